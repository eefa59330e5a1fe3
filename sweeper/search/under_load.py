"""A figure taken under other processes' load never decides: the sweep waits for the machine to
be quiet (bounded, and said) and measures the run again; a run loaded again is kept and not
ranked (status not-ranked, the reason saying so). The waiting is a pure rule over load samples,
so it is tested without a busy machine; `sweeper.foreign` takes the samples."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import foreign, topology
from ..foreign import ForeignLoad
from ..result import RunResult, Status
from ..runner.signals import StopRequest
from . import progress

# a run taken under load is measured again this many times before it is kept and not ranked
LOAD_RERUNS = 1
# the machine is quiet after this many samples in a row at or below the limit
QUIET_SAMPLES = 2
# each sample of the machine's load spans this many seconds (the one before trial 1, half that)
SAMPLE_S = 1.0
# while waiting, a line at most this often
SAY_EVERY_S = 60.0


@dataclass(frozen=True)
class Waited:
    """How a wait for quiet ended."""

    quiet: bool
    waited_s: float
    last: ForeignLoad | None  # the last sample (None: no sample was taken)


def wait_for_quiet(
    limit_pct: float,
    max_wait_s: float,
    sample: Callable[[], ForeignLoad],
    say: Callable[[str], None],
    *,
    should_stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> Waited:
    """Sample until QUIET_SAMPLES in a row are at or below `limit_pct`, at most `max_wait_s`;
    the first busy sample is said, then one line every SAY_EVERY_S."""
    began, said_at, calm, last = clock(), None, 0, None
    while True:
        last = sample()
        calm = calm + 1 if last.cpu_pct <= limit_pct else 0
        waited = clock() - began
        if calm >= QUIET_SAMPLES:
            return Waited(True, waited, last)
        if waited >= max_wait_s or should_stop():
            return Waited(False, waited, last)
        if calm == 0 and (said_at is None or clock() - said_at >= SAY_EVERY_S):
            said_at = clock()
            say(f"waiting: {last.describe()}; at most {max_wait_s - waited:.0f} s more")


def wait_here(limit_pct: float, max_wait_s: float, stop: StopRequest) -> None:
    """Wait for this machine's cores to be quiet (wait_for_quiet over sweeper.foreign's samples),
    saying so; at the bound, say that the run is measured anyway."""
    cpus = topology.machine_cpus()
    waited = wait_for_quiet(
        limit_pct,
        max_wait_s,
        lambda: foreign.sample(SAMPLE_S, cpus),
        progress.say,
        should_stop=lambda: stop.requested,
    )
    if not waited.quiet and waited.last is not None:
        progress.say(f"still busy after {waited.waited_s:.0f} s ({waited.last.describe()}): measuring anyway")


def kept_under_load(result: RunResult, tries: int) -> RunResult:
    """A run loaded every time it was measured: its figure kept, not ranked, and why."""
    note = result.measurement.utilization.load_note if result.measurement is not None else "loaded"
    return result.replace(
        status=Status.NOT_RANKED,
        reason=f"taken under load {tries} times ({note})",
    )
