"""The knobs' dotted names (`group.key`), each spelled once, here: code reads them by these
names, and `check` at import holds every one against its schema's fields (sweeper.config), so
that a field renamed in the schema fails at once, not inside a run. The task's keys belong to
the task's schemas, one per workload; the three here are the ones every task of its kind has."""

from __future__ import annotations

from dataclasses import fields

from .config import (
    BackendConf,
    DistConf,
    FactoryTask,
    ImageTask,
    LoaderConf,
    MeasureConf,
    ScriptTask,
    TaskConf,
    TrainConf,
)


class Knob:
    """The knobs by name: `Knob.LOADER_BATCH_SIZE` is \"loader.batch_size\"."""

    # loader
    LOADER_BATCH_SIZE = "loader.batch_size"
    LOADER_IN_ORDER = "loader.in_order"
    LOADER_MULTIPROCESSING_CONTEXT = "loader.multiprocessing_context"
    LOADER_NUM_WORKERS = "loader.num_workers"
    LOADER_PERSISTENT_WORKERS = "loader.persistent_workers"
    LOADER_PIN_MEMORY = "loader.pin_memory"
    LOADER_PREFETCH_FACTOR = "loader.prefetch_factor"
    # backend
    BACKEND_AFFINITY = "backend.affinity"
    BACKEND_ALLOCATOR = "backend.allocator"
    BACKEND_CHANNELS_LAST = "backend.channels_last"
    BACKEND_COMPILE = "backend.compile"
    BACKEND_CUDNN_BENCHMARK = "backend.cudnn_benchmark"
    BACKEND_DEVICE = "backend.device"
    BACKEND_INTEROP_THREADS = "backend.interop_threads"
    BACKEND_KMP_BLOCKTIME = "backend.kmp_blocktime"
    BACKEND_NUMA = "backend.numa"
    BACKEND_OMP_BIND = "backend.omp_bind"
    BACKEND_PRECISION = "backend.precision"
    BACKEND_TF32 = "backend.tf32"
    BACKEND_FLUSH_DENORMAL = "backend.flush_denormal"
    BACKEND_THREADS = "backend.threads"
    # dist
    DIST_NPROC_PER_NODE = "dist.nproc_per_node"
    # train
    TRAIN_EFFECTIVE_BATCH = "train.effective_batch"
    TRAIN_GRAD_ACCUM_STEPS = "train.grad_accum_steps"
    # measure
    MEASURE_MEMORY_LIMIT_GB = "measure.memory_limit_gb"
    MEASURE_FOREIGN_CPU_MAX_PCT = "measure.foreign_cpu_max_pct"
    MEASURE_QUIET_WAIT_S = "measure.quiet_wait_s"
    MEASURE_ISOLATION = "measure.isolation"
    MEASURE_JOB_SAMPLES = "measure.job_samples"
    MEASURE_PAGE_CACHE = "measure.page_cache"
    MEASURE_DRIFT_TOL = "measure.drift_tol"
    MEASURE_MAX_S = "measure.max_s"
    MEASURE_MIN_WINDOWS = "measure.min_windows"
    MEASURE_REL_PRECISION = "measure.rel_precision"
    MEASURE_STEADY_TOL = "measure.steady_tol"
    MEASURE_TIMEOUT_S = "measure.timeout_s"
    MEASURE_WARMUP_MAX_S = "measure.warmup_max_s"
    MEASURE_WARMUP_S = "measure.warmup_s"
    MEASURE_WARMUP_STEPS = "measure.warmup_steps"
    MEASURE_WINDOW_S = "measure.window_s"
    MEASURE_WINDOWS = "measure.windows"
    # task
    TASK_COMMAND = "task.command"
    TASK_DATA_DIR = "task.data_dir"
    TASK_DECODER = "task.decoder"
    TASK_EPOCH_SAMPLES = "task.epoch_samples"
    TASK_FACTORY = "task.factory"


_SCHEMAS = {
    "loader": (LoaderConf,),
    "backend": (BackendConf,),
    "dist": (DistConf,),
    "train": (TrainConf,),
    "measure": (MeasureConf,),
    "task": (TaskConf, FactoryTask, ScriptTask, ImageTask),
}


def check() -> None:
    """Every name above is a field of its group's schema."""
    for name, value in vars(Knob).items():
        if name.isupper() and isinstance(value, str) and "." in value:
            group, _, key = value.partition(".")
            if not any(key in {f.name for f in fields(schema)} for schema in _SCHEMAS[group]):
                raise AssertionError(f"{name} = {value!r} is no field of the {group} schemas")


check()
