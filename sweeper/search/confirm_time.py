"""The confirmation within hydra.sweeper.timeout: as many interleaved rounds as the time left
holds, and none where it cannot hold one round of the winner and the baseline: no run is started
that cannot finish (a run past the budget is killed and says nothing). Pure."""

from __future__ import annotations

from .budget import format_duration

# the fewest runs a confirmation round has: the winner and the baseline
ROUND_RUNS_AT_LEAST = 2


def rounds_that_fit(members: int, rounds: int, remaining_s: float | None, typical_wall_s: float) -> int:
    """`rounds` rounds of `members` runs each (the candidates and the baseline), fewer where the
    time left cannot hold them all, at least one where it holds the winner's and the baseline's
    runs, else none."""
    if remaining_s is None:
        return rounds
    wall = typical_wall_s or 1.0
    if remaining_s < ROUND_RUNS_AT_LEAST * wall:
        return 0
    if remaining_s >= wall * members * rounds:
        return rounds
    return max(1, int(remaining_s // (wall * members)))


def no_round_line(remaining_s: float, typical_wall_s: float) -> str:
    """What the log says where not one round fits."""
    return (
        f"not confirmed: a round (the winner and the baseline) takes about "
        f"{format_duration(ROUND_RUNS_AT_LEAST * typical_wall_s)} and {format_duration(remaining_s)} of "
        "hydra.sweeper.timeout is left; no run is started that cannot finish, and the winner stands on its "
        "search run"
    )
