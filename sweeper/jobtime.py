"""The whole job's time: what a configuration pays before it runs at its rate, and from which
job length each of the leading configurations finishes first (pure: no torch).

A job of N samples takes start-up + N / rate. The start-up is measured in every run: the build
(model, loader, process group), the workers' first batches, compilation and autotuning, and the
warm-up's time beyond its samples at the rate. The interpreter's own start is the same for
every configuration, so it moves no ranking and no crossover, and is left out.

Finishing first is having the most samples per second over the whole job (N over its time), so
measure.job_samples folds the start-up into a run's figure (`over_job`), as the workers' restart
at each epoch end is folded into it: every decision that reads samples/sec (racing, the noise,
the confirmation, the winner) then ranks by the time to finish the job.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .measurement import Throughput, Timing


def startup_s(before_warmup_s: float, warmup_s: float, warmup_samples: int, rate: float) -> float:
    """The seconds a run lost against one that ran at `rate` from its start: everything before
    its warm-up, and the warm-up's time beyond what its samples take at the rate."""
    lost = before_warmup_s + warmup_s - (warmup_samples / rate if rate > 0 else 0.0)
    return max(0.0, lost)


def job_time_s(startup: float, job_samples: float, rate: float) -> float:
    return startup + job_samples / rate if rate > 0 else math.inf


def over_job(figures: Throughput, startup: float, job_samples: int) -> Throughput:
    """The figure over a job of `job_samples`: its samples over its time to finish, start-up
    included; its interval mapped the same way, the rate once started kept beside it."""
    rate = figures.samples_per_sec
    if rate <= 0:
        return figures

    def job_rate(r: float | None) -> float | None:
        return job_samples / job_time_s(startup, job_samples, r) if r is not None and r > 0 else r

    return dataclasses.replace(
        figures,
        samples_per_sec=job_rate(rate) or 0.0,
        samples_per_sec_ci_low=job_rate(figures.samples_per_sec_ci_low),
        samples_per_sec_ci_high=job_rate(figures.samples_per_sec_ci_high),
        job_samples=job_samples,
        job_time_s=job_time_s(startup, job_samples, rate),
        running_samples_per_sec=rate,
    )


def with_startup(
    figures: Throughput, timing: Timing, before_warmup_s: float, job_samples: float | None
) -> tuple[Throughput, Timing]:
    """A run's start-up recorded, and with measure.job_samples its figure made the whole job's:
    this process's warm-up against its own rate (one rank's, in a data-parallel group)."""
    own = figures.own_samples_per_sec or figures.samples_per_sec
    startup = startup_s(before_warmup_s, timing.warmup_s, timing.warmup_samples, own)
    if job_samples:
        figures = over_job(figures, startup, int(job_samples))
    return figures, dataclasses.replace(timing, startup_s=startup)


@dataclass(frozen=True)
class JobLine:
    """A configuration's time to finish a job, as a function of the job's length."""

    number: int  # its trial
    startup_s: float
    rate: float  # samples/sec once started

    def time_s(self, samples: float) -> float:
        return job_time_s(self.startup_s, samples, self.rate)


@dataclass(frozen=True)
class Lead:
    """One configuration finishing first for every job from `from_samples` up to `to_samples`
    (None: every longer job)."""

    line: JobLine
    from_samples: float
    to_samples: float | None


# start-ups closer than this are within what one warm-up's end can move by (it ends on blocks
# of half a window, window_s 0.5 s by default): such a line does not lead for a start-up it may
# not have
STARTUP_JITTER_S = 0.5


def distinct(lines: Sequence[JobLine], jitter_s: float = STARTUP_JITTER_S) -> list[JobLine]:
    """The lines worth comparing: one with a lower rate is left out where a faster one starts no
    more than `jitter_s` later (it would lead only on a start-up within the jitter)."""
    kept: list[JobLine] = []
    for line in sorted(lines, key=lambda line: -line.rate):
        if line.rate > 0 and not any(k.startup_s <= line.startup_s + jitter_s for k in kept):
            kept.append(line)
    return kept


def crossover(shorter: JobLine, longer: JobLine) -> float | None:
    """The job length (samples) from which `longer` (more start-up, a higher rate) finishes
    first, or None where it never does."""
    if longer.rate <= shorter.rate:
        return None
    return max(0.0, (longer.startup_s - shorter.startup_s) / (1 / shorter.rate - 1 / longer.rate))


def leads(lines: Sequence[JobLine]) -> tuple[Lead, ...]:
    """Which configuration finishes first at each job length, shortest jobs first: the least
    start-up at the shortest, the highest rate at the longest, and between them whichever line
    of time against length lies lowest (their lower envelope)."""
    live = [line for line in lines if line.rate > 0]
    if not live:
        return ()
    current = min(live, key=lambda line: (line.startup_s, -line.rate))
    found: list[Lead] = []
    start = 0.0
    while True:
        later = [(n, line) for line in live if (n := crossover(current, line)) is not None]
        if not later:
            found.append(Lead(current, start, None))
            return tuple(found)
        at, nxt = min(later, key=lambda pair: (max(pair[0], start), -pair[1].rate))
        at = max(at, start)
        if at > start:  # a line that takes over at the same length as the last one never leads
            found.append(Lead(current, start, at))
        current, start = nxt, at


def samples_text(samples: float) -> str:
    """1,400 · 250 k · 1.4 M: a job's length as a person says it."""
    if samples >= 1e6:
        return f"{samples / 1e6:.3g} M"
    if samples >= 1e4:
        return f"{samples / 1e3:.3g} k"
    return f"{samples:,.0f}"
