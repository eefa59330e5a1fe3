"""Which knobs move throughput most, on the recorded grids: Optuna's parameter
importance (its default evaluator, PED-ANOVA, as the report's chart) over every configuration of each grid, the figures
as they were measured. This is what chose the presets' `main` knobs (searched first by a staged
search).

    python benchmarks/importance.py [grid ...]
"""

from __future__ import annotations

import sys

import optuna
from optuna.distributions import CategoricalDistribution
from record_grid import GRIDS, csv_path
from replay import Grid


def importances(grid: Grid) -> dict[str, float]:
    """fANOVA importances of the grid's knobs for samples/sec (each row a trial)."""
    choices = grid.choices()
    distributions = {k: CategoricalDistribution(v) for k, v in choices.items() if len(v) > 1}
    study = optuna.create_study(direction="maximize")
    for key, row in grid.points.items():
        if row.status != "ok":
            continue
        params = {k: v for k, v in zip(grid.knobs, key) if k in distributions}
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions=distributions, value=row.samples_per_sec)
        )
    return optuna.importance.get_param_importances(study)  # Optuna's default evaluator, as the report's


def main(names: list[str]) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for name in names or list(GRIDS):
        ranked = importances(Grid.read(csv_path(name)))
        print(f"| {name} | " + ", ".join(f"{k.split('.')[-1]} {v:.2f}" for k, v in ranked.items()) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
