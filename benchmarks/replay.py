"""Search strategies compared for free, by replaying a recorded grid through the real
search code, with many seeds.

The sweep's own plan (make_plan, the same space and baseline as `python -m sweeper -m`), its
ask/tell loop (optimize: reuse, OOM skipping, the prune floor, racing, stop rules) and its
confirmation (run_confirmation: candidates that beat the baseline, rounds until decided) run
unchanged; only the measured run is replaced, by `ReplayRunner`, which answers a job from the
grid: each window's samples are drawn around the grid's figure (a run-to-run factor and a
per-window factor, both log-normal), the real stopping rule (timing._verdict: precision, racing,
the floor) decides after each window, and the run is charged its warm-up, its windows and a
start-up cost. The peer is replayed the same way: Optuna's TPE with its defaults over the same
space, a fixed measuring time per trial (0.8 s warm-up + 2.5 s window), no reuse, no racing, no
confirmation (hydra-optuna-sweeper with an in-process objective).

Per strategy, over the seeds: the median and 90th percentile of trials and of measured seconds
until a configuration within 90% / 95% of the grid's best was measured, and the final pick's
grid figure (relative to the grid's best).

    python benchmarks/replay.py [seeds] [grid] [--trials N] [--strategies "a;b"]

(grid: a name of record_grid.py's GRIDS, read from benchmarks/grid_<name>.csv)

The grid's figures are single runs: the run-to-run noise is set here (RUN_CV, from this VM's
side-by-side rounds: rounds of one configuration spread about 10%, benchmarks/README.md); the
windows' spread is the grid's own, pooled over the rows of each worker count (Grid.read;
WINDOW_CV for a grid recorded without it).
"""

from __future__ import annotations

import contextlib
import io
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

import optuna
import pandas as pd
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from record_grid import GRIDS, GridSpec, csv_path  # noqa: E402

from sweeper import resolvers  # noqa: E402
from sweeper.config import TrialConf  # noqa: E402
from sweeper.measurement import Measurement, Memory, RunFacts, Stopped  # noqa: E402
from sweeper.measuring import timing  # noqa: E402
from sweeper.preflight import compose as _compose  # noqa: E402
from sweeper.result import RunResult, Status  # noqa: E402
from sweeper.search import confirm, converge  # noqa: E402
from sweeper.search import space as sp  # noqa: E402
from sweeper.search.confirm import run_confirmation  # noqa: E402
from sweeper.search.converge import Converged  # noqa: E402
from sweeper.search.launch import Job  # noqa: E402
from sweeper.search.loop import optimize  # noqa: E402
from sweeper.search.opening import make_sampler  # noqa: E402
from sweeper.search.plan import SweepPlan, make_plan  # noqa: E402
from sweeper.search.settings import SweepSettings  # noqa: E402
from sweeper.stats import rate_interval  # noqa: E402
from sweeper.store.study import StoredStudy  # noqa: E402
from sweeper.store.trials import config_of, ranked, runs_of, was_measured  # noqa: E402
from sweeper.verdict import Verdict  # noqa: E402

HERE = Path(__file__).resolve().parent
RUN_CV, WINDOW_CV = 0.08, 0.06  # log-normal sigma: run to run (the machine's mood), window to window
START_S = 0.4  # a forked run's start (benchmarks/README.md, trial cost)
# a run's warm-up until steady: the mean over the 100 trials of `sweep_gain.py race 5 20` once
# warm-up compared spans of blocks (2.0 when it compared single blocks, from the trial-cost runs)
WARMUP_S = 1.1
PEER_S = 0.8 + 2.5  # the peer's fixed measurement per trial
GRID_WINDOW_S, GRID_WINDOWS_S = 1.5, 4.5  # record_grid.py's windows: 3 of 1.5 s
TPE = {"_target_": "optuna.samplers.TPESampler"}
CPU = sp.Context(cuda=False, bf16=True, convolutional=True)  # the knobs' liveness on this VM
MV = {**TPE, "multivariate": True, "group": True}
GP = {"_target_": "optuna.samplers.GPSampler"}
TWO = {
    "objectives": ["samples_per_sec", "peak_memory_mb"]
}  # the sweep's objectives when it searched speed and memory together


