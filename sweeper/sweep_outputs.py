"""What a sweep leaves in its directory: trials table, winner YAML and command, Hydra-style results."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from optuna.trial import FrozenTrial

from .history import config_of, override_value, to_overrides

# Config groups of conf/: an override `task=x` selects an option, it does not set a value.
GROUPS = ("task", "loader", "backend", "measure")
FINGERPRINT_COLUMNS = ("hostname", "cpu", "cpus_available", "gpu", "torch", "cuda")
# Per-run overrides the sweeper itself adds; a winner does not carry them.
SWEEP_ONLY = ("measure.prune_below", "measure.timeout_s")


def trial_row(trial: FrozenTrial) -> dict[str, Any]:
    attrs = trial.user_attrs
    row: dict[str, Any] = {
        "number": trial.number,
        "state": trial.state.name,
        "status": attrs.get("status"),
        "reason": attrs.get("reason"),
        "baseline": bool(attrs.get("baseline", False)),
        "reused_from": attrs.get("reused_from"),
    }
    row.update(config_of(trial))
    row.update({k: v for k, v in attrs.get("metrics", {}).items()})
    fingerprint = json.loads(attrs.get("fingerprint", "{}"))
    row.update({f"fp_{k}": fingerprint.get(k) for k in FINGERPRINT_COLUMNS})
    row["hardware_class"] = attrs.get("hardware_class")
    row["fixed_overrides"] = " ".join(attrs.get("fixed_overrides", []))
    row["sweep_dir"] = attrs.get("sweep_dir")
    row["duration_s"] = trial.duration.total_seconds() if trial.duration else None
    return row


def trials_table(trials: Sequence[FrozenTrial]) -> pd.DataFrame:
    df = pd.DataFrame([trial_row(t) for t in trials])
    if "reused_from" in df:
        df["reused_from"] = df["reused_from"].astype("Int64")
    return df


def write_table(df: pd.DataFrame, out_dir: Path) -> None:
    df.to_csv(out_dir / "trials.csv", index=False)
    # Parquet needs one type per column: knobs such as threads mix null, ints and strings
    df.astype({c: "string" for c in df.columns if df[c].dtype == object}).to_parquet(
        out_dir / "trials.parquet", index=False
    )


def _split_fixed(fixed: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Group selections (task=image_classification) and values (task.model=resnet50)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups: dict[str, str] = {}
    values: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(list(fixed)):
        key = override.key_or_group
        if key.startswith("hydra") or key in SWEEP_ONLY or key == "search":
            continue
        if key in GROUPS:
            groups[key] = override.value()
        else:
            values[key] = override.value()
    return groups, values


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for dotted, value in sorted(flat.items()):
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def winner_yaml(fixed: Sequence[str], knobs: dict[str, Any], note: str) -> str:
    """A primary config for `python -m sweeper --config-dir DIR --config-name winner`."""
    groups, values = _split_fixed(fixed)
    defaults: list[Any] = ["config", *({f"override {g}": v} for g, v in groups.items()), "_self_"]
    body = {"defaults": defaults, **_nest({**values, **knobs})}
    header = f"# @package _global_\n# {note}\n"
    return header + yaml.safe_dump(body, sort_keys=False)


def winner_command(fixed: Sequence[str], knobs: dict[str, Any]) -> str:
    groups, values = _split_fixed(fixed)
    parts = [f"{g}={override_value(v)}" for g, v in groups.items()]
    parts += to_overrides({**values, **knobs})
    return "python -m sweeper " + " ".join(shlex.quote(p) for p in parts)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def optimization_results(
    name: str, objectives: Sequence[str], best: Sequence[FrozenTrial], winner: FrozenTrial | None
) -> dict[str, Any]:
    """Hydra Optuna sweeper's file: best_params/best_value, or the Pareto solutions."""
    if len(objectives) == 1 and winner is not None:
        return {
            "name": name,
            "best_params": config_of(winner),
            "best_value": _clean(winner.values[0]) if winner.values else None,
        }
    return {
        "name": name,
        "objectives": list(objectives),
        "winner": winner.number if winner else None,
        "solutions": [
            {"number": t.number, "params": config_of(t), "values": [_clean(v) for v in t.values or []]}
            for t in best
        ],
    }
