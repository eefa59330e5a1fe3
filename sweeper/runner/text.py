"""A measured run as text a person reads in a terminal or a cron log (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import BackendConf
from ..datapath import ceiling_words, data_words
from ..measurement import Measurement, Memory, RunFacts, Stopped, Throughput, Timing
from ..result import RunResult, Status
from ..spec import CompileMode, RunSpec

# why the windows stopped, as the summary line says it
_STOPPED = {
    Stopped.PRECISE: "precise enough",
    Stopped.MAX_WINDOWS: "at the window maximum",
    Stopped.RACED: "below the best",
    Stopped.BEHIND: "behind the best",
    Stopped.PRUNED: "below the floor",
    Stopped.DRIFTING: "still drifting at the cap (measure.max_s)",
    Stopped.TIME_LIMIT: "at the run's time limit (measure.timeout_s): the figure is of the windows it measured",
}


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def describe_config(spec: RunSpec) -> str:
    """The run in one line: what it runs, and the knobs that are not the defaults."""
    t, lo, b = spec.task, spec.loader, spec.backend
    threads = f"threads {b.threads if b.threads is not None else 'default'}"
    if spec.is_script:  # a script: its command says what it runs; sweeper adds what acts from outside
        parts = [f"your script ({spec.mode}): {t['command']}", f"device {b.device}", threads]
        return ", ".join(_with_ranks(parts, spec) + _outside(b))
    parts = [
        f"{t['name']} {spec.mode}",
        f"device {b.device}",
        str(b.precision),
        f"batch {lo.batch_size}",
        f"{lo.num_workers} workers",
        threads,
    ]
    if b.channels_last:
        parts.append("channels_last")
    if b.flush_denormal:
        parts.append("subnormals flushed")
    if b.compile != CompileMode.off:
        parts.append(f"compile={b.compile}")
    return ", ".join(_with_ranks(parts, spec) + _outside(b))


def _with_ranks(parts: list[str], spec: RunSpec) -> list[str]:
    if spec.nproc <= 1:
        return parts
    bound = ", NUMA-bound" if spec.backend.numa != "none" else ""
    return [parts[0], f"{spec.nproc} ranks{bound}", *parts[1:]]


def _outside(b: BackendConf) -> list[str]:
    """The process-level knobs, where they are not the defaults."""
    parts = []
    if b.affinity != "none":
        parts.append(f"affinity {b.affinity}")
    if b.allocator != "default":
        parts.append(str(b.allocator))
    if b.omp_bind != "default":
        parts.append(f"OpenMP bind {b.omp_bind}")
    if b.kmp_blocktime is not None:
        parts.append(f"KMP_BLOCKTIME {b.kmp_blocktime}")
    return parts


def _throughput_row(f: Throughput) -> str:
    interval = f.interval
    return (
        f"{_num(f.samples_per_sec)}  ("
        + (
            f"95% interval {_num(interval[0])}-{_num(interval[1])}, "
            if interval is not None
            else "too few windows for an interval, "
        )
        + f"IQR {100 * f.samples_per_sec_rel_iqr:.1f}% over {f.windows_measured} windows"
        + (f", {_STOPPED[f.stopped]}" if f.stopped in _STOPPED else "")
        + (", noisy" if f.noisy else "")
        + ")"
    )


def _epoch_row(f: Throughput, run: RunFacts) -> str:
    epoch = run.epoch_samples or 0
    text = f"{epoch:,} samples" + (
        f" ({run.stored_samples:,} stored, repeating)" if run.stored_samples and run.stored_samples != epoch else ""
    )
    text += f"; {f.epoch_ends_measured} epoch ends inside the windows"
    if f.epoch_restart_s is not None:
        how = "in the windows it fell in" if f.epoch_restart_in_windows_s is not None else "measured once, apart"
        text += f"; each epoch end restarts the workers: {f.epoch_restart_s:.2f} s ({how}"
        steady = f.samples_per_sec_steady
        text += (
            f"; samples/sec counts it once per epoch, {_num(steady)} between restarts)"
            if steady and steady != f.samples_per_sec
            else ")"
        )
    return text


def _memory_row(m: Memory, run: RunFacts) -> str:
    processes = f"{run.nproc_per_node} ranks" if run.nproc_per_node > 1 else "process"
    text = f"{m.peak_rss_mb:,.0f} MB RSS ({processes} + {m.dataloader_processes} loader processes)"
    if m.cuda_max_allocated_mb is not None:
        text += f", CUDA max allocated {m.cuda_max_allocated_mb:,.0f} MB"
    return text


def _warmup_row(t: Timing, script: bool) -> str:
    """How long the warm-up took, whether it ended steady, and what its first step paid."""
    return (
        f"{t.warmup_s:.1f} s, {t.warmup_steps} steps"
        + (", steady" if t.warmup_steady else "")
        + (", ended far below the best" if t.warmup_far_below else "")
        + (f", start-up {t.startup_s:.1f} s in all" if t.startup_s is not None else "")
        + (
            f" (the script's start to its first step {t.first_step_s:.2f} s)"
            if script
            else f" (first batch {t.first_batch_wait_s:.2f} s of loader start-up, compile/autotune {t.compile_s:.2f} s)"
        )
    )


def _job_row(f: Throughput, t: Timing) -> str:
    """measure.job_samples: the job's time to finish, as start-up plus its samples at the rate."""
    return (
        f"{f.job_samples:,} samples in {f.job_time_s:,.1f} s: start-up {t.startup_s or 0.0:.1f} s, then "
        f"{_num(f.running_rate)} samples/sec (samples/sec above is the whole job's)"
    )


