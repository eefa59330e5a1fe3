"""Wall-clock budgets written as people write them: 8h, 30m, 90s, 1h30m, or seconds."""

from __future__ import annotations

import re

from ..errors import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([hms])")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(value: str | float | int | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif re.fullmatch(r"(\d+(\.\d+)?[hms])+", text):
            seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))
        else:
            raise ConfigError(
                f"hydra.sweeper.timeout={value!r} is invalid: expected a duration such as 8h, 30m, 1h30m or 90s."
            )
    if seconds <= 0:
        raise ConfigError(f"hydra.sweeper.timeout={value!r} is invalid: expected a duration > 0.")
    return seconds


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
