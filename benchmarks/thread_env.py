"""One compute thread asked two ways: `torch.set_num_threads(1)` in the loop alone (as sweeper's
built-in workloads run, forked from a process started without thread variables), and the same
with OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 exported before Python starts (as the report's code for
a winner with backend.threads=1 tells you to run it, and as a script under task=script runs).
Each side is a plain loop of benchmarks/plain/ in a fresh process, alternated, the order rotated.

    python benchmarks/thread_env.py [rounds]      default 4

Needs the agreement bench's data (python benchmarks/loop_agreement.py makes it in the system's
temporary directory, or AGREEMENT_DATA).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import loop_agreement  # noqa: E402

NAMES = ("JPEGs warm, mobilenet_v3_small train, 0 workers", "MNIST MLP train, batch 256, 0 workers")
ENVIRONMENTS = {"set_num_threads(1) alone": {}, "and OMP_NUM_THREADS=1 exported": {"OMP_NUM_THREADS": "1"}}


def plain(config: loop_agreement.Config, extra: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if extra:
        env |= {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return loop_agreement.plain_run(config, [] if config.threads else ["--threads=1"], env)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    loop_agreement.make_data()
    configs = [c for c in loop_agreement.CONFIGS if c.name in NAMES]
    print("| loop | " + " | ".join(f"{e}, samples/s" for e in ENVIRONMENTS) + " | exported / alone, each round |")
    print("|---|" + "---:|" * (len(ENVIRONMENTS) + 1))
    for config in configs:
        found: dict[str, list[float]] = {e: [] for e in ENVIRONMENTS}
        for r in range(rounds):
            order = list(ENVIRONMENTS)[r % 2 :] + list(ENVIRONMENTS)[: r % 2]
            for name in order:
                found[name].append(plain(config, ENVIRONMENTS[name]))
        alone, exported = found.values()
        ratios = ", ".join(f"{b / a:.3f}" for a, b in zip(alone, exported))
        cells = " | ".join(f"{statistics.median(v):,.1f}" for v in found.values())
        print(f"| {config.name}, 1 thread | {cells} | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
