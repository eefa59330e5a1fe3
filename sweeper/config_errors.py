"""A value or key the config refuses, as one line that names it and what is allowed: the
schema's type (`loader.batch_size='x' is invalid: expected an integer.`), the nearest key to a
misspelt one, an interpolation that names no key. Hydra's and OmegaConf's own messages are
many lines, with a trace."""

from __future__ import annotations

import difflib
import enum
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from typing import Any, List

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationKeyError,
    InterpolationResolutionError,
    OmegaConfBaseException,
)

from .config import SCHEMAS


def _field_type(full_key: str, config: DictConfig | None) -> Any:
    """The annotated type of `full_key` (e.g. loader.batch_size), from the composed config's
    schema where there is one, else from the schemas by group; `hydra.sweeper.*` from the
    sweeper's settings."""
    if full_key.startswith("hydra.sweeper."):
        from .search.settings import SweepSettings  # it builds on this module's types

        annotation: Any = SweepSettings
        for part in full_key.split(".")[2:]:
            found = [f for f in fields(annotation)] if is_dataclass(annotation) else []
            annotation = next((f.type for f in found if f.name == part), None)
        return annotation
    group, _, leaf = full_key.partition(".")
    candidates = []
    if config is not None and group in config and isinstance(config[group], DictConfig):
        schema = OmegaConf.get_type(config[group])
        if schema is not None and is_dataclass(schema):
            candidates.append(schema)
    candidates += [schema for path, schema in SCHEMAS if path.partition("/")[0] == group]
    for schema in candidates:
        for f in fields(schema):
            if f.name == leaf:
                return f.type
    return None


def _optional(annotation: Any) -> tuple[Any, bool]:
    args = getattr(annotation, "__args__", ())
    if type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return annotation, False


def allowed(annotation: Any) -> str:
    """What a key of this type accepts, as the one-line error says it."""
    inner, nullable = _optional(annotation)
    null = " or null" if nullable else ""
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return f"one of {', '.join(m.value for m in inner)}" + (" (or null)" if nullable else "")
    if inner is bool:
        return "true or false" + null
    if inner is int:
        return "an integer" + null
    if inner is float:
        return "a number" + null
    if getattr(inner, "__origin__", None) in (list, List):
        return "a list [a, b]" + null
    return "a string" + null


def nearest_key(full_key: str, config: DictConfig | None) -> str | None:
    """The config's key nearest to a misspelt one, at any depth (`lodaer.batch_size` ->
    `loader.batch_size`, `hydra.sweeper.n_trial` -> `hydra.sweeper.n_trials`); None if some part
    has no close match."""
    if config is None:
        return None
    node: Any = config
    chosen = []
    parts = full_key.lstrip("+~").split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None
        keys = [str(k) for k in node.keys()]
        match = part if part in keys else next(iter(difflib.get_close_matches(part, keys, n=1, cutoff=0.6)), None)
        if match is None:
            return None
        chosen.append(match)
        if i < len(parts) - 1:
            node = node._get_node(match)
    found = ".".join(chosen)
    return found if found != full_key else None


def error_line(exc: BaseException, config: DictConfig | None = None, overrides: Sequence[str] = ()) -> str | None:
    """The one line for a value or key the config's schema refuses (Hydra's composition error,
    or OmegaConf's, anywhere in the cause chain); None if it is not such an error. `overrides`,
    the command line's, name the whole key a user wrote when OmegaConf names only the start of it."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, OmegaConfBaseException):
        seen = seen.__cause__ or seen.__context__
    if seen is None or not getattr(seen, "full_key", None):
        return None
    key = str(seen.full_key)
    if isinstance(seen, InterpolationKeyError):  # "Interpolation key 'loader.batchsize' not found"
        missing = str(seen).split("'")[1] if str(seen).count("'") >= 2 else str(seen).splitlines()[0]
        like = nearest_key(missing, config)
        hint = f"did you mean ${{{like}}}?" if like else "check its spelling"
        return f"{key}: ${{{missing}}} is not a key of the config ({hint})."
    if isinstance(seen, InterpolationResolutionError):
        return f"{key}: cannot resolve its ${{...}}: {str(seen).splitlines()[0]}"
    if isinstance(seen, (ConfigAttributeError, ConfigKeyError)):
        written = [o.partition("=")[0].lstrip("+~") for o in overrides]
        key = next((w for w in written if w == key or w.startswith(key + ".")), key)
        like = nearest_key(key, config)
        if like:
            return f"{key} is not a key of the config (did you mean {like}?)."
        return f"{key} is not a key of the config: check its spelling (a key of your own: +{key}=...)."
    annotation = _field_type(key, config)
    value = getattr(seen, "value", None)
    if annotation is None:
        first = str(seen).splitlines()[0]
        return f"{key}={value!r} is invalid: {first}"
    shown = repr(value) if not isinstance(value, str) or value.lower() not in ("true", "false") else value
    return f"{key}={shown} is invalid: expected {allowed(annotation)}."
