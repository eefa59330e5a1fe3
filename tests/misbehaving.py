"""Workloads that fail on purpose, used through task=custom task.factory=misbehaving:<name>."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


class HangingDataset(Dataset):
    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int) -> Any:
        time.sleep(3600)


class Aborting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.abort()


class Allocating(nn.Module):
    """Allocates task.params.gb gigabytes on the first forward."""

    def __init__(self, gb: float) -> None:
        super().__init__()
        self.gb = gb
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = torch.ones(int(self.gb * 2**30) // 4)
        return self.lin(x) + big[0]


def _data() -> TensorDataset:
    return TensorDataset(torch.randn(256, 4), torch.randn(256, 1))


def hang(task: dict[str, Any]):
    return nn.Linear(4, 1), HangingDataset(), nn.functional.mse_loss


def abort(task: dict[str, Any]):
    return Aborting(), _data(), nn.functional.mse_loss


def allocate(task: dict[str, Any]):
    return Allocating(float(task["params"]["gb"])), _data(), nn.functional.mse_loss


def raise_error(task: dict[str, Any]):
    raise ValueError("the user's factory failed")


class FailsAtBatch(nn.Module):
    """Aborts the process at batch size `crash`, runs out of memory at `oom_from` and above."""

    def __init__(self, crash: int | None, oom_from: int | None) -> None:
        super().__init__()
        self.crash, self.oom_from = crash, oom_from
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == self.crash:
            os.abort()
        if self.oom_from is not None and x.shape[0] >= self.oom_from:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")
        return self.lin(x)


def fails_at_batch(task: dict[str, Any]):
    params = task.get("params") or {}
    model = FailsAtBatch(params.get("crash"), params.get("oom_from"))
    return model, _data(), nn.functional.mse_loss


class DiesInLoaderWorker(Dataset):
    """Kills the DataLoader worker that loads it with `signum` (SIGKILL as the OOM killer
    sends, SIGSEGV as a crashing native extension gets)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int) -> Any:

        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            os.kill(os.getpid(), self.signum)
        return torch.randn(4), torch.randn(1)


def kill_loader_worker(task: dict[str, Any]):
    import signal

    return nn.Linear(4, 1), DiesInLoaderWorker(signal.SIGKILL), nn.functional.mse_loss


def segfault_loader_worker(task: dict[str, Any]):
    import signal

    return nn.Linear(4, 1), DiesInLoaderWorker(signal.SIGSEGV), nn.functional.mse_loss


class CudaMemoryPerSample(nn.Module):
    """Holds task.params.gb_per_sample GB on the device per sample of the batch: a real CUDA OOM
    from a batch size chosen to exceed the GPU."""

    def __init__(self, gb_per_sample: float) -> None:
        super().__init__()
        self.gb = gb_per_sample
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        held = torch.empty(int(self.gb * 2**30 * x.shape[0]) // 4, device=x.device)
        return self.lin(x) + held[:1]


def cuda_memory_per_sample(task: dict[str, Any]):
    return CudaMemoryPerSample(float(task["params"]["gb_per_sample"])), _data(), nn.functional.mse_loss


# a module global a trial changes: forked trials must each start from the zygote's value
BUILDS = 0


def count_builds(task: dict[str, Any]):
    """Appends how many builds this process's copy of the module has seen to params.out."""
    global BUILDS
    BUILDS += 1
    with open(task["params"]["out"], "a") as f:
        f.write(f"{BUILDS}\n")
    return nn.Linear(4, 1), _data(), nn.functional.mse_loss


def frozen_heap(task: dict[str, Any]):
    """Writes how many objects the process's collector holds frozen (gc.freeze) and whether the
    collector is on to params.out."""
    import gc

    with open(task["params"]["out"], "w") as f:
        f.write(f"{gc.get_freeze_count()} {gc.isenabled()}\n")
    return nn.Linear(4, 1), _data(), nn.functional.mse_loss


class FailsOnRank(nn.Module):
    """In a data-parallel run, one rank (params.rank) aborts, hangs or raises at its first
    forward; every rank writes its pid and command line to params.pids first (a file per rank)."""

    def __init__(self, how: str, rank: int, pids: str) -> None:
        super().__init__()
        self.how, self.rank, self.pids = how, rank, pids
        self.lin = nn.Linear(4, 1)
        me = int(os.environ.get("RANK", "0"))
        os.makedirs(pids, exist_ok=True)
        with open("/proc/self/cmdline") as cmdline, open(os.path.join(pids, f"rank{me}"), "w") as f:
            f.write(f"{os.getpid()} {cmdline.read().replace(chr(0), ' ')}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if int(os.environ.get("RANK", "0")) == self.rank:
            if self.how == "abort":
                os.abort()
            if self.how == "hang":
                time.sleep(3600)
            raise ValueError(f"rank {self.rank} failed on purpose")
        return self.lin(x)


def fails_on_rank(task: dict[str, Any]):
    params = task["params"]
    return FailsOnRank(params["how"], int(params.get("rank", 1)), params["pids"]), _data(), nn.functional.mse_loss


def openmp_binding(task: dict[str, Any]):
    """Appends OpenMP's proc-bind setting as this process's runtime holds it (libgomp read
    OMP_PROC_BIND when it was loaded, not later: 0 false, 3 close, 4 spread) and the CPUs this
    thread may run on (libgomp pins it as it loads, when bound) to params.out, with how many
    libgomp files the process has mapped."""
    import ctypes
    import os

    with open("/proc/self/maps") as maps:
        gomps = sorted({line.split()[-1] for line in maps if "libgomp" in line})
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    with open(task["params"]["out"], "a") as f:
        f.write(f"{ctypes.CDLL(gomps[0]).omp_get_proc_bind()} {cpus} {len(gomps)}\n")
    return nn.Linear(4, 1), _data(), nn.functional.mse_loss
