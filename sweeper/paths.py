"""Where the configs are: `conf/` in a checkout, `sweeper/conf` in an installed package."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def config_dir() -> str:
    checkout = _PACKAGE.parent / "conf"
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    return str(_PACKAGE / "conf")
