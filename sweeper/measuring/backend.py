"""Device, precision, memory, OpenMP and global torch settings for one measured run (imports torch)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from ..errors import InvalidConfig
from ..spec import CompileMode
from ..validation import fp16_without_cuda

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(requested: str) -> torch.device:
    """auto -> cuda when visible, else cpu; cuda without a GPU is a configuration error."""
    cuda = torch.cuda.is_available()
    if requested == "auto":
        return torch.device("cuda" if cuda else "cpu")
    if requested == "cuda" and not cuda:
        raise InvalidConfig(
            "backend.device='cuda' but no CUDA device is visible (torch.cuda.is_available() "
            "is False): use backend.device=cpu or backend.device=auto."
        )
    return torch.device(requested)


def check_precision(device: torch.device, precision: str) -> None:
    if precision == "fp16" and device.type != "cuda":
        raise InvalidConfig(fp16_without_cuda(device.type))
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InvalidConfig(
            f"backend.precision='bf16' is not supported by {torch.cuda.get_device_name(device)}: "
            "use backend.precision=fp16 or fp32."
        )


def apply_threads(threads: int | None, interop_threads: int | None) -> None:
    """Must run before the first parallel op: inter-op threads can be set once per process."""
    if threads is not None:
        torch.set_num_threads(threads)
    if interop_threads is not None:
        torch.set_num_interop_threads(interop_threads)


def apply_flush_denormal(on: bool) -> bool:
    """torch.set_flush_denormal as the knob says; whether it is in effect (False where the CPU
    has no such mode: torch says so by returning False)."""
    return bool(torch.set_flush_denormal(bool(on))) and bool(on)


def apply_cuda_flags(cudnn_benchmark: bool, tf32: bool) -> None:
    torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    torch.backends.cudnn.allow_tf32 = bool(tf32)


def limit_memory(limit_gb: float | None, device_type: str) -> None:
    """measure.memory_limit_gb as an address-space limit: the run's own allocations fail beyond
    it (CPU). The CUDA libraries map far more address space than they use, so not there."""
    import resource

    if limit_gb is None:
        return
    if device_type == "cuda":
        raise InvalidConfig(
            f"measure.memory_limit_gb={limit_gb} limits the address space, which the CUDA libraries need "
            "far more of than they use: set measure.memory_limit_gb=null on a GPU."
        )
    limit = int(limit_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def check_openmp(blocktime: int | None, runtime: str) -> None:
    """backend.kmp_blocktime means something to Intel's OpenMP runtime only."""
    if blocktime is not None and runtime != "intel":
        raise InvalidConfig(
            f"backend.kmp_blocktime={blocktime} is read by Intel's OpenMP runtime, and this "
            f"torch runs {'GNU libgomp' if runtime == 'gnu' else 'no OpenMP runtime'}: set "
            "backend.kmp_blocktime=null."
        )


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def grad_scaler(device: torch.device, precision: str, training: bool) -> Any:
    """fp16 training needs loss scaling; bf16 has fp32's range and does not."""
    if training and precision == "fp16":
        return torch.amp.GradScaler(device.type)
    return None


def maybe_compile(model: torch.nn.Module, mode: str) -> Callable[..., Any]:
    """The model, compiled in `mode` (the spec has normalised it: off, default, max-autotune)."""
    if mode == CompileMode.off:
        return model
    return torch.compile(model, mode=mode)


def synchronize(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class CudaStepTimer:
    """Device time of each step from CUDA events recorded around it on the current stream;
    read after the window's synchronize, so timing adds no synchronization of its own."""

    def __init__(self) -> None:
        self._pairs: list[tuple[Any, Any]] = []
        self._begun: Any = None

    def begin(self) -> None:
        self._begun = torch.cuda.Event(enable_timing=True)
        self._begun.record()

    def end(self) -> None:
        done = torch.cuda.Event(enable_timing=True)
        done.record()
        self._pairs.append((self._begun, done))

    def collect(self) -> list[float]:
        seconds = [begun.elapsed_time(done) / 1e3 for begun, done in self._pairs]
        self._pairs.clear()
        return seconds


def step_timer(device: torch.device) -> CudaStepTimer | None:
    return CudaStepTimer() if device.type == "cuda" else None
