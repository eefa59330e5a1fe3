"""Issue 23: what the recipes cost where they miss. On every grid recorded on this 2-core VM one
of the two recipes is the grid's best point, so the replay cannot say how the sweep fares on a
machine where they are not (more cores, another workload). Here each grid's recipe points are
made mediocre, their figure set to a quantile of the grid's figures (the median by default), and
the default sweep is replayed against the same sweep without recipes on that grid: the price of
two wasted first trials, and whether TPE still finds the (new) best.

    python benchmarks/recipes_miss.py [seeds] [grid] [--at QUANTILE]
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import replay  # noqa: E402
from record_grid import GRIDS, csv_path  # noqa: E402

from sweeper import resolvers  # noqa: E402
from sweeper.search.plan import SweepPlan  # noqa: E402
from sweeper.search.start import recipes  # noqa: E402

DEFAULT = "TPE, samples/sec (the default)"
NO_RECIPES = "TPE, samples/sec, no recipes (before issue 23, tenth part)"


def missed(grid: replay.Grid, plan: SweepPlan, at: float) -> tuple[replay.Grid, list[str]]:
    """The grid with its recipe points' figures set to the `at` quantile of its figures, and what
    was changed, a line each."""
    points = recipes(plan.space, plan.baseline_knobs, cores=plan.machine.cores, cuda=plan.machine.cuda,
                     bf16=plan.machine.bf16)
    figure = float(pd.Series([r.samples_per_sec for r in grid.points.values()
                              if r.status in ("ok", "pruned")]).quantile(at))
    changed, rows = [], dict(grid.points)
    for point in points:
        key = grid.key(point.knobs)
        if key in rows:
            changed.append(f"{dict(zip(grid.knobs, key))}: {rows[key].samples_per_sec:,.0f} -> {figure:,.0f}")
            rows[key] = replace(rows[key], samples_per_sec=figure)
    return replay.Grid(grid.knobs, rows), changed


def main(argv: list[str]) -> None:
    args = list(argv)
    at = 0.5
    if "--at" in args:
        i = args.index("--at")
        at = float(args[i + 1])
        del args[i:i + 2]
    seeds = int(args[0]) if args else 100
    name = args[1] if len(args) > 1 else "mnist_mlp_train"
    if name not in GRIDS or not 0 <= at <= 1:
        sys.exit(f"grid {name!r} or --at {at} unknown: grids {', '.join(GRIDS)}; --at a quantile in [0, 1]")
    resolvers.register()
    grid = replay.Grid.read(csv_path(name))
    with tempfile.TemporaryDirectory() as tmp:
        plan = replay.plan_for(GRIDS[name], replay.STRATEGIES[DEFAULT], 20, Path(tmp))
    worse, changed = missed(grid, plan, at)
    print(f"grid {name}, best {grid.best:,.0f}; the recipes made the {at:.0%} quantile:")
    for line in changed:
        print(f"  {line}")
    replay.table(name, worse, [DEFAULT, NO_RECIPES], seeds, 20)


if __name__ == "__main__":
    main(sys.argv[1:])
