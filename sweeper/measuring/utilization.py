"""Utilization over the measured windows, as practitioners read it: `top`'s CPU percent (of one
core, summed over threads) for the measuring process and its loader workers apart, and on
NVIDIA GPUs what `nvidia-smi` shows (GPU-Util, memory-controller util, power against the cap)
through NVML, when the optional nvidia-ml-py is installed."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import foreign, procs, topology
from ..measurement import Utilization
from .harness import HarnessMonitor, own_thread


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(CPU seconds of pid itself, of its descendants: the live ones plus those it has reaped).
    A worker that exits inside the measurement moves from the live sum into pid's own
    cutime/cstime when it is joined, so differences of these counters stay whole."""
    own = procs.stat(pid)
    if own is None:
        return 0.0, 0.0
    live = [procs.stat(child) for child in procs.tree(pid)[1:]]
    return own.cpu_s, own.reaped_cpu_s + sum(s.cpu_s for s in live if s is not None)


def ranks_cpu_seconds(pid: int) -> tuple[float, float]:
    """cpu_seconds for a launcher of data-parallel ranks (torch.distributed.run): the ranks, its
    children, are the training processes and count with it; their descendants are their loader
    workers."""
    own = procs.stat(pid)
    if own is None:
        return 0.0, 0.0
    ranks = [cpu_seconds(child) for child in procs.children(pid)]
    return own.cpu_s + sum(rank for rank, _ in ranks), sum(workers for _, workers in ranks)


