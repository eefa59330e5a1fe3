"""What a measured run ends as (Status, RunResult) and what a sweep stores on each Optuna trial
(TrialRecord): the one place result keys and trial attribute names are spelled. Pure: no torch,
no Optuna.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

# Above this share of step time spent waiting for the next batch, a run is data-bound.
DATA_BOUND_THRESHOLD = 0.2


class Status(str, Enum):
    """How a run (or a trial) ended."""

    OK = "ok"
    OOM = "oom"
    TIMEOUT = "timeout"  # no result within measure.timeout_s; the process group was killed
    CRASH = "crash"  # killed by a signal
    ERROR = "error"  # an exception, with its message
    INVALID = "invalid"  # this machine can't run it (no GPU, fp16 on CPU, unknown model)
    PRUNED = "pruned"  # clearly slower than the best, stopped early
    INTERRUPTED = "interrupted"  # stopped by SIGTERM/SIGINT of the sweep or run
    SURPLUS = "surplus"  # not run: another process of the study reached n_trials
    SKIPPED = "skipped"  # not run: a point the preset does not sample (ranks oversubscribing the cores)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


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


def waiting_share(data_wait_fraction: float, device_busy_fraction: float | None = None) -> float:
    """The share of the step the run loses to data: on the host, the wait for the next batch;
    with a device that runs ahead of the host, only as much as the device sits idle too."""
    if device_busy_fraction is None:
        return data_wait_fraction
    return min(data_wait_fraction, 1.0 - device_busy_fraction)


def bottleneck(data_wait_fraction: float, device_busy_fraction: float | None = None) -> str:
    share = waiting_share(data_wait_fraction, device_busy_fraction)
    return "data-bound" if share > DATA_BOUND_THRESHOLD else "compute-bound"


# The figures of a run a sweep keeps on its trial (scalars, and each rank's samples/sec; the rest
# stays in result.json).
METRIC_KEYS = (
    "samples_per_sec", "samples_per_sec_iqr", "samples_per_sec_rel_iqr", "step_time_p50_ms",
    "step_time_p95_ms", "data_wait_fraction", "bottleneck", "peak_memory_mb", "peak_rss_mb",
    "cuda_max_allocated_mb", "dataloader_processes", "warmup_s", "compile_s", "first_step_s",
    "compute_bound_samples_per_sec", "data_path_cost", "windows_measured", "wall_s", "device",
    "import_s", "build_s", "measure_s", "convolutional", "first_batch_wait_s", "epoch_ends_measured",
    "epoch_restart_s", "epoch_samples", "cpu_util_main_pct", "cpu_util_workers_pct", "gpu_util_pct",
    "gpu_mem_util_pct", "gpu_power_w", "gpu_power_cap_w", "device_busy_fraction", "device_step_time_p50_ms",
    "samples_per_sec_ci_low", "samples_per_sec_ci_high", "stopped", "warmup_steady", "samples_per_sec_steady",
    "isolation", "isolation_note", "grad_accum_steps", "effective_batch", "affinity", "allocator",
    "nproc_per_node", "rank_samples_per_sec", "omp_bind", "openmp_runtime",
)
# what the parent adds to the child's figures; result.json holds all of it, flat
_RUN_FIELDS = ("status", "reason", "fingerprint", "wall_s", "started_at", "ended_at", "log", "config", "job_dir")


@dataclass
class RunResult:
    """One measured run as the parent saw it: the child's figures and how the run went."""

    status: Status
    reason: str | None = None
    # what the child measured: samples_per_sec, step times, memory, warm-up, ... (result.json keys)
    figures: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    wall_s: float = 0.0  # the whole run as the parent saw it
    started_at: float | None = None  # epoch seconds: when the run held the machine
    ended_at: float | None = None
    log: str | None = None  # the child's stdout and stderr
    config: dict[str, Any] | None = None  # task, loader, backend as run
    job_dir: str | None = None  # the Hydra job directory of a sweep trial

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def get(self, key: str, default: Any = None) -> Any:
        return self.figures.get(key, default)

    @property
    def samples_per_sec(self) -> float | None:
        return self.figures.get("samples_per_sec")

    def metrics(self) -> dict[str, Any]:
        """The scalar figures a trial keeps (METRIC_KEYS), without the missing ones."""
        found = {**self.figures, "wall_s": self.wall_s}
        return {k: found[k] for k in METRIC_KEYS if found.get(k) is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunResult:
        """From the child's result event or a result.json (flat)."""
        figures = {k: v for k, v in d.items() if k not in _RUN_FIELDS and k != "event"}
        return cls(
            status=Status(d.get("status", Status.ERROR)),
            reason=d.get("reason"),
            figures=figures,
            fingerprint=d.get("fingerprint"),
            wall_s=float(d.get("wall_s") or 0.0),
            started_at=d.get("started_at"),
            ended_at=d.get("ended_at"),
            log=d.get("log"),
            config=d.get("config"),
            job_dir=d.get("job_dir"),
        )

    def to_dict(self) -> dict[str, Any]:
        """Flat, as result.json has always been."""
        out: dict[str, Any] = {"status": self.status.value}
        if self.reason is not None:
            out["reason"] = self.reason
        out.update(self.figures)
        for key in ("fingerprint", "wall_s", "started_at", "ended_at", "log", "config", "job_dir"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


# ---- what a sweep stores on an Optuna trial (user_attrs) ----

_STATUS, _REASON, _METRICS = "status", "reason", "metrics"
_KNOBS, _BASELINE, _FIXED = "knobs", "baseline", "fixed_overrides"
_SPS, _REL_IQR = "samples_per_sec", "samples_per_sec_rel_iqr"
_FINGERPRINT, _HARDWARE, _JOB_DIR = "fingerprint", "hardware_class", "job_dir"
_REUSED_FROM, _WORKLOAD, _SWEEP_DIR = "reused_from", "workload", "sweep_dir"
_HOST, _PID, _PID_STARTED, _HEARTBEAT = "host", "sweeper_pid", "sweeper_started", "heartbeat_at"
_RERUN = "rerun_reason"
# the attributes of a result, copied when a result is reused for an identical configuration
_RESULT_ATTRS = (_STATUS, _REASON, _METRICS, _SPS, _REL_IQR, _FINGERPRINT, _HARDWARE)
SKIPPED_PREFIX = "skipped:"


class TrialRecord:
    """A typed view of what sweeper stored on one Optuna trial (its user_attrs), and the
    attribute sets to store: every trial attribute name is spelled here and nowhere else."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: Mapping[str, Any]) -> None:
        self.attrs = attrs

    @classmethod
    def of(cls, trial: Any) -> TrialRecord:
        """Of an Optuna Trial or FrozenTrial."""
        return cls(trial.user_attrs)

    # -- reading --
    @property
    def status(self) -> str | None:
        return self.attrs.get(_STATUS)

    @property
    def reason(self) -> str | None:
        return self.attrs.get(_REASON)

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(self.attrs.get(_METRICS) or {})

    def metric(self, key: str) -> Any:
        return (self.attrs.get(_METRICS) or {}).get(key)

    @property
    def knobs(self) -> dict[str, Any] | None:
        knobs = self.attrs.get(_KNOBS)
        return dict(knobs) if knobs is not None else None

    @property
    def baseline(self) -> bool:
        return bool(self.attrs.get(_BASELINE, False))

    @property
    def fixed_overrides(self) -> list[str]:
        return list(self.attrs.get(_FIXED) or [])

    @property
    def samples_per_sec(self) -> float | None:
        value = self.attrs.get(_SPS)
        return float(value) if value is not None else None

    @property
    def rel_iqr(self) -> float:
        return float(self.attrs.get(_REL_IQR) or 0.0)

    @property
    def fingerprint(self) -> dict[str, Any]:
        text = self.attrs.get(_FINGERPRINT)
        return json.loads(text) if text else {}

    @property
    def has_fingerprint(self) -> bool:
        return bool(self.attrs.get(_FINGERPRINT))

    @property
    def hardware_class(self) -> str | None:
        return self.attrs.get(_HARDWARE)

    @property
    def job_dir(self) -> str | None:
        return self.attrs.get(_JOB_DIR)

    @property
    def reused_from(self) -> int | None:
        return self.attrs.get(_REUSED_FROM)

    @property
    def reused(self) -> bool:
        return self.attrs.get(_REUSED_FROM) is not None

    @property
    def skipped(self) -> bool:
        """Answered without measuring (a predicted OOM, a surplus trial)."""
        return str(self.attrs.get(_REASON) or "").startswith(SKIPPED_PREFIX)

    @property
    def workload(self) -> str | None:
        return self.attrs.get(_WORKLOAD)

    @property
    def sweep_dir(self) -> str | None:
        return self.attrs.get(_SWEEP_DIR)

    @property
    def host(self) -> str | None:
        return self.attrs.get(_HOST)

    @property
    def sweeper_pid(self) -> int | None:
        pid = self.attrs.get(_PID)
        return int(pid) if pid is not None else None

    @property
    def sweeper_started(self) -> float | None:
        return self.attrs.get(_PID_STARTED)

    @property
    def heartbeat_at(self) -> float | None:
        return self.attrs.get(_HEARTBEAT)

    @property
    def rerun_reason(self) -> str | None:
        return self.attrs.get(_RERUN)

    # -- what to store --
    @staticmethod
    def started(*, baseline: bool, knobs: Mapping[str, Any], fixed: list[str], workload: str, sweep_dir: str,
                host: str, pid: int, pid_started: float | None, hardware_class: str) -> dict[str, Any]:
        """When a trial is asked for: what it is and which sweep process runs it."""
        return {_BASELINE: baseline, _KNOBS: dict(knobs), _FIXED: list(fixed), _WORKLOAD: workload,
                _SWEEP_DIR: sweep_dir, _HOST: host, _PID: pid, _PID_STARTED: pid_started, _HARDWARE: hardware_class}

    @staticmethod
    def finished(result: RunResult) -> dict[str, Any]:
        """When its run came back."""
        metrics = result.metrics()
        attrs: dict[str, Any] = {_STATUS: result.status.value, _REASON: result.reason, _METRICS: metrics}
        for key in (_SPS, _REL_IQR):
            if key in metrics:
                attrs[key] = metrics[key]
        if result.fingerprint is not None:
            attrs[_FINGERPRINT] = json.dumps(result.fingerprint)
            attrs[_HARDWARE] = result.fingerprint.get("hardware_class")
        if result.job_dir:
            attrs[_JOB_DIR] = result.job_dir
        return attrs

    @staticmethod
    def ended(status: Status, reason: str) -> dict[str, Any]:
        """Ended without a measurement (skipped, surplus, interrupted, a bad objective value)."""
        return {_STATUS: status.value, _REASON: reason}

    @staticmethod
    def reused_result(source: TrialRecord, source_number: int) -> dict[str, Any]:
        """An identical configuration measured before: its result, and where it came from."""
        return {_REUSED_FROM: source_number, **{k: source.attrs[k] for k in _RESULT_ATTRS if k in source.attrs}}

    @staticmethod
    def rerun(reason: str) -> dict[str, Any]:
        """A configuration the study had, measured again, and why."""
        return {_RERUN: reason}

    @staticmethod
    def heartbeat(now: float) -> dict[str, Any]:
        return {_HEARTBEAT: now}
