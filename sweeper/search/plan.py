"""What a sweep will do, decided before trial 1 and frozen: the fixed overrides, the search
space with the baseline in it, the machine, the study's name and storage, the lock. Everything
that can be wrong with the input is found here and raised as one ConfigError line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial

from .. import command
from ..config import plain
from ..host import Host, this_host
from ..knobs import Knob
from ..machine import Machine
from ..noise import Noise
from ..overrides import split_arguments, to_overrides
from ..runner.lock import DeviceClaim
from ..runner.probe import probe
from ..runner.run import start_env_of
from ..script_version import ScriptVersion, version_of
from ..spec import RunSpec
from ..store.confirmation import Confirmation
from ..store.storage import default_storage
from ..store.trials import repeated_figures, run_facts
from . import space as sp
from .budget import parse_duration
from .checks import BASIC_LAUNCHER, check_launcher, check_space
from .converge import Converged
from .objectives import resolve_directions
from .plan_machine import claim_of, machine_for
from .preset import Compose, searched
from .script_plan import baseline_note, script_space
from .settings import SearchConf, SweepSettings

# the groups a config of sweeper's own app has; another Hydra app's jobs measure themselves
OWN_GROUPS = ("task", "loader", "backend", "measure")


@dataclass(frozen=True)
class Learned:
    """What the sweep's runs have said about the workload (None: no run has said yet)."""

    convolutional: bool | None = None  # channels_last means something
    applied_in_script: bool | None = None  # a script's sweeper.track applies the first-step knobs

    @classmethod
    def of(cls, trials: Sequence[FrozenTrial], script: bool) -> Learned:
        """What the first runs that said it said (a run taken under load says them too)."""
        convolutional, applied = None, None
        for t in trials:
            facts = run_facts(t)
            if facts is not None:
                convolutional = convolutional if convolutional is not None else facts.convolutional
                applied = applied if applied is not None else facts.applied_in_script
                if convolutional is not None and (applied is not None or not script):
                    break  # the first measured run says it all: no need to read every trial at each ask
        return cls(convolutional, applied)