class CpuMonitor:
    """cpu_util_main_pct and cpu_util_workers_pct over the windows."""

    def __init__(
        self,
        pid: int | None = None,
        *,
        read: Callable[[int], tuple[float, float]] = cpu_seconds,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._pid = pid or os.getpid()
        self._read, self._clock = read, clock
        self._start: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def start(self) -> None:
        main, workers = self._read(self._pid)
        self._start = (self._clock(), main, workers)

    def stop(self) -> Utilization:
        main, workers = self._read(self._pid)
        began, main0, workers0 = self._start
        elapsed = self._clock() - began
        if elapsed <= 0:
            return Utilization()
        return Utilization(
            cpu_util_main_pct=100 * (main - main0) / elapsed,
            cpu_util_workers_pct=100 * max(0.0, workers - workers0) / elapsed,
        )


class ForeignMonitor:
    """foreign_cpu_pct over the windows: other processes' CPU on the run's cores (sweeper.foreign),
    and whether it exceeds `max_pct` (the figure was taken under load)."""

    def __init__(self, max_pct: float) -> None:
        self._max_pct, self._root, self._cpus = max_pct, foreign.run_root(), topology.machine_cpus()
        self._start: foreign.Snapshot | None = None

    def start(self) -> None:
        self._start = foreign.snapshot(self._cpus, self._root)

    def stop(self) -> Utilization:
        if self._start is None:
            return Utilization()
        load = foreign.between(self._start, foreign.snapshot(self._cpus, self._root))
        return Utilization(
            foreign_cpu_pct=load.cpu_pct, foreign_process=load.busiest, under_load=load.cpu_pct > self._max_pct
        )


def monitors_for(
    max_foreign_pct: float | None, cpu: CpuMonitor, *others: Any | None, loop_apart: bool = False
) -> list[Any]:
    """The monitors of a run, in the order they start (they stop in reverse): other processes'
    load where watched, the run's own CPU, `others` (the GPU's; None: none), and last sweeper's
    own CPU beside the loop (all of this process where the loop runs in a process of its own:
    `loop_apart`), so that its span is the windows alone, not the other monitors' reads at their
    edges (a /proc walk of every process takes milliseconds)."""
    watched = [ForeignMonitor(max_foreign_pct)] if max_foreign_pct is not None else []
    return [*watched, cpu, *(m for m in others if m is not None), HarnessMonitor(whole_process=loop_apart)]


def _nvml() -> Any | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    return pynvml


# how often NVML is read beside a run: each read is a few driver calls, and at ten and five reads
# a second sweeper's own threads took 2.4-2.6% of a core beside a script on an H200, 0.25% with
# NVML hidden (docs/benchmarks.md, "On a GPU"); NVML's utilization and power are recent averages,
# and a process's GPU memory (the caching allocator's reserve) seldom falls, so two reads a second
# lose little, and the memory sampler reads as often
NVML_SAMPLE_S = 0.5


class _Sampler:
    """Calls `sample()` every `interval_s` in a thread between start and stop, and once at the
    stop where none came before it (a run shorter than one interval); a sample that fails ends
    the sampling, never the run."""

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled = False

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a failing sample must not fail the run
                return
            self._sampled = True

    def start(self) -> None:
        self._thread = own_thread(self._run)
        self._thread.start()

    def _join(self) -> None:
        self._stopping.set()
        if self._thread is None:
            return
        self._thread.join()
        if not self._sampled:
            with contextlib.suppress(Exception):  # a failing sample must not fail the run
                self.sample()


# other processes keeping the run's GPU busier than this (NVML's per-process SM use, percent)
# make its figure one taken under load
FOREIGN_GPU_MAX_PCT = 5.0


class NvmlMonitor(_Sampler):
    """gpu_util_pct, gpu_mem_util_pct and gpu_power_w sampled in a thread (NVML reports each
    as a recent average), and gpu_power_cap_w, for the GPU the run uses; and other processes'
    use of that GPU (NVML's per-process SM samples of processes outside the run's tree)."""

    def __init__(self, nvml: Any, handle: Any, interval_s: float = NVML_SAMPLE_S, root: int | None = None) -> None:
        super().__init__(interval_s)
        self._nvml, self._handle = nvml, handle
        self._samples: list[tuple[float, float, float]] = []
        self._root = root if root is not None else foreign.run_root()
        self._seen_at = 0  # NVML's timestamp of the last per-process sample read
        self._foreign_pct: float | None = None

    def sample(self) -> None:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        power_w = self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3  # milliwatts
        self._samples.append((float(rates.gpu), float(rates.memory), power_w))
        self._sample_others()

    def _sample_others(self) -> None:
        """Other processes' SM use since the last read (none read: no such samples, or a driver
        or container that does not give them)."""
        try:
            seen = self._nvml.nvmlDeviceGetProcessUtilization(self._handle, self._seen_at)
        except Exception:  # noqa: BLE001 - NVMLError_NotFound when no process ran since; not a failed run
            return
        if not seen:
            return
        own = set(procs.tree(self._root))  # read only when NVML saw processes
        by_time: dict[int, float] = {}
        for s in seen:
            self._seen_at = max(self._seen_at, int(s.timeStamp))
            if s.pid not in own:
                by_time[s.timeStamp] = by_time.get(s.timeStamp, 0.0) + float(s.smUtil)
        busiest = max(by_time.values(), default=0.0)
        self._foreign_pct = max(self._foreign_pct or 0.0, busiest)

    def stop(self) -> Utilization:
        self._join()
        if not self._samples:
            return Utilization()
        others = self._foreign_pct
        loaded = others is not None and others > FOREIGN_GPU_MAX_PCT
        n = len(self._samples)
        try:
            cap = self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1e3
        except Exception:  # noqa: BLE001 - some boards do not report a cap
            cap = None
        return Utilization(
            gpu_util_pct=sum(s[0] for s in self._samples) / n,
            gpu_mem_util_pct=sum(s[1] for s in self._samples) / n,
            gpu_power_w=sum(s[2] for s in self._samples) / n,
            gpu_power_cap_w=cap,
            foreign_gpu_util_pct=others,
            under_load=True if loaded else None,  # else the CPU's verdict stands (Utilization.merged)
        )


def nvml_monitor(uuid: str | None, nvml: Any | None = None) -> NvmlMonitor | None:
    """The GPU's monitor by its UUID (NVML ignores CUDA_VISIBLE_DEVICES; the UUID does not
    depend on it); None without nvidia-ml-py, without a driver, or for an unknown device."""
    nvml = nvml if nvml is not None else _nvml()
    if nvml is None or not uuid:
        return None
    try:
        nvml.nvmlInit()
        wanted = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        return NvmlMonitor(nvml, nvml.nvmlDeviceGetHandleByUUID(wanted))
    except Exception:  # noqa: BLE001 - NVMLError and friends: no figures, not a failed run
        return None


def _visible_handle(nvml: Any) -> Any:
    """NVML's handle of the first GPU a CUDA program here sees: CUDA_VISIBLE_DEVICES's first
    entry (a UUID, or an index, which is NVML's where CUDA_DEVICE_ORDER=PCI_BUS_ID or there is
    one GPU), else GPU 0."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(first)
    return nvml.nvmlDeviceGetHandleByIndex(int(first))


def nvml_visible_monitor(nvml: Any | None = None) -> NvmlMonitor | None:
    """The monitor of the GPU a script started here uses (it is not in this process); None
    without nvidia-ml-py or a driver, or where no GPU is visible."""
    nvml = nvml if nvml is not None else _nvml()
    if nvml is None or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    try:
        nvml.nvmlInit()
        return NvmlMonitor(nvml, _visible_handle(nvml))
    except Exception:  # noqa: BLE001 - NVMLError and friends: no figures, not a failed run
        return None


class NvmlProcessMemory(_Sampler):
    """The GPU memory the processes of a script use (NVML's per-process figure: the CUDA context
    and the caching allocator's reserve included), sampled; its peak in MB. A Monitor that
    records no utilization."""

    def __init__(self, nvml: Any, pids: Callable[[], list[int]], interval_s: float = NVML_SAMPLE_S) -> None:
        super().__init__(interval_s)
        self._nvml, self._pids = nvml, pids
        self.peak_mb = 0.0

    def sample(self) -> None:
        mine, used = set(self._pids()), 0
        for index in range(self._nvml.nvmlDeviceGetCount()):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            for proc in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid in mine and proc.usedGpuMemory:
                    used += proc.usedGpuMemory
        self.peak_mb = max(self.peak_mb, used / 2**20)

    def stop(self) -> Utilization:
        self._join()
        return Utilization()


def nvml_process_memory(pids: Callable[[], list[int]], nvml: Any | None = None) -> NvmlProcessMemory | None:
    """The per-process GPU memory of `pids()`; None without nvidia-ml-py or a driver."""
    nvml = nvml if nvml is not None else _nvml()
    if nvml is None or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    try:
        nvml.nvmlInit()
        nvml.nvmlDeviceGetCount()
    except Exception:  # noqa: BLE001
        return None
    return NvmlProcessMemory(nvml, pids)
