"""Why a sweep stops before its next trial: n_trials, an exhausted sampler or space,
convergence (converge.py), the time budget. `stop_reason` is pure; `LoopState` is what the rules
read besides the study."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..noise import Noise
from ..result import Status
from . import progress
from .budget import format_duration

# suggestions in a row that were all measured before: the space has nothing new left
EXHAUSTED_AFTER = 20
# suggestions in a row that the preset does not measure: the sampler finds nothing else
SKIPPED_AFTER = 100
# a sweep's first measured trials all failing with one reason (an error or a crash, not running
# out of memory or time, which a smaller configuration may avoid): the workload fails whatever
# the knobs, and every further trial would fail the same way
FAILED_ALIKE = 3


@dataclass
class LoopState:
    """What the stop rules look at besides the study."""

    unmeasured_in_a_row: int = 0  # suggestions in a row answered without measuring
    skipped_in_a_row: int = 0  # suggestions in a row the preset does not measure (not answers)
    sampler_done: bool = False
    opened: frozenset[str] = frozenset()  # held-back knobs already said to be open
    said: set[str] = field(default_factory=set)  # what the later knobs' tries already told
    start_points_due: bool = False  # this process asked the baseline: queue the start points next
    launched: bool = False  # this process has measured (or answered) a trial
    # the reasons of this process's first measured trials while each failed (None: one did not)
    first_failures: list[str] | None = field(default_factory=list)
    # the run-to-run noise as the study's repeated points say it (sweeper.noise), read before each ask
    noise: Noise = field(default_factory=lambda: Noise(0.0, 0.0))

    def say_once(self, key: str, line: str) -> None:
        if key not in self.said:
            self.said.add(key)
            progress.say(line)


def stop_reason(
    state: LoopState,
    *,
    measured: int,
    n_trials: int,
    remaining_s: float | None,
    reserve_s: float,
    converged: str | None = None,
    waiting: Callable[[], str | None] = lambda: None,
) -> str | None:
    """Why the sweep stops before the next trial, or None to go on (pure). Where it ends on
    n_trials or the budget, `waiting` says what the convergence rule still waited on."""
    if measured >= n_trials:  # converged on its last trial: the rule's line says more
        return converged or f"n_trials={n_trials} reached" + _not_converged(waiting())
    if (alike := failed_alike(state.first_failures)) is not None:
        return alike
    if state.sampler_done:
        return "the sampler has tried everything it had (grid exhausted)"
    if state.unmeasured_in_a_row >= EXHAUSTED_AFTER:
        return f"search space exhausted: the last {EXHAUSTED_AFTER} suggestions were all measured already"
    if state.skipped_in_a_row >= SKIPPED_AFTER:
        return f"the last {SKIPPED_AFTER} suggestions were all points the preset does not measure (oversubscribed)"
    if converged is not None:
        return converged
    if remaining_s is not None and (remaining_s <= reserve_s or remaining_s <= 0):
        return (
            f"timeout budget reached: {format_duration(max(0.0, remaining_s))} left, and the next trial with the "
            f"confirmation's first round takes about {format_duration(reserve_s)}: no trial is started that "
            "cannot finish" + _not_converged(waiting())
        )
    return None


def _not_converged(waiting: str | None) -> str:
    return "" if waiting is None else f"; not converged: {waiting}"


def alike_failure(status: Status | None, reason: str | None) -> str | None:
    """A trial's failure as the failed-alike rule reads it ("error: ..."), or None for an outcome
    a configuration decides: it ran, ran out of memory or time, or was killed by SIGKILL (the
    kernel's answer to memory, too, which a smaller configuration avoids). An invalid run counts:
    one that a knob makes invalid (fp16 on a CPU) gives its own reason, not the others'."""
    if status in (Status.ERROR, Status.INVALID) or (status == Status.CRASH and "SIGKILL" not in (reason or "")):
        return f"{status}: {reason}"
    return None


def failed_alike(failures: list[str] | None) -> str | None:
    """The stop line when a sweep's first FAILED_ALIKE measured trials failed with one reason (its
    numbers aside: steps, pids), or None (pure)."""
    if failures is None or len(failures) < FAILED_ALIKE:
        return None
    # a data-parallel run's reason names its rank ("rank 1 of 2: ..."): the same failure
    if len({re.sub(r"\d+", "#", re.sub(r": rank \d+ of \d+:", ":", why)) for why in failures[:FAILED_ALIKE]}) > 1:
        return None
    return (
        f"the first {FAILED_ALIKE} trials all failed alike ({failures[0]}): the workload fails whatever "
        "the knobs; fix it, then run the same command again"
    )


def nothing_new(why: str, measured: int, n_trials: int) -> str:
    """The stop line of a sweep that measured nothing because its study's earlier sweeps had
    already stopped it: n_trials counts the study's trials, and a converged study converges again
    (pure; other reasons are returned as they are)."""
    more = f"hydra.sweeper.n_trials above {n_trials} measures more; " if measured >= n_trials else ""
    if not (more or why.startswith("converged")):
        return why
    return (
        f"{why}; the study's earlier sweeps had reached this, so nothing new was measured "
        f"({more}another study: hydra.sweeper.study_name=<name>)"
    )
