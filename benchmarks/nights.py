"""Nights back to back, as cron runs them, with the nightly watch (hydra.sweeper.watch=true):

    python benchmarks/nights.py [n_trials] [directory]

In a scratch directory (its own outputs/ and study), the README's main job (`sweeper -m`,
mnist_mlp training) with hydra.sweeper.watch=true, four times:

1. a first night: nothing confirmed yet, it tunes (a full sweep);
2. a quiet night: it should hold, and take a few runs' time, not a sweep's;
3. a night with an injected slowdown on the same fingerprint: the night's processes are frozen
   for 50 ms of every 100 ms (a cgroup v1 freezer toggled from here), as a hypervisor's CPU
   steal or a throttled machine would slow them, so it should drift and re-tune (needs root and
   /sys/fs/cgroup/freezer; otherwise the night is skipped with why);
4. a night under `taskset -c 0`: one core where there were two, a new fingerprint, so it
   should say what changed and re-tune, warm-started from the earlier study.

Prints each night's exit code, wall time and watch lines, and where outputs/index.html is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FREEZER = Path("/sys/fs/cgroup/freezer/sweeper-nights")

# (what the night is, the share of each 100 ms its processes are frozen, a command prefix)
NIGHTS = [
    ("first", 0.0, []),
    ("quiet", 0.0, []),
    ("CPU steal: frozen 50 ms of every 100 ms", 0.5, []),
    ("taskset -c 0", 0.0, ["taskset", "-c", "0"]),
]


def run_night(command: list[str], cwd: Path, env: dict[str, str], steal: float) -> subprocess.CompletedProcess:
    """The night's command; with `steal`, it and every process it starts sit in a freezer cgroup
    frozen for that share of each 100 ms until it ends."""
    if not steal:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    FREEZER.mkdir(exist_ok=True)
    procs = FREEZER / "cgroup.procs"
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: procs.write_text(str(os.getpid())),
    )
    done = threading.Event()

    def toggle() -> None:
        state = FREEZER / "freezer.state"
        while not done.is_set():
            state.write_text("FROZEN")
            time.sleep(0.1 * steal)
            state.write_text("THAWED")
            time.sleep(0.1 * (1 - steal))

    thread = threading.Thread(target=toggle, daemon=True)
    thread.start()
    out, err = proc.communicate()
    done.set()
    thread.join()
    (FREEZER / "freezer.state").write_text("THAWED")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def main() -> None:
    n_trials = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    where = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="nights-"))
    where.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for i, (name, steal, prefix) in enumerate(NIGHTS, 1):
        if steal and not os.access(FREEZER.parent, os.W_OK):
            print(f"night {i} ({name}): skipped, {FREEZER.parent} is not writable here (root, cgroup v1)")
            continue
        command = [
            *prefix,
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            "hydra.sweeper.watch=true",
            f"hydra.sweeper.n_trials={n_trials}",
            f"hydra.sweep.dir=outputs/sweeps/night{i}",
        ]
        started = time.monotonic()
        proc = run_night(command, where, env, steal)
        wall = time.monotonic() - started
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("watch:", "re-tuning", "the winner watched"))]
        rows.append((i, name, proc.returncode, wall))
        print(f"night {i} ({name}): exit {proc.returncode}, {wall:.0f} s", flush=True)
        for line in lines:
            print(f"    {line}", flush=True)
        if proc.returncode not in (0, 3, 4):
            print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    print("\n| night | injected | exit | wall |\n|---|---|---|---|")
    for i, name, code, wall in rows:
        print(f"| {i} | {name} | {code} | {wall:.0f} s |")
    print(f"\nindex: {where / 'outputs' / 'index.html'}")


if __name__ == "__main__":
    main()
