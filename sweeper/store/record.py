"""What a sweep stores on an Optuna trial (its user_attrs), as a typed, frozen record, and the
attribute sets to store: every trial attribute name is spelled here and nowhere else. Pure
(reads FrozenTrials and Trials, imports no Optuna).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..choice import Choice
from ..machine import Fingerprint
from ..measurement import Measurement
from ..result import WALL_S, RunResult, Status

_STATUS, _REASON, _FIGURES = "status", "reason", "metrics"
_KNOBS, _BASELINE, _FIXED = "knobs", "baseline", "fixed_overrides"
_FINGERPRINT, _HARDWARE, _JOB_DIR = "fingerprint", "hardware_class", "job_dir"
_REUSED_FROM, _WORKLOAD, _SWEEP_DIR = "reused_from", "workload", "sweep_dir"
_HOST, _PID, _PID_STARTED, _HEARTBEAT = "host", "sweeper_pid", "sweeper_started", "heartbeat_at"
_RERUN = "rerun_reason"
# the sweep process that is taking a queued point, written before the claim: [host, pid, started]
_CLAIMED_BY = "claimed_by"
# why the trial's first run was measured again: its figure, taken under other processes' load, and what loaded it
_MEASURED_AGAIN = "measured_again"
# a trial told a result its job wrote after an earlier sweep had failed it: that trial's number
_RECOVERED_FROM = "recovered_from"
_SCHEDULER_JOB, _QUEUE_WAIT = "scheduler_job", "queue_wait_s"
_ORIGIN = "origin"  # set by Optuna's enqueue_trial (search/start.py): why this point was measured
_QUEUED_FOR = "queued_for"  # the fixed overrides of the setup that queued the point: only it asks it
# a point queued to be measured again, or in place of another trial: {"why", "of", "knob"} (Again)
_AGAIN = "again"
# how studies written before `again` said the same: a held-back knob's try (the knob, the best's
# number), a point in place of a skipped one, a proposal measured once more (read, never written)
_PROBE_KNOB, _PROBE_OF, _IN_PLACE_OF, _RECHECK_OF = "probe_knob", "probe_of", "in_place_of", "recheck_of"
# a result taken from another study of the same workload and hardware class: "<study>#<number>"
_BORROWED_FROM = "borrowed_from"
# the attributes of a result, copied when a result is reused for an identical configuration
_RESULT_ATTRS = (_STATUS, _REASON, _FIGURES, _FINGERPRINT, _HARDWARE)


def _status(attrs: Mapping[str, Any]) -> Status | None:
    value = attrs.get(_STATUS)
    return None if value is None else Status(value)


class Why(Choice):
    """Why a point is queued for a run of its own although the study may hold it."""

    # a point measured once more for the convergence rule (search/recheck.py): a run of its point
    RECHECK = "recheck"
    HELD_KNOB = "held-knob"  # a held-back knob tried at the best so far (search/held_back.py)
    IN_PLACE = "in-place"  # the nearest point within the cores, for one the preset skipped
    ORPHANED = "orphaned"  # its sweep died while measuring it, and its job left no result (search/unfinished.py)


@dataclass(frozen=True)
class Again:
    """An entry of the one queue of points measured again: why, the trial it stands for, and
    for a held-back knob's try, the knob. Every path that measures a point again queues one, so
    the study's trials say what each run was for."""

    why: Why
    of: int
    knob: str | None = None

    def attrs(self) -> dict[str, Any]:
        return {"why": self.why.value, "of": self.of, **({"knob": self.knob} if self.knob else {})}

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> Again | None:
        """The stored entry, from `again` or the keys studies written before it used."""
        if (again := attrs.get(_AGAIN)) is not None:
            return cls(Why(again["why"]), int(again["of"]), again.get("knob"))
        if attrs.get(_PROBE_KNOB) and attrs.get(_PROBE_OF) is not None:
            return cls(Why.HELD_KNOB, int(attrs[_PROBE_OF]), attrs[_PROBE_KNOB])
        if attrs.get(_IN_PLACE_OF) is not None:
            return cls(Why.IN_PLACE, int(attrs[_IN_PLACE_OF]))
        if attrs.get(_RECHECK_OF) is not None:
            return cls(Why.RECHECK, int(attrs[_RECHECK_OF]))
        return None


@dataclass(frozen=True)
class Owner:
    """The sweep process that runs a trial: stored with the trial as it turns RUNNING, so that a
    sweep killed in that instant leaves no RUNNING trial that nobody can tell is dead."""

    host: str
    pid: int
    started: float | None  # when the process started: a pid reused later is not the same process

    def attrs(self) -> dict[str, Any]:
        return {_HOST: self.host, _PID: self.pid, _PID_STARTED: self.started}

    def claim(self) -> dict[str, Any]:
        """Written, in one write, before the process takes a queued point from the queue (the
        claim and the owner's attributes are separate writes): a sweep killed between them
        leaves a trial whose claimant the next sweep can tell is dead."""
        return {_CLAIMED_BY: [self.host, self.pid, self.started]}


