"""Hydra command-line overrides for a trial: quoting values so Hydra reads them back, and the
winner as a command line or a primary config (pure; used by the sweep's outputs and the report)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from .errors import ConfigError
from .knobs import Knob
from .script_version import split_setup

# Config groups of conf/: an override `task=x` selects an option, it does not set a value.
GROUPS = ("task", "loader", "backend", "measure", "train")
# Per-run overrides the sweeper itself adds (the best so far, a timeout within the budget); a
# winner does not carry them.
SWEEP_ONLY = ("trial", "trial.prune_below", "trial.far_below", "trial.race", "trial.behind", Knob.MEASURE_TIMEOUT_S)


def config_word(value: Any) -> str:
    """A value as a config spells it, for reading: null, true or false, else its text
    (override_value quotes it where Hydra must read it back)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def override_value(value: Any) -> str:
    """A value as Hydra's command line reads it back. Quoted in double quotes where it has none,
    so that a shell's single quotes around the override stay whole (a command's `${...}` needs
    those)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if any(c in text for c in " ,()[]{}'\"=\\") or text == "":
        quote = "'" if '"' in text else '"'
        # Hydra reads a backslash as itself except in a run before a quote (the closing one too)
        escaped = re.sub(rf"(\\*)({quote}|$)", lambda m: m[1] * 2 + ("\\" + m[2] if m[2] else ""), text)
        return quote + escaped + quote
    return text


def to_overrides(values: Mapping[str, Any]) -> list[str]:
    return [f"{k}={override_value(v)}" for k, v in sorted(values.items())]


def split_fixed(fixed: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Group selections (task=image_classification) and values (task.model=resnet50); a stored
    setup's script version (script_version.SETUP_NOTE) is no override and is left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups: dict[str, str] = {}
    values: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(split_setup(fixed)[0]):
        key = override.key_or_group
        if key.startswith("hydra") or key in SWEEP_ONLY or key.split(".")[0] == "search":
            continue
        if key in GROUPS:
            groups[key] = str(override.value())
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
    groups, values = split_fixed(fixed)
    defaults: list[Any] = ["config", *({f"override {g}": v} for g, v in groups.items()), "_self_"]
    body = {"defaults": defaults, **_nest({**values, **knobs})}
    header = f"# @package _global_\n# {note}\n"
    return header + yaml.safe_dump(body, sort_keys=False)


def winner_command(fixed: Sequence[str], knobs: dict[str, Any]) -> str:
    groups, values = split_fixed(fixed)
    parts = [f"{g}={override_value(v)}" for g, v in groups.items()]
    parts += to_overrides({**values, **knobs})
    return " ".join(["python -m sweeper", *(shlex.quote(p) for p in parts)])


def split_arguments(arguments: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Fixed overrides, and knob -> sweep expression for the swept ones."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    fixed, swept = [], {}
    try:
        overrides = OverridesParser.create().parse_overrides(list(arguments))
    except Exception as exc:  # Hydra's grammar error: keep its first line
        raise ConfigError(f"cannot parse the overrides: {str(exc).splitlines()[0]}") from exc
    for override in overrides:
        if override.is_sweep_override():
            swept[override.get_key_element()] = str(override.input_line).split("=", 1)[1]
        else:
            fixed.append(str(override.input_line))
    return fixed, swept
