"""One measured run of a composed config: validate, run isolated, write result.json."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import topology
from ..command import argv, is_script, shown
from ..protocol import thread_env
from ..result import RunResult
from ..validation import check_config
from .isolation import run_isolated

RESULT_FILE = "result.json"
WORKER_LOG = "worker.log"


def worker_spec(cfg: DictConfig) -> dict[str, Any]:
    """The plain-data part of the config the worker needs (no Hydra node)."""
    spec: dict[str, Any] = {
        key: OmegaConf.to_container(cfg[key], resolve=True, enum_to_str=True)
        for key in ("task", "loader", "backend", "measure", "train", "dist")
    }
    # the best so far, where the sweep races this run against it (config.TrialConf)
    spec["trial"] = OmegaConf.to_container(cfg.trial, resolve=True) if "trial" in cfg else {}
    if is_script(spec["task"]):  # the command's words, each with its knobs (never a shell's text)
        spec["task"]["argv"] = argv(cfg)
        spec["task"]["command"] = shown(spec["task"]["argv"])
    spec["cwd"] = os.getcwd()
    return spec


def preload_modules(task: Mapping[str, Any]) -> list[str]:
    """What a forked trial's zygote imports besides torch and torchvision: the task factory
    ("module:function", looked up as the worker does)."""
    factory = str(task.get("factory") or "")
    return [factory] if ":" in factory else []


def allocator_env(spec: Mapping[str, Any]) -> dict[str, str]:
    """LD_PRELOAD for backend.allocator (before anything the run already preloads)."""
    library = topology.allocator_library(str(spec["backend"]["allocator"]))
    if library is None:
        return {}
    return {"LD_PRELOAD": " ".join(p for p in (library, os.environ.get("LD_PRELOAD", "")) if p)}


def start_env(spec: Mapping[str, Any]) -> tuple[dict[str, str], str | None]:
    """What must be in the environment when the run's process starts, and why (None: nothing
    that a fork of the sweep's plain zygote would miss; else the run is forked from a zygote
    started with it, or spawned)."""
    back = spec["backend"]
    preloaded = allocator_env(spec)
    omp = topology.openmp_env(str(back["omp_bind"]), back["kmp_blocktime"])
    why = None
    if preloaded:
        why = f"backend.allocator={back['allocator']} is preloaded (LD_PRELOAD) when a process starts"
    elif omp:
        knobs = [f"backend.{k}={back[k]}" for k in ("omp_bind", "kmp_blocktime") if back[k] not in (None, "default")]
        why = f"{' and '.join(knobs)} are read by OpenMP when a process starts"
    return {**preloaded, **omp}, why


def checked_spec(cfg: DictConfig) -> dict[str, Any]:
    """The worker spec, or ConfigError naming the first bad value."""
    spec = worker_spec(cfg)
    check_config(spec)
    return spec


def measure_spec(
    spec: dict[str, Any],
    out_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    scheduler_job: str | None = None,
) -> RunResult:
    """Measure a checked spec; the result says what the run ended as
    (ok, oom, timeout, crash, error, invalid, pruned, interrupted); never raises for the child's sake."""
    started_with, why = start_env(spec)
    isolation = str(spec["measure"]["isolation"])
    result = run_isolated(
        spec,
        timeout_s=float(spec["measure"]["timeout_s"]),
        log_path=out_dir / WORKER_LOG,
        env={**thread_env(spec["backend"]["threads"]), **started_with, **(env or {})},
        on_event=on_event,
        isolation=isolation,
        preload=preload_modules(spec["task"]),
        started_with=started_with,
    )
    note = f"forked from a zygote started so: {why}" if why and result.isolation == "fork" else None
    result = result.replace(
        isolation_note=note or result.isolation_note,
        scheduler_job=scheduler_job,
        config={k: spec[k] for k in ("task", "loader", "backend", "train", "dist")},
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULT_FILE).write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    return result
