"""Where a process comes from: the plain loop started as a user starts it (`python
imagefolder.py ...`) against the same loop forked from a process that imported torch and
torchvision, collected and froze its objects first, as sweeper's fork server does before it forks
a run. Alternated, the order rotated each round.

    python benchmarks/fork_origin.py [ROUNDS]     default 10: JPEGs read warm, 0 workers

The loop is benchmarks/plain/imagefolder.py (mobilenet_v3_small at 112 px, batch 32, one compute
thread, its files read in first) over the JPEGs `benchmarks/loop_agreement.py` makes
(AGREEMENT_DATA); nothing of sweeper's runs in either process.
"""

from __future__ import annotations

import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("AGREEMENT_DATA") or tempfile.gettempdir()) / "sweeper-loop-agreement" / "jpegs"
LOOP = HERE / "plain" / "imagefolder.py"
ARGS = [
    f"--data={DATA}",
    "--batch-size=32",
    "--workers=0",
    "--threads=1",
    "--model=mobilenet_v3_small",
    "--image-size=112",
    "--warm",
    "--seconds=15",
    "--skip=5",
]


def forked() -> None:
    """Import what a fork server imports, collect and freeze, then run the loop in a fork."""
    import gc

    import torch  # noqa: F401
    import torchvision  # noqa: F401

    gc.collect()
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        sys.path.insert(0, str(LOOP.parent))
        sys.argv = [str(LOOP), *ARGS]
        runpy.run_path(str(LOOP), run_name="__main__")
        sys.stdout.flush()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


def one(fork: bool) -> float:
    """samples/s of one run, started fresh or forked."""
    command = [sys.executable, __file__, "--forked"] if fork else [sys.executable, str(LOOP), *ARGS]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=LOOP.parent).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_sec"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    ratios = []
    for r in range(rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        runs = {fork: one(fork) for fork in order}
        ratios.append(runs[True] / runs[False])
        print(
            f"round {r + 1}: started {runs[False]:.1f}, forked {runs[True]:.1f} samples/s, ratio {ratios[-1]:.3f}",
            flush=True,
        )
    print(
        f"forked / started, {rounds} rounds: median {statistics.median(ratios):.3f} "
        f"({min(ratios):.2f}-{max(ratios):.2f}), above 1 in {sum(x > 1 for x in ratios)}"
    )


if __name__ == "__main__":
    forked() if sys.argv[1:] == ["--forked"] else main()
