#!/bin/bash
# The same sweep at two commits, alternated (the order rotated each round), each run from an
# empty directory: the wall time, the stop line and the confirmed speedup of each. The commits
# are checked out as worktrees
# (git worktree add /tmp/before <commit>; git worktree add /tmp/after HEAD) and run with the
# checkout's environment, PYTHONPATH at each.
#
#   bash benchmarks/commits_side_by_side.sh /tmp/before /tmp/after 2 [sweeper overrides]
set -u
before=$1 after=$2 rounds=$3
shift 3
python=$(command -v python3)
[ -x .venv/bin/python ] && python=$PWD/.venv/bin/python
for i in $(seq 1 "$rounds"); do
  order=("$before" "$after")
  [ $((i % 2)) -eq 0 ] && order=("$after" "$before")  # the order alternates round by round
  for tree in "${order[@]}"; do
    dir=$(mktemp -d)
    start=$(date +%s.%N)
    (cd "$dir" && PYTHONPATH="$tree" timeout 1800 "$python" -m sweeper -m "$@" > log.txt 2>&1)
    rc=$?
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    echo "== $tree run $i: exit $rc, ${wall%.*} s ($dir/log.txt)"
    grep -E "^(stopped|confirmed over|run-to-run noise)" "$dir/log.txt" | tail -3
  done
done
