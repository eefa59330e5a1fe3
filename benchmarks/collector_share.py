"""Python's collector in a plain loop: how long it collects during the loop, and the loop's
figure as written against with `gc.collect(); gc.freeze()` right before it (as sweeper's runs
do), alternated in fresh processes, the order rotated each round.

    python benchmarks/collector_share.py [ROUNDS]     default 6: JPEGs read warm, 0 workers

The loop is benchmarks/plain/imagefolder.py (mobilenet_v3_small at 112 px, batch 32, one compute
thread) over the JPEGs `benchmarks/loop_agreement.py` makes (AGREEMENT_DATA); each run wraps it,
times every collection with `gc.callbacks` from the start of its loop, and prints its figure
with the collections' count per generation and their seconds.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("AGREEMENT_DATA") or tempfile.gettempdir()) / "sweeper-loop-agreement" / "jpegs"
LOOP = HERE / "plain" / "imagefolder.py"
ARGS = ["--batch-size=32", "--workers=0", "--threads=1", "--model=mobilenet_v3_small", "--image-size=112"]


def wrapped(freeze: bool) -> None:
    """Run the plain loop in this process, its collections timed from the start of its loop."""
    timed = {"began": 0.0, "seconds": 0.0, "generations": [0, 0, 0]}

    def on_collect(phase: str, info: dict) -> None:
        if phase == "start":
            timed["began"] = time.perf_counter()
        else:
            timed["seconds"] += time.perf_counter() - timed["began"]
            timed["generations"][info["generation"]] += 1

    sys.path.insert(0, str(LOOP.parent))
    import stopwatch

    run = stopwatch.run

    def timed_run(*args, **kwargs):
        if freeze:
            gc.collect()
            gc.freeze()
        gc.callbacks.append(on_collect)
        try:
            return run(*args, **kwargs)
        finally:
            print(json.dumps({"collected_s": timed["seconds"], "generations": timed["generations"]}), flush=True)

    stopwatch.run = timed_run
    sys.argv = [str(LOOP), f"--data={DATA}", *ARGS, "--seconds=20", "--skip=5"]
    runpy.run_path(str(LOOP), run_name="__main__")


def one(freeze: bool) -> tuple[float, float, list[int]]:
    """(samples/s, seconds collected, collections per generation) of one fresh run."""
    out = subprocess.run(
        [sys.executable, __file__, "--wrapped", str(int(freeze))], capture_output=True, text=True, check=True
    ).stdout
    said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    figure = next(d["samples_per_sec"] for d in said if "samples_per_sec" in d)
    collected = next(d for d in said if "collected_s" in d)
    return figure, collected["collected_s"], collected["generations"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    ratios = []
    for r in range(rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        runs = {freeze: one(freeze) for freeze in order}
        ratios.append(runs[True][0] / runs[False][0])
        for freeze in (False, True):
            figure, seconds, generations = runs[freeze]
            print(
                f"round {r + 1} {'frozen' if freeze else 'as written'}: {figure:.1f} samples/s, "
                f"collected {seconds * 1000:.0f} ms in {generations} collections (generations 0, 1, 2)",
                flush=True,
            )
    each = ", ".join(f"{x:.3f}" for x in ratios)
    print(f"frozen / as written, by round: {each}; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--wrapped":
        wrapped(sys.argv[2] == "1")
    else:
        main()
