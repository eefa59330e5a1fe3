"""Warm-up: steps until the loop runs at a steady rate, before any window is timed. The rate is
read in blocks of half a window; the steady span's rate is kept (a sweep's far-off run is
confirmed by a quarter window on its word: timing.measure). In a sweep, a run whose blocks
already read far below the best ends its warm-up there, steady or not (far_below)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    samples: int = 0  # this process's samples over the whole warm-up, its first step's included
    out_of_time: bool = False  # it ended early to leave time for two windows before the run's time limit


@dataclass(frozen=True)
class Loop:
    """The loop being measured, as warm-up and the windows drive it: where a batch comes from,
    the step, how many samples a batch holds, the device's sync (after every step too with
    `sync_every_step`), and what the run knows around it: its clock, its ranks (`group`; None: a
    single process), the loader's epochs begun, and the seconds until it is killed (None: no
    limit)."""

    next_batch: Callable[[], Any]
    step: Callable[[Any], None]
    samples_of: Callable[[Any], int] = lambda batch: 1
    sync: Callable[[], None] = lambda: None
    sync_every_step: bool = False
    step_timer: StepTimer | None = None
    clock: Callable[[], float] = time.perf_counter
    group: Group | None = None
    epochs_started: Callable[[], int] = lambda: 0
    time_left: Callable[[], float | None] = lambda: None

    def step_once(self, timed: bool = True) -> tuple[Any, float, float, float]:
        """One step, timed: (its batch, before the fetch, after the fetch, after the step); on
        the device too where the loop has a step timer and `timed`."""
        timer = self.step_timer if timed else None
        t0 = self.clock()
        batch = self.next_batch()
        t1 = self.clock()
        if timer is not None:
            timer.begin()
        self.step(batch)
        if timer is not None:
            timer.end()
        return batch, t0, t1, self.clock()

    def agree(self, value: int) -> int:
        """Rank 0's value on every rank (the value itself in a single process)."""
        return self.group.agree(value) if self.group is not None else value


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


@dataclass
class _Blocks:
    """The warm-up's blocks of half a window so far, oldest first: (steps, seconds) and samples;
    and the open block being filled (its start, steps, samples, and the epochs started then)."""

    timed: list[tuple[int, float]] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    start: float = 0.0
    steps: int = 0
    open_samples: int = 0
    epochs: int = 0

    def open(self, now: float, epochs: int) -> None:
        self.start, self.steps, self.open_samples, self.epochs = now, 0, 0, epochs

    def step(self, samples: int) -> None:
        self.steps += 1
        self.open_samples += samples

    def close(self, now: float, epochs: int, restarts_apart: bool) -> float:
        """End the open block at `now`; its step rate. With workers restarting at epoch ends
        (`restarts_apart`), a block one fell in is not kept, as the windows leave it out."""
        if not (restarts_apart and epochs != self.epochs):
            self.add(self.steps, now - self.start, self.open_samples)
        return self.steps / (now - self.start)

    def add(self, steps: int, seconds: float, samples: int) -> None:
        self.timed.append((steps, seconds))
        self.samples.append(samples)

    def rate(self, last: int) -> float:
        """Samples/s over the `last` blocks."""
        return sum(self.samples[-last:]) / max(1e-12, sum(s for _, s in self.timed[-last:]))

    def rates(self) -> list[float]:
        return [n / max(1e-12, s) for n, (_, s) in zip(self.samples, self.timed)]


def _action(rule: WarmUpRule, steps: int, since_settled: float, left: float | None, block: tuple[int, float]) -> int:
    """What warm-up does after its `steps`-th step, `since_settled` s after the first step ended,
    with `left` s before the run is killed and the open block's (steps, seconds)."""
    # a window is at least a loader cycle, at the rate since the first step
    if left is not None and no_time_for_windows(left, max(rule.window_s, rule.cycle * since_settled / (steps - 1))):
        return _OUT_OF_TIME
    if steps < rule.warmup_steps or since_settled < rule.warmup_s:
        return _GO_ON
    if rule.warmup_max_s is None or since_settled >= rule.warmup_max_s:
        return _STOP
    return _BLOCK_END if block[0] and block[1] >= rule.window_s / 2 else _GO_ON


def _ending(rule: WarmUpRule, loop: Loop, blocks: _Blocks) -> tuple[bool, float | None] | None:
    """After a block: None to go on, else whether the rate is steady and the rate warm-up ends at
    (steady: its steady span's, asked of every rank; far below, a single process only: the last
    two blocks')."""
    span = steady_span(blocks.timed, rule.steady_tol) if len(blocks.timed) >= 2 else 0
    if loop.agree(int(span > 0)):  # every rank asks
        return True, blocks.rate(2 * span) if span else None
    if loop.group is None and far_below(blocks.rates(), rule.warmup_bar):
        return False, blocks.rate(2)
    return None


def warm_up(rule: WarmUpRule, loop: Loop) -> WarmUp:
    """Until the minimums are met and the step rate is steady (or the maximum is reached). The
    minimum and maximum time count from the end of the first step, which holds compilation, a
    loader's start or a script's start-up, however long that takes. Blocks of half a window are
    compared (`steady`); with workers restarting at epoch ends, a block that held one is left
    out, as the windows leave it out. A single process's warm-up also ends once its last two
    blocks read under `rule.warmup_bar` (far_below): its rate is then theirs. Whatever its
    minimums, it ends when two windows (at least a loader cycle each, at the rate since the first
    step) would no longer fit in the loop's time left before the run is killed: a run cut short
    by its time limit then has a figure, not none."""
    clock = loop.clock
    start = clock()
    batch, t0, t1, _ = loop.step_once(timed=False)
    loop.sync()
    first_step_s, first_wait_s, samples = clock() - t0, t1 - t0, loop.samples_of(batch)
    settled = clock()  # the first step (compile, loader start) is no block's
    steps, step_rate, steady_rate, is_steady, ended_far_below = 1, 0.0, None, False, False
    blocks = _Blocks()
    blocks.open(settled, loop.epochs_started())
    action = loop.agree(_action(rule, steps, clock() - settled, None, (0, 0.0)))
    while action not in (_STOP, _OUT_OF_TIME):
        batch, *_ = loop.step_once(timed=False)
        if loop.sync_every_step:
            loop.sync()
        size = loop.samples_of(batch)
        blocks.step(size)
        steps, samples = steps + 1, samples + size
        now = clock()
        action = loop.agree(_action(rule, steps, now - settled, loop.time_left(), (blocks.steps, now - blocks.start)))
        if action != _BLOCK_END:
            continue
        loop.sync()
        now = clock()
        step_rate = blocks.close(now, loop.epochs_started(), rule.restarts_apart)
        if (ending := _ending(rule, loop, blocks)) is not None:
            is_steady, steady_rate = ending
            ended_far_below = not is_steady
            break
        blocks.open(now, loop.epochs_started())
    loop.sync()
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
        samples=samples,
    )
