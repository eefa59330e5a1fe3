"""The figures a sweep can optimise, and which way is better for each (pure)."""

from __future__ import annotations

from ..errors import ConfigError
from ..measurement import DIRECTIONS, PRIMARY


def resolve_directions(objectives: list[str]) -> list[str]:
    """Each objective's own direction: samples/sec up, memory and step times down."""
    for name in objectives:
        if name not in DIRECTIONS:
            raise ConfigError(
                f"hydra.sweeper.objectives: {name!r} is not a measured figure: expected some of "
                f"{', '.join(DIRECTIONS)}."
            )
    if not objectives:
        raise ConfigError(f"hydra.sweeper.objectives is empty: name at least {PRIMARY}.")
    return [DIRECTIONS[o] for o in objectives]
