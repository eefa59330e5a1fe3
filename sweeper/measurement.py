"""What one measured run found, typed and frozen, as torch.utils.benchmark's `Measurement`:
the measuring child describes a run here once, and result.json, the terminal text, a trial's
stored figures, the trials table and the report all read these objects (pure: no torch).

A figure's name is its field's name: unique over the sections, so a figure keeps one flat name
in a trial's stored figures and in the CSV/Parquet columns (`Measurement.flat`), and result.json
holds the sections as objects (`Measurement.to_json`, format 2). Every figure name is spelled in
this module only (tests/test_architecture.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .choice import Choice
from .stats import IQR_WARN_THRESHOLD


class Stopped(Choice):
    """Why a run's windows stopped."""

    NOT = ""  # not measured
    PRECISE = "precise"  # its 95% interval reached the precision asked
    MAX_WINDOWS = "max windows"  # at measure.windows
    RACED = "raced"  # its interval lies wholly below the best's (widened for run noise): pruned
    BEHIND = "behind"  # wholly below the best's own low end: stopped, its figure complete
    PRUNED = "pruned"  # under the race's floor (slower than the best by the one test)
    DRIFTING = "drifting"  # still changing when measure.max_s of windows was reached
    # the run's time limit (measure.timeout_s) would have come before its next window ended: the
    # figure is of the windows it measured, rather than none
    TIME_LIMIT = "time limit"

    @property
    def pruned(self) -> bool:
        """Stopped early behind the best: its figure is kept, not ranked."""
        return self in (Stopped.RACED, Stopped.PRUNED)


# Above this share of step time spent waiting for the next batch, a run is data-bound.
DATA_BOUND_THRESHOLD = 0.2


def waiting_share(data_wait_fraction: float, device_busy_fraction: float | None = None) -> float:
    """The share of the step the run loses to data: on the host, the wait for the next batch;
    with a device that runs ahead of the host, only as much as the device sits idle too."""
    if device_busy_fraction is None:
        return data_wait_fraction
    return min(data_wait_fraction, 1.0 - device_busy_fraction)


def bottleneck(data_wait_fraction: float, device_busy_fraction: float | None = None) -> str:
    share = waiting_share(data_wait_fraction, device_busy_fraction)
    return "data-bound" if share > DATA_BOUND_THRESHOLD else "compute-bound"


