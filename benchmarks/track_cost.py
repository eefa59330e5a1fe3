"""What sweeper.track and sweeper.step cost a training loop, outside sweeper (they must
cost nothing measurable) and under it (one small write per step to the measuring process).

    python benchmarks/track_cost.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

N = 1_000_000
LOOPS = {
    "plain loop": "for b in items: pass",
    "for b in sweeper.track(items, samples=64)": "for b in sweeper.track(items, samples=64): pass",
    "sweeper.step(64) per step": "for b in items: sweeper.step(64)",
}


def per_step_ns(env: dict[str, str]) -> dict[str, float]:
    """Each loop's best of 5, in ns per step, in a fresh process with this environment."""
    code = (
        "import json, timeit, sweeper\nitems = [[0] * 64] * %d\nprint(json.dumps({k: 1e9 * min(timeit.repeat(v, "
        "globals=globals(), number=1, repeat=5)) / %d for k, v in %r.items()}))" % (N, N, LOOPS)
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main() -> None:
    outside = per_step_ns({})
    fifo = Path(tempfile.mkdtemp()) / "steps"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keep = os.open(fifo, os.O_WRONLY)
    stop = threading.Event()

    def drain() -> None:  # as the measuring process reads them
        while not stop.is_set():
            try:
                os.read(reader, 1 << 20)
            except BlockingIOError:
                stop.wait(0.001)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    under = per_step_ns({"SWEEPER_STEPS": str(fifo)})
    stop.set()
    thread.join()
    os.close(keep)
    os.close(reader)
    print(f"ns per step, best of 5 x {N:,} steps (a real training step takes 1e5-1e8 ns)")
    print("| loop | outside sweeper | under sweeper |")
    print("|---|---:|---:|")
    for name in LOOPS:
        print(f"| {name} | {outside[name]:,.0f} | {under[name]:,.0f} |")


if __name__ == "__main__":
    main()
