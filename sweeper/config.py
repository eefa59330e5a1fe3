"""The types of sweeper's configs (structured-config schemas): Hydra checks every value's type
and choice where it composes the config. The YAML files in conf/ give the values and document
each key; a schema gives the types (its fields have no defaults: a key the YAML forgot is an
error, not a second default). Ranges and relations between keys are checked in
sweeper.validation; a refused value or key becomes one line in sweeper.config_errors.
"""
# No `from __future__ import annotations`: OmegaConf reads these annotations as types.

import enum
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, OmegaConf

from . import topology
from .choice import Choice


class Device(Choice):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Precision(Choice):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Mode(Choice):
    train = "train"
    inference = "inference"


class Optimizer(Choice):
    adam = "adam"
    sgd = "sgd"


# the CPU topology knobs' choices, as sweeper.topology (which acts on them) spells them
Affinity = Choice("Affinity", {name: name for name in topology.AFFINITIES})
Allocator = Choice("Allocator", {name: name for name in ("default", *topology.ALLOCATORS)})
OmpBind = Choice("OmpBind", {name: name for name in topology.OMP_BINDS})
Numa = Choice("Numa", {name: name for name in topology.NUMA_MODES})


class MpContext(Choice):
    fork = "fork"
    forkserver = "forkserver"
    spawn = "spawn"


class Sync(Choice):
    window = "window"
    step = "step"


class Isolation(Choice):
    fork = "fork"
    spawn = "spawn"


class Decoder(Choice):
    """task.decoder: PIL's decode and transforms, torchvision.io's decode and transforms.v2 on
    tensors in the loader's workers, or the whole batch decoded on the run's device (nvJPEG on a
    GPU), the workers only reading the files."""

    pil = "pil"
    torchvision = "torchvision"
    device = "device"


class PageCache(Choice):
    """measure.page_cache: the state of the data set's files when each run begins."""

    auto = "auto"
    warm = "warm"
    cold = "cold"


@dataclass
class LoaderConf:
    batch_size: int = MISSING
    num_workers: int = MISSING
    pin_memory: bool = MISSING
    prefetch_factor: Optional[int] = MISSING
    persistent_workers: bool = MISSING
    in_order: bool = MISSING
    multiprocessing_context: Optional[MpContext] = MISSING


@dataclass
class BackendConf:
    device: Device = MISSING
    precision: Precision = MISSING
    threads: Optional[int] = MISSING
    interop_threads: Optional[int] = MISSING
    channels_last: bool = MISSING
    # off | default | max-autotune; YAML's false and true mean off and default (spec.CompileMode)
    compile: str = MISSING
    cudnn_benchmark: bool = MISSING
    flush_denormal: bool = MISSING
    tf32: bool = MISSING
    affinity: Affinity = MISSING
    allocator: Allocator = MISSING
    omp_bind: OmpBind = MISSING
    kmp_blocktime: Optional[int] = MISSING
    numa: Numa = MISSING


@dataclass
class MeasureConf:
    warmup_s: float = MISSING
    warmup_steps: int = MISSING
    warmup_max_s: Optional[float] = MISSING
    steady_tol: float = MISSING
    window_s: float = MISSING
    min_windows: Optional[int] = MISSING
    windows: int = MISSING
    rel_precision: Optional[float] = MISSING
    sync: Sync = MISSING
    isolation: Isolation = MISSING
    timeout_s: float = MISSING
    lock: bool = MISSING
    compute_bound: bool = MISSING
    memory_limit_gb: Optional[float] = MISSING
    foreign_cpu_max_pct: Optional[float] = MISSING
    quiet_wait_s: float = MISSING
    drift_tol: Optional[float] = MISSING
    max_s: Optional[float] = MISSING
    # the samples of the job the figure stands for (2e6 reads as 2,000,000); null = the rate
    job_samples: Optional[float] = MISSING
    # the data set's files before each run: evicted (cold), read in (warm), or cold where larger
    # than memory (auto); sweeper/measuring/page_cache.py
    page_cache: PageCache = MISSING