@dataclass(frozen=True)
class Throughput:
    """samples/sec over the measured windows, with its spread and why measuring stopped."""

    # the windows' mean; with workers restarted at every epoch end, over whole epochs
    samples_per_sec: float = 0.0
    samples_per_sec_iqr: float = 0.0
    samples_per_sec_rel_iqr: float = 0.0
    window_samples_per_sec: tuple[float, ...] = ()
    windows_measured: int = 0
    # the 95% interval of the windows' mean; None with too few windows to bound it
    samples_per_sec_ci_low: float | None = None
    samples_per_sec_ci_high: float | None = None
    stopped: Stopped = Stopped.NOT
    # between epoch restarts, when samples_per_sec counts one restart per epoch
    samples_per_sec_steady: float | None = None
    epoch_restart_s: float | None = None
    epoch_ends_measured: int = 0
    # what each epoch end cost the loop, from the windows it fell in (their time beyond their
    # samples at the steady rate); None when no window held one: then it is timed apart
    epoch_restart_in_windows_s: float | None = None
    # this process's own rate, a rank of a data-parallel group (the group's total is the figure)
    own_samples_per_sec: float | None = None
    # each rank's own, in rank order (the group's result)
    rank_samples_per_sec: tuple[float | None, ...] | None = None
    # the run was still changing: the rate's change over the windows left out of the figure
    # (later / earlier - 1, e.g. -0.09), and the step (warm-up counted) where the kept ones begin
    drift: float | None = None
    steady_from_step: int | None = None
    # the same step on one batch held on the device (measure.compute_bound)
    compute_bound_samples_per_sec: float | None = None
    compute_bound_samples_per_sec_iqr: float | None = None
    data_path_cost: float | None = None
    # a workload on files (measure.compute_bound): the files alone, read cold by as many threads
    # as the run has workers, and the loader alone with them cached (sweeper/measuring/ceiling.py)
    disk_samples_per_sec: float | None = None
    disk_mb_per_sec: float | None = None
    decode_samples_per_sec: float | None = None
    # measure.job_samples: samples_per_sec is then the whole job's (its samples over its time to
    # finish, start-up included: sweeper.jobtime), and the rate once started is kept beside it
    job_samples: int | None = None
    job_time_s: float | None = None
    running_samples_per_sec: float | None = None

    @property
    def noisy(self) -> bool:
        return self.samples_per_sec_rel_iqr > IQR_WARN_THRESHOLD

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.samples_per_sec_ci_low is None or self.samples_per_sec_ci_high is None:
            return None
        return self.samples_per_sec_ci_low, self.samples_per_sec_ci_high

    def __post_init__(self) -> None:  # from stored figures: the plain value, typed
        object.__setattr__(self, "stopped", Stopped(self.stopped))

    @property
    def pruned(self) -> bool:
        return self.stopped.pruned

    @property
    def running_rate(self) -> float:
        """samples/sec once started: the figure itself unless it is a whole job's."""
        return self.running_samples_per_sec if self.running_samples_per_sec is not None else self.samples_per_sec

    @property
    def drift_note(self) -> str | None:
        """'drifting down 9% over the windows; measured until steady at step 1,400' (None: steady)."""
        if self.drift is None:
            return None
        way = f"drifting {'down' if self.drift < 0 else 'up'} {abs(self.drift):.0%} over the windows"
        if self.stopped == Stopped.DRIFTING:
            return f"{way}; still drifting at the cap (measure.max_s): the figure is of its last windows"
        return f"{way}; measured until steady at step {self.steady_from_step or 0:,}"


@dataclass(frozen=True)
class Timing:
    """Where a step's time goes, and what the run paid before its first measured window."""

    step_time_p50_ms: float = 0.0
    step_time_p95_ms: float = 0.0
    step_time_p99_ms: float = 0.0  # a latency budget's usual percentile (0.0: a run before it was recorded)
    # the share of step time spent waiting for the next batch, on the host
    data_wait_fraction: float = 0.0
    # data-bound | compute-bound (on a GPU, waiting counts while the GPU idles too)
    bottleneck: str = ""
    steps_measured: int = 0
    samples_measured: int = 0
    warmup_s: float = 0.0
    warmup_steps: int = 0
    warmup_samples: int = 0  # this process's samples over the warm-up
    warmup_steady: bool = False  # warm-up ended on a steady step rate, not at its maximum
    # warm-up ended early on two blocks far below the best (a sweep's run): its first window
    # then confirms that as a quarter window
    warmup_far_below: bool = False
    # samples/s over the warm-up's steady span (this process's, in a group), or None
    warmup_samples_per_sec: float | None = None
    first_step_s: float = 0.0
    first_batch_wait_s: float = 0.0  # loader start-up: workers forking, their first samples
    compile_s: float = 0.0  # the first step's compute beyond a typical step's
    # from CUDA events around each step, read after each window
    device_step_time_p50_ms: float | None = None
    device_busy_fraction: float | None = None
    # where a run's wall time goes besides measuring (the process start is wall_s less these)
    import_s: float | None = None
    build_s: float | None = None
    measure_s: float | None = None
    # what the run paid before it ran at its rate: the build, the loader's start, compilation
    # and autotuning, and the warm-up's time beyond its samples at the rate (sweeper.jobtime)
    startup_s: float | None = None

    @property
    def waiting_share(self) -> float:
        return waiting_share(self.data_wait_fraction, self.device_busy_fraction)


