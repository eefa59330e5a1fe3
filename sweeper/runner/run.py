"""One measured run of a composed config: validate, run isolated, write result.json."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from .. import topology
from ..errors import DiskFull, is_disk_full
from ..protocol import thread_env
from ..result import RunResult
from ..spec import RunSpec
from ..validation import check_command_here, check_config
from .isolation import run_isolated

RESULT_FILE = "result.json"
WORKER_LOG = "worker.log"


def preload_modules(spec: RunSpec) -> list[str]:
    """What a forked trial's zygote imports besides torch and torchvision: the task factory
    ("module:function", looked up as the worker does)."""
    factory = str(spec.factory or "")
    return [factory] if ":" in factory else []


def allocator_env(allocator: str) -> dict[str, str]:
    """LD_PRELOAD for backend.allocator (before anything the run already preloads)."""
    library = topology.allocator_library(allocator)
    if library is None:
        return {}
    return {"LD_PRELOAD": " ".join(p for p in (library, os.environ.get("LD_PRELOAD", "")) if p)}


def start_env_of(allocator: str, omp_bind: str, kmp_blocktime: int | None) -> dict[str, str]:
    """The environment a process must start with for these knobs (read only at its start)."""
    return {**allocator_env(allocator), **topology.openmp_env(omp_bind, kmp_blocktime)}


def start_env(spec: RunSpec) -> tuple[dict[str, str], str | None]:
    """What must be in the environment when the run's process starts, and why (None: nothing
    that a fork of the sweep's plain zygote would miss; else the run is forked from a zygote
    started with it, or spawned)."""
    back = spec.backend
    preloaded = allocator_env(str(back.allocator))
    omp = topology.openmp_env(str(back.omp_bind), back.kmp_blocktime)
    why = None
    if preloaded:
        why = f"backend.allocator={back.allocator} is preloaded (LD_PRELOAD) when a process starts"
    elif omp:
        set_at_start = {"omp_bind": back.omp_bind, "kmp_blocktime": back.kmp_blocktime}
        knobs = [f"backend.{k}={v}" for k, v in set_at_start.items() if v not in (None, "default")]
        why = f"{' and '.join(knobs)} are read by OpenMP when a process starts"
    return {**preloaded, **omp}, why


def checked_spec(cfg: DictConfig) -> RunSpec:
    """The run's spec, or ConfigError naming the first bad value; called where the run runs."""
    spec = RunSpec.of(cfg)
    check_config(spec)
    check_command_here(spec)
    return spec


def measure_spec(
    spec: RunSpec,
    out_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    scheduler_job: str | None = None,
) -> RunResult:
    """Measure a checked spec; the result says what the run ended as
    (ok, oom, timeout, crash, error, invalid, pruned, interrupted); never raises for the child's
    sake. A disk too full for result.json is DiskFull, which carries the result: what was
    measured outlives it."""
    started_with, why = start_env(spec)
    isolation = str(spec.measure.isolation)
    result = run_isolated(
        spec.to_json(),
        timeout_s=float(spec.measure.timeout_s),
        log_path=out_dir / WORKER_LOG,
        env={**thread_env(spec.backend.threads), **started_with, **(env or {})},
        on_event=on_event,
        isolation=isolation,
        preload=preload_modules(spec),
        started_with=started_with,
    )
    note = f"forked from a zygote started so: {why}" if why and result.isolation == "fork" else None
    result = result.replace(
        isolation_note=note or result.isolation_note,
        scheduler_job=scheduler_job,
        config=spec.config(),
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / RESULT_FILE).write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise DiskFull(
            f"no space left on device for {out_dir / RESULT_FILE}", result.replace(job_dir=str(out_dir))
        ) from exc
    return result
