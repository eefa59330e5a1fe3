"""Hydra's sweep grammar -> Optuna distributions, and which knobs mean something where.

choice(a,b) / a,b    -> CategoricalDistribution
range(a,b[,s])       -> IntDistribution(a, b - s, step=s)   (Hydra's range excludes b)
interval(a,b)        -> FloatDistribution, or IntDistribution when both ends are written as ints
int(interval(a,b))   -> IntDistribution
tag(log, interval)   -> log=True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from .. import topology
from ..command import AT_FIRST_STEP
from ..errors import ConfigError
from ..knobs import Knob
from ..overrides import config_word

_INT_INTERVAL = re.compile(r"^\s*(tag\([^,]*,\s*)?interval\(\s*-?\d+\s*,\s*-?\d+\s*\)\)?\s*$")

# Knobs that only mean something when another knob has a given value. Value given when dead.
NEUTRAL: dict[str, Any] = {
    Knob.LOADER_PREFETCH_FACTOR: None,
    Knob.LOADER_PERSISTENT_WORKERS: False,
    Knob.LOADER_IN_ORDER: True,
    Knob.LOADER_MULTIPROCESSING_CONTEXT: None,
    Knob.LOADER_PIN_MEMORY: False,
    Knob.BACKEND_CHANNELS_LAST: False,
    Knob.BACKEND_CUDNN_BENCHMARK: False,
    Knob.BACKEND_TF32: False,
    Knob.BACKEND_FLUSH_DENORMAL: False,
    Knob.BACKEND_NUMA: "none",
}
# OpenMP's binding pins the process's own thread to one core as OpenMP starts (GNU's and Intel's
# runtimes alike), and the loader workers and data-parallel ranks that process starts inherit that
# core: without backend.affinity to place them they share it (2 workers on 2 cores read
# 7,141-7,916 samples/s bound against 14,404-15,613 unbound, docs/benchmarks.md). A preset samples the
# binding only where it pins the compute threads alone, and leaves the process unbound elsewhere;
# set outside the space, it stays as you set it. The value where it is not sampled:
UNBOUND = {Knob.BACKEND_OMP_BIND: "default"}
# DataLoader knobs that only exist with worker processes.
NEEDS_WORKERS = (
    Knob.LOADER_PREFETCH_FACTOR,
    Knob.LOADER_PERSISTENT_WORKERS,
    Knob.LOADER_IN_ORDER,
    Knob.LOADER_MULTIPROCESSING_CONTEXT,
)
# Knobs that change speed but not how much memory a batch needs (for "OOM at batch b").
MEMORY_NEUTRAL = {
    Knob.LOADER_BATCH_SIZE,
    Knob.LOADER_NUM_WORKERS,
    Knob.LOADER_PREFETCH_FACTOR,
    Knob.LOADER_PERSISTENT_WORKERS,
    Knob.LOADER_IN_ORDER,
    Knob.LOADER_MULTIPROCESSING_CONTEXT,
    Knob.LOADER_PIN_MEMORY,
    Knob.BACKEND_THREADS,
    Knob.BACKEND_INTEROP_THREADS,
    Knob.BACKEND_AFFINITY,
    Knob.BACKEND_CUDNN_BENCHMARK,
    Knob.BACKEND_TF32,
    Knob.BACKEND_FLUSH_DENORMAL,
    Knob.BACKEND_OMP_BIND,
    Knob.BACKEND_KMP_BLOCKTIME,
    Knob.BACKEND_NUMA,
}


@dataclass(frozen=True)
class Context:
    """What the machine and workload allow, from the device probe and the task config."""

    cuda: bool
    bf16: bool
    convolutional: bool | None  # None: unknown (a custom workload)
    loader_in_order: bool = True  # the installed torch's DataLoader has in_order
    openmp: str = "gnu"  # the OpenMP runtime torch loads: gnu | intel | none
    # the knobs a script's sweeper.track applies at its first step (command.AT_FIRST_STEP) take
    # effect: always in sweeper's own loop; in a script once its baseline showed sweeper.track
    first_step_applied: bool = True


def parse_override(key: str, text: str) -> Override:
    try:
        return OverridesParser.create().parse_override(f"{key}={text}")
    except Exception as exc:  # hydra's grammar errors carry the position; keep them one line
        raise ConfigError(f"search param {key}={text!r}: {str(exc).splitlines()[0]}") from exc


def to_distribution(key: str, text: str) -> BaseDistribution | None:
    """The Optuna distribution a sweep expression stands for; None for a fixed value."""
    override = parse_override(key, str(text))
    if not override.is_sweep_override():
        return None
    value = override.value()
    log = "log" in getattr(value, "tags", set())
    if isinstance(value, ChoiceSweep):
        if log:
            raise ConfigError(f"search param {key}={text!r}: tag(log, ...) needs interval(...), not a choice.")
        choices = list(value.list)
        if not choices:
            raise ConfigError(f"search param {key}={text!r}: choice() needs at least one value.")
        if any(c is not None and not isinstance(c, (bool, int, float, str)) for c in choices):
            raise ConfigError(f"search param {key}={text!r}: choices must be numbers, words, true/false or null.")
        return CategoricalDistribution(choices)  # type: ignore[arg-type]  # checked just above
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if not (isinstance(start, int) and isinstance(stop, int) and isinstance(step, int)):
            raise ConfigError(f"search param {key}={text!r}: range() needs integer start, stop and step.")
        if step <= 0 or stop <= start:
            raise ConfigError(f"search param {key}={text!r}: range(start,stop,step) needs start < stop and step > 0.")
        high = start + ((stop - 1 - start) // step) * step
        if log and step != 1:
            raise ConfigError(
                f"search param {key}={text!r}: Optuna cannot combine log with step {step}; "
                "use choice(...) for powers of two."
            )
        return IntDistribution(start, high, step=step, log=log)
    if isinstance(value, IntervalSweep):
        assert value.start is not None and value.end is not None  # Hydra's interval(low, high) has both
        low, top = float(value.start), float(value.end)
        if low >= top:
            raise ConfigError(f"search param {key}={text!r}: interval(low,high) needs low < high.")
        if log and low <= 0:
            raise ConfigError(f"search param {key}={text!r}: a log interval needs low > 0.")
        if isinstance(value.start, int) and isinstance(value.end, int) or _INT_INTERVAL.match(str(text)):
            return IntDistribution(int(low), int(top), log=log)
        return FloatDistribution(low, top, log=log)
    raise ConfigError(f"search param {key}={text!r}: {type(value).__name__} is not supported.")


def build_space(params: Mapping[str, Any]) -> dict[str, BaseDistribution]:
    space = {}
    for key, text in params.items():
        dist = to_distribution(key, text)
        if dist is None:
            raise ConfigError(
                f"search param {key}={text!r} is a single value, not a sweep: "
                f"set it as a normal override ({key}={text}) or give choice(...)/range(...)/interval(...)."
            )
        space[key] = dist
    return space


def restrict_to_machine(space: dict[str, BaseDistribution], ctx: Context) -> dict[str, BaseDistribution]:
    """Drop precisions the device can't run and knobs the installed torch lacks; a knob left
    with nothing to choose is dropped."""
    out = dict(space)
    if not ctx.loader_in_order:
        out.pop(Knob.LOADER_IN_ORDER, None)
    if ctx.openmp != "intel":  # KMP_BLOCKTIME is Intel's runtime's alone
        out.pop(Knob.BACKEND_KMP_BLOCKTIME, None)
    if ctx.openmp == "none":
        out.pop(Knob.BACKEND_OMP_BIND, None)
    dist = out.get(Knob.BACKEND_PRECISION)
    if isinstance(dist, CategoricalDistribution):
        runnable = [p for p in dist.choices if p != "fp16" or ctx.cuda]
        runnable = [p for p in runnable if p != "bf16" or ctx.bf16]
        out[Knob.BACKEND_PRECISION] = CategoricalDistribution(runnable)
    return {k: v for k, v in out.items() if not (isinstance(v, CategoricalDistribution) and len(v.choices) < 2)}


def hold_effective_batch(space: dict[str, BaseDistribution], effective: int | None) -> dict[str, BaseDistribution]:
    """With train.effective_batch set, only batch sizes that divide it are sampled (gradient
    accumulation makes up the rest), so no configuration changes what the optimizer sees."""
    dist = space.get(Knob.LOADER_BATCH_SIZE)
    if not effective or dist is None:
        return space
    if isinstance(dist, CategoricalDistribution):
        values = list(dist.choices)
    elif isinstance(dist, IntDistribution) and not dist.log:
        values = list(range(dist.low, dist.high + 1, dist.step))
    else:
        values = [v for v in (2**i for i in range(31)) if contains(dist, v)]  # a log range: its powers of two
    kept = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0 and effective % v == 0]
    if not kept:
        raise ConfigError(
            f"train.effective_batch={effective}: no loader.batch_size of the search space divides it "
            f"({', '.join(map(str, values[:10]))}): search batch sizes that divide it."
        )
    return {**space, Knob.LOADER_BATCH_SIZE: CategoricalDistribution(kept)}


def unsampled_reason(
    knobs: Mapping[str, Any],
    cores: int,
    effective_batch: int | None,
    ranks_from_preset: bool,
    logical: int | None = None,
) -> str | None:
    """Why a trial's configuration is not measured, or None: ranks that divide no effective
    batch, or (when the preset chose the ranks, not the user) ranks oversubscribing the physical
    `cores` or the `logical` CPUs (topology.oversubscribes)."""
    nproc = int(knobs.get(Knob.DIST_NPROC_PER_NODE) or 1)
    batch = knobs.get(Knob.LOADER_BATCH_SIZE)
    if effective_batch and isinstance(batch, int) and effective_batch % (batch * nproc):
        return (
            f"loader.batch_size={batch} x dist.nproc_per_node={nproc} does not divide "
            f"train.effective_batch={effective_batch}"
        )
    threads, workers = knobs.get(Knob.BACKEND_THREADS), int(knobs.get(Knob.LOADER_NUM_WORKERS) or 0)
    if ranks_from_preset and topology.oversubscribes(nproc, threads, workers, cores, logical):
        per_rank = threads or 1
        smt = f" ({logical} logical CPUs)" if logical and logical > cores else ""
        return (
            f"{nproc} ranks x ({per_rank} thread{'s' * (per_rank != 1)}, {workers} loader "
            f"worker{'s' * (workers != 1)}) oversubscribe "
            f"the {cores} cores{smt}; the preset does not sample it "
            "(sweep dist.nproc_per_node yourself to measure such points)"
        )
    return None


def within_cores(
    knobs: Mapping[str, Any], cores: int, space: Mapping[str, BaseDistribution], logical: int | None = None
) -> dict[str, Any] | None:
    """The point nearest an oversubscribed one that the preset measures: the same ranks, with
    threads and loader workers lowered to the cores each rank has, where the space holds those
    values; None when the point is not oversubscribed or cannot be fitted. TPE models each
    knob alone: told only that oversubscribed points were skipped, it learned that ranks are
    slow, and a sweep rarely measured the ranks where they were the fastest point."""
    nproc = int(knobs.get(Knob.DIST_NPROC_PER_NODE) or 1)
    threads, workers = knobs.get(Knob.BACKEND_THREADS), int(knobs.get(Knob.LOADER_NUM_WORKERS) or 0)
    if not topology.oversubscribes(nproc, threads, workers, cores, logical):
        return None
    logical = logical or cores
    fitted = dict(knobs)
    if topology.oversubscribes(nproc, threads, 0, cores, logical):
        fitted[Knob.BACKEND_THREADS] = max(1, cores // nproc)
    if nproc * workers > logical:
        fitted[Knob.LOADER_NUM_WORKERS] = max(1, logical // nproc)
    changed = [k for k in (Knob.BACKEND_THREADS, Knob.LOADER_NUM_WORKERS) if fitted.get(k) != knobs.get(k)]
    if any(k not in space or not contains(space[k], fitted[k]) for k in changed):
        return None
    if topology.oversubscribes(
        nproc, fitted.get(Knob.BACKEND_THREADS), int(fitted.get(Knob.LOADER_NUM_WORKERS) or 0), cores, logical
    ):
        return None
    return fitted


def include_value(dist: BaseDistribution, value: Any) -> BaseDistribution:
    """A choice holds the baseline's value (the baseline is a point of the space, one choice
    more); a range stays as you wrote it, the baseline outside it (widening range(1,10) to hold
    a batch of 64 would sample the 54 values you left out)."""
    if isinstance(dist, CategoricalDistribution) and value not in dist.choices:
        return CategoricalDistribution([*dist.choices, value])
    return dist


def spelled(dist: BaseDistribution) -> str:
    """A distribution in the sweep grammar it came from (for messages): choice(32,64), range(0,5),
    interval(0.1,1.0)."""
    if isinstance(dist, CategoricalDistribution):
        return f"choice({','.join(config_word(c) for c in dist.choices)})"
    if isinstance(dist, IntDistribution):
        step = f",{dist.step}" if dist.step != 1 else ""
        return f"range({dist.low},{dist.high + dist.step}{step})"
    if isinstance(dist, FloatDistribution):
        return f"interval({dist.low},{dist.high})"
    return repr(dist)


def contains(dist: BaseDistribution, value: Any) -> bool:
    """Whether a suggestion from `dist` can be `value` (null and words never fit a number range)."""
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(dist, IntDistribution):
        return isinstance(value, int) and dist.low <= value <= dist.high and (value - dist.low) % dist.step == 0
    assert isinstance(dist, FloatDistribution)
    return dist.low <= value <= dist.high


def is_active(key: str, chosen: Mapping[str, Any], ctx: Context) -> bool:
    """Whether a knob means something given the values chosen so far (and the base config)."""
    if key in NEEDS_WORKERS:
        return (chosen.get(Knob.LOADER_NUM_WORKERS) or 0) > 0
    if key in AT_FIRST_STEP and not ctx.first_step_applied:
        return False
    if key in (Knob.LOADER_PIN_MEMORY, Knob.BACKEND_CUDNN_BENCHMARK, Knob.BACKEND_TF32):
        return ctx.cuda
    if key == Knob.BACKEND_CHANNELS_LAST:
        return ctx.convolutional is not False
    if key == Knob.BACKEND_NUMA:  # binds ranks: means something with two or more
        return (chosen.get(Knob.DIST_NPROC_PER_NODE) or 1) > 1
    if key in UNBOUND:
        return binds_compute_alone(chosen)
    return True


def binds_compute_alone(chosen: Mapping[str, Any]) -> bool:
    """Whether an OpenMP binding would pin the compute threads alone (UNBOUND): no loader workers
    or ranks to inherit the process's core, or backend.affinity placing them apart."""
    shared = (chosen.get(Knob.LOADER_NUM_WORKERS) or 0) > 0 or (chosen.get(Knob.DIST_NPROC_PER_NODE) or 1) > 1
    return not shared or chosen.get(Knob.BACKEND_AFFINITY) not in (None, "none")


def dead_value(key: str) -> Any:
    """The value a knob takes in a trial where it is not sampled (is_active is False)."""
    return UNBOUND[key] if key in UNBOUND else NEUTRAL[key]


def suggestion_order(keys: list[str]) -> list[str]:
    """Knobs others depend on first, so define-by-run can skip the dead ones."""
    return sorted(keys, key=lambda k: (k in NEUTRAL or k in UNBOUND, k))
