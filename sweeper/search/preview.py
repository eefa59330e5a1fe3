"""The plan, shown before a night is spent on it (hydra.sweeper.plan): the machine as read, the
space, the start points in order, what the preset skips and why, and an estimate of the sweep's
wall time. Nothing is measured, but for one run of your config where the study has no history
to time a run by (the probe), which also says what the workload makes dead (channels_last on a
model without convolutions), so that the start points read as they will run. `plan_lines` is
pure; `show` gathers what it prints."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ..host import Host
from ..knobs import Knob
from ..machine import Fingerprint, Machine, hardware_class
from ..result import RunResult
from ..runner.run import RESULT_FILE
from ..store.record import TrialRecord
from ..store.study import StoredStudy
from . import space as sp
from .budget import format_duration
from .plan import Learned, SweepPlan
from .settings import SweepSettings
from .start import StartPoint, live, recipes

HERE = "here"


@dataclass(frozen=True)
class Estimate:
    """A sweep's wall time from one run's: each trial a run, the confirmation's rounds three runs
    each (the winner, the baseline and a runner-up); a budget cuts the trials to what it holds
    after the confirmation's first round. Trials raced behind the best stop sooner: at most."""

    run_s: float
    source: str  # where the run's wall time came from
    trials: int  # the trials the sweep counts on
    confirm_runs: int
    budget_s: float | None = None

    @classmethod
    def of(cls, run_s: float, source: str, settings: SweepSettings, budget_s: float | None) -> Estimate:
        """As the sweep's budget rule runs it (stops.stop_reason): the baseline always; each next
        trial while what is left exceeds a run and the confirmation's first round; then as many
        confirmation runs as are left (a first round at least), none where only the baseline ran."""
        trials, runs = settings.n_trials, settings.confirmation_runs
        if budget_s is not None and run_s > 0:
            room = budget_s / run_s - 1 - settings.first_round_runs  # trial k starts while k < room
            trials = min(trials, max(1, math.ceil(room)))
            left = math.floor(budget_s / run_s) - trials
            runs = min(runs, max(settings.first_round_runs, left)) if trials > 1 else 0
        return cls(run_s, source, trials, runs, budget_s)

    @property
    def total_s(self) -> float:
        return self.run_s * (self.trials + self.confirm_runs)

    def describe(self, n_trials: int) -> str:
        budget = f"hydra.sweeper.timeout={format_duration(self.budget_s or 0)}"
        if self.budget_s is not None and self.trials <= 1:
            cut = f"; {budget} holds your config's run alone: nothing is measured against it"
        elif self.budget_s is not None and self.trials < n_trials:
            cut = f"; {budget} holds {self.trials} of the {n_trials} trials and the confirmation's first round"
        else:
            cut = ""
        return (
            f"about {format_duration(self.run_s)} a run ({self.source}): at most "
            f"{format_duration(self.total_s)} for {self.trials} trial{'s' if self.trials != 1 else ''} and "
            f"{self.confirm_runs} confirmation runs{cut}"
        )


def _values(dist: BaseDistribution | None, base: Any) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    return [base]


def skipped(plan: SweepPlan) -> list[str]:
    """The ranks x threads x workers points of the space that the preset does not measure, counted,
    with one reason and the point measured instead (pure but for the plan)."""
    keys = (Knob.DIST_NPROC_PER_NODE, Knob.BACKEND_THREADS, Knob.LOADER_NUM_WORKERS)
    grids = [_values(plan.space.get(k), plan.base_value(k)) for k in keys]
    if len(grids[0]) < 2:
        return []
    total, over, first = 0, 0, None
    for point in itertools.product(*grids):
        knobs = dict(zip(keys, point))
        total += 1
        if (why := plan.unsampled_reason(knobs)) is not None:
            over += 1
            if first is None:
                fitted = plan.within_cores(knobs)
                first = (why.split(";")[0], {k: v for k, v in (fitted or {}).items() if k in plan.space})
    if first is None:
        return []
    instead = (
        f"; measured instead at {sp_short(first[1])}" if first[1] else "; no nearer point of the space fits"
    )  # fmt: skip
    return [f"{over} of {total} ranks x threads x workers points, e.g. {first[0]}{instead}"]


def sp_short(knobs: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (knobs or {}).items())


def plan_lines(
    plan: SweepPlan, points: Sequence[StartPoint], skips: Sequence[str], estimate: Estimate | str
) -> list[str]:
    """What `hydra.sweeper.plan` prints (pure)."""
    host = plan.host
    lines = [
        f"machine: {host.describe()}",
        f"workload: {plan.workload}, preset {plan.search.preset}",
        f"measures on: {measured_on(plan)}",
    ]
    lines.append(f"space: {len(plan.space)} knobs (* searched first), your config's value in brackets")
    for key in plan.order:
        mark = "*" if key in plan.main else " "
        lines.append(f"  {mark} {key:<30} {sp.spelled(plan.space[key]):<36} [{plan.baseline_knobs.get(key)}]")
    dropped = sorted(set(plan.search.params) - set(plan.space))
    if dropped:
        lines.append(f"not searched (one value here, or not installed, or not in your command): {', '.join(dropped)}")
    lines += [f"note: {note}" for note in plan.notes]
    lines.append("start: trial 0 your config, then")
    for n, point in enumerate(points, 1):
        changed = {k: v for k, v in point.knobs.items() if plan.baseline_knobs.get(k) != v}
        lines.append(f"  {n}. {point.origin.removeprefix('recipe: ')}: {sp_short(changed) or 'as yours'}")
    if not points:
        lines.append("  the sampler's choices (no recipes)")
    lines += [f"skipped, not measured: {s}" for s in skips] or ["skipped, not measured: none"]
    lines.append(
        f"estimate: {estimate.describe(plan.settings.n_trials) if isinstance(estimate, Estimate) else estimate}"
    )
    return lines


