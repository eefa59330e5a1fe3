"""A user's training script measured in stages, as measure_one measures sweeper's own loop:
start it with the knobs sweeper applies from outside (threads, cores, allocator, OpenMP, ranks
under torch's elastic launcher), time its steps until the figure is known, stop it, describe
what ran.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import jobtime, procs, topology
from ..command import PYTHONS, knob_env
from ..machine import Fingerprint
from ..measurement import Measurement, Memory, RunFacts
from ..protocol import FIRST_STEP_ENV, LOADER_CPUS_ENV, seconds_until_killed
from ..result import RunResult, Status
from ..spec import RunSpec
from .events import Events
from .group import rank_threads
from .rule import Rule
from .script import Script, ScriptFailed, ScriptSteps, first_step_deadline

if TYPE_CHECKING:  # imported where a run measures: they read the machine's monitors
    from .memory import PeakRSS
    from .utilization import CpuMonitor, NvmlProcessMemory

BIND_MODULE = "sweeper.measuring.bind"


@dataclass(frozen=True)
class Launch:
    """How the script is started: its words (under the launcher for ranks), the environment
    sweeper adds, and what the child does before exec (its cores, its parent's death)."""

    words: tuple[str, ...]
    env: dict[str, str]
    preexec: Callable[[], None]
    user_words: tuple[str, ...]


def first_step_settings(spec: RunSpec) -> dict[str, Any]:
    """What sweeper.track applies inside the script at its first step (command.AT_FIRST_STEP, and
    the threads of a single process): the values away from PyTorch's defaults, so that a default
    leaves the script's own setting as it is."""
    b = spec.backend
    settings: dict[str, Any] = {
        name: True
        for name, on in (("flush_denormal", b.flush_denormal), ("cudnn_benchmark", b.cudnn_benchmark), ("tf32", b.tf32))
        if on
    }
    if b.threads is not None and spec.nproc == 1:  # ranks get theirs from OMP_NUM_THREADS, per rank
        settings["threads"] = b.threads
    return settings


def launch(spec: RunSpec) -> Launch:
    back, nproc = spec.backend, spec.nproc
    words = list(spec.argv)
    if words[0] in PYTHONS:
        words[0] = sys.executable  # the Python that runs sweeper: torch and sweeper are there
    env = knob_env(spec.to_json())
    if settings := first_step_settings(spec):
        env[FIRST_STEP_ENV] = json.dumps(settings)
    if back.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the script sees no GPU
    cores = list(topology.machine_cpus())
    compute: tuple[int, ...] | None = None
    if nproc > 1:
        threads = rank_threads(spec, cores)
        if threads is not None:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        bind = back.affinity != "none" or back.numa != "none"
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "--no-python",
            *([sys.executable, "-m", BIND_MODULE] if bind else []),
        ]
        started = [*launcher, *words]
    else:
        placement = topology.place(str(back.affinity), cores, back.threads, spec.loader.num_workers)
        if placement is not None:
            compute = placement.compute
            env[LOADER_CPUS_ENV] = ",".join(map(str, placement.loader))
            if back.threads is None:
                env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(len(compute))
        started = words

    def preexec() -> None:
        procs.prctl(procs.PR_SET_PDEATHSIG, 9)  # SIGKILL when the measuring process dies
        if compute is not None:
            topology.pin(compute)

    return Launch(tuple(started), env, preexec, spec.argv)


def _run_facts(spec: RunSpec, script: Script, words: tuple[str, ...]) -> RunFacts:
    """What ran, read from the script's process while it still runs (its maps, its cores)."""
    from . import memory

    tree = memory.tree(script.pid)
    maps = procs.mapped_files(script.pid)
    return RunFacts(
        device=str(spec.backend.device),
        grad_accum_steps=spec.train.grad_accum_steps,
        effective_batch=spec.train.effective_batch,
        nproc_per_node=spec.nproc,
        allocator=topology.allocator_in_maps(maps),
        openmp_runtime=topology.openmp_runtime(maps),
        cpus_allowed_main=topology.cpus_allowed(script.pid),
        cpus_allowed_workers=tuple(sorted({topology.cpus_allowed(p) or "" for p in tree[1:]})),
        command=words,
        applied_in_script=script.tracked,
    )


