"""One measured run in this process, in stages that each return a small frozen value:
prepare the process, build the workload, warm up and time it, measure the extras, describe
the run. `measure_one` reads as that list (alone, or as one rank of a data-parallel group).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .. import jobtime, procs, topology
from ..config import PageCache
from ..machine import Fingerprint
from ..measurement import Measurement, Memory, RunFacts, Stopped, Throughput, Timing, Utilization
from ..protocol import seconds_until_killed
from ..result import RunResult, Status
from ..spec import RunSpec
from . import ceiling, page_cache
from .events import Events
from .group import Rank, TorchGroup, join_group, numa_node, rank_cpus
from .restarts import with_restarts
from .rule import Rule


@dataclass(frozen=True)
class Prepared:
    """The process set up for the run, before anything is built: threads, cores, device, group."""

    torch: Any
    device: Any  # torch.device
    rank: Rank | None
    group: TorchGroup | None
    placement: topology.Placement | None
    machine_cores: tuple[int, ...]
    openmp_runtime: str
    cuda_at_start: bool  # a forked trial inherits no CUDA context: the zygote never creates one
    import_s: float
    flush_denormal: bool = False  # torch.set_flush_denormal took effect (the CPU has the mode)


@dataclass(frozen=True)
class Built:
    """The workload as the run measures it: model, step and an endless stream of batches."""

    workload: Any  # sweeper.workload.Workload
    step: Callable[[Any], None]
    next_batch: Callable[[], Any]  # one optimizer step's batch (its micro-batches when accumulating)
    samples_of: Callable[[Any], int]
    stream: Any  # loader.BatchStream
    epoch_samples: int
    accum: int
    nproc: int


@dataclass(frozen=True)
class Timed:
    throughput: Throughput
    timing: Timing
    utilization: Utilization


def prepare(spec: RunSpec, rank: Rank | None, started: float) -> Prepared:
    """Threads, cores and device, in the order torch needs them: before any thread starts."""
    if spec.cwd and spec.cwd not in sys.path:
        sys.path.insert(0, spec.cwd)  # the user's own workload modules
    import torch

    from . import backend

    imported = time.perf_counter()
    cuda_at_start = bool(torch.cuda.is_initialized())
    back = spec.backend
    backend.apply_threads(back.threads, back.interop_threads)
    machine_cores = topology.machine_cpus()
    own_cores = rank_cpus(rank, list(machine_cores)) if rank is not None else machine_cores
    placement = topology.place(str(back.affinity), own_cores, back.threads, spec.loader.num_workers)
    if placement is not None:
        topology.pin(placement.compute)  # before any thread starts: they inherit it
        if back.threads is None:
            torch.set_num_threads(len(placement.compute))  # one compute thread per pinned core
    device = backend.resolve_device(str(back.device))
    group = None
    if rank is not None:
        device, group = join_group(torch, device, rank)
    backend.limit_memory(spec.measure.memory_limit_gb, device.type)
    openmp_runtime = topology.openmp_runtime(procs.mapped_files())  # torch is imported: its OpenMP is mapped
    backend.check_openmp(back.kmp_blocktime, openmp_runtime)
    backend.check_precision(device, str(back.precision))
    backend.apply_cuda_flags(back.cudnn_benchmark, back.tf32)
    flushed = backend.apply_flush_denormal(back.flush_denormal)
    return Prepared(
        torch,
        device,
        rank,
        group,
        placement,
        machine_cores,
        openmp_runtime,
        cuda_at_start,
        import_s=imported - started,
        flush_denormal=flushed,
    )


def build(spec: RunSpec, ready: Prepared) -> Built:
    """Model (on the device, wrapped for DDP, compiled), its step, and the DataLoader's stream."""
    from . import backend, loader
    from .steps import make_step
    from .workload import build_workload

    torch, device, rank = ready.torch, ready.device, ready.rank
    task, back, training = spec.task, spec.backend, spec.training
    torch.manual_seed(0)
    workload = build_workload(task)
    model = workload.model.to(device)
    if back.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train(training)
    if rank is not None:  # as a data-parallel script wraps it: before compiling
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    compiled = backend.maybe_compile(model, back.compile)
    nproc, accum = spec.nproc, spec.grad_accum_steps
    step = make_step(
        workload,
        compiled,
        device,
        str(back.precision),
        training,
        task.get("lr") or 0.01,
        accum,
        no_sync=getattr(model, "no_sync", None),
    )
    data = loader.make_loader(
        workload,
        spec.loader,
        device,
        training,
        task["epoch_samples"],
        ready.placement.loader if ready.placement is not None else None,
        shard=(rank.rank, rank.world) if rank is not None else None,
    )
    non_blocking = spec.loader.pin_memory and device.type == "cuda"
    stream = loader.BatchStream(data)

    def next_micro_batch() -> Any:
        return loader.to_device(stream(), device, non_blocking, back.channels_last)

    def next_batch() -> Any:  # with accumulation: the micro-batches of one optimizer step
        return next_micro_batch() if accum == 1 else [next_micro_batch() for _ in range(accum)]

    def samples_of(batch: Any) -> int:
        return loader.batch_size_of(batch) if accum == 1 else sum(map(loader.batch_size_of, batch))

    return Built(workload, step, next_batch, samples_of, stream, len(data.dataset), accum, nproc)  # type: ignore[arg-type]  # a map-style dataset


