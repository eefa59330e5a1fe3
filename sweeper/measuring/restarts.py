"""The loader workers' restart at each epoch end (a DataLoader without persistent workers forks
them again): what it costs the loop, read from the windows an end fell in or timed apart, added
to a figure once per epoch, so that the figure is what a loop over whole epochs runs at."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..config import LoaderConf
from ..measurement import Throughput


def over_epochs(steady: float, epoch_samples: int, restart_s: float) -> float:
    """samples/s over whole epochs: the steady rate's time for an epoch's samples plus one restart."""
    return epoch_samples / (epoch_samples / steady + restart_s)


def with_epoch_restarts(figures: Throughput, epoch_samples: int, restart_s: float) -> Throughput:
    """The figure over whole epochs: each epoch pays one worker restart on top of its steady
    steps. When the figure is of the steady windows (samples_per_sec_steady: the few windows an
    end fell in left out), the restart (`restart_s`: read from those windows, else timed apart)
    is added once per epoch, the interval scaled with it; otherwise the windows already hold
    the restarts."""
    steady = figures.samples_per_sec_steady
    if steady is None or steady <= 0:
        return replace(figures, samples_per_sec_steady=figures.samples_per_sec, epoch_restart_s=restart_s)
    whole = over_epochs(steady, epoch_samples, restart_s)
    scale = whole / steady
    interval = figures.interval
    return replace(
        figures,
        samples_per_sec=whole,
        epoch_restart_s=restart_s,
        samples_per_sec_ci_low=interval[0] * scale if interval else None,
        samples_per_sec_ci_high=interval[1] * scale if interval else None,
    )


def with_restarts(
    figures: Throughput, loader: LoaderConf, epoch_samples: int, timed_apart: Callable[[], float]
) -> Throughput:
    """The figures with the workers' restart per epoch where they restart: its cost as the windows
    it fell in lived it, else (no window held one) `timed_apart` once. A pruned run gets only what
    its windows read, the scale its rules read it on (timing._as_the_figure)."""
    if loader.num_workers == 0 or loader.persistent_workers:
        return figures
    restart = figures.epoch_restart_in_windows_s
    if restart is None and not figures.pruned:
        restart = timed_apart()
    return figures if restart is None else with_epoch_restarts(figures, epoch_samples, restart)
