"""The timing loop: warm-up, then timed windows of whole steps (clock injectable for tests).

Each step is timed as [wait for the next batch][copy + compute + synchronize], so the share of
step time spent waiting for data says whether the run is data-bound or compute-bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..result import bottleneck
from ..stats import Spread, quantile

# Above this share of step time spent waiting for the next batch, a run is data-bound.
DATA_BOUND_THRESHOLD = 0.2


@dataclass
class Timings:
    warmup_s: float = 0.0
    warmup_steps: int = 0
    first_step_s: float = 0.0
    first_wait_s: float = 0.0  # the first batch: loader start-up (workers forking, first samples)
    window_samples_per_sec: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
    samples: int = 0
    pruned: bool = False

    def summary(self) -> dict[str, Any]:
        spread = Spread.of(self.window_samples_per_sec)
        wait_fraction = sum(self.wait_s) / sum(self.step_s) if self.step_s else 0.0
        typical_step = quantile(self.step_s, 0.5)
        # the first step's compute beyond a typical step's is compilation / autotuning; its wait
        # for the first batch is the loader starting, reported on its own
        typical_compute = quantile([s - w for s, w in zip(self.step_s, self.wait_s)], 0.5)
        return {
            "samples_per_sec": spread.median,
            "samples_per_sec_iqr": spread.iqr,
            "samples_per_sec_rel_iqr": spread.relative_iqr,
            "noisy": spread.noisy,
            "window_samples_per_sec": self.window_samples_per_sec,
            "windows_measured": spread.n,
            "step_time_p50_ms": 1e3 * typical_step,
            "step_time_p95_ms": 1e3 * quantile(self.step_s, 0.95),
            "data_wait_fraction": wait_fraction,
            "bottleneck": bottleneck(wait_fraction),
            "steps_measured": len(self.step_s),
            "samples_measured": self.samples,
            "warmup_s": self.warmup_s,
            "warmup_steps": self.warmup_steps,
            "first_step_s": self.first_step_s,
            "first_batch_wait_s": self.first_wait_s,
            "compile_s": max(0.0, self.first_step_s - self.first_wait_s - typical_compute),
        }


def measure(
    next_batch: Callable[[], Any],
    step: Callable[[Any], None],
    samples_of: Callable[[Any], int],
    sync: Callable[[], None],
    *,
    warmup_s: float,
    warmup_steps: int,
    windows: int,
    window_s: float,
    prune_below: float | None = None,
    on_window: Callable[[int, float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timings:
    """Run warm-up then `windows` windows; stop early (pruned) when the median window so far,
    after two windows, is below `prune_below` samples/sec."""
    t = Timings()
    start = clock()
    while t.warmup_steps < warmup_steps or clock() - start < warmup_s:
        t0 = clock()
        batch = next_batch()
        t1 = clock()
        step(batch)
        sync()
        if t.warmup_steps == 0:
            t.first_step_s, t.first_wait_s = clock() - t0, t1 - t0
        t.warmup_steps += 1
    t.warmup_s = clock() - start

    for index in range(windows):
        window_start = clock()
        samples = 0
        while True:
            t0 = clock()
            batch = next_batch()
            t1 = clock()
            step(batch)
            sync()
            t2 = clock()
            t.wait_s.append(t1 - t0)
            t.step_s.append(t2 - t0)
            samples += samples_of(batch)
            if t2 - window_start >= window_s:
                break
        rate = samples / (t2 - window_start)
        t.window_samples_per_sec.append(rate)
        t.samples += samples
        if on_window is not None:
            on_window(index, rate)
        if (
            prune_below is not None
            and index >= 1
            and Spread.of(t.window_samples_per_sec).median < prune_below
        ):
            t.pruned = True
            break
    return t