# name: hydra.sweeper settings and the preset's search.* keys (the sampler's seed is the replay's); keys
# with _ are the replay's:
# _measure (measure.* of search trials), _confirm_measure (of confirmation runs; else the defaults), _contend (the race
# the earlier race: windows' noise only, and a run overlapping the best measured to max windows), _no_behind
# (the earlier rule: a run behind the best's own interval measured on to precision), _two_window_floor
# (before the same part: the floor waits for two windows however far below it a run is), _runners_up
# (the confirmation's runners-up beside the search's fastest; 1 as shipped)
def _precision(share: float) -> dict[str, Any]:
    """A strategy whose search and confirmation runs measure to this precision."""
    return {"_measure": {"rel_precision": share}, "_confirm_measure": {"rel_precision": share}}


STRATEGIES: dict[str, dict[str, Any]] = {
    "before: TPE, speed+memory, race on windows' noise": {
        "sampler": TPE,
        **TWO,
        "run_noise": None,
        "_contend": True,
        "_runners_up": 2,
    },
    "TPE, speed+memory, race with run noise": {"sampler": TPE, **TWO},
    "TPE, speed+memory, staged 0.5": {"sampler": TPE, **TWO, "search.staged": 0.5},
    "TPE, samples/sec (the default)": {"sampler": TPE},
    "TPE, samples/sec, every trial (converge=false)": {"sampler": TPE, "converge": False},
    # the convergence rule in the terminator's form: the stretch of sampled trials none of which
    # was faster than the best before it by the test (8, the default)
    "TPE, samples/sec, converge: last 6 none faster by the test": {"sampler": TPE, "_converge": {"after": 6}},
    "TPE, samples/sec, converge: last 10 none faster by the test": {"sampler": TPE, "_converge": {"after": 10}},
    "TPE, samples/sec, converge: last 12 none faster by the test": {"sampler": TPE, "_converge": {"after": 12}},
    "TPE, samples/sec, Optuna's regret-bound terminator": {"sampler": TPE, "_terminator": True},
    "TPE, samples/sec, converge: a best untold from the start points after three runs each ends it": {
        "sampler": TPE,
        "_untold_ends": True,
    },
    # the same with up to five runs each asked first (converge.RUNS for the sweep): a tie the
    # test can tell at five runs runs on, one it cannot ends the search
    "TPE, samples/sec, converge: a best untold from the start points after five runs each ends it": {
        "sampler": TPE,
        "_untold_ends": True,
        "_runs": 5,
    },
    # a sampled best the start points missed that has led through the whole stretch ends it too
    "TPE, samples/sec, converge: a best that led through the stretch ends it": {"sampler": TPE, "_led_through": True},
    "TPE, samples/sec, confirm top 3 at 5% (the last stop's default)": {
        "sampler": TPE,
        "_runners_up": 2,
        "_confirm_measure": {"rel_precision": 0.05},
    },
    "TPE, samples/sec, staged 0.5": {"sampler": TPE, "search.staged": 0.5},
    "TPE, samples/sec, staged 0.3": {"sampler": TPE, "search.staged": 0.3},
    "TPE, samples/sec, no racing": {"sampler": TPE, "race": False},
    "TPE, samples/sec, 5% precision": {"sampler": TPE, **_precision(0.05)},
    "TPE, samples/sec, 10% precision": {"sampler": TPE, **_precision(0.10)},
    "TPE, samples/sec, 15% precision": {"sampler": TPE, **_precision(0.15)},
    "TPE, samples/sec, 20% precision": {"sampler": TPE, **_precision(0.20)},
    "TPE, samples/sec, 15% in the search, 10% in the confirmation": {
        "sampler": TPE,
        "_measure": {"rel_precision": 0.15},
        "_confirm_measure": {"rel_precision": 0.10},
    },
    "TPE, samples/sec, at most 6 windows a search trial": {"sampler": TPE, "_measure": {"windows": 6}},
    "TPE, samples/sec, at most 5 windows a search trial": {"sampler": TPE, "_measure": {"windows": 5}},
    "TPE, samples/sec, at most 6 windows a run": {
        "sampler": TPE,
        "_measure": {"windows": 6},
        "_confirm_measure": {"windows": 6},
    },
    "TPE, samples/sec, confirm top 3": {"sampler": TPE, "_runners_up": 2},
    "TPE, samples/sec, confirm top 1": {"sampler": TPE, "_runners_up": 0},
    "TPE, samples/sec, no stop behind the best": {"sampler": TPE, "_no_behind": True},
    "TPE, samples/sec, floor after two windows only": {"sampler": TPE, "_two_window_floor": True},
    "TPE, samples/sec, neither": {"sampler": TPE, "_no_behind": True, "_two_window_floor": True},
    "TPE, samples/sec, no recipes": {"sampler": TPE, "search.recipes": False},
    "TPE multivariate+group, samples/sec": {"sampler": MV},
    "TPE startup 10, samples/sec": {"sampler": {**TPE, "n_startup_trials": 10}},
    "GPSampler, samples/sec": {"sampler": GP},
    "random": {"sampler": {"_target_": "optuna.samplers.RandomSampler"}},
}


