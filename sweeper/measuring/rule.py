"""When a run's warm-up and windows stop (timing.measure applies it): the measure.* settings,
and the sweep's race against the best so far, as one frozen rule."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import MeasureConf, TrialConf


@dataclass(frozen=True)
class Rule:
    """When warm-up and measuring stop: warm-up at least `warmup_s` and `warmup_steps`, then
    until two successive blocks of steps run within `steady_tol` of each other (at most
    `warmup_max_s`); windows of `window_s` until the 95% interval of their rate is within
    `rel_precision` of it (at least `min_windows`, at most `max_windows`). Racing against the
    best trial's interval `race` = (low, high), widened by the sweep for run-to-run noise: a run
    whose interval lies wholly below it stops (pruned). A run whose interval lies wholly below
    `behind`, the low end of the best's own interval, stops too, its figure kept (complete): the
    sweep needs no more precise a figure of a run it knows is behind, and windows cannot resolve
    the run-to-run noise that decides by how much.
    `prune_below` is the race's floor (slower than the best by the one test): the rate under it
    after two windows stops the run, and after one already when under `far_below`, slower than
    the floor by the same test (the sweep hands both over as figures): a run that far below is
    no near miss. When the warm-up's steady span already read under that bar, the first window
    is a quarter window. Two successive warm-up blocks under `warmup_floor` of the floor end the
    warm-up there, steady or not, and the quarter window follows: a bar set by how loops ramp
    up, not by the noise (docs/benchmarks.md has the races it was read from). Every rule reads the
    same statistic as the figure: the rate over the windows (samples over time) and its 95%
    interval (stats.rate_interval), with the workers' restart per epoch where the figure has it.
    A window is at least `window_s` of whole loader cycles (`cycle` steps: one batch from each
    worker, which arrive in bursts); a group's is rank 0's count of such steps."""

    warmup_s: float
    warmup_steps: int
    max_windows: int
    window_s: float
    warmup_max_s: float | None = None  # None: warm-up stops at its minimums
    steady_tol: float = 0.05
    min_windows: int = 1
    rel_precision: float | None = None  # None: always max_windows
    prune_below: float | None = None
    far_below: float | None = None  # None: the floor waits for two windows
    # the lowest early block of a loop still ramping up read 0.73 of its figure (warmup.far_below)
    warmup_floor: float | None = 0.7  # None: warm-up waits for a steady rate however far below
    race: tuple[float, float] | None = None
    behind: float | None = None
    cycle: int = 1
    # the loader's workers restart at each epoch end (not persistent), a cost timed apart: the
    # rules read the windows no epoch end fell in (Timings.counted_totals), with the restart those
    # ends cost added per epoch of `epoch_samples` as the figure has it (None: not added)
    restarts_apart: bool = False
    epoch_samples: int | None = None
    # a run whose windows still change by more than this (stats.trend) measures on, its earlier
    # windows left out of the figure, until steady or `max_s` seconds of windows; None: no check
    drift_tol: float | None = None
    max_s: float | None = None

    @property
    def warmup_bar(self) -> float | None:
        """samples/s under which two successive warm-up blocks end the warm-up (None: never)."""
        if self.prune_below is None or self.warmup_floor is None:
            return None
        return self.warmup_floor * self.prune_below

    @classmethod
    def of(
        cls,
        measure: MeasureConf,
        workers: int = 0,
        persistent_workers: bool = True,
        trial: TrialConf | None = None,
        epoch_samples: int | None = None,
    ) -> Rule:
        """measure.* (and the sweep's `trial` node: the best so far to race against) as a Rule.
        Warm-up lasts at least two batches per loader worker, so that every worker has started
        (forkserver and spawn workers start one after another, seconds each) before a steady
        rate can be declared."""
        trial = trial or TrialConf()
        race = trial.race
        return cls(
            warmup_s=measure.warmup_s,
            warmup_steps=max(measure.warmup_steps, 2 * workers),
            max_windows=measure.windows,
            window_s=measure.window_s,
            warmup_max_s=measure.warmup_max_s,
            steady_tol=measure.steady_tol,
            min_windows=measure.min_windows or measure.windows,
            rel_precision=measure.rel_precision,
            prune_below=trial.prune_below,
            far_below=trial.far_below,
            race=(float(race[0]), float(race[1])) if race else None,
            behind=trial.behind,
            cycle=max(1, workers),
            restarts_apart=workers > 0 and not persistent_workers,
            epoch_samples=epoch_samples,
            drift_tol=measure.drift_tol,
            max_s=measure.max_s,
        )
