"""Checks of a composed config that need no torch: one clear line per bad value, before any run.

The types and choices of every key are checked by Hydra as it composes the config (the schemas
in sweeper.config); what is checked here are ranges, paths and relations between keys. The
spec is complete (every key present): a default lives in conf/, nowhere else.
Device-dependent checks (is there a GPU, can it run fp16) happen in the worker, which reports
them as outcome ``invalid`` before measuring anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Mapping

from . import host, topology
from .command import PYTHONS
from .config import PageCache
from .errors import ConfigError
from .knobs import Knob
from .spec import COMPILE_MODES, RunSpec

# The schemas make every value its declared type (an int is an int, null only where Optional)
# before the spec exists; these two check the ranges a type cannot say.


def _check_int(name: str, value: int | None, minimum: int, allow_none: bool = False) -> None:
    if value is not None and value < minimum:
        allowed = f"an integer >= {minimum}" + (" or null" if allow_none else "")
        raise ConfigError(f"{name}={value!r} is invalid: expected {allowed}.")


def _check_positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{name}={value!r} is invalid: expected a number > 0.")


def _check_far_below(far_below: float | None, prune_below: float | None) -> None:
    """The one-window bar lies under the floor it is read against."""
    _check_positive("trial.far_below", far_below)
    if far_below is not None and (prune_below is None or far_below > prune_below):
        raise ConfigError(
            f"trial.far_below={far_below!r} is invalid: expected samples/sec at or below trial.prune_below "
            f"({prune_below!r}), or null."
        )


def _check_share(name: str, value: float | None) -> None:
    """A relative tolerance: 0.05 is 5%; 1 or more would accept anything."""
    if value is not None and not 0 < value < 1:
        raise ConfigError(f"{name}={value!r} is invalid: expected a share in (0, 1) (0.05 = 5%) or null.")


def _check_existing_path(name: str, value: Any) -> None:
    if value is not None and not Path(str(value)).expanduser().exists():
        raise ConfigError(f"{name}={value!r} does not exist: give an existing path or null.")


# The built-in workloads' sizes (conf/task/*.yaml): counts of samples, classes, pixels, tokens,
# layers and heads. A key a task does not have is not checked; a custom task's own keys live
# under task.params, which its factory checks.
TASK_SIZES = ("num_samples", "image_size", "num_classes", "vocab_size", "seq_len", "depth", "width", "heads")


def _check_task(task: Mapping[str, Any]) -> None:
    for key in TASK_SIZES:
        if key in task:
            _check_int(f"task.{key}", task[key], 1)
    if task.get("lr") is not None and task["lr"] < 0:
        raise ConfigError(f"task.lr={task['lr']!r} is invalid: expected a number >= 0.")
    if "heads" in task and task["width"] % task["heads"]:
        raise ConfigError(f"task.width={task['width']} must be a multiple of task.heads={task['heads']}.")
    if "num_tokens" in task and not task.get("token_file") and task["num_tokens"] <= task["seq_len"]:
        raise ConfigError(
            f"task.num_tokens={task['num_tokens']!r} holds no window of task.seq_len={task['seq_len']} tokens "
            f"and its next-token target: expected at least {task['seq_len'] + 1}."
        )
    if task.get("token_file") is not None:
        _check_token_file(str(task["token_file"]), int(task["seq_len"]))
    model = str(task.get("model", ""))
    patch = int(model.rsplit("_", 1)[1]) if model.startswith("vit_") else 1  # vit_b_16: 16x16 patches
    if task.get("image_size", 1) % patch:
        size = int(task["image_size"])
        below = size - size % patch
        raise ConfigError(
            f"task.image_size={size} is not a multiple of {model}'s patch size {patch}: use "
            + (f"{below} or {below + patch}." if below else f"{patch}.")
        )
    data_dir = task.get("data_dir")
    if data_dir is not None and Path(str(data_dir)).expanduser().is_dir():
        if not any(p.is_dir() for p in Path(str(data_dir)).expanduser().iterdir()):
            raise ConfigError(
                f"task.data_dir={data_dir!r} holds no class folders: expected one folder of images per "
                "class (<data_dir>/<class>/<image>.jpg), as torchvision's ImageFolder reads them."
            )


def _check_token_file(name: str, seq_len: int) -> None:
    """The language model reads uint16 token ids (nanoGPT's train.bin): a whole number of them,
    more than one window."""
    path = Path(name).expanduser()
    what = "a file of uint16 token ids (nanoGPT's train.bin format)"
    if not path.is_file():
        raise ConfigError(f"task.token_file={name!r} is not a file: expected {what}.")
    size = path.stat().st_size
    if size % 2:
        raise ConfigError(f"task.token_file={name!r} holds {size:,} bytes, an odd number: expected {what}.")
    if size // 2 <= seq_len:
        raise ConfigError(
            f"task.token_file={name!r} holds {size // 2:,} tokens, no window of task.seq_len={seq_len} "
            f"and its next-token target: expected at least {seq_len + 1}."
        )


def _check_train(spec: RunSpec) -> None:
    nproc = spec.dist.nproc_per_node
    batch = spec.loader.batch_size * nproc  # samples of one micro-step over all ranks
    accum, effective = spec.train.grad_accum_steps, spec.train.effective_batch
    _check_int(Knob.TRAIN_GRAD_ACCUM_STEPS, accum, 1)
    _check_int(Knob.TRAIN_EFFECTIVE_BATCH, effective, 1, allow_none=True)
    if (accum > 1 or effective is not None) and not spec.training:
        raise ConfigError(
            f"train.grad_accum_steps={accum} / train.effective_batch={effective} need task.mode=train "
            f"(got {spec.mode!r}): leave them at 1 / null for inference."
        )
    if effective is None:
        return
    per_step = f"loader.batch_size={spec.loader.batch_size}" + (f" x dist.nproc_per_node={nproc}" if nproc > 1 else "")
    if effective % batch:
        raise ConfigError(
            f"train.effective_batch={effective} is not a multiple of {per_step}: pick a batch size that divides it."
        )
    if accum not in (1, effective // batch):
        raise ConfigError(
            f"train.grad_accum_steps={accum} disagrees with train.effective_batch={effective} / "
            f"{per_step} = {effective // batch}: set only one of them."
        )


def _check_dist(spec: RunSpec) -> None:
    nproc, numa = spec.dist.nproc_per_node, str(spec.backend.numa)
    _check_int(Knob.DIST_NPROC_PER_NODE, nproc, 1)
    if numa == "none":
        return
    planned = host.planned()  # this machine, or the one a plan is printed for
    nodes = [n.node for n in planned.nodes]
    if len(nodes) < 2:
        raise ConfigError(
            f"backend.numa={numa!r} binds ranks to NUMA nodes, and this machine has {len(nodes) or 1}: "
            "use backend.numa=none."
        )
    if nproc % len(nodes):
        raise ConfigError(
            f"backend.numa={numa!r} puts the same number of ranks on each of the {len(nodes)} NUMA "
            f"nodes: dist.nproc_per_node={nproc} is not a multiple of {len(nodes)}."
        )
    if planned is host.this_host() and shutil.which("numactl") is None:
        raise ConfigError(
            f"backend.numa={numa!r} runs each rank under numactl, which is not installed: install "
            "numactl (Debian/Ubuntu) or use backend.numa=none."
        )


def _check_script(spec: RunSpec) -> None:
    if not spec.argv:
        raise ConfigError(
            "task.command is empty: give the command that runs your script, e.g. "
            "task.command='python train.py --batch-size ${loader.batch_size}'."
        )
    for knob in spec.task["reads"]:
        group, _, key = str(knob).partition(".")
        if group not in ("loader", "backend", "train", "dist") or not hasattr(getattr(spec, group), key):
            raise ConfigError(
                f"task.reads: {knob!r} is not a knob: expected keys such as loader.batch_size or backend.precision."
            )
    if spec.measure.compute_bound:
        raise ConfigError(
            "measure.compute_bound=true times sweeper's own step on a batch held in memory, which a "
            "script does not have: set measure.compute_bound=false with task=script."
        )


def fp16_without_cuda(device: str) -> str:
    """The one line for fp16 where the runs have no CUDA device: from the sweep's plan, before
    trial 1, and from the measuring process, which knows its device."""
    return (
        f"backend.precision='fp16' needs a CUDA device (fp16 AMP with a GradScaler); the device is {device}: "
        "use backend.precision=bf16 or fp32."
    )


def check_command_here(spec: RunSpec) -> None:
    """A script's program and the file python runs, on the machine that runs it (a cluster's
    node may have programs and paths its login node lacks: checked by the job there). The
    command is run as its words, no shell: its program on PATH or at its path."""
    if not spec.is_script or not spec.argv:
        return
    program = spec.argv[0]
    if program not in PYTHONS and shutil.which(program) is None:
        where = "is not an executable file" if "/" in program else "is not a program on PATH"
        raise ConfigError(f"task.command runs {program!r}, which {where}: check its spelling, or write its full path.")
    script = spec.argv[1] if program in PYTHONS and len(spec.argv) > 1 else None
    if script is not None and script.endswith(".py") and not Path(script).expanduser().is_file():
        raise ConfigError(
            f"task.command runs {script!r}, which does not exist in {Path.cwd()}: check the path (a "
            "relative one starts where you run sweeper)."
        )


def _check_loader(spec: RunSpec) -> None:
    """The loader's counts, and the knobs that mean something only with workers."""
    loader = spec.loader
    _check_int(Knob.LOADER_NUM_WORKERS, loader.num_workers, 0)
    _check_int(Knob.LOADER_PREFETCH_FACTOR, loader.prefetch_factor, 1, allow_none=True)
    if loader.num_workers == 0:
        for knob, idle in (
            ("prefetch_factor", None),
            ("persistent_workers", False),
            ("in_order", True),
            ("multiprocessing_context", None),
        ):
            value = getattr(loader, knob)
            if value != idle:
                shown = (
                    str(value).lower()
                    if isinstance(value, bool)
                    else repr(str(value) if isinstance(value, str) else value)
                )
                raise ConfigError(
                    f"loader.{knob}={shown} needs loader.num_workers > 0 (got 0): set "
                    f"loader.{knob}={'null' if idle is None else str(idle).lower()} or add workers."
                )