@dataclass(frozen=True)
class TrialRecord:
    """One trial as sweeper stored it, read back (TrialAttrs below writes it)."""

    status: Status | None  # None: not finished
    reason: str | None
    # the figures as stored, flat (a table's columns; typed: `measurement`)
    figures: Mapping[str, Any]
    knobs: dict[str, Any] | None  # every knob the trial set (None: a trial sweeper did not ask)
    baseline: bool
    fixed_overrides: tuple[str, ...]
    fingerprint_json: str | None
    hardware_class: str | None
    job_dir: str | None
    reused_from: int | None
    workload: str | None
    sweep_dir: str | None
    host: str | None
    sweeper_pid: int | None
    sweeper_started: float | None
    heartbeat_at: float | None
    rerun_reason: str | None
    scheduler_job: str | None = None  # slurm:<job id>, where a scheduler ran it
    queue_wait_s: float | None = None  # from its submission to its run's start
    origin: str | None = None  # queued after the baseline: a warm start or a recipe, and from where
    again: Again | None = None  # queued to be measured again: why, and of which trial
    queued_for: tuple[str, ...] | None = None  # a queued point's setup (None: queued by hand, or not queued)
    recovered_from: int | None = None  # the failed trial whose job's late result this trial holds
    measured_again: str | None = None  # its first run was taken under load: its figure and what loaded it
    borrowed_from: str | None = None  # "<study>#<n>": another study's result, ranked here as our own
    claimed_by: Owner | None = None  # a queued point's claimant, until the claim's winner names itself

    @classmethod
    def of(cls, trial: Any) -> TrialRecord:
        """Of an Optuna Trial or FrozenTrial."""
        return cls.from_attrs(trial.user_attrs)

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> TrialRecord:
        knobs = attrs.get(_KNOBS)
        pid = attrs.get(_PID)
        return cls(
            status=_status(attrs),
            reason=attrs.get(_REASON),
            figures=dict(attrs.get(_FIGURES) or {}),
            knobs=dict(knobs) if knobs is not None else None,
            baseline=bool(attrs.get(_BASELINE, False)),
            fixed_overrides=tuple(attrs.get(_FIXED) or ()),
            fingerprint_json=attrs.get(_FINGERPRINT),
            hardware_class=attrs.get(_HARDWARE),
            job_dir=attrs.get(_JOB_DIR),
            reused_from=attrs.get(_REUSED_FROM),
            workload=attrs.get(_WORKLOAD),
            sweep_dir=attrs.get(_SWEEP_DIR),
            host=attrs.get(_HOST),
            sweeper_pid=int(pid) if pid is not None else None,
            sweeper_started=attrs.get(_PID_STARTED),
            heartbeat_at=attrs.get(_HEARTBEAT),
            rerun_reason=attrs.get(_RERUN),
            scheduler_job=attrs.get(_SCHEDULER_JOB),
            queue_wait_s=attrs.get(_QUEUE_WAIT),
            origin=attrs.get(_ORIGIN),
            again=Again.from_attrs(attrs),
            queued_for=tuple(attrs[_QUEUED_FOR]) if attrs.get(_QUEUED_FOR) is not None else None,
            recovered_from=attrs.get(_RECOVERED_FROM),
            measured_again=attrs.get(_MEASURED_AGAIN),
            borrowed_from=attrs.get(_BORROWED_FROM),
            claimed_by=Owner(*attrs[_CLAIMED_BY]) if attrs.get(_CLAIMED_BY) else None,
        )

    def again_for(self, why: Why) -> int | None:
        """The trial this one stands for, where it was queued again for `why`."""
        return self.again.of if self.again is not None and self.again.why == why else None

    @property
    def probe_knob(self) -> str | None:  # a held-back knob tried at the best so far: which
        return self.again.knob if self.again is not None and self.again.why == Why.HELD_KNOB else None

    @property
    def probe_of(self) -> int | None:  # ... and the best's trial number
        return self.again_for(Why.HELD_KNOB)

    @property
    def in_place_of(self) -> int | None:  # the skipped trial whose nearest point within the cores this is
        return self.again_for(Why.IN_PLACE)

    @property
    def recheck_of(self) -> int | None:  # the proposal this run measures once more
        return self.again_for(Why.RECHECK)

    # -- reading (the typed parts on first use: a sweep reads many records) --
    @cached_property
    def measurement(self) -> Measurement | None:
        """What the run measured (ok and pruned trials)."""
        if not self.figures or self.status not in (Status.OK, Status.PRUNED):
            return None
        return Measurement.from_flat(self.figures)

    @cached_property
    def fingerprint(self) -> Fingerprint | None:
        return Fingerprint.from_dict(json.loads(self.fingerprint_json)) if self.fingerprint_json else None

    @property
    def samples_per_sec(self) -> float | None:
        return self.measurement.throughput.samples_per_sec if self.measurement is not None else None

    @property
    def rel_iqr(self) -> float:
        return self.measurement.throughput.samples_per_sec_rel_iqr if self.measurement is not None else 0.0

    @property
    def wall_s(self) -> float | None:
        value = self.figures.get(WALL_S)
        return float(value) if value else None

    @property
    def reused(self) -> bool:
        return self.reused_from is not None

    @property
    def measured(self) -> bool:
        """Ran a measurement of its own (or is running one): not reused, not answered without running, not
        interrupted (measured again on resume), not a proposal's second run (like a confirmation's: not a trial)."""
        own = not self.reused and self.borrowed_from is None and self.recheck_of is None
        return own and (self.status is None or (self.status.ran and self.status != Status.INTERRUPTED))


