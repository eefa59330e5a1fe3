"""Where things are: the configs (`conf/` in a checkout, `sweeper/conf` in an installed package),
and the file that names a sweep directory's study."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# in each sweep's directory: which study and storage it used (python -m sweeper.report reads it)
SWEEP_FILE = "sweep.json"


def config_dir() -> str:
    checkout = _PACKAGE.parent / "conf"
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    return str(_PACKAGE / "conf")