def _check_backend(spec: RunSpec) -> None:
    """The compile mode, thread counts, and an allocator this machine has."""
    backend = spec.backend
    if backend.compile not in COMPILE_MODES:
        raise ConfigError(
            f"backend.compile={backend.compile!r} is invalid: expected one of {', '.join(COMPILE_MODES)}."
        )
    _check_int(Knob.BACKEND_THREADS, backend.threads, 1, allow_none=True)
    allocator = str(backend.allocator)
    if allocator != "default" and topology.allocator_library(allocator) is None:
        raise ConfigError(
            f"backend.allocator={allocator!r} is not installed on this machine: install "
            f"{topology.ALLOCATORS[allocator][1]} (Debian/Ubuntu) or use backend.allocator=default."
        )
    _check_int(Knob.BACKEND_INTEROP_THREADS, backend.interop_threads, 1, allow_none=True)
    _check_int(Knob.BACKEND_KMP_BLOCKTIME, backend.kmp_blocktime, 0, allow_none=True)


def _check_measure(spec: RunSpec) -> None:
    """The measuring rule's ranges, and what the sweep tells a trial."""
    measure = spec.measure
    _check_positive(Knob.MEASURE_WARMUP_S, measure.warmup_s)
    _check_int(Knob.MEASURE_WARMUP_STEPS, measure.warmup_steps, 1)
    _check_int(Knob.MEASURE_WINDOWS, measure.windows, 1)
    _check_int(Knob.MEASURE_MIN_WINDOWS, measure.min_windows, 1)
    _check_positive(Knob.MEASURE_WARMUP_MAX_S, measure.warmup_max_s)
    _check_share(Knob.MEASURE_STEADY_TOL, measure.steady_tol)
    _check_share(Knob.MEASURE_REL_PRECISION, measure.rel_precision)
    race = spec.trial.race
    if race is not None and len(race) != 2:
        raise ConfigError(f"trial.race={race!r} is invalid: expected null or [low, high] samples/sec.")
    _check_positive("trial.behind", spec.trial.behind)
    _check_positive("trial.prune_below", spec.trial.prune_below)
    _check_far_below(spec.trial.far_below, spec.trial.prune_below)
    _check_positive(Knob.MEASURE_WINDOW_S, measure.window_s)
    _check_positive(Knob.MEASURE_TIMEOUT_S, measure.timeout_s)
    _check_positive(Knob.MEASURE_MEMORY_LIMIT_GB, measure.memory_limit_gb)
    _check_positive(Knob.MEASURE_FOREIGN_CPU_MAX_PCT, measure.foreign_cpu_max_pct)
    if measure.quiet_wait_s < 0:
        raise ConfigError(f"{Knob.MEASURE_QUIET_WAIT_S}={measure.quiet_wait_s!r} is invalid: expected seconds >= 0.")
    _check_share(Knob.MEASURE_DRIFT_TOL, measure.drift_tol)
    _check_positive(Knob.MEASURE_MAX_S, measure.max_s)
    if measure.job_samples is not None and measure.job_samples < 1:
        raise ConfigError(
            f"{Knob.MEASURE_JOB_SAMPLES}={measure.job_samples!r} is invalid: expected the samples of the "
            "whole job (>= 1, e.g. 2e6), or null for the rate alone."
        )