@dataclass(frozen=True)
class TerminatorRule:
    """Optuna's terminator as a convergence rule: stop when the regret bound of its Gaussian-process
    model falls below the run-to-run noise of the best figure (StaticErrorEvaluator), after the
    same guard as the shipped rule (each main knob measured at two values)."""

    noise: float = RUN_CV

    def ask_again(self, *args: Any, **kwargs: Any) -> None:
        """The terminator asks for no point measured once more."""
        return None

    def waiting_on(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reason(self, trials: Sequence[Any], space: Any, main: Any, front: Any = ()) -> str | None:
        from optuna.study import StudyDirection
        from optuna.terminator import RegretBoundEvaluator

        from sweeper.search.converge import _tried_once

        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.values]
        if len(done) < 5 or _tried_once(trials, space, main):
            return None
        best = max(t.values[0] for t in done)
        bound = RegretBoundEvaluator().evaluate(done, StudyDirection.MAXIMIZE)
        return f"converged: regret bound {bound:,.0f} below the noise" if bound < self.noise * best else None


@dataclass(frozen=True)
class _EndsMore(Converged):
    """The shipped rule, and where it runs on with a best that is not a start point's, one more
    stop (`ends`, a line or None) on that best and the start points' best."""

    def reason(self, trials: Sequence[Any], space: Any, main: Any, front: Any = ()) -> str | None:
        said = super().reason(trials, space, main, front)
        standing = self._standing(trials, space, main, front) if said is None else None
        if standing is None or isinstance(standing, str) or standing[0].number == standing[1].number:
            return said
        return self.ends(*standing, trials)

    def ends(self, best: Any, start: Any, trials: Sequence[Any]) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class UntoldEnds(_EndsMore):
    """The shipped rule, and a best the test still cannot tell from the start points after
    converge.RUNS runs each taken as at their level: the search stops there too, where the
    shipped rule runs on."""

    def ends(self, best: Any, start: Any, trials: Sequence[Any]) -> str | None:
        if not self._exhausted(best, start, trials):
            return None
        return f"converged: the best, #{best.number}, untold from #{start.number} after {converge.RUNS} runs each"


@dataclass(frozen=True)
class LedThrough(_EndsMore):
    """The shipped rule, and a sampled best the start points missed (faster than them by the
    test on two runs or more, or untold after converge.RUNS runs each) that has led since
    before the stretch: none of the last `after` sampled trials took the lead, by its level or
    by the test. A sampler still climbing changes the leader within the stretch; one that found
    the region the start points missed and stayed there does not."""

    def ends(self, best: Any, start: Any, trials: Sequence[Any]) -> str | None:
        told = self._verdict(best, start, trials)
        if told is Verdict.FASTER and len(runs_of(best, trials)) < 2:
            return None
        if told is Verdict.UNSURE and not self._exhausted(best, start, trials):
            return None
        numbered = {t.number: t for t in trials}
        stretch = [t for t in trials if converge._sampled(t, numbered)][-self.after :]
        if best.number >= stretch[0].number:
            return None
        return f"converged: the best, #{best.number}, led through the last {self.after} sampled trials"


def _contending_verdict(t: timing.Timings, rule: timing.Rule) -> Stopped | None:
    """timing._verdict as it was before racing allowed for run noise: a run whose interval overlaps the best's is
    measured on to max windows instead of stopping when precise."""
    verdict = timing._verdict(t, rule)
    if verdict != Stopped.PRECISE or rule.race is None:
        return verdict
    _, interval = rate_interval(*t.totals())
    assert interval is not None
    return None if not (interval[0] > rule.race[1] or interval[1] < rule.race[0]) else verdict


