"""The child process of one measured run: `python -m sweeper.measure.worker`, spec as JSON on stdin.

The parent (sweeper.runner.isolation) has already set the thread environment; this module imports torch,
builds the workload, measures, and sends JSON-line events on $SWEEPER_EVENT_FD, the last one
the result. Exceptions become results (`oom`, `invalid`, `error`); signals are seen by the parent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import sys
import time
import traceback
from typing import Any

from .. import topology
from ..errors import InvalidConfig
from ..validation import grad_accum_steps
from ..protocol import EVENT_FD_ENV, PARENT_PID_ENV
from ..result import Status, looks_like_oom
from .lifeline import die_with_parent
from .ranks import Rank, TorchGroup, rank_cpus
from .timing import Rule


class Events:
    """JSON lines to the parent: on the inherited fd $SWEEPER_EVENT_FD, or on `path` (a rank
    opens the launcher's pipe by its /proc path), else on stdout."""

    def __init__(self, path: str | None = None) -> None:
        fd = os.environ.get(EVENT_FD_ENV)
        if path is not None:
            self._out = open(path, "w", buffering=1)
            if path != os.devnull:  # the fd loader workers let go of (loader.start_worker)
                os.environ[EVENT_FD_ENV] = str(self._out.fileno())
        else:
            self._out = os.fdopen(int(fd), "w", buffering=1) if fd else sys.stdout

    def send(self, **event: Any) -> None:
        self._out.write(json.dumps(event, default=str) + "\n")
        self._out.flush()


# torch's words for a DataLoader worker that died (a signal, the OOM killer, a segfault)
_LOADER_DIED = re.compile(r"DataLoader worker \(pid.*?\) (is killed by signal|exited unexpectedly)")


def limit_memory(limit_gb: float | None, device_type: str) -> None:
    """measure.memory_limit_gb as an address-space limit: the run's own allocations fail beyond
    it (CPU). The CUDA libraries map far more address space than they use, so not there."""
    if limit_gb is None:
        return
    if device_type == "cuda":
        raise InvalidConfig(
            f"measure.memory_limit_gb={limit_gb} limits the address space, which the CUDA libraries need "
            "far more of than they use: set measure.memory_limit_gb=null on a GPU."
        )
    limit = int(limit_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def check_openmp(back: dict[str, Any], runtime: str) -> None:
    """backend.kmp_blocktime means something to Intel's OpenMP runtime only."""
    if back.get("kmp_blocktime") is not None and runtime != "intel":
        raise InvalidConfig(f"backend.kmp_blocktime={back['kmp_blocktime']} is read by Intel's OpenMP runtime, and this "
                            f"torch runs {'GNU libgomp' if runtime == 'gnu' else 'no OpenMP runtime'}: set "
                            "backend.kmp_blocktime=null.")


def join_group(torch: Any, device: Any, rank: Rank) -> tuple[Any, TorchGroup]:
    """This rank in the job's process group: gloo on the CPU, NCCL with one GPU per rank."""
    import torch.distributed as dist

    if device.type == "cuda":  # one GPU per rank (the launcher checked there are enough)
        device = torch.device("cuda", rank.local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    return device, TorchGroup(rank.world)


def pruned_reason(result: dict[str, Any], rule: Rule) -> str:
    """Both intervals when raced; the floor when below it."""
    own = (f"{result['samples_per_sec_ci_low']:,.1f}-{result['samples_per_sec_ci_high']:,.1f} samples/s "
           f"after {result['windows_measured']} windows")
    if result.get("stopped") == "raced":
        return f"pruned: its 95% interval {own} lies below the best trial's {rule.race[0]:,.1f}-{rule.race[1]:,.1f}"
    return (f"pruned: median {result['samples_per_sec']:,.1f} samples/s after {result['windows_measured']} "
            f"windows is below {rule.prune_below:,.1f}")


def _cuda_uuid(torch: Any, device: Any) -> str | None:
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return str(uuid) if uuid is not None else None


def run(spec: dict[str, Any], events: Events) -> dict[str, Any]:
    """The measured run: this process, or the ranks of a data-parallel run it launches."""
    if int((spec.get("dist") or {}).get("nproc_per_node") or 1) > 1:
        from .ranks import launch

        return launch(spec, events)
    return measure_one(spec, events)


def measure_one(spec: dict[str, Any], events: Events, rank: Rank | None = None) -> dict[str, Any]:
    """Measure in this process: alone, or as one `rank` of a DistributedDataParallel group."""
    started = time.perf_counter()
    if spec.get("cwd") and spec["cwd"] not in sys.path:
        sys.path.insert(0, spec["cwd"])  # the user's own workload modules
    events.send(event="phase", phase="import")
    import torch

    from . import backend, loader, memory, timing, utilization
    from .fingerprint import fingerprint
    from .steps import make_step
    from .workload import build_workload

    imported = time.perf_counter()
    # a forked trial inherits no CUDA context: the zygote never creates one
    cuda_at_start = bool(torch.cuda.is_initialized())
    task, load, back, meas = spec["task"], spec["loader"], spec["backend"], spec["measure"]
    backend.apply_threads(back["threads"], back["interop_threads"])
    machine_cores = sorted(os.sched_getaffinity(0))
    own_cores = rank_cpus(rank, machine_cores) if rank is not None else tuple(machine_cores)
    placement = topology.place(back.get("affinity", "none"), own_cores, back["threads"], int(load["num_workers"]))
    if placement is not None:
        topology.pin(placement.compute)  # before any thread starts: they inherit it
        if back["threads"] is None:
            torch.set_num_threads(len(placement.compute))  # one compute thread per pinned core
    device = backend.resolve_device(back["device"])
    group = None
    if rank is not None:
        device, group = join_group(torch, device, rank)
    limit_memory(meas.get("memory_limit_gb"), device.type)
    with open("/proc/self/maps") as maps:  # torch is imported: its OpenMP runtime is mapped
        openmp_runtime = topology.openmp_runtime(maps.read())
    check_openmp(back, openmp_runtime)
    backend.check_precision(device, back["precision"])
    backend.apply_cuda_flags(back["cudnn_benchmark"], back["tf32"])
    training = task["mode"] == "train"

    with memory.PeakRSS() as peak:
        events.send(event="phase", phase="build")
        torch.manual_seed(0)
        workload = build_workload(task)
        model = workload.model.to(device)
        if back["channels_last"]:
            model = model.to(memory_format=torch.channels_last)
        model.train(training)
        if rank is not None:  # as a data-parallel script wraps it: before compiling
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        compiled = backend.maybe_compile(model, back["compile"])
        nproc = rank.world if rank is not None else 1
        accum = grad_accum_steps(spec.get("train"), int(load["batch_size"]), nproc) if training else 1
        step = make_step(workload, compiled, device, back["precision"], training, task.get("lr") or 0.01, accum,
                         no_sync=getattr(model, "no_sync", None))
        data = loader.make_loader(workload, load, device, training, task.get("epoch_samples"),
                                  placement.loader if placement is not None else None,
                                  shard=(rank.rank, rank.world) if rank is not None else None)
        non_blocking = bool(load["pin_memory"]) and device.type == "cuda"
        stream = loader.BatchStream(data)
        sync = backend.synchronize(device)
        sync_every_step = meas.get("sync", "window") == "step"
        monitors: list[timing.Monitor] = [utilization.CpuMonitor()]
        if device.type == "cuda":
            gpu = utilization.nvml_monitor(_cuda_uuid(torch, device))
            monitors += [gpu] if gpu is not None else []

        def next_micro_batch() -> Any:
            return loader.to_device(stream(), device, non_blocking, back["channels_last"])

        def next_batch() -> Any:  # with accumulation: the micro-batches of one optimizer step
            return next_micro_batch() if accum == 1 else [next_micro_batch() for _ in range(accum)]

        def samples_of(batch: Any) -> int:
            return loader.batch_size_of(batch) if accum == 1 else sum(map(loader.batch_size_of, batch))

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        events.send(event="phase", phase="measure")
        rule = Rule.of(meas, int(load["num_workers"]))
        built = time.perf_counter()
        timings = timing.measure(
            next_batch,
            step,
            samples_of,
            sync,
            rule,
            sync_every_step=sync_every_step,
            step_timer=backend.step_timer(device),
            monitors=monitors,
            epochs_started=lambda: stream.epochs_started,
            on_window=lambda i, rate: events.send(
                event="window", phase=f"window {i + 1}", index=i, samples_per_sec=rate
            ),
            group=group,
        )
        result: dict[str, Any] = {
            "status": Status.PRUNED if timings.pruned else Status.OK,
            **timings.summary(),
            # where a trial's wall time goes besides measuring (process start is wall_s - these)
            "import_s": imported - started,
            "build_s": built - imported,
            "measure_s": time.perf_counter() - built,
        }
        # where the run and its loader workers were allowed to run, as the kernel says
        result["cpus_allowed_main"] = topology.cpus_allowed()
        result["cpus_allowed_workers"] = sorted({topology.cpus_allowed(p) or "" for p in memory.tree(os.getpid())[1:]})
        # what the optimizer saw: samples/sec counts samples of optimizer progress either way
        result["grad_accum_steps"] = accum
        result["effective_batch"] = int(load["batch_size"]) * accum * nproc
        result["nproc_per_node"] = nproc
        if rank is not None:
            result["rank"] = rank.rank
        result["epoch_samples"] = len(data.dataset)
        result["stored_samples"] = len(workload.dataset)
        if load["num_workers"] > 0 and not load["persistent_workers"] and not timings.pruned:
            # every epoch end starts the workers again: its cost measured once, on its own
            events.send(event="phase", phase="epoch_restart")
            result = timing.with_epoch_restarts(result, result["epoch_samples"], stream.restart_cost_s())
        if timings.pruned:
            result["reason"] = pruned_reason(result, rule)
        if meas.get("compute_bound") and not timings.pruned:
            events.send(event="phase", phase="compute_bound")
            held = next_batch()  # one batch kept on the device: no loader in the loop
            bound = timing.measure(
                lambda: held,
                step,
                samples_of,
                sync,
                dataclasses.replace(rule, warmup_steps=1, prune_below=None, race=None),
                sync_every_step=sync_every_step,
                group=group,
            ).summary()
            result["compute_bound_samples_per_sec"] = bound["samples_per_sec"]
            result["compute_bound_samples_per_sec_iqr"] = bound["samples_per_sec_iqr"]
            result["data_path_cost"] = 1.0 - result["samples_per_sec"] / bound["samples_per_sec"]
        del stream, data  # shut the DataLoader workers down before the last memory sample

    result["peak_rss_mb"] = peak.peak_bytes / 2**20
    result["process_threads_peak"] = peak.peak_threads
    result["cuda_initialized_at_start"] = cuda_at_start
    result["affinity"] = back.get("affinity", "none")
    with open("/proc/self/maps") as maps:
        result["allocator"] = topology.allocator_in_maps(maps.read())  # mapped, so in effect
    result["openmp_runtime"] = openmp_runtime
    result["omp_bind"] = back.get("omp_bind", "default")
    result["dataloader_processes"] = peak.peak_workers
    result["cuda_max_allocated_mb"] = (
        torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    )
    result["peak_memory_mb"] = result["cuda_max_allocated_mb"] or result["peak_rss_mb"]
    result["device"] = str(device)
    # the global flags as torch has them now: what the run really ran with
    result["cudnn_benchmark_in_effect"] = bool(torch.backends.cudnn.benchmark)
    result["tf32_in_effect"] = bool(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32)
    # the sweep learns from the workload itself whether channels_last means anything
    result["convolutional"] = bool(workload.convolutional)
    result["fingerprint"] = fingerprint(device, len(machine_cores))
    return result


def outcome(spec: dict[str, Any], events: Events, rank: Rank | None = None) -> dict[str, Any]:
    """The run's result, or its failure as a result (status and reason): never raises."""
    try:
        return run(spec, events) if rank is None else measure_one(spec, events, rank)
    except InvalidConfig as exc:
        return {"status": Status.INVALID, "reason": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - every failure is data for the parent
        message = f"{type(exc).__name__}: {exc}".strip()
        traceback.print_exc()
        if isinstance(exc, MemoryError) or looks_like_oom(message):
            status = Status.OOM
        elif _LOADER_DIED.search(message):
            status = Status.CRASH  # the parent makes it oom when the kernel's OOM killer did it
        else:
            status = Status.ERROR
        return {"status": status, "reason": message.splitlines()[0][:500] if message else status}


def serve(spec: dict[str, Any], events: Events) -> None:
    """Measure `spec` and send the result (or the failure) as the last event; never returns."""
    result = outcome(spec, events)
    events.send(event="result", **result)
    # Skip interpreter teardown: DataLoader workers and CUDA contexts can hang it; the parent
    # kills the process group after the result anyway.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or 0))
    events = Events()
    try:
        spec = json.load(sys.stdin)
    except ValueError as exc:
        events.send(event="result", status=Status.ERROR, reason=f"unreadable spec: {exc}")
        os._exit(0)
    serve(spec, events)


if __name__ == "__main__":
    main()
