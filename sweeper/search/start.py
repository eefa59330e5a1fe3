"""Where a sweep starts, after the baseline: points worth measuring before the sampler's own
guesses. The winners of the same study on the lab's other hardware classes (a warm start: what
a lab with many machine types wants the second night), then the practitioners' recipes (the
largest batch, the cores split between the loader and the compute from either side and, on a
CPU, between data-parallel ranks, bf16 where the device computes it in hardware, on a CPU the
allocator PyTorch's CPU launcher preloads, pinned memory on CUDA).
Each is queued with Optuna's enqueue_trial for this setup alone, only with knobs valid in this
space (the sampler fills the rest), and carries where it came from (`origin`) into its trial."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ..host import Host
from ..knobs import Knob
from ..store import queue
from ..store.record import TrialRecord
from ..store.study import StoredStudy, first_trial, sibling_names, split_class
from ..store.trials import config_of, ranked
from . import space as sp
from .plan import SweepPlan


@dataclass(frozen=True)
class StartPoint:
    knobs: Mapping[str, Any]
    origin: str  # "warm start: the winner on <class>" or "recipe: ..."


def _largest(dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        numbers = [c for c in dist.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        return max(numbers) if numbers else None
    if isinstance(dist, IntDistribution):
        return dist.high - (dist.high - dist.low) % dist.step
    return None


def _nearest(dist: BaseDistribution, want: int) -> Any:
    """The space's value closest to `want` from below (else the smallest above)."""
    if isinstance(dist, CategoricalDistribution):
        numbers = sorted(c for c in dist.choices if isinstance(c, int) and not isinstance(c, bool))
    elif isinstance(dist, IntDistribution):
        numbers = list(range(dist.low, dist.high + 1, dist.step))
    else:
        return None
    below = [n for n in numbers if n <= want]
    return below[-1] if below else (numbers[0] if numbers else None)


# the allocators PyTorch's CPU launcher (torch.backends.xeon.run_cpu) preloads, in its order of
# preference: the first the space holds (installed here) goes into a CPU recipe
LAUNCHER_ALLOCATORS = ("tcmalloc", "jemalloc")


def _launcher_allocator(space: Mapping[str, BaseDistribution]) -> str | None:
    dist = space.get(Knob.BACKEND_ALLOCATOR)
    return next((a for a in LAUNCHER_ALLOCATORS if dist is not None and sp.contains(dist, a)), None)


def recipes(
    space: Mapping[str, BaseDistribution],
    baseline: Mapping[str, Any],
    *,
    host: Host,
    cuda: bool,
    bf16: bool,
    bf16_fast: bool = True,
) -> list[StartPoint]:
    """The practitioners' recipe on top of the baseline, once from each side of the cores'
    split: the loader's side (workers at the core count, compute threads on the cores they
    leave, at least one) and, on a CPU, the compute's side (compute threads at the physical core
    count, as PyTorch's CPU launcher sets them, the loader in the main process). Which side wins
    is the workload's (a loader-bound MLP, a compute-bound CNN), so both are measured first.
    Workers and threads both at the core count oversubscribe: on 2 cores that point read 0.61 of
    the best, and anchored TPE's model there.
    On several GPUs the loader's side runs one rank per GPU, the CPUs split between their
    workers; on two NUMA nodes or more ranks are bound to nodes. On a CPU where the space has
    ranks a third recipe runs data parallel: one rank per NUMA node with threads on its physical
    cores (run_cpu's instance per node), or on one node two ranks on half the cores each.
    All with the largest batch, bf16 where the device runs it (`bf16`) and computes it in
    hardware (`bf16_fast`; emulated, it runs slower than fp32, and the recipe says it left bf16
    out), channels_last (live only for convolutional models), persistent workers, on a CPU the
    allocator PyTorch's CPU launcher preloads (TCMalloc, else JeMalloc, where the space holds
    one), and pinned memory on CUDA."""
    yours = {k: v for k, v in baseline.items() if k in space and sp.contains(space[k], v)}
    # in the space where set, so in each recipe: its log line names it
    preloaded = None if cuda else _launcher_allocator(space)
    common = {
        Knob.LOADER_BATCH_SIZE: _largest(space[Knob.LOADER_BATCH_SIZE]) if Knob.LOADER_BATCH_SIZE in space else None,
        Knob.BACKEND_PRECISION: "bf16" if bf16 and bf16_fast else None,
        Knob.BACKEND_CHANNELS_LAST: True,
        Knob.LOADER_PIN_MEMORY: True if cuda else None,
        Knob.LOADER_PERSISTENT_WORKERS: True,
        Knob.BACKEND_ALLOCATOR: preloaded,
    }
    precision = space.get(Knob.BACKEND_PRECISION)
    emulated = bf16 and not bf16_fast and precision is not None and sp.contains(precision, "bf16")
    points: list[StartPoint] = []
    for what, split in _sides(space, host, cuda):
        recipe = dict(yours)
        for key, value in {**common, **split}.items():
            if key in space and value is not None and sp.contains(space[key], value):
                recipe[key] = value
        if recipe != yours and all(p.knobs != recipe for p in points):
            points.append(StartPoint(recipe, _recipe_origin(what, recipe, emulated, preloaded)))
    return points