def time_windows(spec: RunSpec, ready: Prepared, built: Built, events: Events) -> Timed:
    """Warm-up until steady, then windows until the figure is known (timing.measure)."""
    from . import backend, timing, utilization

    device = ready.device
    # Python's garbage collector as the report's code leaves a script's (report/code.py): collected
    # and frozen just before the loop. A script's collector can otherwise reach its loop with a
    # full collection due, which every loader worker forked at an epoch start then runs over the
    # inherited heap, copying its pages (benchmarks/restart_gc.py); whether it is due depends on
    # the script's history, which a run cannot reproduce: it measures the loop without the debt
    gc.collect()
    gc.freeze()
    gpu = None
    if device.type == "cuda":
        ready.torch.cuda.reset_peak_memory_stats(device)
        uuid = getattr(ready.torch.cuda.get_device_properties(device), "uuid", None)
        gpu = utilization.nvml_monitor(str(uuid) if uuid is not None else None)
    monitors: list[timing.Monitor] = utilization.monitors_for(
        spec.measure.foreign_cpu_max_pct, utilization.CpuMonitor(), gpu
    )
    events.phase("measure")
    t = timing.measure(
        built.next_batch,
        built.step,
        built.samples_of,
        backend.synchronize(device),
        rule := Rule.of(
            spec.measure,
            spec.loader.num_workers,
            spec.loader.persistent_workers,
            trial=spec.trial,
            epoch_samples=built.epoch_samples,
        ),
        sync_every_step=spec.measure.sync == "step",
        step_timer=backend.step_timer(device),
        monitors=monitors,
        epochs_started=lambda: built.stream.epochs_started,
        on_window=events.window,
        group=ready.group,
        time_left=seconds_until_killed(),
    )
    return Timed(t.throughput(rule.restarts_apart), t.timing(), t.utilization)


def pruned_reason(figures: Throughput, rule: Rule) -> str:
    """Both intervals when raced; the floor when below it."""
    if figures.stopped == Stopped.RACED and rule.race is not None and figures.interval is not None:
        low, high = figures.interval
        return (
            f"pruned: its 95% interval {low:,.1f}-{high:,.1f} samples/s after {figures.windows_measured} windows "
            f"lies below the best trial's {rule.race[0]:,.1f}-{rule.race[1]:,.1f}"
        )
    if figures.windows_measured == 1 and rule.far_below is not None and rule.prune_below is not None:
        return (
            f"pruned: {figures.samples_per_sec:,.1f} samples/s after 1 window is below {rule.far_below:,.1f}, "
            f"slower by the test than the floor {rule.prune_below:,.1f}"
        )
    return (
        f"pruned: {figures.samples_per_sec:,.1f} samples/s after {figures.windows_measured} "
        f"windows is below {rule.prune_below:,.1f}"
    )


def extras(spec: RunSpec, ready: Prepared, built: Built, figures: Throughput, events: Events) -> Throughput:
    """What a full run adds to its windows: the cost of restarting workers at each epoch end,
    and the compute-only bound on a batch held on the device with, for a workload on files, the
    data path's ceilings (measure.compute_bound). A pruned run gets no more than the restart its
    windows read (restarts.with_restarts)."""

    def timed_apart() -> float:
        events.phase("epoch_restart")
        return built.stream.restart_cost_s()

    figures = with_restarts(figures, spec.loader, built.epoch_samples, timed_apart)
    if figures.pruned or not spec.measure.compute_bound or figures.stopped == Stopped.TIME_LIMIT:
        return figures  # a run stopped by its time limit has no time left for a second loop
    figures = _compute_bound(spec, ready, built, figures, events)
    return _data_ceilings(spec, ready, built, figures, events) if built.workload.files else figures


def _compute_bound(spec: RunSpec, ready: Prepared, built: Built, figures: Throughput, events: Events) -> Throughput:
    """The step's own rate on one batch kept on the device (no loader in the loop), and the share
    of the run's rate the data path costs."""
    from . import backend, timing

    events.phase("compute_bound")
    held = built.next_batch()
    rule = replace(Rule.of(spec.measure), warmup_steps=1, prune_below=None, race=None, behind=None)
    bound = timing.measure(
        lambda: held,
        built.step,
        built.samples_of,
        backend.synchronize(ready.device),
        rule,
        sync_every_step=spec.measure.sync == "step",
        group=ready.group,
    ).throughput()
    return replace(
        figures,
        compute_bound_samples_per_sec=bound.samples_per_sec,
        compute_bound_samples_per_sec_iqr=bound.samples_per_sec_iqr,
        data_path_cost=1.0 - figures.samples_per_sec / bound.samples_per_sec,
    )


