"""A measured run as text a person reads in a terminal or a cron log (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..result import RunResult, Status


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
            f"{_num(result['samples_per_sec'])}  (IQR {100 * result['samples_per_sec_rel_iqr']:.1f}% "
            f"over {result['windows_measured']} windows"
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
    if "compute_bound_samples_per_sec" in result:
        rows.append(
            (
                "compute-only",
                f"{_num(result['compute_bound_samples_per_sec'])} samples/sec on a batch held in "
                f"memory: the data path costs {100 * result['data_path_cost']:.0f}%",
            )
        )
    memory = f"{result['peak_rss_mb']:,.0f} MB RSS (process + {result['dataloader_processes']} loader processes)"
    if result.get("cuda_max_allocated_mb") is not None:
        memory += f", CUDA max allocated {result['cuda_max_allocated_mb']:,.0f} MB"
    rows += [
        ("peak memory", memory),
        (
            "warm-up",
            f"{result['warmup_s']:.1f} s, {result['warmup_steps']} steps "
            f"(first batch {result.get('first_batch_wait_s', 0.0):.2f} s of loader start-up, "
            f"compile/autotune {result['compile_s']:.2f} s)",
        ),
        (
            "machine",
            f"{fp.get('cpu')}, {fp.get('threads')} threads of {fp.get('cpus_available')} cores, "
            f"{fp.get('gpu') or 'no GPU'}, torch {fp.get('torch')}"
            + (f", CUDA {fp['cuda']}" if fp.get("cuda") else ""),
        ),
    ]
    if status == Status.PRUNED:
        rows.insert(0, ("pruned", run.reason or ""))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)
