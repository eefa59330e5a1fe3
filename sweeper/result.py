"""How a measured run ended (Status) and what the parent keeps of it (RunResult): the child's
typed Measurement, the machine's Fingerprint and the run's own facts; result.json is its
serialization. Pure: no torch, no Optuna.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from .machine import Fingerprint
from .measurement import PRIMARY, RESULT_FORMAT, Measurement


class Status(str, Enum):
    """How a run (or a trial) ended."""

    OK = "ok"
    OOM = "oom"
    TIMEOUT = "timeout"  # no result within measure.timeout_s; the process group was killed
    CRASH = "crash"  # killed by a signal
    ERROR = "error"  # an exception, with its message
    INVALID = "invalid"  # this machine can't run it (no GPU, fp16 on CPU, unknown model)
    PRUNED = "pruned"  # clearly slower than the best, stopped early
    # its figure kept, not ranked; the reason says why: measured on a machine of another hardware
    # class than the study's, or under other processes' load each time it was measured
    NOT_RANKED = "not-ranked"
    INTERRUPTED = "interrupted"  # stopped by SIGTERM/SIGINT of the sweep or run
    # not run at all:
    SURPLUS = "surplus"  # another process of the study reached n_trials
    SKIPPED = "skipped"  # a point the preset does not sample (ranks oversubscribing the cores)
    OOM_PREDICTED = "oom-predicted"  # a smaller batch with the same memory settings ran out of memory

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Status | None:
        """The statuses that studies and result.json files written by earlier versions hold."""
        return _EARLIER.get(str(value))

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def ran(self) -> bool:
        """A run was started for it (the statuses above the last three)."""
        return self not in (Status.SURPLUS, Status.SKIPPED, Status.OOM_PREDICTED)


# what earlier versions wrote: a proposal's second run (before the one test; kept from the sampler,
# its `again` naming the proposal) is a run of its point like any other, and a figure kept and not
# ranked had a status for each reason
_EARLIER = {"second-run": Status.OK, "other-hardware": Status.NOT_RANKED, "under-load": Status.NOT_RANKED}


# Texts by which PyTorch, CUDA and Python say "out of memory" (as Lightning and accelerate do).
_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "memoryerror",
    "std::bad_alloc",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
)


def looks_like_oom(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _OOM_MARKERS)


# the run's wall time as the parent saw it, kept beside the figures of a trial
WALL_S = "wall_s"
# result.json's keys besides the measurement's sections
_RUN_KEYS = (
    "status",
    "reason",
    "isolation",
    "isolation_note",
    "wall_s",
    "started_at",
    "ended_at",
    "log",
    "config",
    "job_dir",
    "scheduler_job",
)
_FORMAT, _MACHINE = "format", "machine"


@dataclass(frozen=True)
class RunResult:
    """One measured run as the parent saw it: the child's measurement and how the run went."""

    status: Status
    reason: str | None = None
    measurement: Measurement | None = None  # what the child measured (ok and pruned runs)
    fingerprint: Fingerprint | None = None
    # fork (from the zygote) or spawn, and why not forked where forking was asked
    isolation: str | None = None
    isolation_note: str | None = None
    wall_s: float = 0.0  # the whole run as the parent saw it
    started_at: float | None = None  # epoch seconds: when the run held the machine
    ended_at: float | None = None
    log: str | None = None  # the child's stdout and stderr
    config: dict[str, Any] | None = None  # task, loader, backend as run
    job_dir: str | None = None  # the Hydra job directory of a sweep trial
    # figures another Hydra app's job returned (its objectives), where there is no measurement
    reported: dict[str, float] | None = None
    # the scheduler's job that ran it (slurm:<job id>), where a scheduler did
    scheduler_job: str | None = None
    # seconds from the job's submission to the run's start (a scheduler's queue, a lock's wait)
    queue_wait_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def under_load(self) -> bool:
        """Its figure was taken while other processes loaded its cores (measure.foreign_cpu_max_pct)."""
        return self.measurement is not None and bool(self.measurement.utilization.under_load)

    @property
    def samples_per_sec(self) -> float | None:
        return self.value(PRIMARY)

    def replace(self, **changes: Any) -> RunResult:
        return replace(self, **changes)

    def value(self, name: str) -> Any:
        """The figure called `name` (an objective), measured or reported."""
        if self.measurement is not None:
            return self.measurement.value(name)
        return (self.reported or {}).get(name)

    def figures(self) -> dict[str, Any]:
        """The flat figures a trial keeps: the measurement's (or what a job reported) and the run's own."""
        found = self.measurement.flat() if self.measurement is not None else dict(self.reported or {})
        own = {WALL_S: self.wall_s or None, "isolation": self.isolation, "isolation_note": self.isolation_note}
        return {**found, **{k: v for k, v in own.items() if v is not None}}

    def to_json(self) -> dict[str, Any]:
        """result.json (format 2): the run's keys, the measurement's sections, the machine."""
        out: dict[str, Any] = {_FORMAT: RESULT_FORMAT, "status": self.status.value}
        for key in _RUN_KEYS[1:]:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.measurement is not None:
            out.update(self.measurement.to_json())
        if self.fingerprint is not None:
            out[_MACHINE] = self.fingerprint.to_dict()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunResult:
        """From the child's result event or a result.json (of this format: ValueError for another)."""
        if d.get(_FORMAT) != RESULT_FORMAT:
            raise ValueError(f"a result of format {d.get(_FORMAT)!r}: this sweeper reads format {RESULT_FORMAT}")
        measurement = Measurement.from_json(d) if "throughput" in d else None
        fingerprint = d.get(_MACHINE)
        return cls(
            status=Status(d.get("status", Status.ERROR)),
            reason=d.get("reason"),
            measurement=measurement,
            fingerprint=Fingerprint.from_dict(fingerprint) if fingerprint else None,
            isolation=d.get("isolation"),
            isolation_note=d.get("isolation_note"),
            wall_s=float(d.get("wall_s") or 0.0),
            started_at=d.get("started_at"),
            ended_at=d.get("ended_at"),
            log=d.get("log"),
            config=d.get("config"),
            job_dir=d.get("job_dir"),
            scheduler_job=d.get("scheduler_job"),
        )