def _sides(space: Mapping[str, BaseDistribution], host: Host, cuda: bool) -> list[tuple[str, dict[str, Any]]]:
    """Each recipe's split of the machine: what it says, and its ranks, workers and threads."""
    nodes = len(host.nodes)
    if cuda:  # one rank per GPU, where the space has ranks; the CPUs split between their workers
        ranks = _nearest_in(space, Knob.DIST_NPROC_PER_NODE, max(1, len(host.gpus))) or 1
        per_rank = max(1, host.usable_logical // ranks)
        workers = _nearest_in(space, Knob.LOADER_NUM_WORKERS, per_rank)
        what = "the loader's side: workers at the core count" if ranks == 1 else (
            f"the loader's side: one rank per GPU ({ranks}), each with {workers} workers of the "
            f"{host.usable_logical} CPUs"
        )  # fmt: skip
        split = {Knob.DIST_NPROC_PER_NODE: ranks, Knob.LOADER_NUM_WORKERS: workers}
        if ranks >= 2 and nodes >= 2:
            split[Knob.BACKEND_NUMA] = "node"
            what += ", ranks bound to NUMA nodes"
        return [(what, split)]
    cores = host.usable_physical
    workers = _nearest_in(space, Knob.LOADER_NUM_WORKERS, cores)
    compute = {Knob.LOADER_NUM_WORKERS: 0, Knob.BACKEND_THREADS: _nearest_in(space, Knob.BACKEND_THREADS, cores)}
    if workers is None:  # no loader workers to split the cores with (a script that takes none): one side
        sides = [("compute threads at the core count", compute)]
    else:
        loader = {
            Knob.LOADER_NUM_WORKERS: workers,
            Knob.BACKEND_THREADS: _nearest_in(space, Knob.BACKEND_THREADS, max(1, cores - workers)),
        }
        sides = [
            ("the loader's side: workers at the core count, compute threads on the cores left", loader),
            ("the compute's side: compute threads at the core count, the loader in the main process", compute),
        ]
    return sides + _data_parallel(space, cores, nodes)


def _data_parallel(space: Mapping[str, BaseDistribution], cores: int, nodes: int) -> list[tuple[str, dict[str, Any]]]:
    """The CPU's data-parallel recipe, where the space has ranks: on two NUMA nodes or more one
    rank per node, bound there (run_cpu's instance per node); on one, two ranks, each with
    compute threads on its half of the cores, the smallest split that says whether ranks pay.
    Neither side's recipe runs a rank, and where ranks win, a sampler that finds them late
    finds them after the stretch the convergence rule waits for: of the README's main jobs on 2
    cores that ran to n_trials, most picked two ranks (docs/benchmarks.md)."""
    ranks = max(nodes, 2)
    share = cores // ranks
    if share < 1 or _nearest_in(space, Knob.DIST_NPROC_PER_NODE, ranks) != ranks:
        return []
    split = {
        Knob.DIST_NPROC_PER_NODE: ranks,
        Knob.LOADER_NUM_WORKERS: 0,
        Knob.BACKEND_THREADS: _nearest_in(space, Knob.BACKEND_THREADS, share),
    }
    if nodes >= 2:
        split[Knob.BACKEND_NUMA] = "node"
        return [(f"one rank per NUMA node ({nodes}), bound there, compute threads on its {share} cores", split)]
    return [
        (
            f"data parallel: {ranks} ranks, each with compute threads on {share} of the {cores} cores and its loader",
            split,
        )
    ]


def _recipe_origin(what: str, recipe: Mapping[str, Any], bf16_emulated: bool, preloaded: str | None) -> str:
    """The recipe's words in the log and its trial: which side of the cores, and the precision
    and memory it chose (or why not bf16)."""
    largest = "the largest batch, " if Knob.LOADER_BATCH_SIZE in recipe else ""  # a script may take no batch size
    return (
        f"recipe: {largest}{what}"
        + (", bf16" if recipe.get(Knob.BACKEND_PRECISION) == "bf16" else "")
        + (", no bf16 (emulated here)" if bf16_emulated else "")
        + (f", {preloaded} (as PyTorch's CPU launcher)" if preloaded else "")
        + (", pinned memory" if recipe.get(Knob.LOADER_PIN_MEMORY) else "")
    )


def _nearest_in(space: Mapping[str, BaseDistribution], key: str, want: int) -> Any:
    return _nearest(space[key], want) if key in space else None


def warm_starts(
    storage: Any, study_name: str, fixed: Sequence[str], space: Mapping[str, BaseDistribution]
) -> list[StartPoint]:
    """The winners of the same study on other hardware classes (`name@<class>`), as points of
    this space: their knobs that this space holds, with values it can take."""
    points = []
    for name in sibling_names(storage, study_name):
        other = StoredStudy(optuna.load_study(study_name=name, storage=storage), storage)
        trials = other.trials(fixed)
        number = other.last_winner()
        winner = next((t for t in trials if t.number == number), None) or next(iter(ranked(trials)), None)
        if winner is None:
            continue
        knobs = {k: v for k, v in config_of(winner).items() if k in space and sp.contains(space[k], v)}
        if knobs:
            hardware = TrialRecord.of(winner).hardware_class or split_class(name)[1]
            points.append(
                StartPoint(knobs, f"warm start: the winner on {hardware} (study {name}, trial #{winner.number})")
            )
    return points


def winner_before_afresh(
    stored: StoredStudy, fixed: Sequence[str], space: Mapping[str, BaseDistribution]
) -> list[StartPoint]:
    """Where this study started afresh (a watched night found the machine drifted), the winner
    of the trials before, as a point of this space: measured early, as a warm start."""
    first, number = first_trial(stored.study, fixed), stored.last_winner()
    if not first or number is None or number >= first:
        return []
    knobs = {k: v for k, v in config_of(stored.trial(number)).items() if k in space and sp.contains(space[k], v)}
    origin = f"warm start: the winner before the study started afresh (trial #{number})"
    return [StartPoint(knobs, origin)] if knobs else []


class Queued(Enum):
    """What became of a start point."""

    QUEUED = "queued"
    HELD = "held"  # the study holds its point already: the baseline's own, or one measured before
    NO_ROOM = "no room"  # n_trials leaves no trial for it (none is left waiting in the study)


def live(point: StartPoint, plan: SweepPlan, ctx: sp.Context) -> StartPoint:
    """The point as it will run: a knob it makes dead (no loader workers, a model without
    convolutions) at the value the run has, so that what is queued, and shown as the trial's
    params, is what ran."""
    context = {**{k: plan.base_value(k) for k in (Knob.LOADER_NUM_WORKERS, Knob.DIST_NPROC_PER_NODE)}, **point.knobs}
    knobs = {
        k: v if k not in sp.NEUTRAL or sp.is_active(k, context, ctx) else sp.NEUTRAL[k] for k, v in point.knobs.items()
    }
    return replace(point, knobs=knobs)


def queue_start(stored: StoredStudy, plan: SweepPlan, room: int, ctx: sp.Context) -> list[tuple[StartPoint, Queued]]:
    """After the baseline is asked: queue the warm start and the recipes the settings ask for
    (each once, in order, for the sampler's next asks), as many as the `room` that n_trials
    leaves after the baseline, each with what became of it. A grid measures every point anyway:
    no recipes."""
    points = []
    if plan.search.warm_start:
        points += winner_before_afresh(stored, plan.setup, plan.space)
        points += warm_starts(stored.storage, stored.name, plan.setup, plan.space)
    if plan.search.recipes and not plan.settings.grid:
        points += recipes(
            plan.space,
            plan.baseline_knobs,
            host=plan.host,
            cuda=plan.machine.cuda,
            bf16=plan.machine.bf16,
            bf16_fast=plan.machine.bf16_fast,
        )
    outcomes = []
    for point in (live(p, plan, ctx) for p in points):
        if queue.holds(stored, point.knobs, plan.setup):
            outcomes.append((point, Queued.HELD))
        elif room <= 0:
            outcomes.append((point, Queued.NO_ROOM))
        elif queue.enqueue(stored, point.knobs, point.origin, plan.setup):
            outcomes.append((point, Queued.QUEUED))
            room -= 1
        else:
            outcomes.append((point, Queued.HELD))
    return outcomes