@dataclass(frozen=True)
class Row:
    """One recorded configuration. The columns record_grid.py adds (its run's wall time, warm-up
    and window spread) are None in a grid recorded before them."""

    status: str
    samples_per_sec: float
    peak_memory_mb: float
    wall_s: float | None = None
    warmup_s: float | None = None
    window_cv: float | None = None  # of 1.5 s windows: pooled over the rows with its worker count (Grid.read)

    @property
    def start_s(self) -> float:
        """What the run cost besides its warm-up and windows: the fork, the build, the loader's
        start (spawned workers: seconds)."""
        if self.wall_s is None or self.warmup_s is None:
            return START_S
        return max(START_S, self.wall_s - self.warmup_s - GRID_WINDOWS_S)


@dataclass(frozen=True)
class Grid:
    """A recorded grid: knobs -> its row."""

    knobs: tuple[str, ...]
    points: Mapping[tuple[Any, ...], Row]

    @classmethod
    def read(cls, path: Path) -> Grid:
        """The grid, each row's window spread pooled (root mean square) over the rows with its
        number of loader workers: one row's spread of 3 windows is a poor estimate of its own
        (real 0.5 s windows of real sweeps' runs spread 0.6-3.9x what their rows said, quartiles;
        pooled, within 15% for 2-4 workers: docs/benchmarks.md)."""
        frame = pd.read_csv(path)
        knobs = tuple(c for c in frame.columns if "." in c)
        extra = [c for c in ("wall_s", "warmup_s", "window_cv") if c in frame.columns]
        if "window_cv" in frame.columns and "loader.num_workers" in frame.columns:
            pooled = frame.groupby("loader.num_workers")["window_cv"].transform(lambda s: math.sqrt((s**2).mean()))
            frame = frame.assign(window_cv=pooled)
        points = {
            tuple(_plain(row[k]) for k in knobs): Row(
                str(row["status"]),
                float(row["samples_per_sec"]),
                float(row["peak_memory_mb"]),
                **{c: None if pd.isna(row[c]) else float(row[c]) for c in extra},
            )
            for _, row in frame.iterrows()
        }
        return cls(knobs, points)

    def choices(self) -> dict[str, list[Any]]:
        """Each knob's values in the grid (the peer's space)."""
        return {k: sorted({key[i] for key in self.points}, key=repr) for i, k in enumerate(self.knobs)}

    @property
    def best(self) -> float:
        return max(row.samples_per_sec for row in self.points.values() if row.status in ("ok", "pruned"))

    def key(self, knobs: Mapping[str, Any]) -> tuple[Any, ...]:
        """A configuration's key in the grid: its dead knobs (a worker knob without workers) at
        their neutral values, as the sweep runs them."""
        live = {k: _plain(knobs.get(k)) for k in self.knobs}
        return tuple(v if sp.is_active(k, live, CPU) else sp.dead_value(k) for k, v in live.items())

    def row(self, knobs: Mapping[str, Any]) -> Row | None:
        row = self.points.get(self.key(knobs))
        return row if row is not None and row.status in ("ok", "pruned") else None

    def figure(self, knobs: Mapping[str, Any]) -> float | None:
        row = self.row(knobs)
        return row.samples_per_sec if row is not None else None


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value  # a CSV's empty cell: null


def _parse(value: str) -> Any:
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(value)
    return {"null": None, "true": True, "false": False}.get(value, value)


