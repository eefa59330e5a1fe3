"""Warm-up: steps until the loop runs at a steady rate, before any window is timed. The rate is
read in blocks of half a window; the steady span's rate is kept (a sweep's far-off run is
confirmed by a quarter window on its word: timing.measure). In a sweep, a run whose blocks
already read far below the best ends its warm-up there, steady or not (far_below)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class StepTimer(Protocol):
    """Times each step on the device: marks around the step, read after the window's sync."""

    def begin(self) -> None: ...
    def end(self) -> None: ...
    def collect(self) -> list[float]: ...


class Group(Protocol):
    """The ranks of a data-parallel run, for the measuring loop (None: a single process)."""

    def agree(self, value: int) -> int: ...  # rank 0's value, on every rank
    def total(self, elapsed: float, samples: int) -> tuple[float, int]: ...  # (longest, summed) over ranks


class WarmUpRule(Protocol):
    """The warm-up's part of timing.Rule (read-only: the rule is frozen)."""

    @property
    def warmup_s(self) -> float: ...
    @property
    def warmup_steps(self) -> int: ...
    @property
    def warmup_max_s(self) -> float | None: ...
    @property
    def window_s(self) -> float: ...
    @property
    def steady_tol(self) -> float: ...
    @property
    def restarts_apart(self) -> bool: ...
    @property
    def warmup_bar(self) -> float | None: ...
    @property
    def cycle(self) -> int: ...


# what a run needs after its last window before it is killed: the loader's workers shut down,
# the run described and its result written (seconds; a loaded machine's, with room to spare)
AFTER_WINDOWS_S = 5.0


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up did."""

    seconds: float
    steps: int
    first_step_s: float
    first_wait_s: float  # the first batch: loader start-up (workers forking, first samples)
    step_rate: float  # steps/s at its end
    steady: bool  # it ended on a steady step rate, not on its maximum
    samples_per_sec: float | None  # over the steady span (the blocks the steady test compared)
    far_below: bool = False  # it ended on two blocks under the rule's warmup_bar (far_below)
    out_of_time: bool = False  # it ended early to leave time for two windows before the run's time limit


def step_once(
    next_batch: Callable[[], Any], step: Callable[[Any], None], clock: Callable[[], float], step_timer: StepTimer | None
) -> tuple[Any, float, float, float]:
    """One step, timed: (its batch, before the fetch, after the fetch, after the step)."""
    t0 = clock()
    batch = next_batch()
    t1 = clock()
    if step_timer is not None:
        step_timer.begin()
    step(batch)
    if step_timer is not None:
        step_timer.end()
    return batch, t0, t1, clock()


# what warm-up does after a step (rank 0's choice in a group)
_GO_ON, _STOP, _BLOCK_END, _OUT_OF_TIME = 0, 1, 2, 3


def no_time_for_windows(
    seconds_left: float | None, window_s: float, windows: int = 2, after_s: float = AFTER_WINDOWS_S
) -> bool:
    """Whether `windows` more windows of `window_s` and what the run does after them no longer
    fit in the `seconds_left` before the run is killed (None: no limit)."""
    return seconds_left is not None and windows * window_s + after_s > seconds_left


def steady_span(blocks: Sequence[tuple[int, float]], tol: float) -> int:
    """How many of the warm-up's latest blocks ((steps, seconds) each, oldest first) run at the
    rate of as many blocks before them (within `tol`), for the smallest such span; 0 when none
    does. One block against one is the strictest test of a trend, and enough for a quiet loop; a
    loop whose workers deliver in bursts swings 15-20% from block to block while its rate stays
    put, and only longer spans average that out."""

    def rate(span: Sequence[tuple[int, float]]) -> float:
        return sum(n for n, _ in span) / max(1e-12, sum(s for _, s in span))

    for k in range(1, len(blocks) // 2 + 1):
        newer, older = rate(blocks[-k:]), rate(blocks[-2 * k : -k])
        if abs(newer - older) <= tol * newer:
            return k
    return 0


def steady(blocks: Sequence[tuple[int, float]], tol: float) -> bool:
    """Whether the warm-up's latest blocks run at the rate of the blocks before them (steady_span)."""
    return steady_span(blocks, tol) > 0


