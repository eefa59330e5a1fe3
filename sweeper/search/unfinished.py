"""Trials that earlier sweeps of the study left unfinished or lost, settled before a sweep asks
for new ones: nothing a job measured is lost because the sweep that submitted it stopped.

- A trial whose job the scheduler still holds (queued, running, requeued) is waited for,
  within the sweep's budget, and then read: a killed sweep's job goes on measuring.
- A RUNNING trial whose sweep is gone (its process dead on this host, or no heartbeat for
  GRACE_S) is told the result.json its job left, else failed as interrupted (measured again).
- A trial failed as lost or interrupted whose job later wrote a result is recovered: a new
  trial holds that result and stands in for it (an ended Optuna trial cannot change).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from optuna.trial import FrozenTrial, Trial, TrialState

from ..result import RunResult, Status
from ..store import queue
from ..store.heartbeat import orphans, process_alive
from ..store.record import Again, TrialRecord, Why
from ..store.study import StoredStudy
from . import lost_jobs, progress, scheduled
from .plan import SweepPlan
from .trials import tell_result

# what a result written late is recovered from: the trial was failed without its job's word
_LOST = (Status.INTERRUPTED, Status.ERROR)


def _left_result(sweep_dir: str | None, number: int, since: float | None = None) -> RunResult | None:
    """The result.json trial `number`'s job wrote in its folder (since `since`, epoch seconds)."""
    return lost_jobs.left_result(Path(sweep_dir) / str(number) if sweep_dir else None, since)


def late_results(trials: Sequence[FrozenTrial], fixed: Sequence[str]) -> list[tuple[FrozenTrial, RunResult]]:
    """This setup's trials failed as lost or interrupted whose job wrote a result after the
    trial had been failed (each once: `trials` lists none that a recovery replaced)."""
    found = []
    for trial in trials:
        record = TrialRecord.of(trial)
        if trial.state != TrialState.FAIL or record.status not in _LOST or record.fixed_overrides != tuple(fixed):
            continue
        since = trial.datetime_start.timestamp() if trial.datetime_start else None
        result = _left_result(record.sweep_dir, trial.number, since)
        if result is None or not result.status.ran or result.status == Status.INTERRUPTED:
            continue
        if (result.status, result.reason) == (record.status, record.reason):
            continue  # the job's own verdict, told when the trial ended: nothing came late
        found.append((trial, result))
    return found


def _still_held(trials: Sequence[FrozenTrial]) -> dict[int, str]:
    """Trial number -> job, for the trials whose job the scheduler still holds."""
    held = {}
    for trial in trials:
        job = TrialRecord.of(trial).scheduler_job
        if job is not None and scheduled.is_active(scheduled.job_state(job)):
            held[trial.number] = job
    return held


def _wait_for_jobs(stored: StoredStudy, numbers: Sequence[int], give_up: Callable[[], bool]) -> set[int]:
    """Wait while the scheduler holds the jobs of these trials; the numbers still held when
    `give_up` says so (left for the next sweep)."""
    pending = _still_held([stored.trial(n) for n in numbers])
    for number, job in pending.items():
        progress.say(
            f"trial #{number}: its job {job} is still {scheduled.job_state(job) or 'queued'}, from a sweep "
            "that stopped; its result is read when it ends"
        )
    while pending and not give_up():
        time.sleep(scheduled.POLL_S)
        pending = _still_held([stored.trial(n) for n in pending])
    return set(pending)


def _queue_again(stored: StoredStudy, plan: SweepPlan, trial: FrozenTrial) -> None:
    """An orphaned trial of this setup that left no result: its point goes back in the queue, to
    be measured in this sweep (nothing the sweep that died asked for is lost). The baseline is
    asked again as the baseline, and a point measured again for another trial stands for that
    one: neither is queued here."""
    record = TrialRecord.of(trial)
    if not trial.params or record.fixed_overrides != plan.setup or record.baseline or record.again is not None:
        return
    knobs = {k: v for k, v in trial.params.items() if k in plan.space}
    if len(knobs) != len(trial.params):
        return  # asked in another space: the sampler asks this one's own points
    origin = f"{record.origin}; " if record.origin else ""
    queue.enqueue(
        stored,
        knobs,
        f"{origin}measured again: its sweep stopped while it ran",
        plan.setup,
        again=Again(Why.ORPHANED, trial.number),
    )
    progress.say(
        f"trial #{trial.number}: its sweep stopped while it ran and left no result; its point is measured again"
    )


def settle(stored: StoredStudy, plan: SweepPlan, give_up: Callable[[], bool]) -> None:
    """Settle what earlier sweeps left (see the module's docstring), before the first ask."""
    found = orphans(
        stored.trials(),
        host=socket.gethostname(),
        now=time.time(),
        alive=process_alive,
        told=lambda job: scheduled.job_state(job) is not None,
    )
    failed = [
        t
        for t in stored.trials(plan.setup)
        if t.state == TrialState.FAIL
        and TrialRecord.of(t).status in _LOST
        and TrialRecord.of(t).scheduler_job is not None
    ]
    still = _wait_for_jobs(stored, [*(t.number for t, _ in found), *(t.number for t in failed)], give_up)
    for trial, why in found:
        if trial.number in still:
            continue  # its job runs on: the next sweep reads it
        record = TrialRecord.of(trial)
        result = _left_result(record.sweep_dir, trial.number)
        if result is not None and record.fixed_overrides == plan.setup:
            tell_result(stored, Trial(stored.study, stored.trial_id(trial.number)), result, plan)
            progress.say(f"trial #{trial.number}: its job finished after its sweep stopped; its result.json is read")
        else:
            stored.fail(trial.number, Status.INTERRUPTED, why)
            _queue_again(stored, plan, trial)
    for trial, result in late_results(stored.trials(plan.setup), plan.setup):
        if trial.number in still:
            continue
        stand_in = stored.stand_in(trial)
        told = tell_result(
            stored,
            stand_in,
            result.replace(
                reason=f"recovered from #{trial.number}: its job wrote this result after the sweep had failed it"
                if result.ok
                else result.reason
            ),
            plan,
        )
        progress.say(
            f"trial #{told.trial.number}: the result trial #{trial.number}'s job wrote after it was failed, recovered"
        )
