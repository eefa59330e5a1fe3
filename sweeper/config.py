"""The types of sweeper's configs (structured-config schemas): Hydra checks every value's type
and choice where it composes the config, and `error_line` says what was wrong in one line.
The YAML files in conf/ give the values and document each key; a schema gives the types
(its fields have no defaults: a key the YAML forgot is an error, not a second default).
Ranges and relations between keys are checked in sweeper.validation.
"""
# No `from __future__ import annotations`: OmegaConf reads these annotations as types.

import difflib
import enum
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from . import topology


class Choice(str, enum.Enum):
    """A config choice: compared, printed and serialized as its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


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
    # off | default | max-autotune; YAML's false and true mean off and default (validation.py)
    compile: str = MISSING
    cudnn_benchmark: bool = MISSING
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
    prune_below: Optional[float] = MISSING
    race: Optional[List[float]] = MISSING
    behind: Optional[float] = MISSING


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


# (config group, schema name, schema): each YAML of the group names its schema in its defaults
SCHEMAS = (
    ("loader", "loader_schema", LoaderConf),
    ("backend", "backend_schema", BackendConf),
    ("measure", "measure_schema", MeasureConf),
    ("train", "train_schema", TrainConf),
    ("dist", "dist_schema", DistConf),
    ("task", "mnist_mlp_schema", MnistTask),
    ("task", "image_classification_schema", ImageTask),
    ("task", "language_model_schema", LanguageTask),
    ("task", "custom_schema", CustomTask),
    ("task", "script_schema", ScriptTask),
)


def register() -> None:
    """Make the schemas known to Hydra (idempotent): before conf/ is composed."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for group, name, schema in SCHEMAS:
        store.store(group=group, name=name, node=schema, provider="sweeper")


# ---- one line for a value the schema refuses ----

def _field_type(full_key: str, config: Optional[DictConfig]) -> Any:
    """The annotated type of `full_key` (e.g. loader.batch_size), from the composed config's
    schema where there is one, else from the schemas by group."""
    group, _, leaf = full_key.partition(".")
    candidates = []
    if config is not None and group in config and isinstance(config[group], DictConfig):
        schema = OmegaConf.get_type(config[group])
        if schema is not None and is_dataclass(schema):
            candidates.append(schema)
    candidates += [schema for g, _, schema in SCHEMAS if g == group]
    for schema in candidates:
        for f in fields(schema):
            if f.name == leaf:
                return f.type
    return None


def _optional(annotation: Any) -> tuple[Any, bool]:
    args = getattr(annotation, "__args__", ())
    if type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return annotation, False


def allowed(annotation: Any) -> str:
    """What a key of this type accepts, as the one-line error says it."""
    inner, nullable = _optional(annotation)
    null = " or null" if nullable else ""
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return f"one of {', '.join(m.value for m in inner)}" + (" (or null)" if nullable else "")
    if inner is bool:
        return "true or false" + null
    if inner is int:
        return "an integer" + null
    if inner is float:
        return "a number" + null
    if getattr(inner, "__origin__", None) in (list, List):
        return "a list [a, b]" + null
    return "a string" + null


def _keys_like(full_key: str, config: Optional[DictConfig]) -> list[str]:
    group, _, leaf = full_key.partition(".")
    if config is None or group not in config or not isinstance(config[group], DictConfig):
        return []
    return [f"{group}.{k}" for k in difflib.get_close_matches(leaf, list(config[group].keys()), n=1)]


def error_line(exc: BaseException, config: Optional[DictConfig] = None) -> Optional[str]:
    """The one line for a value or key the config's schema refuses (Hydra's composition error,
    or OmegaConf's, anywhere in the cause chain); None if it is not such an error."""
    seen = exc
    while seen is not None and not isinstance(seen, OmegaConfBaseException):
        seen = seen.__cause__ or seen.__context__
    if seen is None or not getattr(seen, "full_key", None):
        return None
    key = str(seen.full_key)
    if isinstance(seen, (ConfigAttributeError, ConfigKeyError)):
        like = _keys_like(key, config)
        if like:
            return f"{key} is not a key of the config (did you mean {like[0]}?)."
        return f"{key} is not a key of the config: check its spelling (a key of your own: +{key}=...)."
    annotation = _field_type(key, config)
    value = getattr(seen, "value", None)
    if annotation is None:
        first = str(seen).splitlines()[0]
        return f"{key}={value!r} is invalid: {first}"
    shown = repr(value) if not isinstance(value, str) or value.lower() not in ("true", "false") else value
    return f"{key}={shown} is invalid: expected {allowed(annotation)}."


def plain(value: Any) -> Any:
    """A config value as plain data (a choice as its string)."""
    return value.value if isinstance(value, enum.Enum) else value
