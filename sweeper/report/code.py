"""The winner as the lines to change in the reader's own training script, against the baseline
(pure). Only the settings that differ appear; each as the PyTorch line that sets it."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .. import topology
from ..knobs import Knob
from ..spec import CompileMode, normalize_compile

_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
_LOADER_ARGS = (
    "batch_size",
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "in_order",
    "multiprocessing_context",
)
_LIBRARIES = topology.ALLOCATOR_SONAMES


def openmp_env(bind: str) -> str:
    """backend.omp_bind as the variables to export (sweeper.topology's rule, as the run sets them)."""
    return " ".join(f"{k}={v}" for k, v in topology.openmp_standard_env(bind).items())


def _threads(knobs: Mapping[str, Any]) -> list[str]:
    lines = []
    if Knob.BACKEND_THREADS in knobs:
        n = knobs[Knob.BACKEND_THREADS]
        lines.append(
            "# torch.set_num_threads: PyTorch's default"
            if n is None
            else f"torch.set_num_threads({n})  # or export OMP_NUM_THREADS={n} before start-up"
        )
    if Knob.BACKEND_INTEROP_THREADS in knobs:
        n = knobs[Knob.BACKEND_INTEROP_THREADS]
        lines.append(
            "# torch.set_num_interop_threads: PyTorch's default"
            if n is None
            else f"torch.set_num_interop_threads({n})  # once, before any parallel work"
        )
    return lines


def affinity_lines(knobs: Mapping[str, Any]) -> list[str]:
    affinity = knobs.get(Knob.BACKEND_AFFINITY)
    if affinity in ("compact", "spread"):
        where = "the first cores" if affinity == "compact" else "cores spaced evenly over the machine"
        return [
            f"os.sched_setaffinity(0, compute_cores)  # {affinity}: one per compute thread on {where}, "
            "before torch starts its threads; workers on the rest in worker_init_fn"
        ]
    return ["# CPU affinity: none (the OS places threads and workers)"] if Knob.BACKEND_AFFINITY in knobs else []


# knobs read as the process starts: the environment and the launcher of one start command
_AT_START = (
    Knob.BACKEND_ALLOCATOR,
    Knob.BACKEND_OMP_BIND,
    Knob.BACKEND_KMP_BLOCKTIME,
    Knob.DIST_NPROC_PER_NODE,
    Knob.BACKEND_NUMA,
)


def _start(knobs: Mapping[str, Any]) -> list[str]:
    """How the script starts, as one command a user can run: the environment these knobs set
    before it (an allocator preloaded, OpenMP's binding) and its launcher (python, or torchrun)."""
    if not any(k in knobs for k in _AT_START):
        return []
    env = []
    if knobs.get(Knob.BACKEND_ALLOCATOR) in _LIBRARIES:
        env.append(f"LD_PRELOAD={_LIBRARIES[knobs[Knob.BACKEND_ALLOCATOR]]}")
    if knobs.get(Knob.BACKEND_OMP_BIND) in ("close", "spread"):
        env.append(openmp_env(knobs[Knob.BACKEND_OMP_BIND]))
    if knobs.get(Knob.BACKEND_KMP_BLOCKTIME) is not None:
        env.append(f"KMP_BLOCKTIME={knobs[Knob.BACKEND_KMP_BLOCKTIME]}")  # Intel's OpenMP reads it
    nproc = int(knobs.get(Knob.DIST_NPROC_PER_NODE) or 1)
    launcher = f"torchrun --standalone --nproc_per_node={nproc} train.py" if nproc > 1 else "python train.py"
    return [f"# start with {' '.join([*env, launcher])}"]


def _ranks(knobs: Mapping[str, Any]) -> list[str]:
    if int(knobs.get(Knob.DIST_NPROC_PER_NODE) or 1) <= 1:
        return []
    numa = (
        ["# each rank under numactl --cpunodebind=N --membind=N, ranks in blocks, one block per NUMA node"]
        if knobs.get(Knob.BACKEND_NUMA) == "node"
        else []
    )
    return [
        *numa,
        "dist.init_process_group('gloo')  # 'nccl' on GPUs; then DistributedDataParallel(model) and a "
        "DistributedSampler (each rank its share of every epoch)",
    ]


def flag_lines(knobs: Mapping[str, Any]) -> list[str]:
    lines = []
    if Knob.BACKEND_CUDNN_BENCHMARK in knobs:
        lines.append(f"torch.backends.cudnn.benchmark = {bool(knobs[Knob.BACKEND_CUDNN_BENCHMARK])}")
    if Knob.BACKEND_TF32 in knobs:
        on = bool(knobs[Knob.BACKEND_TF32])
        lines += [f"torch.backends.cuda.matmul.allow_tf32 = {on}", f"torch.backends.cudnn.allow_tf32 = {on}"]
    if Knob.BACKEND_FLUSH_DENORMAL in knobs:
        lines.append(
            f"torch.set_flush_denormal({bool(knobs[Knob.BACKEND_FLUSH_DENORMAL])})"
            + (
                "  # values below about 1e-38 become 0: no slow subnormal math"
                if knobs[Knob.BACKEND_FLUSH_DENORMAL]
                else ""
            )
        )
    return lines


def _decoder(knobs: Mapping[str, Any]) -> list[str]:
    """task.decoder as the dataset's lines: ImageFolder's PIL path, torchvision.io's decode with
    transforms.v2 on the uint8 tensor (crop and resize before the conversion to float), or the
    batch's bytes decoded on the device at once."""
    if Knob.TASK_DECODER not in knobs:
        return []
    if knobs[Knob.TASK_DECODER] == "torchvision":
        return [
            "# crop: your crop and resize in transforms.v2 (v2.RandomResizedCrop to train; v2.Resize, v2.CenterCrop)",
            "dataset = ImageFolder(root, transform=v2.Compose([*crop, v2.ToDtype(torch.float32, scale=True), "
            "v2.Normalize(mean, std)]),",
            "                      loader=lambda path: decode_image(read_file(path), mode=ImageReadMode.RGB))",
        ]
    if knobs[Knob.TASK_DECODER] == "device":
        return [
            "dataset = ImageFolder(root, loader=read_bytes)  # the workers only read the files' bytes",
            "collate = lambda s: ([b for b, _ in s], torch.tensor([c for _, c in s]))  # collate_fn=collate",
            "images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)  # the whole batch at once",
            "inputs = v2.ToDtype(torch.float32, scale=True)(torch.stack([crop(image) for image in images]))",
            "inputs = v2.Normalize(mean, std)(inputs)",
        ]
    return ["dataset = ImageFolder(root, transform=transform)  # PIL decodes and transforms"]


def _loader(knobs: Mapping[str, Any], device: str) -> list[str]:
    args = [f"{name}={knobs[f'loader.{name}']!r}" for name in _LOADER_ARGS if f"loader.{name}" in knobs]
    if not args:
        return []
    lines = [f"loader = DataLoader(dataset, {', '.join(args)})"]
    if knobs.get(Knob.LOADER_PIN_MEMORY) and device == "cuda":
        lines.append("inputs = inputs.to(device, non_blocking=True)  # pinned batches copy asynchronously")
    return lines


def _model(knobs: Mapping[str, Any]) -> list[str]:
    lines = []
    if Knob.BACKEND_CHANNELS_LAST in knobs:
        if knobs[Knob.BACKEND_CHANNELS_LAST]:
            lines += [
                "model = model.to(memory_format=torch.channels_last)",
                "inputs = inputs.contiguous(memory_format=torch.channels_last)",
            ]
        else:
            lines.append("# channels_last: off (PyTorch's contiguous NCHW)")
    if Knob.BACKEND_COMPILE in knobs:
        mode = normalize_compile(knobs[Knob.BACKEND_COMPILE])
        lines.append(
            "# torch.compile: off"
            if mode == CompileMode.off
            else "model = torch.compile(model)"
            if mode == CompileMode.default
            else f"model = torch.compile(model, mode={str(mode)!r})"
        )
    return lines


def _precision(knobs: Mapping[str, Any], device: str) -> list[str]:
    if Knob.BACKEND_PRECISION not in knobs:
        return []
    precision = knobs[Knob.BACKEND_PRECISION]
    if precision not in _DTYPES:
        return ["# fp32: no autocast"]
    lines = [f"with torch.autocast(device_type={device!r}, dtype={_DTYPES[precision]}):  # forward and loss"]
    if precision == "fp16":
        lines.append(
            f"scaler = torch.amp.GradScaler({device!r})  # scaler.scale(loss).backward(); "
            "scaler.step(optimizer); scaler.update()"
        )
    return lines


def script_lines(knobs: Mapping[str, Any], device: str) -> list[str]:
    """The lines of a training script that set these knobs, in the order a script sets them."""
    known = {
        *(f"loader.{a}" for a in _LOADER_ARGS),
        Knob.BACKEND_THREADS,
        Knob.BACKEND_INTEROP_THREADS,
        Knob.BACKEND_CUDNN_BENCHMARK,
        Knob.BACKEND_TF32,
        Knob.BACKEND_FLUSH_DENORMAL,
        Knob.BACKEND_CHANNELS_LAST,
        Knob.BACKEND_COMPILE,
        Knob.BACKEND_PRECISION,
        Knob.BACKEND_AFFINITY,
        Knob.BACKEND_ALLOCATOR,
        Knob.BACKEND_OMP_BIND,
        Knob.BACKEND_KMP_BLOCKTIME,
        Knob.DIST_NPROC_PER_NODE,
        Knob.BACKEND_NUMA,
        Knob.TASK_DECODER,
    }
    others = [f"# {key} = {value!r}" for key, value in sorted(knobs.items()) if key not in known]
    return [
        *_start(knobs),
        *_ranks(knobs),
        *affinity_lines(knobs),
        *_threads(knobs),
        *flag_lines(knobs),
        *_decoder(knobs),
        *_loader(knobs, device),
        *_model(knobs),
        *_precision(knobs, device),
        *others,
    ]


# A run of sweeper's own workloads is measured with the collector collected and frozen before
# its loop (measuring/stages.py); a script's loop reads the same figure only with this line before it
FROZEN_COLLECTOR = (
    "gc.collect(); gc.freeze()  # just before the loop, as measured: forked loader workers then skip "
    "a full collection of the heap they inherit"
)


def _collector(knobs: Mapping[str, Any]) -> list[str]:
    """The collector's line where the loader forks its workers (PyTorch's default on Linux)."""
    workers = int(knobs.get(Knob.LOADER_NUM_WORKERS) or 0)
    forks = knobs.get(Knob.LOADER_MULTIPROCESSING_CONTEXT) in (None, "fork")
    return [FROZEN_COLLECTOR] if workers > 0 and forks else []


def code_diff(baseline: Mapping[str, Any], winner: Mapping[str, Any], device: str) -> tuple[str, ...]:
    """`-` baseline / `+` winner lines for the knobs whose values differ; empty when none do.
    A winner whose loader forks workers also gets the collector's line (FROZEN_COLLECTOR): its
    figure holds for a loop with it."""
    changed = sorted(k for k in {*baseline, *winner} if baseline.get(k) != winner.get(k))
    if not changed:
        return ()
    before = script_lines({k: baseline.get(k) for k in changed}, device)
    after = [*script_lines({k: winner.get(k) for k in changed}, device), *_collector(winner)]
    return tuple(
        line
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("---", "+++"))
    )