def check_page_cache(asked: str, reads_files: bool, error: type[ConfigError] = ConfigError) -> None:
    """measure.page_cache=warm or cold sets the state of the files a workload reads: one line
    where it reads none (sweeper's own tasks are known before a run; a factory's, once built)."""
    if asked != PageCache.auto and not reads_files:
        raise error(
            f"{Knob.MEASURE_PAGE_CACHE}={PageCache(asked).value} sets the state of the files a workload reads, "
            "and this one reads none that sweeper knows of: point it at files (task.data_dir, task.token_file, "
            "or Workload.files of your own) or set measure.page_cache=auto."
        )


def check_config(spec: RunSpec) -> None:
    """Raise ConfigError naming the first value out of range, or keys that contradict each other."""
    task, loader = spec.task, spec.loader

    if spec.is_script:  # task=script: its words were made from task.command (sweeper.command)
        _check_script(spec)
    elif ":" not in spec.factory:
        raise ConfigError(
            f"task.factory={spec.factory!r} is invalid: expected 'module:function', e.g. task.factory=my_bench:build."
        )
    _check_int(Knob.TASK_EPOCH_SAMPLES, task["epoch_samples"], 1, allow_none=True)
    for key in ("root", "data_dir", "token_file"):
        _check_existing_path(f"task.{key}", task.get(key))  # the tasks that read a file have it
    _check_task(task)

    _check_int(Knob.LOADER_BATCH_SIZE, loader.batch_size, 1)
    _check_train(spec)
    _check_loader(spec)
    _check_backend(spec)
    _check_dist(spec)
    _check_measure(spec)
    if spec.is_script or spec.factory.startswith("sweeper.tasks."):  # the files are known from the config
        check_page_cache(spec.measure.page_cache, bool(task.get("data_dir") or task.get("token_file")))