@dataclass(frozen=True)
class SweepPlan:
    settings: SweepSettings
    fixed: tuple[str, ...]  # the non-sweep overrides: what every trial runs with
    base: DictConfig  # the config as composed from them: the baseline
    own_app: bool  # sweeper's own workloads (else another Hydra app's jobs)
    machine: Machine
    workload: str  # "mnist_mlp train", "image_classification train (resnet18)", ...
    directions: tuple[str, ...]
    deadline_s: float | None  # the whole sweep's budget
    space: Mapping[str, BaseDistribution]  # the baseline's values included
    order: tuple[str, ...]  # knobs others depend on first
    baseline_knobs: Mapping[str, Any]
    study_name: str  # <name>@<hardware class>
    storage_url: str
    claim: DeviceClaim  # what each measurement locks (the same as a single run's)
    sweep_dir: Path
    asked: frozenset[str] = frozenset()  # knobs the user swept (the rest came from the preset)
    notes: tuple[str, ...] = ()  # what the plan decided that the user should hear before trial 1
    runs_here: bool = True  # the jobs run on this machine (the basic launcher), not a scheduler's
    script: bool = False  # task=script: a user's script, measured from outside
    # the knobs searched first (the preset's main ones and those the user swept): see held_back
    main: frozenset[str] = frozenset()
    # the preset's knobs searched only later (costly to start, no change to the steady rate),
    # unless the user swept them: see held_back
    later: frozenset[str] = frozenset()
    # when the search has converged before n_trials (None: hydra.sweeper.converge=false, or a
    # grid sampler, which is asked for every point)
    converge: Converged | None = None
    # the search= preset: its shares of n_trials (staged, later_after) and start points
    search: SearchConf = field(default_factory=SearchConf)
    # task=script: the version of the script the command runs (its file, its git work tree)
    script_version: ScriptVersion | None = None
    # the cores, SMT siblings, NUMA nodes and GPUs the plan counts (this machine, or one described)
    host: Host = field(default_factory=this_host)

    @property
    def setup(self) -> tuple[str, ...]:
        """What this sweep's trials share with the study's other trials of their setup: the fixed
        overrides and, for a script, the version of the script (an edited script is a new setup,
        measured anew). The command lines made for the trials are the fixed overrides alone."""
        return (*self.fixed, self.script_version.setup_entry()) if self.script_version else self.fixed

    def noise(self, trials: Sequence[FrozenTrial], confirmation: Confirmation | None = None) -> Noise:
        """The run-to-run noise every decision reads: hydra.sweeper.run_noise, updated from the
        configurations these trials (and the setup's last confirmation) measured more than once."""
        return Noise.estimate(self.settings.run_spread, repeated_figures(trials, confirmation))

    @property
    def objectives(self) -> list[str]:
        return list(self.settings.objectives)

    @property
    def hardware_class(self) -> str:
        return self.machine.hardware_class

    def context(self, learned: Learned) -> sp.Context:
        return sp.Context(
            cuda=self.machine.cuda,
            bf16=self.machine.bf16,
            convolutional=learned.convolutional,
            loader_in_order=self.machine.loader_in_order,
            openmp=self.machine.openmp,
            first_step_applied=not self.script or bool(learned.applied_in_script),
        )

    @property
    def ranks_from_preset(self) -> bool:
        """The preset searches the ranks, the user did not ask for them."""
        return Knob.DIST_NPROC_PER_NODE in self.space and Knob.DIST_NPROC_PER_NODE not in self.asked

    def _with_base(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """`knobs` over the base config's batch, workers, threads and ranks (those not searched)."""
        keys = (Knob.LOADER_BATCH_SIZE, Knob.LOADER_NUM_WORKERS, Knob.BACKEND_THREADS, Knob.DIST_NPROC_PER_NODE)
        return {**{k: self.base_value(k) for k in keys}, **knobs}

    def unsampled_reason(self, knobs: Mapping[str, Any]) -> str | None:
        """Why this trial is not measured (see space.unsampled_reason), or None."""
        if not self.own_app:
            return None
        return sp.unsampled_reason(
            self._with_base(knobs),
            self.host.usable_physical,
            self.base_value(Knob.TRAIN_EFFECTIVE_BATCH),
            ranks_from_preset=self.ranks_from_preset,
            logical=self.host.usable_logical,
        )

    def within_cores(self, knobs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The searched knobs of the nearest point the preset measures, when `knobs` oversubscribe
        the cores with ranks the preset chose (see space.within_cores); None otherwise."""
        if not self.own_app or not self.ranks_from_preset:
            return None
        fitted = sp.within_cores(
            self._with_base(knobs), self.host.usable_physical, self.space, self.host.usable_logical
        )
        return None if fitted is None else {k: fitted[k] for k in knobs}

    def held_back(self, measured: int) -> frozenset[str]:
        """The knobs kept at the baseline's values for now: the preset's `later` ones for the
        first search.later_after x n_trials measured trials (they cost seconds of start-up a
        trial and leave the steady rate alone), and in a staged search (search.staged = s) all
        but the main knobs for the first s x n_trials, so that the knobs that move throughput
        most are settled first; empty once the whole space is searched."""
        n_trials = self.settings.n_trials
        held: frozenset[str] = frozenset()
        share, rest = self.search.staged, frozenset(self.space) - self.main
        if share and self.main and rest and measured < share * n_trials:
            held |= rest
        if self.search.later_after and measured < self.search.later_after * n_trials:
            held |= self.later
        return held

    def base_value(self, key: str) -> Any:
        """The baseline's value of a key, as plain data (a choice as its string)."""
        return plain(OmegaConf.select(self.base, key))

    def start_environments(self) -> list[dict[str, str]]:
        """The environments the trials' processes can start with: every allocator, OpenMP binding
        and KMP_BLOCKTIME the space holds (your config's where it holds none), combined; your
        config's first. Empty where runs are not forked here (spawned, or a scheduler's jobs)."""
        if not (self.own_app and self.runs_here and self.base_value(Knob.MEASURE_ISOLATION) == "fork"):
            return []

        def values(knob: str) -> list[Any]:
            dist, yours = self.space.get(knob), self.base_value(knob)
            if not isinstance(dist, CategoricalDistribution):
                return [yours]
            return [yours, *(v for v in dist.choices if v != yours)]

        found: list[dict[str, str]] = []
        for allocator, bind, blocktime in itertools.product(
            values(Knob.BACKEND_ALLOCATOR), values(Knob.BACKEND_OMP_BIND), values(Knob.BACKEND_KMP_BLOCKTIME)
        ):
            env = start_env_of(str(allocator), str(bind), blocktime)
            if env not in found:
                found.append(env)
        return found

    def overrides_for(self, knobs: Mapping[str, Any]) -> list[str]:
        """The command-line overrides of a trial with these knobs."""
        return [*self.fixed, *to_overrides(knobs)]


def workload_label(base: DictConfig) -> str:
    task = base.task
    return f"{task.name} {task.mode}" + (f" ({task.model})" if "model" in task else "")


def _space(
    base: DictConfig,
    chosen: SearchConf,
    settings: SweepSettings,
    swept: Mapping[str, str],
    machine: Machine,
    *,
    own_app: bool,
    script: bool,
) -> tuple[dict[str, BaseDistribution], frozenset[str], list[str]]:
    """The search space: the command line's sweep expressions over hydra.sweeper.params over the
    preset's params; checked, restricted to what the machine has, with the baseline's value a
    point of it. Also the knobs the user asked for, and what to
    say about the space before trial 1."""
    space = sp.build_space({**chosen.params, **(settings.params or {}), **swept})
    asked = frozenset({*(settings.params or {}), *swept})
    notes: list[str] = []
    if script:
        space, notes = script_space(space, base, asked)
    if own_app:
        space = sp.hold_effective_batch(space, OmegaConf.select(base, Knob.TRAIN_EFFECTIVE_BATCH, default=None))
    check_space(base, space, own_app)
    machine_allows = sp.Context(
        cuda=machine.cuda,
        bf16=machine.bf16,
        convolutional=None,
        loader_in_order=machine.loader_in_order,
        openmp=machine.openmp,
    )
    space = sp.restrict_to_machine(space, machine_allows)
    # the baseline is a point of the space
    space = {k: sp.include_value(d, plain(OmegaConf.select(base, k))) for k, d in space.items()}
    return space, asked, notes


def _study_name(settings: SweepSettings, workload: str, machine: Machine) -> str:
    """Numbers from different hardware never mix: one study per hardware class."""
    if settings.study_name:
        return f"{settings.study_name}@{machine.hardware_class}"
    return f"{workload.split(' (')[0].replace(' ', '-')}-{machine.device}-{machine.hardware_class}"


def _workload(
    base: DictConfig, fixed: list[str], *, own_app: bool, script: bool, app_name: str
) -> tuple[str, ScriptVersion | None, list[str]]:
    """What the study is named by; a script's version (its edits are measured anew) and the
    note on the baseline its command gives."""
    if not script:
        return (workload_label(base) if own_app else app_name), None, []
    argv = RunSpec.of(base).argv
    notes = [note] if (note := baseline_note(base, fixed)) else []
    return f"{command.script_name(argv)} {base.task.mode} (script)", version_of(argv, Path.cwd()), notes


def make_plan(
    settings: SweepSettings,
    arguments: Sequence[str],
    *,
    compose: Compose,
    app_name: str,
    sweep_dir: Path,
    probe_machine: Callable[[str, str | None, str], Machine] = probe,
    launcher: str = BASIC_LAUNCHER,
    host: Host | None = None,
) -> SweepPlan:
    """Everything a sweep needs before trial 1; ConfigError names the first thing that is wrong.
    `host`: the machine the plan counts cores and GPUs of (this one unless described)."""
    host = host or this_host()
    check_launcher(settings, launcher)
    fixed, swept = split_arguments(arguments)
    base = compose(fixed)
    directions = resolve_directions(list(settings.objectives))
    deadline_s = parse_duration(settings.timeout)
    own_app = all(key in base for key in OWN_GROUPS)
    script = own_app and command.is_script(base.task)
    machine = machine_for(base, own_app, script, launcher, probe_machine)
    chosen = searched(base, compose, fixed, machine, workload_knobs=own_app and not script)
    # how the search runs is not what a trial runs with: search.recipes=false and the like leave
    # the trials' overrides, and the setup that the study knows them by, as they were
    fixed = [o for o in fixed if not o.lstrip("+~").startswith("search.")]
    space, asked, notes = _space(base, chosen, settings, swept, machine, own_app=own_app, script=script)
    workload, version, script_notes = _workload(base, fixed, own_app=own_app, script=script, app_name=app_name)
    notes += script_notes
    baseline_knobs = {k: plain(OmegaConf.select(base, k)) for k in space}
    return SweepPlan(
        settings=settings,
        fixed=tuple(fixed),
        base=base,
        own_app=own_app,
        machine=machine,
        workload=workload,
        directions=tuple(directions),
        deadline_s=deadline_s,
        space=space,
        order=tuple(sp.suggestion_order(list(space))),
        baseline_knobs=baseline_knobs,
        study_name=_study_name(settings, workload, machine),
        storage_url=settings.storage or default_storage(),
        claim=claim_of(base, own_app, host, space),
        sweep_dir=sweep_dir,
        asked=asked,
        notes=tuple(notes),
        runs_here=launcher == BASIC_LAUNCHER,
        script=script,
        main=frozenset(k for k in {*chosen.main, *asked} if k in space),
        later=frozenset(k for k in chosen.later if k in space and k not in asked),
        converge=Converged(sigma=settings.run_spread) if settings.converge and not settings.grid else None,
        search=chosen,
        script_version=version,
        host=host,
    )