def _machine(spec: RunSpec, cores: int) -> Fingerprint:
    """The machine as the probe sees it, asked once the script has stopped (a CUDA context of
    ours must not sit beside the script's)."""
    from .backend import resolve_device
    from .fingerprint import fingerprint

    threads = rank_threads(spec, topology.machine_cpus())  # as launch() set them
    return replace(fingerprint(resolve_device(str(spec.backend.device)), cores), threads=threads, interop_threads=None)


def _memory(peak: PeakRSS, gpu_memory: NvmlProcessMemory | None) -> Memory:
    """The script's peak memory: on a GPU what its processes held there (NVML), else the peak
    resident memory of its process tree, loader workers included."""
    cuda = gpu_memory.peak_mb if gpu_memory is not None and gpu_memory.peak_mb else None
    rss = peak.peak_bytes / 2**20
    return Memory(
        peak_memory_mb=cuda or rss, peak_rss_mb=rss, cuda_max_allocated_mb=cuda, dataloader_processes=peak.peak_workers
    )


def _cpu_monitor(pid: int, nproc: int) -> CpuMonitor:
    """The script's CPU over the windows: its process and its loader workers; under the launcher
    for ranks, the ranks are the training processes."""
    from . import utilization

    read = utilization.ranks_cpu_seconds if nproc > 1 else utilization.cpu_seconds
    return utilization.CpuMonitor(pid, read=read)


def measure_script(spec: RunSpec, events: Events) -> RunResult:
    """Start the script, time its steps as sweeper's own loop is timed, stop it; its outcome."""
    from . import timing, utilization
    from .memory import PeakRSS

    meas = spec.measure
    how = launch(spec)
    cores = len(topology.machine_cpus())
    events.phase("start script")
    script = Script(how.words, how.env, spec.cwd, how.preexec)
    steps = ScriptSteps(
        script,
        first_step_deadline(script.started, float(meas.timeout_s)),
        on_first=lambda: events.phase("warm-up (the script's steps have begun)"),
    )
    gpu_memory = utilization.nvml_process_memory(lambda: procs.tree(script.pid))
    try:
        with PeakRSS(pid=script.pid) as peak:
            gpu = utilization.nvml_visible_monitor() if spec.backend.device != "cpu" else None
            monitors: list[timing.Monitor] = utilization.monitors_for(
                meas.foreign_cpu_max_pct, _cpu_monitor(script.pid, spec.nproc), gpu, gpu_memory, loop_apart=True
            )
            began = time.perf_counter()
            t = timing.measure(
                steps.next_batch,
                steps.step,
                steps.samples_of,
                lambda: None,
                Rule.of(meas, spec.loader.num_workers, trial=spec.trial),
                monitors=monitors,
                on_window=events.window,
                clock=steps.clock,
                time_left=seconds_until_killed(),
            )
            facts = _run_facts(spec, script, how.user_words)
    except ScriptFailed as failed:
        script.stop()
        return RunResult(failed.status, str(failed))
    script.stop()
    timing_ = replace(t.timing(), measure_s=time.perf_counter() - began)
    if not steps.wait_known:
        timing_ = replace(timing_, bottleneck="not reported")
    # the script's own start (its imports, its build) lies inside the warm-up: it counts from
    # the script's start, as its clock does
    figures, timing_ = jobtime.with_startup(t.throughput(), timing_, 0.0, meas.job_samples)
    measurement = Measurement(figures, timing_, _memory(peak, gpu_memory), t.utilization, facts)
    machine = _machine(spec, cores)
    if figures.pruned:
        from .stages import pruned_reason

        return RunResult(Status.PRUNED, pruned_reason(figures, Rule.of(meas, trial=spec.trial)), measurement, machine)
    return RunResult(Status.OK, None, measurement, machine)