@dataclass
class ReplayRunner:
    """Answers the sweep's jobs from the grid, measuring as the real run would (the same windows
    and stopping rule), and keeps the measured seconds it charged."""

    grid: Grid
    plan: SweepPlan
    rng: random.Random
    search_measure: Mapping[str, Any] = field(default_factory=dict)  # measure.* of search trials
    confirm_measure: Mapping[str, Any] = field(default_factory=dict)  # measure.* of confirmation runs
    contend: bool = False  # the earlier race (see _contending_verdict)
    behind: bool = True  # False: trial.behind ignored (a run behind the best measured to the end)
    one_window_bar: bool = True  # False: the floor waits for two windows (trial.far_below ignored)
    confirming: bool = False
    charged_s: float = 0.0
    log: list[tuple[float, float | None]] = field(default_factory=list)  # (seconds so far, grid figure)

    def batch(self, jobs: Sequence[Job]) -> list[RunResult]:
        return [self._one(job.overrides) for job in jobs]

    def __call__(
        self, overrides: list[str], job_idx: int, trial_number: int | None = None, subdir: str | None = None
    ) -> RunResult:
        return self._one(overrides)

    @contextlib.contextmanager
    def on_node(self, host: str | None) -> Iterator[None]:
        yield

    def _one(self, overrides: list[str]) -> RunResult:
        given = dict(o.split("=", 1) for o in overrides)
        knobs = {k: _parse(given[k]) if k in given else self.plan.base_value(k) for k in self.grid.knobs}
        changed: dict[str, Any] = {}
        trial: dict[str, Any] = {}
        if "measure.rel_precision" in given:  # the precision the run-to-run noise asks for
            changed["rel_precision"] = _parse(given["measure.rel_precision"])
        changed.update(self.confirm_measure if self.confirming else self.search_measure)  # a strategy's own
        measure = replace(OmegaConf.to_object(self.plan.base.measure), **changed)
        for bar in ("prune_below", "far_below"):
            if f"trial.{bar}" in given:
                trial[bar] = float(given[f"trial.{bar}"])
        if "trial.race" in given:
            trial["race"] = [float(x) for x in given["trial.race"].strip("[]").split(",")]
        if "trial.behind" in given and self.behind:
            trial["behind"] = float(given["trial.behind"])
        row = self.grid.row(knobs)
        if row is None:
            self.charged_s += START_S
            return RunResult(Status.ERROR, f"not in the grid: {knobs}", fingerprint=self.plan.machine.fingerprint)
        true = row.samples_per_sec
        rule = timing.Rule.of(measure, int(knobs.get("loader.num_workers") or 0), trial=TrialConf(**trial))
        if not self.one_window_bar:
            rule = replace(rule, far_below=None)
        mood = math.exp(self.rng.gauss(0.0, RUN_CV))
        # the window spread of its rows (pooled by worker count), scaled from 1.5 s windows to this rule's
        window_cv = WINDOW_CV if row.window_cv is None else row.window_cv * math.sqrt(GRID_WINDOW_S / rule.window_s)
        t = timing.Timings()
        for _ in range(rule.max_windows):
            seconds = rule.window_s
            samples = true * mood * math.exp(self.rng.gauss(0.0, window_cv)) * seconds
            t.window_samples_per_sec.append(samples / seconds)
            t.window_totals.append((samples, seconds))
            t.stopped = (_contending_verdict if self.contend and not self.confirming else timing._verdict)(
                t, rule
            ) or Stopped.NOT
            if t.stopped:
                break
        t.pruned = t.stopped.pruned
        t.stopped = t.stopped or Stopped.MAX_WINDOWS
        self.charged_s += row.start_s + WARMUP_S + sum(s for _, s in t.window_totals)
        measured = Measurement(
            throughput=t.throughput(),
            memory=Memory(peak_memory_mb=row.peak_memory_mb),
            run=RunFacts(device="cpu", applied_in_script=True if self.plan.script else None),
        )
        self.log.append((self.charged_s, None if t.pruned else true))
        status = Status.PRUNED if t.pruned else Status.OK
        return RunResult(
            status, "pruned (replay)" if t.pruned else None, measured, fingerprint=self.plan.machine.fingerprint
        )


@dataclass(frozen=True)
class Outcome:
    """One replayed sweep: per threshold, (trials, seconds) until a configuration that good was
    measured (None: never), and the final pick's grid figure over the grid's best."""

    reached: Mapping[float, tuple[int, float] | None]
    pick: float
    trials: int
    seconds: float
    speedup: float | None = None  # the pick's grid figure over the baseline's (what the confirmation should say)
    confirm_runs: int = 0  # the confirmation's runs
    converged: bool = False  # the search stopped before n_trials, converged


def _reached(log: Sequence[tuple[float, float | None]], best: float) -> dict[float, tuple[int, float] | None]:
    out: dict[float, tuple[int, float] | None] = {}
    for share in (0.90, 0.95):
        out[share] = next(((i + 1, s) for i, (s, figure) in enumerate(log) if figure and figure >= share * best), None)
    return out


_PLANS: dict[tuple[str, str, int], SweepPlan] = {}