@dataclass
class TrialConf:
    """What the sweep tells one trial about the best so far (`+trial=raced trial.race=[..]`):
    never part of a user's config, so `--help` and `--cfg job` do not show it."""

    # stop early when the windows so far run below this samples/sec (the race's floor, sweeper.noise)
    prune_below: Optional[float] = None
    # stop after one window already under this samples/sec: slower than the floor by the test
    far_below: Optional[float] = None
    # the best trial's 95% interval [low, high], widened for hydra.sweeper.run_noise: a run
    # wholly below it stops, pruned
    race: Optional[List[float]] = None
    # the low end of the best trial's own interval: a run wholly below it stops with its figure
    behind: Optional[float] = None


@dataclass
class TrainConf:
    grad_accum_steps: int = MISSING
    effective_batch: Optional[int] = MISSING


@dataclass
class DistConf:
    nproc_per_node: int = MISSING


@dataclass
class TaskConf:
    name: str = MISSING
    mode: Mode = MISSING
    epoch_samples: Optional[int] = MISSING


@dataclass
class FactoryTask(TaskConf):
    # "module:function" that builds the workload sweeper's own loop trains
    factory: str = MISSING


@dataclass
class ScriptTask(TaskConf):
    # the command that runs the user's script, the knobs interpolated: ${loader.batch_size}
    command: str = MISSING
    # knobs the script reads from its environment (SWEEPER_LOADER_BATCH_SIZE, ...), not its command
    reads: List[str] = MISSING


@dataclass
class MnistTask(FactoryTask):
    root: Optional[str] = MISSING
    num_samples: int = MISSING
    optimizer: Optimizer = MISSING
    lr: float = MISSING


@dataclass
class ImageTask(FactoryTask):
    model: str = MISSING
    data_dir: Optional[str] = MISSING
    # how task.data_dir's JPEGs become tensors (sweeper/tasks/image_classification.py)
    decoder: Decoder = MISSING
    image_size: int = MISSING
    num_classes: int = MISSING
    num_samples: int = MISSING
    lr: float = MISSING


@dataclass
class LanguageTask(FactoryTask):
    token_file: Optional[str] = MISSING
    num_tokens: int = MISSING
    vocab_size: int = MISSING
    seq_len: int = MISSING
    depth: int = MISSING
    width: int = MISSING
    heads: int = MISSING
    lr: float = MISSING


@dataclass
class CustomTask(FactoryTask):
    # anything the factory reads
    params: Dict[str, Any] = field(default_factory=dict)


def typed_task(schema: Any, task: Any) -> Any:
    """A built-in task's mapping, as every factory receives it, as the task's own type: its keys
    typed and checked by its schema (a factory reads fields, not keys with defaults of its own)."""
    known = {f.name for f in fields(schema)}
    typed = OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(schema), {k: v for k, v in task.items() if k in known})
    )
    assert isinstance(typed, schema)
    return typed


# (schema name, schema): each YAML of conf/ names its schema in its defaults
# (`- /schema/task/mnist_mlp@_here_`); the schemas live in a group of their own, `schema/`, so
# that they are never offered as a group's options (task=mnist_mlp is a workload, its schema is not)
SCHEMAS = (
    ("loader", LoaderConf),
    ("backend", BackendConf),
    ("measure", MeasureConf),
    ("train", TrainConf),
    ("dist", DistConf),
    ("task/mnist_mlp", MnistTask),
    ("task/image_classification", ImageTask),
    ("task/language_model", LanguageTask),
    ("task/custom", CustomTask),
    ("task/script", ScriptTask),
)


def register() -> None:
    """Make the schemas known to Hydra (idempotent): before conf/ is composed."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    try:
        if "raced.yaml" in store.list("trial"):  # stored already: storing again costs ~15 ms
            return
    except OSError:  # the group is not there yet
        pass
    from .search.settings import SearchConf  # a sweep's schema: it builds on this module's types

    for path, schema in (*SCHEMAS, ("search", SearchConf)):
        group, _, name = f"schema/{path}".rpartition("/")
        store.store(group=group, name=name, node=schema, provider="sweeper")
    store.store(group="trial", name="raced", node=TrialConf, provider="sweeper")


# ---- one line for a value the schema refuses ----


def plain(value: Any) -> Any:
    """A config value as plain data (a choice as its string)."""
    return value.value if isinstance(value, enum.Enum) else value
