"""A measured run as text a person reads in a terminal or a cron log (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..result import RunResult, Status


# why the windows stopped, as the summary line says it
_STOPPED = {"precise": "precise enough", "max windows": "at the window maximum", "raced": "below the best",
            "pruned": "below the floor"}


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def describe_config(cfg: Mapping[str, Any]) -> str:
    t, lo, b = cfg["task"], cfg["loader"], cfg["backend"]
    parts = [
        f"{t['name']} {t['mode']}",
        f"device {b['device']}",
        b["precision"],
        f"batch {lo['batch_size']}",
        f"{lo['num_workers']} workers",
        f"threads {b['threads'] if b['threads'] is not None else 'default'}",
    ]
    if b["channels_last"]:
        parts.append("channels_last")
    if b.get("affinity", "none") != "none":
        parts.append(f"affinity {b['affinity']}")
    if b.get("allocator", "default") != "default":
        parts.append(b["allocator"])
    if b.get("omp_bind", "default") != "default":
        parts.append(f"OpenMP bind {b['omp_bind']}")
    if b.get("kmp_blocktime") is not None:
        parts.append(f"KMP_BLOCKTIME {b['kmp_blocktime']}")
    nproc = (cfg.get("dist") or {}).get("nproc_per_node", 1)
    if nproc > 1:
        parts.insert(1, f"{nproc} ranks" + (", NUMA-bound" if b.get("numa", "none") != "none" else ""))
    if str(b["compile"]) not in ("off", "False"):
        parts.append(f"compile={b['compile']}")
    return ", ".join(parts)


def format_result(run: RunResult) -> str:
    status = run.status
    if status not in (Status.OK, Status.PRUNED):
        return f"{status}: {run.reason or ''}"
    fp = run.fingerprint or {}
    result = run.figures
    rows = [
        (
            "samples/sec",
            f"{_num(result['samples_per_sec'])}  ("
            + (f"95% interval {_num(result['samples_per_sec_ci_low'])}-{_num(result['samples_per_sec_ci_high'])}, "
               if result.get("samples_per_sec_ci_low") is not None else "")
            + f"IQR {100 * result['samples_per_sec_rel_iqr']:.1f}% over {result['windows_measured']} windows"
            + (f", {_STOPPED[result['stopped']]}" if result.get("stopped") in _STOPPED else "")
            + (", noisy" if result.get("noisy") else "")
            + ")",
        ),
        (
            "step time",
            f"p50 {result['step_time_p50_ms']:.2f} ms   p95 {result['step_time_p95_ms']:.2f} ms",
        ),
        (
            "waiting for data",
            f"{100 * result['data_wait_fraction']:.0f}% of step time: {result['bottleneck']}",
        ),
    ]
    if result.get("rank_samples_per_sec"):
        ranks = result["rank_samples_per_sec"]
        rows.insert(1, ("ranks", f"{len(ranks)} data-parallel ranks: "
                        + ", ".join(_num(r) for r in ranks if r is not None)
                        + " samples/sec each; the total above is theirs in common windows"))
    if "device_busy_fraction" in result:
        rows.append(("device busy", f"{100 * result['device_busy_fraction']:.0f}% of the windows "
                     f"(device step p50 {result['device_step_time_p50_ms']:.2f} ms, CUDA events)"))
    if "cpu_util_main_pct" in result:
        rows.append(("CPU use", f"main process {result['cpu_util_main_pct']:.0f}%, loader workers "
                     f"{result.get('cpu_util_workers_pct', 0.0):.0f}% (percent of one core, as top shows it)"))
    if "gpu_util_pct" in result:
        power = (f", power {result['gpu_power_w']:.0f} W" + (f" of {result['gpu_power_cap_w']:.0f} W cap"
                 if "gpu_power_cap_w" in result else "")) if "gpu_power_w" in result else ""
        rows.append(("GPU use", f"GPU-Util {result['gpu_util_pct']:.0f}%, memory controller "
                     f"{result.get('gpu_mem_util_pct', 0.0):.0f}%{power} (NVML)"))
    if "epoch_samples" in result:
        stored = result.get("stored_samples")
        text = f"{result['epoch_samples']:,} samples" + (
            f" ({stored:,} stored, repeating)" if stored and stored != result["epoch_samples"] else "")
        text += f"; {result.get('epoch_ends_measured', 0)} epoch ends inside the windows"
        if "epoch_restart_s" in result:
            text += f"; each epoch end restarts the workers: {result['epoch_restart_s']:.2f} s (measured once"
            steady = result.get("samples_per_sec_steady")
            text += (f"; samples/sec counts it once per epoch, {_num(steady)} between restarts)"
                     if steady and steady != result["samples_per_sec"] else ")")
        rows.append(("epoch", text))
    if "compute_bound_samples_per_sec" in result:
        rows.append(
            (
                "compute-only",
                f"{_num(result['compute_bound_samples_per_sec'])} samples/sec on a batch held in "
                f"memory: the data path costs {100 * result['data_path_cost']:.0f}%",
            )
        )
    processes = (f"{result['nproc_per_node']} ranks" if result.get("nproc_per_node", 1) > 1 else "process")
    memory = f"{result['peak_rss_mb']:,.0f} MB RSS ({processes} + {result['dataloader_processes']} loader processes)"
    if result.get("cuda_max_allocated_mb") is not None:
        memory += f", CUDA max allocated {result['cuda_max_allocated_mb']:,.0f} MB"
    rows += [
        ("peak memory", memory),
        (
            "warm-up",
            f"{result['warmup_s']:.1f} s, {result['warmup_steps']} steps"
            + (", steady" if result.get("warmup_steady") else "") + " "
            f"(first batch {result.get('first_batch_wait_s', 0.0):.2f} s of loader start-up, "
            f"compile/autotune {result['compile_s']:.2f} s)",
        ),
        (
            "machine",
            f"{fp.get('cpu')}, {fp.get('threads')} threads{' per rank' if result.get('nproc_per_node', 1) > 1 else ''} of {fp.get('cpus_available')} cores, "
            f"{fp.get('gpu') or 'no GPU'}, torch {fp.get('torch')}"
            + (f", CUDA {fp['cuda']}" if fp.get("cuda") else ""),
        ),
    ]
    if status == Status.PRUNED:
        rows.insert(0, ("pruned", run.reason or ""))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)
