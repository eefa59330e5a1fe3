"""A script's winner as a shell script runs it (task=script): the environment to export, the one
line that launches it (on cores with taskset, as ranks with torchrun), and what sweeper.track
applied inside it at its first step, as the PyTorch lines to add before its loop. The report
shows it against your configuration's; the sweep's last lines say what to run tomorrow. Pure."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import topology
from ..command import AT_FIRST_STEP, OUTSIDE
from ..knobs import Knob
from .code import affinity_lines, flag_lines, openmp_env

_PINNED = ("compact", "spread")


@dataclass(frozen=True)
class ScriptRun:
    """One side of the comparison: the lines for the knobs given (the outside knobs that differ
    from the other side's, and the first-step knobs sweeper.track applied)."""

    environment: tuple[str, ...]  # export lines, or a comment where a variable stays unset
    launch: str  # the command as launched (taskset, torchrun), or the command itself
    inside: tuple[str, ...]  # PyTorch lines the script runs before its loop

    @classmethod
    def of(
        cls, words: Sequence[str], outside: Mapping[str, Any], inside: Mapping[str, Any], cpus: str | None
    ) -> ScriptRun:
        ranks = int(outside.get(Knob.DIST_NPROC_PER_NODE) or 1)
        pinned = outside.get(Knob.BACKEND_AFFINITY) in _PINNED
        # ranks pin themselves, each on its own share of the cores: one taskset cannot place them
        per_rank = affinity_lines(outside) if ranks > 1 and pinned else []
        return cls(
            environment=tuple(_environment(outside)),
            launch=_launch(outside, shlex.join(words), cpus),
            inside=(*per_rank, *flag_lines({k: True for k, on in inside.items() if on})),
        )


def sides(
    before: Sequence[str],
    after: Sequence[str],
    baseline: Mapping[str, Any],
    winner: Mapping[str, Any],
    cpus: tuple[str | None, str | None] = (None, None),
) -> tuple[ScriptRun, ScriptRun]:
    """Your configuration's run and the winner's, each with the knobs that differ between them.
    Inside, sweeper.track applies only a value away from PyTorch's default: a default is the
    script's own. `cpus`: the cores each side's script ran on."""
    changed = sorted(k for k in OUTSIDE if baseline.get(k) != winner.get(k))
    applied = sorted(k for k in AT_FIRST_STEP if baseline.get(k) != winner.get(k))
    return (
        ScriptRun.of(before, {k: baseline.get(k) for k in changed}, {k: baseline.get(k) for k in applied}, cpus[0]),
        ScriptRun.of(after, {k: winner.get(k) for k in changed}, {k: winner.get(k) for k in applied}, cpus[1]),
    )


def script_diff(
    before: Sequence[str],
    after: Sequence[str],
    baseline: Mapping[str, Any],
    winner: Mapping[str, Any],
    cpus: tuple[str | None, str | None] = (None, None),
) -> tuple[str, ...]:
    """`-` your configuration / `+` the winner, in the order a shell script has it: the
    environment, the command line as each side launches it (under taskset or torchrun where it
    does: one line a side, the line to run), the lines inside."""
    was, now = sides(before, after, baseline, winner, cpus)
    launched = [f"-{was.launch}", f"+{now.launch}"] if was.launch != now.launch else []
    return (*_changed(was.environment, now.environment), *launched, *_changed(was.inside, now.inside))


def run_tomorrow(
    before: Sequence[str], after: Sequence[str], baseline: Mapping[str, Any], winner: Mapping[str, Any]
) -> list[str]:
    """What to run tomorrow, as lines of a shell script: the winner's environment where it
    differs from yours, its one launch line, and the lines to add inside the script as comments
    (a script that runs without sweeper no longer has sweeper.track apply them)."""
    was, now = sides(before, after, baseline, winner)
    return [
        *(line for line in now.environment if line not in was.environment),
        now.launch,
        *(f"# in the script, before its loop: {line}" for line in now.inside if line not in was.inside),
    ]


def _changed(was: Sequence[str], now: Sequence[str]) -> list[str]:
    return [*(f"-{line}" for line in was if line not in now), *(f"+{line}" for line in now if line not in was)]


def _environment(knobs: Mapping[str, Any]) -> list[str]:
    """The shell lines that set these outside knobs' environment before a script starts."""
    lines = []
    if Knob.BACKEND_THREADS in knobs:
        n = knobs[Knob.BACKEND_THREADS]
        lines.append(
            "# OMP_NUM_THREADS unset: PyTorch's default"
            if n is None
            else f"export OMP_NUM_THREADS={n} MKL_NUM_THREADS={n}"
        )
    if Knob.BACKEND_ALLOCATOR in knobs:
        allocator = knobs[Knob.BACKEND_ALLOCATOR]
        libraries = topology.ALLOCATOR_SONAMES
        lines.append(
            f"export LD_PRELOAD={libraries[allocator]}"
            if allocator in libraries
            else "# LD_PRELOAD unset: glibc's allocator"
        )
    if Knob.BACKEND_OMP_BIND in knobs:
        bind = knobs[Knob.BACKEND_OMP_BIND]
        lines.append(
            f"export {openmp_env(bind)}"
            if bind in ("close", "spread")
            else "# OMP_PROC_BIND unset: the OpenMP runtime's default"
        )
    if knobs.get(Knob.BACKEND_KMP_BLOCKTIME) is not None:
        lines.append(f"export KMP_BLOCKTIME={knobs[Knob.BACKEND_KMP_BLOCKTIME]}  # Intel OpenMP")
    if Knob.BACKEND_DEVICE in knobs:
        lines.append(
            "export CUDA_VISIBLE_DEVICES=  # no GPU"
            if knobs[Knob.BACKEND_DEVICE] == "cpu"
            else "# CUDA_VISIBLE_DEVICES as the machine has it"
        )
    return lines


def _launch(knobs: Mapping[str, Any], command: str, cpus: str | None) -> str:
    """The one line that starts the script with these outside knobs: as ranks under torchrun
    (each pinning itself where an affinity is asked: ScriptRun.inside), on its compute threads'
    cores under taskset, or as it is."""
    affinity = knobs.get(Knob.BACKEND_AFFINITY)
    ranks = int(knobs.get(Knob.DIST_NPROC_PER_NODE) or 1)
    if ranks > 1:
        said = []
        if affinity in _PINNED:
            pins = "each rank pins its compute threads to its share of the cores, in the script (below)"
            said.append(f"{affinity}: {pins}")
        if knobs.get(Knob.BACKEND_NUMA) == "node":
            said.append("each rank bound to its own NUMA node, as numactl --cpunodebind=N --membind=N binds one")
        return f"torchrun --standalone --nproc_per_node={ranks} --no-python {command}" + (
            f"  # {'; '.join(said)}" if said else ""
        )
    if affinity in _PINNED:
        return (
            f"taskset -c {cpus or '<cores>'} {command}  # {affinity}: the compute threads' cores; "
            "sweeper.track puts the DataLoader workers on the rest"
        )
    return command