def measured_on(plan: SweepPlan) -> str:
    """The devices each measurement claims and locks (one sweep at a time on each)."""
    claim = plan.claim
    if claim.resource == "cpu":
        return f"the CPU ({plan.host.usable_logical} CPUs this process may use)"
    many = len(claim.locks) > 1
    which = claim.pin if claim.pin is not None else claim.resource.removeprefix("gpu")
    return f"GPU{'s' if many else ''} {which}" + (", one per rank, each locked for its trial" if many else "")


def start_points(plan: SweepPlan, known: Learned) -> list[StartPoint]:
    """The recipes as they will be queued: knobs they make dead at the value the run has, as far
    as the runs so far (`known`: the study's, or the probe's) said what the workload makes dead."""
    if not plan.search.recipes or plan.settings.grid:
        return []
    machine = plan.machine
    points = recipes(
        plan.space,
        plan.baseline_knobs,
        host=plan.host,
        cuda=machine.cuda,
        bf16=machine.bf16,
        bf16_fast=machine.bf16_fast,
    )
    return [live(p, plan, plan.context(known)) for p in points]


def history_run_s(plan: SweepPlan, trials: Sequence[Any]) -> float | None:
    """The median wall time of the study's runs of this setup, where it has any."""
    walls = sorted(w for t in trials if (w := TrialRecord.of(t).wall_s))
    return walls[len(walls) // 2] if walls else None


@dataclass(frozen=True)
class Probe:
    """One run of your config as `python -m sweeper` measures it: its wall time, and what it
    said of the workload (whether channels_last means anything)."""

    run_s: float
    known: Learned


def probe_run(fixed: Sequence[str]) -> Probe | None:
    """One run of your config, timed (None: it failed)."""
    with tempfile.TemporaryDirectory(prefix="sweeper-plan-") as out:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "sweeper", *fixed, f"hydra.run.dir={out}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        run_s = time.monotonic() - started
        if done.returncode != 0:
            return None
        try:
            measured = RunResult.from_json(json.loads((Path(out) / RESULT_FILE).read_text())).measurement
        except (OSError, ValueError):
            measured = None  # timed all the same; the start points then show the recipes as written
        facts = measured.run if measured is not None else None
        return Probe(run_s, Learned(facts.convolutional, facts.applied_in_script) if facts else Learned())


def described_machine(host: Host, device: str) -> Machine:
    """What the probe would find on a described machine: CUDA where it has GPUs and the config
    does not ask for the CPU, bf16 computed in hardware (the probe there will say otherwise)."""
    cuda = bool(host.gpus) and device != "cpu"
    made = Fingerprint(
        hostname=host.name,
        cpu="described",
        cpu_count=host.logical,
        cpus_available=host.usable_logical,
        cpu_quota=host.cpu_quota,
        gpu=host.gpus[0].name if cuda else None,
        gpu_count=len(host.gpus) if cuda else 0,
    )
    fingerprint = dataclasses.replace(made, hardware_class=hardware_class(made))
    return Machine(device="cuda" if cuda else "cpu", cuda=cuda, bf16=True, fingerprint=fingerprint)


def estimate_for(plan: SweepPlan, described: bool, trials: Sequence[Any]) -> tuple[Estimate | str, Learned]:
    """From the study's runs of this setup (`trials`) where it has some, else from one probe run
    of your config here; with what those runs said of the workload."""
    if described:
        return "made on the machine itself: run the same command there with hydra.sweeper.plan=here", Learned()
    if trials and (run_s := history_run_s(plan, trials)) is not None:
        source = f"the median of the study's {len(trials)} runs of this setup"
        return Estimate.of(run_s, source, plan.settings, plan.deadline_s), Learned.of(trials, plan.script)
    if not plan.own_app:
        return "none: another app's runs cannot be probed; a first sweep's trials time them", Learned()
    progress_line(f"timing one run of your config ({' '.join(['python -m sweeper', *plan.fixed])}) ...")
    if (probe := probe_run(plan.fixed)) is None:
        failed = "none: the probe run of your config failed (python -m sweeper with the same overrides says why)"
        return failed, Learned()
    return Estimate.of(probe.run_s, "a probe run of your config", plan.settings, plan.deadline_s), probe.known


def study_trials(plan: SweepPlan) -> list[Any]:
    """This setup's trials in the plan's study, without creating either (none where neither is)."""
    import optuna

    url = plan.storage_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []
    try:
        study = optuna.load_study(study_name=plan.study_name, storage=url)
    except Exception:  # noqa: BLE001 - no such study, or a storage that does not answer: no history
        return []
    return StoredStudy(study, url).trials(plan.setup)


def progress_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def show(plan: SweepPlan, described: bool) -> None:
    """Print the plan (stdout), with the estimate where it can be made."""
    estimate, known = estimate_for(plan, described, [] if described else study_trials(plan))
    print("\n".join(plan_lines(plan, start_points(plan, known), skipped(plan), estimate)), flush=True)
