"""What `sweeper --help` lists, read from the schemas and conf/ so that it cannot drift from them:
the config groups with their options, and the keys a user sets (Hydra's `hydra.help.template`
in conf/config.yaml calls these through resolvers)."""

from __future__ import annotations

import textwrap
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from .config import SCHEMAS

_INDENT = " " * 18


def _wrapped(label: str, words: list[str]) -> str:
    return textwrap.fill(", ".join(words), width=100, initial_indent=f"  {label:<16}", subsequent_indent=_INDENT)


def groups_text() -> str:
    """Each config group of conf/ and its options, the default marked with *."""
    import yaml

    from .paths import config_dir
    from .preflight import group_options

    primary = yaml.safe_load((Path(config_dir()) / "config.yaml").read_text())
    defaults = {k: v for entry in primary["defaults"] if isinstance(entry, dict) for k, v in entry.items()}
    lines = []
    for group in ("task", "search"):
        lines.append(_wrapped(group, [o + ("*" if o == defaults[group] else "") for o in group_options(group)]))
    lines.append(_wrapped("hydra/launcher", ["basic*", "submitit_slurm", "submitit_local (the [slurm] extra)"]))
    return "\n".join(lines)


def _leaves(schema: Any, prefix: str = "") -> list[str]:
    """A dataclass's field names, nested ones dotted (search.staged)."""
    names = []
    for f in fields(schema):
        if f.name.startswith("_"):
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default
        if is_dataclass(default):
            names += _leaves(type(default), f"{prefix}{f.name}.")
        else:
            names.append(prefix + f.name)
    return names


def keys_text() -> str:
    """The keys a user sets, by group, as the schemas declare them."""
    from .search.settings import SweepSettings

    schemas = dict(SCHEMAS)
    lines = [
        _wrapped(f"{group}.", _leaves(schemas[group])) for group in ("loader", "backend", "train", "dist", "measure")
    ]
    task_keys: list[str] = []
    for path, schema in SCHEMAS:
        if path.startswith("task/"):
            task_keys += [k for k in _leaves(schema) if k not in task_keys]
    lines.append(_wrapped("task.", task_keys))
    lines.append(_wrapped("hydra.sweeper.", _leaves(SweepSettings)))
    return "\n".join(lines)
