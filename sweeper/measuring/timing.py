"""The timing loop: warm-up (warmup.py), then timed windows of whole steps (clock injectable for tests).

Each step is timed on the host as [wait for the next batch][copy + launch compute], so the share
of step time spent waiting for data says whether the run is data-bound or compute-bound. The
device is synchronized only at window edges, as a real loop never synchronizes per step: the
host queues step n+1 (and fetches its batch) while the device still runs step n, and the
window's time, taken after the synchronize, is exact. Device busy time per step comes from a
step timer (CUDA events) read after each window.

Ranks of a data-parallel run (dist.nproc_per_node > 1) are measured as one: every decision is
rank 0's (a rank that stopped alone would leave the others waiting in an all-reduce), windows
have the same number of steps on every rank, and a window's rate is the ranks' samples summed
over the longest rank's time: the total in a common window.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..measurement import Stopped, Throughput, Timing, Utilization, bottleneck
from ..stats import Spread, quantile, rate_interval, trend
from .restarts import over_epochs
from .rule import Rule
from .warmup import AFTER_WINDOWS_S, Group, Loop, StepTimer, WarmUp, no_time_for_windows, warm_up


class Monitor(Protocol):
    """Watches the measured windows (CPU or GPU utilization): started when the first window
    starts, stopped when the last one ends, returns what it recorded."""

    def start(self) -> None: ...
    def stop(self) -> Utilization: ...


@dataclass
class Timings:
    """What the loop recorded, step by step and window by window (mutable while it runs)."""

    warmup_s: float = 0.0
    warmup_steps: int = 0
    warmup_samples: int = 0
    first_step_s: float = 0.0
    first_wait_s: float = 0.0  # the first batch: loader start-up (workers forking, first samples)
    window_samples_per_sec: list[float] = field(default_factory=list)
    # (samples, seconds) of each window: the group's total over its longest rank's time
    window_totals: list[tuple[float, float]] = field(default_factory=list)
    own_window_samples_per_sec: list[float] = field(default_factory=list)  # this rank's alone (ranks only)
    warmup_step_rate: float = 0.0  # steps/s at the end of warm-up
    # samples/s over the warm-up's steady span (the blocks the steady test compared), or None
    warmup_samples_per_sec: float | None = None
    window_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
    device_step_s: list[float] = field(default_factory=list)  # from the step timer, if any
    samples: int = 0
    window_epoch_ends: list[int] = field(default_factory=list)  # epoch ends inside each window
    utilization: Utilization = field(default_factory=Utilization)
    warmup_steady: bool = False  # warm-up ended on a steady step rate, not on its maximum
    warmup_far_below: bool = False  # warm-up ended on two blocks far below the best (warmup.far_below)
    stopped: Stopped = Stopped.NOT
    pruned: bool = False
    window_steps: list[int] = field(default_factory=list)  # rank 0's steps in each window
    # leading windows left out of the figure because the run was still changing after them, and
    # the change they showed (later / earlier - 1, compounded over each time windows were left out)
    dropped: int = 0
    drift: float = 0.0

    def throughput(self, restarts_apart: bool = False) -> Throughput:
        """The figure is the counted windows' samples over their time, the statistic the
        interval, the precision rule and the racing rule are of (a median window with a mean's
        interval could lie outside it). With `restarts_apart` it is the steady rate
        (samples_per_sec_steady too): restarts.with_epoch_restarts adds the restarts."""
        spread = Spread.of(self.window_samples_per_sec[self.dropped :])
        rate, interval = rate_interval(*self.counted_totals(restarts_apart))
        low, high = interval or (None, None)
        return Throughput(
            samples_per_sec=rate,
            samples_per_sec_iqr=spread.iqr,
            samples_per_sec_rel_iqr=spread.relative_iqr,
            window_samples_per_sec=tuple(self.window_samples_per_sec),
            windows_measured=len(self.window_samples_per_sec),
            drift=self.drift if self.dropped else None,
            steady_from_step=self.steady_from_step,
            samples_per_sec_ci_low=low,
            samples_per_sec_ci_high=high,
            stopped=self.stopped,
            epoch_ends_measured=self.epoch_ends,
            samples_per_sec_steady=rate if self.steady_counted(restarts_apart) else None,
            epoch_restart_in_windows_s=self.restart_in_windows_s(restarts_apart),
            # this rank's windows have the group's steps, not equal seconds: their mean rate
            own_samples_per_sec=(
                statistics.fmean(self.own_window_samples_per_sec) if self.own_window_samples_per_sec else None
            ),
        )

    @property
    def epoch_ends(self) -> int:
        """Epoch ends that fell inside the measured windows."""
        return sum(self.window_epoch_ends)

    def totals(self) -> tuple[list[float], list[float]]:
        """The kept windows' samples and seconds (those after the ones left out as still
        changing; windows known only by their rate count a second each)."""
        if self.window_totals:
            kept = self.window_totals[self.dropped :]
            return [n for n, _ in kept], [s for _, s in kept]
        rates = self.window_samples_per_sec[self.dropped :]
        return list(rates), [1.0] * len(rates)

    @property
    def kept_epoch_ends(self) -> list[int]:
        return self.window_epoch_ends[self.dropped :]

    @property
    def steady_from_step(self) -> int | None:
        """The step (warm-up counted) at which the kept windows begin, where windows were left out."""
        return self.warmup_steps + sum(self.window_steps[: self.dropped]) if self.dropped else None

    def steady_counted(self, restarts_apart: bool) -> bool:
        """Whether the figure is of the windows no epoch end fell in: the workers' restart at
        an epoch end is timed apart and added per epoch (restarts.with_epoch_restarts), and such windows
        are the majority (else the windows' mean already holds the restarts)."""
        ends = sum(1 for e in self.kept_epoch_ends if e)
        return restarts_apart and bool(self.kept_epoch_ends) and 2 * ends < len(self.kept_epoch_ends)

    def restart_in_windows_s(self, restarts_apart: bool) -> float | None:
        """What an epoch end cost the loop, read from the windows it fell in: their time beyond
        their samples at the steady rate, per epoch end (the stall, less the batches the new
        workers made side by side during it, as the loop lived them). None when no window held
        one, or the figure is not of the steady windows."""
        if not self.steady_counted(restarts_apart):
            return None
        steady, _ = rate_interval(*self.counted_totals(restarts_apart))
        samples, seconds = self.totals()
        ended = [(n, s, e) for n, s, e in zip(samples, seconds, self.kept_epoch_ends) if e]
        if not ended or steady <= 0:
            return None
        return max(0.0, sum(s - n / steady for n, s, _ in ended) / sum(e for _, _, e in ended))

    def counted_totals(self, restarts_apart: bool = False) -> tuple[list[float], list[float]]:
        """The samples and seconds of the windows the figure is of (steady_counted: those no
        epoch end fell in; else all). A restart's stall in one window of a few would otherwise
        widen the interval, and keep the precision rule from ever stopping, for a cost that is
        measured on its own."""
        samples, seconds = self.totals()
        if not self.steady_counted(restarts_apart):
            return samples, seconds
        kept = [i for i, e in enumerate(self.kept_epoch_ends) if not e]
        return [samples[i] for i in kept], [seconds[i] for i in kept]

    def timing(self) -> Timing:
        wait_fraction = sum(self.wait_s) / sum(self.step_s) if self.step_s else 0.0
        # the first step's compute beyond a typical step's is compilation / autotuning; its wait
        # for the first batch is the loader starting, reported on its own
        typical_compute = quantile([s - w for s, w in zip(self.step_s, self.wait_s)], 0.5)
        busy = min(1.0, sum(self.device_step_s) / sum(self.window_s)) if self.device_step_s else None
        return Timing(
            step_time_p50_ms=1e3 * quantile(self.step_s, 0.5),
            step_time_p95_ms=1e3 * quantile(self.step_s, 0.95),
            step_time_p99_ms=1e3 * quantile(self.step_s, 0.99),
            data_wait_fraction=wait_fraction,
            bottleneck=bottleneck(wait_fraction, busy),
            steps_measured=len(self.step_s),
            samples_measured=self.samples,
            warmup_s=self.warmup_s,
            warmup_steps=self.warmup_steps,
            warmup_samples=self.warmup_samples,
            warmup_steady=self.warmup_steady,
            warmup_far_below=self.warmup_far_below,
            warmup_samples_per_sec=self.warmup_samples_per_sec,
            first_step_s=self.first_step_s,
            first_batch_wait_s=self.first_wait_s,
            compile_s=max(0.0, self.first_step_s - self.first_wait_s - typical_compute),
            device_step_time_p50_ms=1e3 * quantile(self.device_step_s, 0.5) if self.device_step_s else None,
            device_busy_fraction=busy,
        )


def _after_warm_up(w: WarmUp) -> Timings:
    """The run's timings, begun with what its warm-up did."""
    return Timings(
        warmup_s=w.seconds,
        warmup_steps=w.steps,
        warmup_samples=w.samples,
        first_step_s=w.first_step_s,
        first_wait_s=w.first_wait_s,
        warmup_step_rate=w.step_rate,
        warmup_samples_per_sec=w.samples_per_sec,
        warmup_steady=w.steady,
        warmup_far_below=w.far_below,
    )


def _window_lengths(rule: Rule, w: WarmUp, group: Group | None) -> tuple[float | int, float | int]:
    """How long the first window and each later one run: `window_s` seconds in a single process;
    for ranks, the same whole loader cycles of steps on each, as many as `window_s` holds at the
    warm-up's step rate (rank 0's count, agreed). A run whose warm-up already ran far below the
    floor confirms it in a first window of a quarter (_far_below)."""
    if group is not None:
        steps = group.agree(max(1, math.ceil(rule.window_s * w.step_rate)))
        until = rule.cycle * math.ceil(steps / rule.cycle)
        return until, until
    return (rule.window_s / 4 if _far_below(w.samples_per_sec, rule) else rule.window_s), rule.window_s


def _far_below(warmup_rate: float | None, rule: Rule) -> bool:
    """Whether the warm-up's steady span already ran under the floor's one-window bar
    (`far_below`): then a quarter window is enough to confirm it, as the first window, before
    the run stops pruned (the span itself is no window: the figure and the decision stay the
    windows')."""
    return warmup_rate is not None and rule.far_below is not None and warmup_rate < rule.far_below


def _still_changing(t: Timings, rule: Rule) -> int:
    """Before a run stops with its figure: whether its kept windows still change (stats.trend);
    if so, their earlier half is left out of the figure, the change recorded, and how many were
    left out returned (0: steady). A run is called changing at `drift_tol`, and once called,
    steady again only within `steady_tol` (the warm-up's bar): a loop climbing out of a slow
    start slows its climb before it ends, and a bar as wide as the first would stop it there."""
    if rule.drift_tol is None:
        return 0
    rates = t.window_samples_per_sec[t.dropped :]
    change = trend(rates, min(rule.drift_tol, rule.steady_tol) if t.dropped else rule.drift_tol)
    if change is None:
        return 0
    t.dropped += len(rates) // 2
    t.drift = (1 + t.drift) * (1 + change) - 1
    return len(rates) // 2


def _out_of_time(t: Timings, rule: Rule, seconds_left: float | None) -> bool:
    """Whether the next window (as long as the last, at least window_s) would end too close to
    the run's time limit for what follows it: AFTER_WINDOWS_S, and where workers restart at epoch
    ends and no window held one, a loader start for the restart timed apart (stages.extras)."""
    restart_s = t.first_wait_s if rule.restarts_apart and not t.epoch_ends else 0.0
    return no_time_for_windows(
        seconds_left, max(rule.window_s, t.window_s[-1]), windows=1, after_s=AFTER_WINDOWS_S + restart_s
    )


def _verdict(t: Timings, rule: Rule) -> Stopped | None:
    """After a window: why to stop now, or None to go on."""
    counted = t.counted_totals(rule.restarts_apart)
    n = len(counted[0])
    rate, interval = _as_the_figure(t, rule, *rate_interval(*counted))
    bar = rule.prune_below if n >= 2 else rule.far_below if n == 1 else None
    if bar is not None and rate < bar:
        return Stopped.PRUNED
    if n < min(rule.min_windows, rule.max_windows) or interval is None:
        return None
    low, high = interval
    if rule.race is not None and high < rule.race[0]:
        return Stopped.RACED
    if rule.behind is not None and high < rule.behind:
        return Stopped.BEHIND
    if rule.rel_precision is None:
        return None
    # a run close to the best stops when precise too: windows beyond that cannot resolve a
    # difference that the run-to-run noise hides (the confirmation measures the close ones again)
    return Stopped.PRECISE if (high - low) / 2 <= rule.rel_precision * rate else None


def _as_the_figure(
    t: Timings, rule: Rule, rate: float, interval: tuple[float, float] | None
) -> tuple[float, tuple[float, float] | None]:
    """The rules' rate and interval on the figure's scale: where the figure is of the windows no
    epoch end fell in, with the workers' restart they read added per epoch
    (restarts.with_epoch_restarts), the rules race that, as the best's figure and bars hold it,
    not the steady windows alone."""
    restart = t.restart_in_windows_s(rule.restarts_apart) if rule.epoch_samples else None
    if restart is None or rate <= 0:
        return rate, interval
    scale = over_epochs(rate, rule.epoch_samples or 0, restart) / rate
    return rate * scale, (interval[0] * scale, interval[1] * scale) if interval else None


def _window(loop: Loop, t: Timings, rule: Rule, until: float | int) -> tuple[int, int, float]:
    """One window of whole loader cycles, its steps appended to `t`: until `until` seconds have
    passed (a single process) or `until` steps are done (ranks: the same count on each).
    (samples, steps, seconds), the seconds after the device's sync."""
    window_start = loop.clock()
    samples, steps = 0, 0
    while True:
        batch, t0, t1, t2 = loop.step_once()
        if loop.sync_every_step:
            loop.sync()
            t2 = loop.clock()
        t.wait_s.append(t1 - t0)
        t.step_s.append(t2 - t0)
        samples += loop.samples_of(batch)
        steps += 1
        if steps % rule.cycle == 0 and (steps >= until if loop.group is not None else t2 - window_start >= until):
            break
    loop.sync()  # the window ends when the device has done its work
    return samples, steps, loop.clock() - window_start


def _record(loop: Loop, t: Timings, samples: int, steps: int, elapsed: float, epoch_ends: int) -> float:
    """A window's figures into `t` (a group's: the ranks' samples over the longest rank's time);
    its samples/s."""
    if loop.step_timer is not None:
        t.device_step_s.extend(loop.step_timer.collect())
    t.window_s.append(elapsed)
    if loop.group is not None:
        t.own_window_samples_per_sec.append(samples / elapsed)
        elapsed, samples = loop.group.total(elapsed, samples)
    rate = samples / elapsed
    t.window_samples_per_sec.append(rate)
    t.window_totals.append((samples, elapsed))
    t.window_epoch_ends.append(epoch_ends)
    t.window_steps.append(steps)
    t.samples += samples
    return rate


def _after_window(t: Timings, rule: Rule, index: int, budget: int) -> tuple[Stopped, int]:
    """Why to stop after `index` windows of at most `budget` (Stopped.NOT: go on), and the
    budget: a run whose windows still change at its end measures on until steady, up to max_s."""
    stopped = _verdict(t, rule) or Stopped.NOT
    if stopped.pruned or not (stopped or index >= budget):
        return stopped, budget
    left_out = _still_changing(t, rule)
    if not left_out:
        return stopped or Stopped.MAX_WINDOWS, budget
    if sum(t.window_s) >= (rule.max_s or 0.0):
        return Stopped.DRIFTING, budget
    return Stopped.NOT, index + left_out


def measure(
    next_batch: Callable[[], Any],
    step: Callable[[Any], None],
    samples_of: Callable[[Any], int],
    sync: Callable[[], None],
    rule: Rule,
    *,
    sync_every_step: bool = False,
    step_timer: StepTimer | None = None,
    monitors: Sequence[Monitor] = (),
    epochs_started: Callable[[], int] = lambda: 0,
    on_window: Callable[[int, float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    group: Group | None = None,
    time_left: Callable[[], float | None] = lambda: None,
) -> Timings:
    """Warm up, then measure windows until `rule` says stop. `sync` runs after the first step
    (its time is compile time), at warm-up block edges and at each window's end; after every
    step too with `sync_every_step` (a pessimistic bound: every step waits for the device). With a
    `group`, the window's steps are rank 0's count and rates are the group's. `time_left` says
    how long until the run is killed (protocol.seconds_until_killed; None: no limit): no window is
    begun that would end too close to it, and the run stops with the windows it has
    (Stopped.TIME_LIMIT), as its warm-up ends early to leave room for two (warm_up)."""
    loop = Loop(
        next_batch, step, samples_of, sync, sync_every_step, step_timer, clock, group, epochs_started, time_left
    )
    w = warm_up(rule, loop)
    t = _after_warm_up(w)
    first_until, until = _window_lengths(rule, w, group)
    for monitor in monitors:
        monitor.start()
    index, budget = 0, rule.max_windows  # windows left out as still changing are measured again
    while True:
        epochs = epochs_started()
        samples, steps, elapsed = _window(loop, t, rule, until if index else first_until)
        rate = _record(loop, t, samples, steps, elapsed, epochs_started() - epochs)
        if on_window is not None:
            on_window(index, rate)
        index += 1
        t.stopped, budget = _after_window(t, rule, index, budget)
        if t.stopped:
            break
        out_of_time = _out_of_time(t, rule, time_left())
        if loop.agree(int(out_of_time)):
            t.stopped = Stopped.TIME_LIMIT
            break
    t.pruned = t.stopped.pruned
    if w.out_of_time and not t.pruned:
        t.stopped = Stopped.TIME_LIMIT  # its warm-up was cut short too
    for monitor in reversed(monitors):  # the first started stops last: spans nest around the windows
        t.utilization = t.utilization.merged(monitor.stop())
    return t
