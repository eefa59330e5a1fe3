"""Checks of a composed config that need no torch: one clear line per bad value, before any run.

Device-dependent checks (is there a GPU, can it run fp16) happen in the worker, which reports
them as outcome ``invalid`` before measuring anything.
"""

from __future__ import annotations

from collections.abc import Mapping
import shutil
from pathlib import Path
from typing import Any

from . import topology
from .errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("off", "default", "max-autotune")
MODES = ("train", "inference")
OPTIMIZERS = ("adam", "sgd")
MP_CONTEXTS = ("fork", "forkserver", "spawn")
SYNC_MODES = ("window", "step")
ISOLATIONS = ("fork", "spawn")


def normalize_compile(value: Any) -> str:
    """YAML and the command line may spell `off` as false; everything else stays as given."""
    if value is False or value is None:
        return "off"
    if value is True:
        return "default"
    return str(value)


def _check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f"an integer >= {minimum}" + (" or null" if allow_none else "")
        raise ConfigError(f"{name}={value!r} is invalid: expected {allowed}.")


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is invalid: expected one of {', '.join(allowed)}.")


def _check_positive(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{name}={value!r} is invalid: expected a number > 0.")


def _check_existing_path(name: str, value: Any) -> None:
    if value is not None and not Path(str(value)).expanduser().exists():
        raise ConfigError(f"{name}={value!r} does not exist: give an existing path or null.")


def nproc_of(cfg: Mapping[str, Any]) -> int:
    return int((cfg.get("dist") or {}).get("nproc_per_node") or 1)


def grad_accum_steps(train: Mapping[str, Any] | None, batch_size: int, nproc: int = 1) -> int:
    """Micro-batches per optimizer step: derived from train.effective_batch when it is set
    (batch_size x grad_accum_steps x nproc_per_node = effective_batch)."""
    train = train or {}
    if train.get("effective_batch"):
        return int(train["effective_batch"]) // (batch_size * nproc)
    return int(train.get("grad_accum_steps") or 1)


def _check_train(cfg: Mapping[str, Any]) -> None:
    train, nproc = cfg.get("train") or {}, nproc_of(cfg)
    batch = cfg["loader"]["batch_size"] * nproc  # samples of one micro-step over all ranks
    accum, effective = train.get("grad_accum_steps", 1), train.get("effective_batch")
    _check_int("train.grad_accum_steps", accum, 1)
    _check_int("train.effective_batch", effective, 1, allow_none=True)
    if (accum > 1 or effective is not None) and cfg["task"].get("mode") != "train":
        raise ConfigError(f"train.grad_accum_steps={accum} / train.effective_batch={effective} need task.mode=train "
                          f"(got {cfg['task'].get('mode')!r}): leave them at 1 / null for inference.")
    if effective is None:
        return
    per_step = f"loader.batch_size={cfg['loader']['batch_size']}" + (f" x dist.nproc_per_node={nproc}" if nproc > 1 else "")
    if effective % batch:
        raise ConfigError(f"train.effective_batch={effective} is not a multiple of {per_step}: "
                          "pick a batch size that divides it.")
    if accum not in (1, effective // batch):
        raise ConfigError(f"train.grad_accum_steps={accum} disagrees with train.effective_batch={effective} / "
                          f"{per_step} = {effective // batch}: set only one of them.")


def _check_dist(cfg: Mapping[str, Any]) -> None:
    nproc, numa = (cfg.get("dist") or {}).get("nproc_per_node", 1), cfg["backend"].get("numa", "none")
    _check_int("dist.nproc_per_node", nproc, 1)
    _check_choice("backend.numa", numa, topology.NUMA_MODES)
    if numa == "none":
        return
    nodes = topology.numa_nodes()
    if len(nodes) < 2:
        raise ConfigError(f"backend.numa={numa!r} binds ranks to NUMA nodes, and this machine has {len(nodes) or 1}: "
                          "use backend.numa=none.")
    if nproc % len(nodes):
        raise ConfigError(f"backend.numa={numa!r} puts the same number of ranks on each of the {len(nodes)} NUMA "
                          f"nodes: dist.nproc_per_node={nproc} is not a multiple of {len(nodes)}.")
    if shutil.which("numactl") is None:
        raise ConfigError(f"backend.numa={numa!r} runs each rank under numactl, which is not installed: install "
                          "numactl (Debian/Ubuntu) or use backend.numa=none.")


def check_config(cfg: Mapping[str, Any]) -> None:
    """Raise ConfigError naming the first bad value and what is allowed."""
    task, loader, backend, measure = cfg["task"], cfg["loader"], cfg["backend"], cfg["measure"]

    factory = task.get("factory")
    if not isinstance(factory, str) or ":" not in factory:
        raise ConfigError(
            f"task.factory={factory!r} is invalid: expected 'module:function', "
            "e.g. task.factory=my_bench:build."
        )
    _check_choice("task.mode", task.get("mode"), MODES)
    if "optimizer" in task:
        _check_choice("task.optimizer", task["optimizer"], OPTIMIZERS)
    _check_int("task.epoch_samples", task.get("epoch_samples"), 1, allow_none=True)
    for key in ("root", "data_dir", "token_file"):
        _check_existing_path(f"task.{key}", task.get(key))

    _check_int("loader.batch_size", loader["batch_size"], 1)
    _check_train(cfg)
    _check_int("loader.num_workers", loader["num_workers"], 0)
    _check_int("loader.prefetch_factor", loader["prefetch_factor"], 1, allow_none=True)
    if loader["num_workers"] == 0 and loader["prefetch_factor"] is not None:
        raise ConfigError(
            f"loader.prefetch_factor={loader['prefetch_factor']} needs loader.num_workers > 0 "
            "(got 0): set loader.prefetch_factor=null or add workers."
        )
    if loader["num_workers"] == 0 and loader["persistent_workers"]:
        raise ConfigError(
            "loader.persistent_workers=true needs loader.num_workers > 0 (got 0): "
            "set loader.persistent_workers=false or add workers."
        )

    if not isinstance(loader.get("in_order", True), bool):
        raise ConfigError(f"loader.in_order={loader['in_order']!r} is invalid: expected true or false.")
    context = loader.get("multiprocessing_context")
    if context is not None and context not in MP_CONTEXTS:
        raise ConfigError(f"loader.multiprocessing_context={context!r} is invalid: expected null (the platform's "
                          f"default) or one of {', '.join(MP_CONTEXTS)}.")
    for knob, idle in (("in_order", True), ("multiprocessing_context", None)):
        if loader["num_workers"] == 0 and loader.get(knob, idle) != idle:
            raise ConfigError(
                f"loader.{knob}={loader[knob]!r} needs loader.num_workers > 0 (got 0): "
                f"set loader.{knob}={'true' if idle else 'null'} or add workers."
            )

    _check_choice("backend.device", backend["device"], DEVICES)
    _check_choice("backend.precision", backend["precision"], PRECISIONS)
    _check_choice("backend.compile", normalize_compile(backend["compile"]), COMPILE_MODES)
    _check_int("backend.threads", backend["threads"], 1, allow_none=True)
    _check_choice("backend.affinity", backend.get("affinity", "none"), topology.AFFINITIES)
    allocator = backend.get("allocator", "default")
    _check_choice("backend.allocator", allocator, ("default", *topology.ALLOCATORS))
    if allocator != "default" and topology.allocator_library(allocator) is None:
        raise ConfigError(f"backend.allocator={allocator!r} is not installed on this machine: install "
                          f"{topology.ALLOCATORS[allocator][1]} (Debian/Ubuntu) or use backend.allocator=default.")
    _check_int("backend.interop_threads", backend["interop_threads"], 1, allow_none=True)
    _check_choice("backend.omp_bind", backend.get("omp_bind", "default"), topology.OMP_BINDS)
    _check_int("backend.kmp_blocktime", backend.get("kmp_blocktime"), 0, allow_none=True)
    _check_dist(cfg)

    _check_positive("measure.warmup_s", measure["warmup_s"])
    _check_int("measure.warmup_steps", measure["warmup_steps"], 1)
    _check_int("measure.windows", measure["windows"], 1)
    _check_int("measure.min_windows", measure.get("min_windows"), 1, allow_none=True)
    _check_positive("measure.warmup_max_s", measure.get("warmup_max_s"), allow_none=True)
    _check_positive("measure.steady_tol", measure.get("steady_tol", 0.05))
    _check_positive("measure.rel_precision", measure.get("rel_precision"), allow_none=True)
    race = measure.get("race")
    if race is not None and (not isinstance(race, (list, tuple)) or len(race) != 2
                             or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in race)):
        raise ConfigError(f"measure.race={race!r} is invalid: expected null or [low, high] samples/sec.")
    _check_positive("measure.window_s", measure["window_s"])
    _check_choice("measure.sync", measure.get("sync", "window"), SYNC_MODES)
    _check_choice("measure.isolation", measure.get("isolation", "spawn"), ISOLATIONS)
    _check_positive("measure.timeout_s", measure["timeout_s"])
    _check_positive("measure.memory_limit_gb", measure["memory_limit_gb"], allow_none=True)
