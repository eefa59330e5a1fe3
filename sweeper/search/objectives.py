"""The figures a sweep can optimise, and which way is better for each (pure)."""

from __future__ import annotations

from ..errors import ConfigError
from ..measurement import DIRECTIONS, PRIMARY


def resolve_directions(objectives: list[str], direction: str | list[str] | None) -> list[str]:
    for name in objectives:
        if name not in DIRECTIONS:
            raise ConfigError(
                f"hydra.sweeper.objectives: {name!r} is not a measured figure: expected some of "
                f"{', '.join(DIRECTIONS)}."
            )
    if not objectives:
        raise ConfigError(f"hydra.sweeper.objectives is empty: name at least {PRIMARY}.")
    if direction is None:
        return [DIRECTIONS[o] for o in objectives]
    given = [direction] if isinstance(direction, str) else list(direction)
    if len(given) != len(objectives) or any(d not in ("minimize", "maximize") for d in given):
        raise ConfigError(
            f"hydra.sweeper.direction={direction!r} is invalid: expected one of minimize/maximize "
            f"per objective ({len(objectives)}: {', '.join(objectives)})."
        )
    return given
