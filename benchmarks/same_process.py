"""sweeper's loop against the plain loop's, in one process: does sweeper's data path or step run
slower than a loop written apart from it?

    python benchmarks/same_process.py [PAIRS] [FILTER]      defaults: 10 pairs, every configuration

Between two processes this VM's speed moves by 10-15%, more than the differences sought here. So
each configuration of loop_agreement.py builds both sides in one process: sweeper's (its own
`prepare` and `build`: the workload, the DataLoader with its worker start, the step, the batch
stream) and the plain loop's (`benchmarks/plain/<loop>.py`'s `build`), each with its own loader
workers, and runs them in slices of SLICE_S seconds (default 3), alternating A B B A ..., each
slice after one untimed step. Printed: each side's median samples/s and the paired ratio, sweeper
over plain; also each side's data path with the other's step, which says whether a gap is the
data's or the step's; and the two steps on the same few batches held in memory (the data out of
the picture), sweeper's over the plain one's.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "plain"))
import loop_agreement  # noqa: E402

SLICE_S = float(os.environ.get("SLICE_S", 3))
HELD_BATCHES = 6  # the batches both steps cycle through, taken once from the plain loader


def sweepers_side(config: loop_agreement.Config) -> tuple[Callable[[], Any], Callable[[Any], int]]:
    """sweeper's batches and step for the configuration, as its measured run builds them."""
    from sweeper import resolvers
    from sweeper.measuring import stages
    from sweeper.preflight import compose
    from sweeper.spec import RunSpec

    resolvers.register()
    spec = RunSpec.of(compose(tuple(config.overrides())))
    built = stages.build(spec, stages.prepare(spec, None, time.perf_counter()))

    def step(batch: Any) -> int:
        built.step(batch)
        return built.samples_of(batch)

    return built.next_batch, step


def plain_side(config: loop_agreement.Config) -> tuple[Callable[[], Any], Callable[[Any], int]]:
    """The plain loop's batches (epoch after epoch, as its `for` loop) and step."""
    import importlib

    module = importlib.import_module(config.loop)
    loader, step = module.build(module.arguments(config.plain_args()))

    def batches() -> Any:
        while True:
            yield from loader

    stream = batches()
    return lambda: next(stream), step


def rates(sides: dict[str, tuple[Callable[[], Any], Callable[[Any], int]]], pairs: int) -> dict[str, list[float]]:
    names = list(sides)
    found: dict[str, list[float]] = {n: [] for n in names}
    for p in range(pairs):
        for name in names[p % len(names) :] + names[: p % len(names)]:
            next_batch, step = sides[name]
            step(next_batch())
            samples, start = 0, time.perf_counter()
            while time.perf_counter() - start < SLICE_S:
                samples += step(next_batch())
            found[name].append(samples / (time.perf_counter() - start))
    return found


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    loop_agreement.make_data()
    print(
        "| configuration | plain, samples/s | sweeper / plain "
        "| sweeper's data, plain step | plain data, sweeper's step | held batches, sweeper's step / plain step |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for config in (c for c in loop_agreement.CONFIGS if only in c.name and not c.cold):
        ours, theirs = sweepers_side(config), plain_side(config)
        held = itertools.cycle([theirs[0]() for _ in range(HELD_BATCHES)])
        found = rates(
            {
                "sweeper": ours,
                "plain": theirs,
                "sweeper's data": (ours[0], theirs[1]),
                "sweeper's step": (theirs[0], ours[1]),
                "held, sweeper's step": (lambda: next(held), ours[1]),
                "held, plain step": (lambda: next(held), theirs[1]),
            },
            pairs,
        )

        def paired(name: str, over: str = "plain") -> str:
            ratios = [a / b for a, b in zip(found[name], found[over])]
            return f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})"

        plain = found["plain"]
        cells = " | ".join(paired(n) for n in ("sweeper", "sweeper's data", "sweeper's step"))
        cells += " | " + paired("held, sweeper's step", "held, plain step")
        print(f"| {config.name} | {statistics.median(plain):,.1f} | {cells} |", flush=True)
    os._exit(0)  # the loaders' workers are not joined one by one


if __name__ == "__main__":
    main()
