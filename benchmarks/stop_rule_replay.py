"""The run's own stop rule applied to a plain loop's recorded steps: whether sweeper's warm-up and
windows, stopping when their interval is precise, read a process's steps higher than the same
steps averaged over a fixed span. Everything compared comes from one process's steps, so the
spread between processes drops out.

    python benchmarks/stop_rule_replay.py [RUNS]     default 8: JPEGs read warm, 0 workers

Each run is benchmarks/plain/imagefolder.py for 40 s (its configuration as in fork_origin.py),
every step's end time recorded; nothing of sweeper's runs beside it. Then, from each step one
second in on (while 14 s of steps remain), sweeper's measuring loop (`timing.measure`, with the
rule of conf/measure/default.yaml) is replayed on the steps that follow, on a clock the recorded
steps advance, once as shipped and once with the precision stop off (its windows up to the cap);
each figure is set against the mean rate of the same steps over 10 s from that start. Printed
per run, the means over its starts (overlapping starts are not independent: the runs are).
"""

from __future__ import annotations

import json
import runpy
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from fork_origin import ARGS, LOOP
from omegaconf import OmegaConf

from sweeper.measuring import timing
from sweeper.measuring.rule import Rule

ROOT = Path(__file__).resolve().parents[1]
SECONDS = 40
SPAN_S = 10.0


def record() -> None:
    """Run the plain loop in this process, each step's end printed at its end (one JSON line)."""
    sys.path.insert(0, str(LOOP.parent))
    import stopwatch

    ends: list[float] = []
    counted = stopwatch.Stopwatch.step

    def step(self: stopwatch.Stopwatch, samples: int) -> bool:
        ends.append(time.perf_counter())
        return counted(self, samples)

    stopwatch.Stopwatch.step = step
    sys.argv = [str(LOOP), *[a for a in ARGS if not a.startswith("--seconds")], f"--seconds={SECONDS}"]
    runpy.run_path(str(LOOP), run_name="__main__")
    print(json.dumps({"ends": ends}), flush=True)


def shipped_rule() -> Rule:
    measure = OmegaConf.load(ROOT / "conf" / "measure" / "default.yaml")
    del measure["defaults"]
    return Rule.of(measure)  # type: ignore[arg-type]


def replay(durations: list[float], rule: Rule) -> float | None:
    """The figure sweeper's loop makes of these steps (32 samples each); None if they run out."""
    steps = iter(durations)
    now = [0.0]

    def step(batch: int) -> None:
        now[0] += next(steps)

    try:
        timings = timing.measure(lambda: 32, step, lambda batch: batch, lambda: None, rule, clock=lambda: now[0])
    except (StopIteration, RuntimeError):  # a generator's StopIteration surfaces as RuntimeError
        return None
    return timings.throughput().samples_per_sec


def span_rate(durations: list[float]) -> float:
    elapsed, steps = 0.0, 0
    for d in durations:
        elapsed, steps = elapsed + d, steps + 1
        if elapsed >= SPAN_S:
            break
    return 32 * steps / elapsed


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shipped = shipped_rule()
    no_stop = replace(shipped, rel_precision=None)
    per_run = []
    for i in range(runs):
        out = subprocess.run([sys.executable, __file__, "--record"], capture_output=True, text=True, check=True).stdout
        ends = json.loads(out.strip().splitlines()[-1])["ends"]
        durations = [b - a for a, b in zip(ends, ends[1:])]
        rows = []
        for k in range(len(durations)):
            if ends[k] - ends[0] < 1.0 or ends[-1] - ends[k] < 14.0:
                continue
            rest = durations[k:]
            a, b = replay(rest, shipped), replay(rest, no_stop)
            if a is not None and b is not None:
                span = span_rate(rest)
                rows.append((a / span, b / span, a / b))
        means = [statistics.mean(r[j] for r in rows) for j in range(3)]
        per_run.append(means)
        print(
            f"run {i + 1}: {len(rows)} starts; as shipped / the span {means[0]:.3f}, precision stop off / the "
            f"span {means[1]:.3f}, shipped / stop off {means[2]:.3f}",
            flush=True,
        )
    for j, name in enumerate(("as shipped / the span", "precision stop off / the span", "shipped / stop off")):
        values = [m[j] for m in per_run]
        print(f"{name}, {runs} runs: median {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")


if __name__ == "__main__":
    record() if sys.argv[1:] == ["--record"] else main()