def _data_ceilings(spec: RunSpec, ready: Prepared, built: Built, figures: Throughput, events: Events) -> Throughput:
    """For a workload on files: the rates the disk and the decode alone allow (ceiling.measure)."""
    from . import backend

    events.phase("data ceilings")
    synchronize = backend.synchronize(ready.device)

    def next_batch_done() -> Any:  # on the device, copied and decoded there (task.decoder=device)
        batch = built.next_batch()
        synchronize()
        return batch

    found = ceiling.measure(
        built.workload.files,
        len(built.workload.dataset),
        max(1, spec.loader.num_workers),
        2 * spec.measure.window_s,
        next_batch_done,
        built.samples_of,
    )
    return replace(
        figures,
        disk_samples_per_sec=found.disk_samples_per_sec,
        disk_mb_per_sec=found.disk_mb_per_sec,
        decode_samples_per_sec=found.decode_samples_per_sec,
    )


def describe(spec: RunSpec, ready: Prepared, built: Built) -> tuple[RunFacts, Fingerprint]:
    """What ran, as the kernel and torch have it now, and the machine."""
    from . import memory as mem
    from .fingerprint import fingerprint

    torch, device = ready.torch, ready.device
    facts = RunFacts(
        device=str(device),
        grad_accum_steps=built.accum,
        effective_batch=spec.effective_batch,
        nproc_per_node=built.nproc,
        rank=ready.rank.rank if ready.rank is not None else None,
        numa_node=numa_node(),
        allocator=topology.allocator_in_maps(procs.mapped_files()),  # mapped, so in effect
        openmp_runtime=ready.openmp_runtime,
        cpus_allowed_main=topology.cpus_allowed(),
        cpus_allowed_workers=tuple(sorted({topology.cpus_allowed(p) or "" for p in mem.tree(os.getpid())[1:]})),
        epoch_samples=built.epoch_samples,
        stored_samples=len(built.workload.dataset),
        convolutional=bool(built.workload.convolutional),  # the sweep learns whether channels_last means anything
        # the global flags as torch has them now: what the run really ran with
        cudnn_benchmark_in_effect=bool(torch.backends.cudnn.benchmark),
        flush_denormal_in_effect=ready.flush_denormal,
        tf32_in_effect=bool(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32),
        cuda_initialized_at_start=ready.cuda_at_start,
    )
    return facts, fingerprint(device, len(ready.machine_cores))


def peak_memory(ready: Prepared, peak: Any) -> Memory:
    """The process tree's peak RSS as sampled, and CUDA's max allocated: the device's is the figure."""
    torch, device = ready.torch, ready.device
    rss = peak.peak_bytes / 2**20
    cuda = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return Memory(
        peak_memory_mb=cuda or rss,
        peak_rss_mb=rss,
        cuda_max_allocated_mb=cuda,
        dataloader_processes=peak.peak_workers,
        process_threads_peak=peak.peak_threads,
    )


def measure_one(spec: RunSpec, events: Events, rank: Rank | None = None) -> RunResult:
    """Measure in this process: alone, or as one `rank` of a DistributedDataParallel group."""
    from .memory import PeakRSS

    started = time.perf_counter()
    events.phase("import")
    ready = prepare(spec, rank, started)
    with PeakRSS() as peak:
        events.phase("build")
        built = build(spec, ready)
        cache = page_cache.prepare(spec.measure.page_cache, built.workload.files)
        if cache is not None and cache.page_cache == PageCache.cold:  # cold in every epoch, not the first alone
            files = built.workload.files
            built.stream.before_epoch = lambda: page_cache.evict(files)
        measuring = time.perf_counter()
        timed = time_windows(spec, ready, built, events)
        figures = extras(spec, ready, built, timed.throughput, events)
        # where the run's time went besides measuring (the process start is wall_s less these)
        timing_ = replace(
            timed.timing,
            import_s=ready.import_s,
            build_s=measuring - started - ready.import_s,
            measure_s=time.perf_counter() - measuring,
        )
        figures, timing_ = jobtime.with_startup(figures, timing_, measuring - started, spec.measure.job_samples)
        built.stream.close()  # the DataLoader workers shut down before the last memory sample
    facts, machine = describe(spec, ready, built)
    if cache is not None:
        facts = replace(
            facts,
            page_cache=cache.page_cache,
            data_files=cache.files,
            data_bytes=cache.bytes,
            memory_available_bytes=cache.memory_available_bytes,
            data_cached_at_start=cache.cached_at_start,
        )
    measurement = Measurement(figures, timing_, peak_memory(ready, peak), timed.utilization, facts)
    reason = pruned_reason(figures, Rule.of(spec.measure, trial=spec.trial)) if figures.pruned else None
    return RunResult(Status.PRUNED if figures.pruned else Status.OK, reason, measurement, machine)