def _ranks_row(rates: Sequence[float | None]) -> str:
    """Each data-parallel rank's own figure beside the group's total."""
    each = ", ".join(_num(r) for r in rates if r is not None)
    return f"{len(rates)} data-parallel ranks: {each} samples/sec each; the total above is theirs in common windows"


def _data_path_rows(f: Throughput, run: RunFacts) -> list[tuple[str, str]]:
    """The files the run read and their cache state, the data path's ceilings, the compute-only bound."""
    rows = []
    if (data := data_words(run)) is not None:
        rows.append(("data", data))
    if (ceilings := ceiling_words(f)) is not None:
        rows.append(("data path", ceilings))
    if f.compute_bound_samples_per_sec is not None:
        rows.append(
            (
                "compute-only",
                f"{_num(f.compute_bound_samples_per_sec)} samples/sec on a batch held in "
                f"memory: the data path costs {100 * (f.data_path_cost or 0.0):.0f}%",
            )
        )
    return rows


def format_result(result: RunResult) -> str:
    """The terminal summary of a run: what to know before its figures (pruned, under load, the
    script), its figures, where step time goes, memory, the machine."""
    status, measured = result.status, result.measurement
    if status not in (Status.OK, Status.PRUNED) or measured is None:
        return f"{status}: {result.reason or ''}"
    run = measured.run
    rows = [
        *([("pruned", result.reason or "")] if status == Status.PRUNED else []),
        *(
            [("under load", f"this figure was taken under load: {measured.utilization.load_note}")]
            if measured.utilization.under_load
            else []
        ),
        *([("script", " ".join(run.command))] if run.command else []),
        *_figure_rows(measured),
    ]
    if (fp := result.fingerprint) is not None:
        per_rank = " per rank" if run.nproc_per_node > 1 else ""
        rows.append(("machine", f"{fp.describe()}; torch threads {fp.threads or 'default'}{per_rank}"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


def _figure_rows(measured: Measurement) -> list[tuple[str, str]]:
    """The run's figure and how far to trust it, then where its step time and memory go."""
    f, t, m, u, run = measured.throughput, measured.timing, measured.memory, measured.utilization, measured.run
    rows = [("samples/sec", _throughput_row(f))]
    if (drift := f.drift_note) is not None:
        rows.append(("still changing", drift))
    if f.job_samples is not None and f.job_time_s is not None:
        rows.append(("whole job", _job_row(f, t)))
    if f.rank_samples_per_sec:
        rows.append(("ranks", _ranks_row(f.rank_samples_per_sec)))
    rows += [
        (
            "step time",
            f"p50 {t.step_time_p50_ms:.2f} ms   p95 {t.step_time_p95_ms:.2f} ms   p99 {t.step_time_p99_ms:.2f} ms",
        ),
        (
            "waiting for data",
            f"{100 * t.data_wait_fraction:.0f}% of step time: {t.bottleneck}"
            if t.bottleneck != "not reported"
            else "not reported (sweeper.track reports it; sweeper.step and the printed line do not)",
        ),
    ]
    if t.device_busy_fraction is not None:
        rows.append(
            (
                "device busy",
                f"{100 * t.device_busy_fraction:.0f}% of the windows "
                f"(device step p50 {t.device_step_time_p50_ms or 0.0:.2f} ms, CUDA events)",
            )
        )
    if used := u.describe():
        rows.append(("utilization", used))
    if run.epoch_samples is not None:
        rows.append(("epoch", _epoch_row(f, run)))
    rows += _data_path_rows(f, run)
    return [*rows, ("peak memory", _memory_row(m, run)), ("warm-up", _warmup_row(t, bool(run.command)))]