def plan_for(spec: GridSpec, strategy: Mapping[str, Any], n_trials: int, tmp: Path) -> SweepPlan:
    """The sweep's own plan for a grid's space and a strategy's settings (the sampler unseeded)."""
    key = (repr(spec), repr(strategy), n_trials)
    if key not in _PLANS:
        settings = SweepSettings.from_config(
            {
                **{k: v for k, v in strategy.items() if not k.startswith(("_", "search."))},
                "n_trials": n_trials,
                "storage": f"sqlite:///{tmp / 'unused.db'}",
                "study_name": "replay",
            }
        )
        search = [
            f"{k}={'null' if v is None else str(v).lower()}" for k, v in strategy.items() if k.startswith("search.")
        ]
        plan = make_plan(
            settings,
            [*spec.base, *search, *spec.space],
            compose=lambda o: _compose(tuple(o)),
            app_name="sweeper",
            sweep_dir=tmp / "sweep",
        )
        # the grid's space is swept on the command line (all of it "asked"): its main knobs are the
        # spec's; whether bf16 ran in hardware is the grid's host's, whatever this one does: the
        # recipes are that host's
        _PLANS[key] = replace(
            plan,
            main=frozenset(k for k in spec.main if k in plan.space),
            machine=replace(plan.machine, bf16_fast=spec.bf16_fast),
        )
    return _PLANS[key]


def replay_sweeper(
    grid: Grid, spec: GridSpec, strategy: Mapping[str, Any], seed: int, n_trials: int, tmp: Path
) -> Outcome:
    plan = plan_for(spec, strategy, n_trials, tmp)
    seeded = SweepSettings.from_config(
        {**_settings_dict(plan.settings), "sampler": {**strategy["sampler"], "seed": seed}}
    )
    plan = _with_settings(plan, seeded)
    if "_converge" in strategy:
        plan = replace(plan, converge=Converged(**strategy["_converge"]))
    if strategy.get("_untold_ends") and plan.converge is not None:
        plan = replace(plan, converge=UntoldEnds(sigma=plan.converge.sigma))
    if strategy.get("_led_through") and plan.converge is not None:
        plan = replace(plan, converge=LedThrough(sigma=plan.converge.sigma))
    if strategy.get("_terminator"):
        plan = replace(plan, converge=TerminatorRule())  # type: ignore[arg-type]
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(
        storage=storage, sampler=make_sampler(plan), study_name=plan.study_name, directions=list(plan.directions)
    )
    stored = StoredStudy(study, storage)
    runner = ReplayRunner(
        grid,
        plan,
        random.Random(seed),
        strategy.get("_measure", {}),
        strategy.get("_confirm_measure", {}),
        contend=bool(strategy.get("_contend")),
        behind=not strategy.get("_no_behind"),
        one_window_bar=not strategy.get("_two_window_floor"),
    )
    runs = strategy.get("_runs", converge.RUNS)  # the most runs each the rule asks of a tie
    with contextlib.redirect_stdout(io.StringIO()), mock.patch.object(converge, "RUNS", runs):
        why = optimize(stored, plan, runner, stopped=lambda: None, remaining=lambda: None)  # type: ignore[arg-type]
        searched = len(runner.log)
        runner.confirming = True
        with mock.patch.object(confirm, "RUNNERS_UP", strategy.get("_runners_up", confirm.RUNNERS_UP)):
            decision = run_confirmation(
                stored,
                plan,
                runner,
                remaining=lambda: None,
                typical_wall_s=5.0,  # type: ignore[arg-type]
                stopped=lambda: False,
            )
    trials = stored.trials(plan.setup)
    by_number = {t.number: t for t in trials}
    best = ranked(trials)
    winner = by_number[decision.winner] if decision else (best[0] if best else None)
    pick = grid.figure(config_of(winner)) if winner is not None else 0.0
    yours = grid.figure(plan.baseline_knobs)
    return Outcome(
        _reached(runner.log[:searched], grid.best),
        (pick or 0.0) / grid.best,
        sum(was_measured(t) for t in trials),
        runner.charged_s,
        (pick or 0.0) / yours if yours else None,
        len(runner.log) - searched,
        why.startswith("converged"),
    )


def _settings_dict(settings: SweepSettings) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(settings))  # type: ignore[return-value]


def _with_settings(plan: SweepPlan, settings: SweepSettings) -> SweepPlan:
    return replace(plan, settings=settings)


