"""What the recipes cost where they miss. On every grid recorded on this 2-core VM one
of the two recipes is the grid's best point, so the replay cannot say how the sweep fares on a
machine where they are not (more cores, another workload). Two ways to make them miss, each
replayed with the default sweep against the same sweep without recipes:

- `hole`: the recipe points alone made mediocre, their figure set to a quantile of the grid's
  figures (`--at`, the median by default), their neighbours left as they are: the worst case for
  TPE's model, which reads the region around them as poor;
- `mirror`: the batch axis reversed (the largest batch reads what the smallest did), a smooth
  surface whose best lies far from the recipes' largest batch.

    python benchmarks/recipes_miss.py [seeds] [grid] [--how hole|mirror] [--at QUANTILE] [--strategies "a;b"]
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import replay
from record_grid import GRIDS, csv_path

from sweeper import resolvers
from sweeper.search.plan import SweepPlan
from sweeper.search.start import recipes

DEFAULT = "TPE, samples/sec (the default)"
NO_RECIPES = "TPE, samples/sec, no recipes"


def missed(grid: replay.Grid, plan: SweepPlan, at: float) -> tuple[replay.Grid, list[str]]:
    """The grid with its recipe points' figures set to the `at` quantile of its figures, and what
    was changed, a line each."""
    machine = plan.machine
    points = recipes(
        plan.space,
        plan.baseline_knobs,
        host=plan.host,
        cuda=machine.cuda,
        bf16=machine.bf16,
        bf16_fast=machine.bf16_fast,
    )
    figure = float(
        pd.Series([r.samples_per_sec for r in grid.points.values() if r.status in ("ok", "pruned")]).quantile(at)
    )
    changed, rows = [], dict(grid.points)
    for point in points:
        key = grid.key(point.knobs)
        if key in rows:
            changed.append(f"{dict(zip(grid.knobs, key))}: {rows[key].samples_per_sec:,.0f} -> {figure:,.0f}")
            rows[key] = replace(rows[key], samples_per_sec=figure)
    return replay.Grid(grid.knobs, rows), changed


def mirrored(grid: replay.Grid) -> replay.Grid:
    """The grid with its batch axis reversed: each point reads the row of the batch at the other
    end of the axis (the largest the smallest's, the second largest the second smallest's...)."""
    i = grid.knobs.index("loader.batch_size")
    batches = sorted({key[i] for key in grid.points})
    other = dict(zip(batches, reversed(batches)))
    return replay.Grid(
        grid.knobs,
        {key: grid.points.get((*key[:i], other[key[i]], *key[i + 1 :]), row) for key, row in grid.points.items()},
    )


def _option(args: list[str], name: str, default: str) -> str:
    if name not in args:
        return default
    i = args.index(name)
    value = args[i + 1]
    del args[i : i + 2]
    return value


def main(argv: list[str]) -> None:
    args = list(argv)
    how, at = _option(args, "--how", "hole"), float(_option(args, "--at", "0.5"))
    chosen = _option(args, "--strategies", f"{DEFAULT};{NO_RECIPES}").split(";")
    seeds = int(args[0]) if args else 100
    name = args[1] if len(args) > 1 else "mnist_mlp_train"
    if name not in GRIDS or how not in ("hole", "mirror") or not 0 <= at <= 1:
        sys.exit(
            f"grid {name!r}, --how {how!r} or --at {at} unknown: grids {', '.join(GRIDS)}; --how hole or "
            "mirror; --at a quantile in [0, 1]"
        )
    resolvers.register()
    grid = replay.Grid.read(csv_path(name))
    if how == "mirror":
        worse = mirrored(grid)
        print(f"grid {name}, its batch axis reversed: best {worse.best:,.0f}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            plan = replay.plan_for(GRIDS[name], replay.STRATEGIES[DEFAULT], 20, Path(tmp))
        worse, changed = missed(grid, plan, at)
        print(f"grid {name}, best {grid.best:,.0f}; the recipes made the {at:.0%} quantile:")
        for line in changed:
            print(f"  {line}")
    replay.table(name, worse, chosen, seeds, 20)


if __name__ == "__main__":
    main(sys.argv[1:])
