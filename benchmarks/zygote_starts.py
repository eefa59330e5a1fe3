"""What a sweep waits for its zygotes: the start environments of the CPU preset (three allocators
by three OpenMP bindings, those installed here) asked for one at a time in a seeded random order,
as trials would ask, and the seconds spent in `zygote_for` before each run could fork: started
one at a time with four kept alive (as before), and up to nine kept with the expected ones
brought up beside a starting one on the idle cores (as a sweep does now). Measured in one
sitting, alternated. (Both with the zygote's own imports as they are now: a zygote bound by
OpenMP imports what follows torch unpinned.)

    python benchmarks/zygote_starts.py [repeats]     # default 3
    python benchmarks/zygote_starts.py 4 spares      # as a sweep does now only: run it at two
                                                     # commits (git worktree), alternated
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

from sweeper import topology
from sweeper.runner import fork_servers as zygote
from sweeper.runner.run import start_env_of

MODULES = ["sweeper.tasks.mnist_mlp:build"]  # the README's main job's workload


def environments() -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    for allocator in topology.installed_allocators():
        for bind in ("default", "close", "spread"):
            env = start_env_of(allocator, bind, None)
            if env not in found:
                found.append(env)
    return found


def waited(order: list[dict[str, str]], spares: bool) -> list[float]:
    """Seconds each ask waited, from a sweep's state: the plain zygote alive, nothing else."""
    zygote.MAX_ZYGOTES = 9 if spares else 4
    zygote.close_all()
    zygote.zygote_for(MODULES, {})
    zygote.expect(environments() if spares else [])
    waits = []
    for env in order:
        started = time.perf_counter()
        zygote.zygote_for(MODULES, env)
        waits.append(time.perf_counter() - started)
    zygote.expect([])
    zygote.close_all()
    return waits


def main(repeats: int, spares_only: bool = False) -> None:
    envs = environments()
    rows: dict[str, list[float]] = {"one at a time, 4 kept": [], "up to 9 kept, spares on the idle cores": []}
    if spares_only:
        del rows["one at a time, 4 kept"]
    for seed in range(repeats):
        # a sweep's trials ask for the non-plain environments in some order, some twice
        rng = random.Random(seed)
        order = [rng.choice(envs[1:]) for _ in range(12)]
        for name, spares in zip(rows, (True,) if spares_only else (False, True)):
            total = sum(waited(order, spares))
            rows[name].append(total)
            print(f"seed {seed}, {name}: {total:.1f} s waited over 12 asks", flush=True)
    cores = len(os.sched_getaffinity(0))
    print(f"\n{len(envs)} start environments, {cores} cores; seconds waited for zygotes over 12 asks:")
    print("| zygotes | median (min-max) |")
    print("|---|---|")
    for name, totals in rows.items():
        print(f"| {name} | {statistics.median(totals):.1f} s ({min(totals):.1f}-{max(totals):.1f}) |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2:3] == ["spares"])