def replay_peer(grid: Grid, seed: int, n_trials: int) -> Outcome:
    """Hydra's Optuna sweeper: TPE with Optuna's defaults, one fixed measurement per trial."""
    rng = random.Random(seed)
    log: list[tuple[float, float | None]] = []
    spent = 0.0
    choices = grid.choices()

    def objective(trial: optuna.Trial) -> float:
        nonlocal spent
        knobs = {k: trial.suggest_categorical(k, v) for k, v in choices.items()}
        row = grid.row(knobs)
        true = row.samples_per_sec if row is not None else 0.0
        spent += PEER_S
        window_cv = (
            WINDOW_CV / math.sqrt(PEER_S / 0.5)
            if row is None or row.window_cv is None
            else row.window_cv * math.sqrt(GRID_WINDOW_S / 2.5)
        )
        noise = math.exp(rng.gauss(0.0, RUN_CV) + rng.gauss(0.0, window_cv))
        log.append((spent, true))
        return true * noise

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=n_trials)
    pick = grid.figure(study.best_trial.params) or 0.0
    return Outcome(_reached(log, grid.best), pick / grid.best, n_trials, spent)


def _q(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(name: str, outcomes: Sequence[Outcome]) -> str:
    """A table row: per threshold, the share of seeds that got there, and over all seeds (a seed
    that never got there counts as never) the median / 90th percentile of trials and seconds."""
    cells = [name]
    for share in (0.90, 0.95):
        hits = [o.reached[share] for o in outcomes]
        trials = [h[0] if h else math.inf for h in hits]
        secs = [h[1] if h else math.inf for h in hits]
        cells.append(
            f"{sum(h is not None for h in hits) / len(hits):.0%}: {_n(statistics.median(trials))} / "
            f"{_n(_q(trials, 0.9))} trials, {_n(statistics.median(secs))} / {_n(_q(secs, 0.9))} s"
        )
    picks = [o.pick for o in outcomes]
    cells.append(f"{statistics.median(picks):.3f} (p10 {_q(picks, 0.1):.3f}, mean {statistics.fmean(picks):.3f})")
    speedups = [o.speedup for o in outcomes if o.speedup is not None]
    cells.append(f"{statistics.median(speedups):.2f}x" if speedups else "-")
    cells.append(f"{statistics.median(o.seconds for o in outcomes):.0f}")
    cells.append(f"{statistics.fmean(o.confirm_runs for o in outcomes):.2f}")
    cells.append(
        f"{statistics.fmean(o.converged for o in outcomes):.0%}, {statistics.fmean(o.trials for o in outcomes):.1f}"
    )
    return "| " + " | ".join(cells) + " |"


def _n(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:.0f}"


def main(argv: Sequence[str]) -> None:
    args = list(argv)
    n_trials = 20
    chosen = list(STRATEGIES)
    if "--trials" in args:
        i = args.index("--trials")
        n_trials = int(args[i + 1])
        del args[i : i + 2]
    if "--strategies" in args:
        i = args.index("--strategies")
        chosen = args[i + 1].split(";")
        del args[i : i + 2]
    seeds = int(args[0]) if args else 100
    name = args[1] if len(args) > 1 else "mnist_mlp_train"
    if name not in GRIDS or any(c not in STRATEGIES for c in chosen):
        sys.exit(
            f"grid {name!r} or a strategy of {chosen} unknown: grids {', '.join(GRIDS)}; "
            f"strategies {', '.join(STRATEGIES)}"
        )
    resolvers.register()
    table(name, Grid.read(csv_path(name)), chosen, seeds, n_trials)


def table(name: str, grid: Grid, chosen: Sequence[str], seeds: int, n_trials: int) -> None:
    """The replay table of the chosen strategies on a grid, the peer's row first."""
    spec = GRIDS[name]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    started = time.monotonic()
    print(
        f"grid {name}: {len(grid.points)} points, best {grid.best:,.0f} samples/s; "
        f"{seeds} seeds, {n_trials} trials; noise: run {RUN_CV:.0%}, window "
        + (
            "the grid's, pooled by worker count"
            if next(iter(grid.points.values())).window_cv is not None
            else f"{WINDOW_CV:.0%}"
        )
    )
    print(
        "| strategy | to 90% of the best: seeds that got there: median / p90 trials, median / p90 measured s | "
        "to 95% | final pick / grid best, median (p10, mean) | pick / baseline, median "
        "| measured s, whole sweep, median | confirmation runs, mean | stopped early; trials measured, mean |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|")
    print(
        summarize("peer: TPE defaults, fixed 3.3 s, no reuse", [replay_peer(grid, s, n_trials) for s in range(seeds)])
    )
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in chosen:
            outcomes = [replay_sweeper(grid, spec, STRATEGIES[strategy], s, n_trials, Path(tmp)) for s in range(seeds)]
            print(summarize(f"sweeper: {strategy}", outcomes), flush=True)
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