def far_below(rates: Sequence[float], bar: float | None) -> bool:
    """Whether the warm-up's last two blocks (samples/s each, oldest first) both ran under `bar`:
    a run that far below the best is not worth a steady rate. Two, not one: a loop whose
    workers deliver in bursts can read one slow block; and the bar sits below the lowest ratio
    of an early block to the final figure seen while a loop ramps up (0.73 of it), so a run
    that would end above the prune floor does not read under it twice."""
    return bar is not None and len(rates) >= 2 and all(r < bar for r in rates[-2:])


def warm_up(
    rule: WarmUpRule,
    next_batch: Callable[[], Any],
    step: Callable[[Any], None],
    sync: Callable[[], None],
    sync_every_step: bool,
    clock: Callable[[], float],
    group: Group | None = None,
    epochs_started: Callable[[], int] = lambda: 0,
    samples_of: Callable[[Any], int] = lambda batch: 1,
    time_left: Callable[[], float | None] = lambda: None,
) -> WarmUp:
    """Until the minimums are met and the step rate is steady (or the maximum is reached). The
    minimum and maximum time count from the end of the first step, which holds compilation, a
    loader's start or a script's start-up, however long that takes. Blocks of half a window are
    compared (`steady`); with workers restarting at epoch ends, a block that held one is left
    out, as the windows leave it out. A single process's warm-up also ends once its last two
    blocks read under `rule.warmup_bar` (far_below): its rate is then theirs. Whatever its
    minimums, it ends when two windows (at least a loader cycle each, at the rate since the first
    step) would no longer fit in the `time_left` before the run is killed: a run cut short by
    its time limit then has a figure, not none."""
    agree = group.agree if group is not None else (lambda value: value)
    start = clock()
    settled = block_start = start
    steps, first_step_s, first_wait_s, step_rate, steady_rate, is_steady = 0, 0.0, 0.0, 0.0, None, False
    ended_far_below = False
    block_steps, block_samples, block_epochs = 0, 0, epochs_started()
    blocks: list[tuple[int, float]] = []
    block_sample_counts: list[int] = []
    while True:
        batch, t0, t1, _ = step_once(next_batch, step, clock, None)
        if steps == 0 or sync_every_step:
            sync()
        if steps == 0:
            first_step_s, first_wait_s = clock() - t0, t1 - t0
            settled = block_start = clock()  # the first step (compile, loader start) is no block's
            block_epochs = epochs_started()
        else:
            block_steps += 1
            block_samples += samples_of(batch)
        steps += 1
        now = clock()
        left = time_left() if steps > 1 else None
        # a window is at least a loader cycle, at the rate since the first step
        if left is not None and no_time_for_windows(
            left, max(rule.window_s, rule.cycle * (now - settled) / (steps - 1))
        ):
            action = _OUT_OF_TIME
        elif steps < rule.warmup_steps or now - settled < rule.warmup_s:
            action = _GO_ON
        elif rule.warmup_max_s is None or now - settled >= rule.warmup_max_s:
            action = _STOP
        else:
            action = _BLOCK_END if block_steps and now - block_start >= rule.window_s / 2 else _GO_ON
        action = agree(action)
        if action in (_STOP, _OUT_OF_TIME):
            break
        if action == _BLOCK_END:
            sync()
            now = clock()
            step_rate = block_steps / (now - block_start)
            if not (rule.restarts_apart and epochs_started() != block_epochs):
                blocks.append((block_steps, now - block_start))
                block_sample_counts.append(block_samples)
            span = steady_span(blocks, rule.steady_tol) if len(blocks) >= 2 else 0
            if agree(int(span > 0)):  # every rank asks
                is_steady = True
                if span:
                    seconds = sum(s for _, s in blocks[-2 * span :])
                    steady_rate = sum(block_sample_counts[-2 * span :]) / max(1e-12, seconds)
                break
            rates = [n / max(1e-12, s) for n, (_, s) in zip(block_sample_counts, blocks)]
            if group is None and far_below(rates, rule.warmup_bar):
                ended_far_below = True
                steady_rate = sum(block_sample_counts[-2:]) / max(1e-12, sum(s for _, s in blocks[-2:]))
                break
            block_start, block_steps, block_samples, block_epochs = now, 0, 0, epochs_started()
    sync()
    seconds = clock() - start
    if not step_rate and steps > 1:
        step_rate = (steps - 1) / max(1e-9, seconds - first_step_s)
    return WarmUp(
        seconds,
        steps,
        first_step_s,
        first_wait_s,
        step_rate,
        is_steady,
        steady_rate,
        ended_far_below,
        out_of_time=action == _OUT_OF_TIME,
    )
