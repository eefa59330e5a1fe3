"""Where things are: the configs (`conf/` in a checkout, `sweeper/conf` in an installed package),
the file that names a sweep directory's study, and the per-machine cache (probe answers,
generated datasets, dataset indexes)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# in each sweep's directory: which study and storage it used (python -m sweeper.report reads it)
SWEEP_FILE = "sweep.json"


def not_a_sweep_dir(path: Path, file: str = SWEEP_FILE) -> str:
    """Why `path` is no sweep's directory (it lacks `file`), and which one the user may have
    meant: the newest sweep under it (`outputs/sweeps/2026-11-27` for its last time of day)."""
    if not path.exists():
        return f"{str(path)!r} does not exist"
    # <project>/outputs/sweeps/<date>/<time> at most four levels down: no walk of a whole disk
    found = (
        [p for depth in ("*", "*/*", "*/*/*", "*/*/*/*") for p in path.glob(f"{depth}/{file}")] if path.is_dir() else []
    )
    inside = sorted(found, key=lambda p: p.stat().st_mtime)
    meant = f" (the newest sweep under it: {inside[-1].parent})" if inside else ""
    return f"{str(path)!r} holds no {file}{meant}"


def config_dir() -> str:
    """sweeper's configs, their schemas (sweeper.config) made known to Hydra, which checks every
    value against them as it composes."""
    from .config import register

    register()
    checkout = _PACKAGE.parent / "conf"
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    return str(_PACKAGE / "conf")


CACHE_ENV = "SWEEPER_CACHE_DIR"


def cache_dir() -> Path:
    """$SWEEPER_CACHE_DIR, else $XDG_CACHE_HOME/sweeper, else ~/.cache/sweeper."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sweeper"


def write_atomically(path: Path, write: Callable[[Path], None]) -> bool:
    """write(tmp) then rename over `path`, so a reader never sees half a file; False when the
    cache cannot be written (a read-only home): the caller goes on without it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        write(tmp)
        tmp.replace(path)
        return True
    except OSError:
        return False