@dataclass(frozen=True)
class Memory:
    """Peak memory: RSS of the process tree (an upper bound: shared pages count in each
    worker), CUDA's max allocated; the figure a sweep minimizes is the device's."""

    peak_memory_mb: float = 0.0
    peak_rss_mb: float = 0.0
    cuda_max_allocated_mb: float | None = None
    dataloader_processes: int = 0
    process_threads_peak: int | None = None
    rank_peak_rss_mb: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Utilization:
    """Over the windows, as top and nvidia-smi show it (None: not recorded)."""

    # percent of one core, summed over threads
    cpu_util_main_pct: float | None = None
    cpu_util_workers_pct: float | None = None
    # NVML (nvidia-ml-py): GPU-Util, memory-controller use, power against the cap
    gpu_util_pct: float | None = None
    gpu_mem_util_pct: float | None = None
    gpu_power_w: float | None = None
    gpu_power_cap_w: float | None = None
    # other processes' CPU on the run's cores (sweeper.foreign), percent of one core, and the
    # busiest of them ("pid 4242 python train.py"); under_load: beyond measure.foreign_cpu_max_pct
    foreign_cpu_pct: float | None = None
    foreign_process: str | None = None
    # other processes' use of the run's GPU (NVML's per-process SM samples), percent, at its highest
    foreign_gpu_util_pct: float | None = None
    under_load: bool | None = None
    # sweeper's own CPU beside the loop (its sampling threads in the measuring process and the
    # process that started the run), percent of one core (measuring.harness)
    harness_cpu_pct: float | None = None

    def merged(self, other: Utilization) -> Utilization:
        """This one with the figures `other` recorded (each monitor records some)."""
        return dataclasses.replace(self, **{k: v for k, v in _items(other) if v is not None})

    def describe(self, device_busy_fraction: float | None = None) -> str:
        """One line: CPU of the run and its workers, the device's busy share, NVML's GPU figures."""
        parts = []
        if self.cpu_util_main_pct is not None:
            parts.append(
                f"CPU {self.cpu_util_main_pct:.0f}% in the training process, "
                f"{self.cpu_util_workers_pct or 0.0:.0f}% in loader workers"
                + (f", {self.harness_cpu_pct:.1f}% in sweeper's own" if self.harness_cpu_pct is not None else "")
                + " (100% = one core)"
            )
        if device_busy_fraction is not None:
            parts.append(f"device busy {device_busy_fraction:.0%} of the time")
        if self.gpu_util_pct is not None:
            gpu = f"GPU-Util {self.gpu_util_pct:.0f}%, memory controller {self.gpu_mem_util_pct or 0.0:.0f}%"
            if self.gpu_power_w is not None:
                gpu += f", {self.gpu_power_w:.0f} W"
                gpu += f" of a {self.gpu_power_cap_w:.0f} W cap" if self.gpu_power_cap_w else ""
            parts.append(gpu)
        return "; ".join(parts)

    @property
    def load_note(self) -> str:
        """'other processes used 190% CPU on its cores (pid 4242 python train.py)'."""
        who = f" ({self.foreign_process})" if self.foreign_process else ""
        note = f"other processes used {self.foreign_cpu_pct or 0.0:.0f}% CPU on its cores{who}"
        if self.foreign_gpu_util_pct:
            note += f" and kept its GPU up to {self.foreign_gpu_util_pct:.0f}% busy"
        return note


@dataclass(frozen=True)
class RunFacts:
    """What ran: the device and process layout as the kernel and torch had them."""

    device: str = ""
    grad_accum_steps: int = 1
    effective_batch: int | None = None
    nproc_per_node: int = 1
    rank: int | None = None
    numa_node: int | None = None
    # the allocator and OpenMP runtime mapped into the process: so in effect
    allocator: str | None = None
    openmp_runtime: str | None = None
    cpus_allowed_main: str | None = None
    cpus_allowed_workers: tuple[str, ...] = ()
    rank_cpus_allowed: tuple[str | None, ...] | None = None
    epoch_samples: int | None = None
    stored_samples: int | None = None
    # the files the dataset read (measure.page_cache): the state each run began in (warm | cold),
    # their count and size against the memory available, and the share cached as the run began
    page_cache: str | None = None
    data_files: int | None = None
    data_bytes: int | None = None
    memory_available_bytes: int | None = None
    data_cached_at_start: float | None = None
    # task=script: the command as it ran (its words, the knobs interpolated)
    command: tuple[str, ...] | None = None
    # task=script: its steps came through sweeper.track / sweeper.step, which apply the
    # per-process settings (flush_denormal, threads, cudnn.benchmark, TF32) at its first step
    applied_in_script: bool | None = None
    # the workload said so: channels_last means something
    convolutional: bool | None = None
    cudnn_benchmark_in_effect: bool | None = None
    flush_denormal_in_effect: bool | None = None
    tf32_in_effect: bool | None = None
    cuda_initialized_at_start: bool | None = None