class TrialAttrs:
    """What a sweep stores on a trial at each step of its life, as the user_attrs to write: the
    writing side of TrialRecord, spelled with the same names."""

    @staticmethod
    def started(
        *,
        baseline: bool,
        knobs: Mapping[str, Any],
        fixed: list[str],
        workload: str,
        sweep_dir: str,
        hardware_class: str,
    ) -> dict[str, Any]:
        """When a trial's knobs are chosen: what it measures, and for which setup."""
        return {
            _BASELINE: baseline,
            _KNOBS: dict(knobs),
            _FIXED: list(fixed),
            _WORKLOAD: workload,
            _SWEEP_DIR: sweep_dir,
            _HARDWARE: hardware_class,
        }

    @staticmethod
    def recovered(number: int) -> dict[str, Any]:
        """A trial that holds the result trial `number`'s job wrote after it had been failed."""
        return {_RECOVERED_FROM: number}

    @staticmethod
    def submitted(scheduler_job: str) -> dict[str, Any]:
        """When its job is submitted to a scheduler: the job, as the scheduler names it."""
        return {_SCHEDULER_JOB: scheduler_job}

    @staticmethod
    def queued(origin: str | None, fixed: Sequence[str], again: Again | None = None) -> dict[str, Any]:
        """A point queued for its setup's next ask (enqueue_trial's user_attrs): for which setup and
        why (no origin: the baseline), and where it is measured again, the queue's entry."""
        return {
            _QUEUED_FOR: list(fixed),
            **({_ORIGIN: origin} if origin is not None else {}),
            **({_AGAIN: again.attrs()} if again is not None else {}),
        }

    @staticmethod
    def finished(result: RunResult) -> dict[str, Any]:
        """When its run came back."""
        attrs: dict[str, Any] = {_STATUS: result.status.value, _REASON: result.reason, _FIGURES: result.figures()}
        if result.fingerprint is not None:
            attrs[_FINGERPRINT] = json.dumps(result.fingerprint.to_dict())
            attrs[_HARDWARE] = result.fingerprint.hardware_class
        optional = {_JOB_DIR: result.job_dir, _SCHEDULER_JOB: result.scheduler_job, _QUEUE_WAIT: result.queue_wait_s}
        return attrs | {key: value for key, value in optional.items() if value is not None}

    @staticmethod
    def ended(status: Status, reason: str) -> dict[str, Any]:
        """Ended without a measurement (skipped, surplus, interrupted, a bad objective value)."""
        return {_STATUS: status.value, _REASON: reason}

    @staticmethod
    def reused_result(source: Any, source_number: int, study: str | None = None) -> dict[str, Any]:
        """An identical configuration's result (its Trial or FrozenTrial) and its source (another `study`: borrowed)."""
        where = {_REUSED_FROM: source_number} if study is None else {_BORROWED_FROM: f"{study}#{source_number}"}
        return where | {k: source.user_attrs[k] for k in _RESULT_ATTRS if k in source.user_attrs}

    @staticmethod
    def rerun(reason: str) -> dict[str, Any]:
        """A configuration the study had, measured again, and why."""
        return {_RERUN: reason}

    @staticmethod
    def loaded_run(note: str) -> dict[str, Any]:
        """Its run was taken under other processes' load and is measured again: its figure, what loaded it."""
        return {_MEASURED_AGAIN: note}

    @staticmethod
    def heartbeat(now: float) -> dict[str, Any]:
        return {_HEARTBEAT: now}