_SECTIONS = (
    ("throughput", Throughput),
    ("timing", Timing),
    ("memory", Memory),
    ("utilization", Utilization),
    ("run", RunFacts),
)
RESULT_FORMAT = 2


def _items(section: Any) -> list[tuple[str, Any]]:
    return [(f.name, getattr(section, f.name)) for f in fields(section)]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _typed(cls: type, values: Mapping[str, Any]) -> Any:
    """A section from plain values: its own keys only, lists back to tuples."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in known})


@dataclass(frozen=True)
class Measurement:
    throughput: Throughput = field(default_factory=Throughput)
    timing: Timing = field(default_factory=Timing)
    memory: Memory = field(default_factory=Memory)
    utilization: Utilization = field(default_factory=Utilization)
    run: RunFacts = field(default_factory=RunFacts)

    def flat(self) -> dict[str, Any]:
        """Every recorded figure by its name (a trial's stored figures, a table's columns)."""
        return {k: _plain(v) for name, _ in _SECTIONS for k, v in _items(getattr(self, name)) if v is not None}

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> Measurement:
        """From flat figures, as a trial stores them (`flat`'s inverse)."""
        return cls(**{name: _typed(section, values) for name, section in _SECTIONS})

    def to_json(self) -> dict[str, Any]:
        """result.json's sections (format 2)."""
        return {name: {k: _plain(v) for k, v in _items(getattr(self, name))} for name, _ in _SECTIONS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Measurement:
        return cls(**{name: _typed(section, data.get(name) or {}) for name, section in _SECTIONS})

    def value(self, name: str) -> Any:
        """The figure called `name` (an objective chosen in the config), or None."""
        for section, cls in _SECTIONS:
            if name in FIGURES_OF[cls]:
                return getattr(getattr(self, section), name)
        return None

    def replace(self, **sections: Any) -> Measurement:
        return dataclasses.replace(self, **sections)


FIGURES_OF = {cls: tuple(f.name for f in fields(cls)) for _, cls in _SECTIONS}
# every figure's flat name, in section order
FIGURE_NAMES = tuple(name for _, cls in _SECTIONS for name in FIGURES_OF[cls])

# the figures a sweep can optimise, and which way is better for each
DIRECTIONS = {
    "samples_per_sec": "maximize",
    "peak_memory_mb": "minimize",
    "step_time_p95_ms": "minimize",
    "step_time_p99_ms": "minimize",
    "step_time_p50_ms": "minimize",
    "peak_rss_mb": "minimize",
}
# a run in one row: the figures the report's trials table shows (the CSV has them all)
KEY_FIGURES = (
    "samples_per_sec",
    "samples_per_sec_rel_iqr",
    "peak_memory_mb",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "data_wait_fraction",
    "compile_s",
)
# what kind of cost each minimized objective is (which of the report's charts has it on its axis)
COST_KIND = {
    "peak_memory_mb": "memory",
    "peak_rss_mb": "memory",
    "step_time_p95_ms": "latency",
    "step_time_p99_ms": "latency",
}
PRIMARY = "samples_per_sec"
# the step latency a chart or a limit reads, by percentile
LATENCY = {"p95": "step_time_p95_ms", "p99": "step_time_p99_ms"}
MEMORY = "peak_memory_mb"
# samples/sec alone: the sampler searches one figure; the memory is measured all the same and
# the report draws speed against it
DEFAULT_OBJECTIVES = (PRIMARY,)
