"""Issue 23: search strategies compared for free, by replaying a recorded grid through the real
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

    python benchmarks/replay.py [seeds] [grid.csv] [--trials N] [--strategies a,b]

The grid's figures are single search runs (a pruned row's figure is from its few windows): its
noise is not recorded per row, so the replay's noise is set here (RUN_CV, WINDOW_CV), from this
VM's side-by-side rounds (benchmarks/README.md: rounds of one configuration spread about 10%).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper import resolvers  # noqa: E402
from sweeper.__main__ import _compose  # noqa: E402
from sweeper.measure import timing  # noqa: E402
from sweeper.measurement import Measurement, Memory, RunFacts  # noqa: E402
from sweeper.result import RunResult, Status  # noqa: E402
from sweeper.search.confirm import run_confirmation  # noqa: E402
from sweeper.search.launch import Job  # noqa: E402
from sweeper.search.loop import optimize  # noqa: E402
from sweeper.search.plan import SweepPlan, make_plan  # noqa: E402
from sweeper.search.settings import SweepSettings  # noqa: E402
from sweeper.search.sweep import make_sampler  # noqa: E402
from sweeper.store.study import StoredStudy  # noqa: E402
from sweeper.store.trials import config_of, primary_value, ranked, was_measured  # noqa: E402

HERE = Path(__file__).resolve().parent
GRID = HERE / "grid_mnist_mlp_train.csv"
# the grid's space and base, as benchmarks/sweep_gain.py recorded it
SPACE = ["search=none", "loader.batch_size=choice(32,64,128,256,512,1024)", "loader.num_workers=range(0,5)",
         "backend.threads=choice(1,2)", "backend.precision=choice(fp32,bf16)", "backend.threads=2"]
RUN_CV, WINDOW_CV = 0.08, 0.06  # log-normal sigma: run to run (the machine's mood), window to window
START_S = 0.4  # a forked run's start (benchmarks/README.md, trial cost)
WARMUP_S = 2.0  # a run's warm-up until steady (the trial-cost benchmark's runs: 7.0 s measuring, 5 s of it windows)
PEER_S = 0.8 + 2.5  # the peer's fixed measurement per trial
TPE = {"_target_": "optuna.samplers.TPESampler"}
# name: hydra.sweeper settings (the sampler's seed is the replay's)
STRATEGIES: dict[str, dict[str, Any]] = {
    "tpe (today)": {"sampler": TPE},
    "tpe + recipes": {"sampler": TPE, "recipes": True},
    "tpe multivariate+group": {"sampler": {**TPE, "multivariate": True, "group": True}},
    "tpe multivariate + recipes": {"sampler": {**TPE, "multivariate": True, "group": True}, "recipes": True},
    "gp": {"sampler": {"_target_": "optuna.samplers.GPSampler"}},
    "gp + recipes": {"sampler": {"_target_": "optuna.samplers.GPSampler"}, "recipes": True},
    "random": {"sampler": {"_target_": "optuna.samplers.RandomSampler"}},
    "tpe no racing": {"sampler": TPE, "race": False},
    "tpe no racing no floor": {"sampler": TPE, "race": False, "prune_ratio": None},
    # measuring less per search trial (the confirmation keeps measure.*): replay-only keys
    "tpe 10% precision": {"sampler": TPE, "_measure": {"rel_precision": 0.10}},
    "tpe 10% precision 2 windows": {"sampler": TPE, "_measure": {"rel_precision": 0.10, "min_windows": 2}},
    "tpe 10% no racing": {"sampler": TPE, "race": False, "_measure": {"rel_precision": 0.10}},
    "tpe startup 10": {"sampler": {**TPE, "n_startup_trials": 10}},
    "tpe startup 10 no racing": {"sampler": {**TPE, "n_startup_trials": 10}, "race": False},
    "tpe mv startup 10 no racing": {"sampler": {**TPE, "n_startup_trials": 10, "multivariate": True, "group": True},
                                    "race": False},
    "gp 10% precision": {"sampler": {"_target_": "optuna.samplers.GPSampler"}, "_measure": {"rel_precision": 0.10}},
    "tpe mv 10% precision": {"sampler": {**TPE, "multivariate": True, "group": True},
                             "_measure": {"rel_precision": 0.10}},
}


@dataclass(frozen=True)
class Grid:
    """A recorded grid: knobs -> (status, samples/sec, peak memory MB)."""

    knobs: tuple[str, ...]
    points: Mapping[tuple[Any, ...], tuple[str, float, float]]

    @classmethod
    def read(cls, path: Path) -> Grid:
        frame = pd.read_csv(path)
        knobs = tuple(c for c in frame.columns if "." in c)
        points = {tuple(_plain(row[k]) for k in knobs): (str(row["status"]), float(row["samples_per_sec"]),
                                                         float(row["peak_memory_mb"]))
                  for _, row in frame.iterrows()}
        return cls(knobs, points)

    @property
    def best(self) -> float:
        return max(sps for status, sps, _ in self.points.values() if status in ("ok", "pruned"))

    def figure(self, knobs: Mapping[str, Any]) -> float | None:
        point = self.points.get(tuple(_plain(knobs.get(k)) for k in self.knobs))
        return point[1] if point is not None and point[0] in ("ok", "pruned") else None


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    return value


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
    confirming: bool = False
    charged_s: float = 0.0
    log: list[tuple[float, float | None]] = field(default_factory=list)  # (seconds so far, grid figure)

    def batch(self, jobs: Sequence[Job]) -> list[RunResult]:
        return [self._one(job.overrides) for job in jobs]

    def __call__(self, overrides: list[str], job_idx: int, trial_number: int | None = None,
                 subdir: str | None = None) -> RunResult:
        return self._one(overrides)

    @contextlib.contextmanager
    def on_node(self, host: str | None) -> Iterator[None]:
        yield

    def _one(self, overrides: list[str]) -> RunResult:
        given = dict(o.split("=", 1) for o in overrides)
        knobs = {k: _parse(given[k]) if k in given else self.plan.base_value(k) for k in self.grid.knobs}
        measure = {**{k: self.plan.base_value(f"measure.{k}") for k in
                      ("warmup_s", "warmup_steps", "windows", "window_s", "warmup_max_s", "steady_tol", "min_windows",
                       "rel_precision")}, "prune_below": None, "race": None,
                   **({} if self.confirming else self.search_measure)}
        if "measure.prune_below" in given:
            measure["prune_below"] = float(given["measure.prune_below"])
        if "measure.race" in given:
            measure["race"] = [float(x) for x in given["measure.race"].strip("[]").split(",")]
        true = self.grid.figure(knobs)
        if true is None:
            self.charged_s += START_S
            return RunResult(Status.ERROR, f"not in the grid: {knobs}", fingerprint=self.plan.machine.fingerprint)
        rule = timing.Rule.of(measure, int(knobs.get("loader.num_workers") or 0))
        mood = math.exp(self.rng.gauss(0.0, RUN_CV))
        t = timing.Timings()
        for _ in range(rule.max_windows):
            seconds = rule.window_s
            samples = true * mood * math.exp(self.rng.gauss(0.0, WINDOW_CV)) * seconds
            t.window_samples_per_sec.append(samples / seconds)
            t.window_totals.append((samples, seconds))
            t.stopped = timing._verdict(t, rule) or ""
            if t.stopped:
                break
        t.pruned = t.stopped in ("pruned", "raced")
        t.stopped = t.stopped or "max windows"
        self.charged_s += START_S + WARMUP_S + sum(s for _, s in t.window_totals)
        memory = self.grid.points[tuple(_plain(knobs.get(k)) for k in self.grid.knobs)][2]
        measured = Measurement(throughput=t.throughput(), memory=Memory(peak_memory_mb=memory),
                               run=RunFacts(device="cpu"))
        self.log.append((self.charged_s, None if t.pruned else true))
        status = Status.PRUNED if t.pruned else Status.OK
        return RunResult(status, "pruned (replay)" if t.pruned else None, measured,
                         fingerprint=self.plan.machine.fingerprint)


@dataclass(frozen=True)
class Outcome:
    """One replayed sweep: per threshold, (trials, seconds) until a configuration that good was
    measured (None: never), and the final pick's grid figure over the grid's best."""

    reached: Mapping[float, tuple[int, float] | None]
    pick: float
    trials: int
    seconds: float


def _reached(log: Sequence[tuple[float, float | None]], best: float) -> dict[float, tuple[int, float] | None]:
    out: dict[float, tuple[int, float] | None] = {}
    for share in (0.90, 0.95):
        out[share] = next(((i + 1, s) for i, (s, figure) in enumerate(log) if figure and figure >= share * best), None)
    return out


_PLANS: dict[tuple[str, int], SweepPlan] = {}


def replay_sweeper(grid: Grid, strategy: Mapping[str, Any], seed: int, n_trials: int, tmp: Path) -> Outcome:
    key = (repr(strategy), n_trials)
    if key not in _PLANS:
        settings = SweepSettings.from_config({**{k: v for k, v in strategy.items() if not k.startswith("_")},
                                              "n_trials": n_trials,
                                              "storage": f"sqlite:///{tmp / 'unused.db'}", "study_name": "replay"})
        _PLANS[key] = make_plan(settings, SPACE, compose=lambda o: _compose(tuple(o)), app_name="sweeper",
                                sweep_dir=tmp / "sweep")
    plan = _PLANS[key]
    seeded = SweepSettings.from_config({**_settings_dict(plan.settings),
                                        "sampler": {**strategy["sampler"], "seed": seed}})
    strategy = {k: v for k, v in strategy.items() if not k.startswith("_")} | {"_measure": strategy.get("_measure", {})}
    plan = _with_settings(plan, seeded)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, sampler=make_sampler(plan), study_name=plan.study_name,
                                directions=list(plan.directions))
    stored = StoredStudy(study, storage)
    runner = ReplayRunner(grid, plan, random.Random(seed), strategy["_measure"])
    with contextlib.redirect_stdout(io.StringIO()):
        optimize(stored, plan, runner, stopped=lambda: None, remaining=lambda: None)  # type: ignore[arg-type]
        searched = len(runner.log)
        runner.confirming = True
        decision = run_confirmation(stored, plan, runner, remaining=lambda: None, typical_wall_s=5.0,  # type: ignore[arg-type]
                                    stopped=lambda: False)
    trials = stored.trials(plan.fixed)
    by_number = {t.number: t for t in trials}
    best = ranked(trials)
    winner = by_number[decision.winner] if decision else (best[0] if best else None)
    pick = grid.figure(config_of(winner)) if winner is not None else 0.0
    return Outcome(_reached(runner.log[:searched], grid.best), (pick or 0.0) / grid.best,
                   sum(was_measured(t) for t in trials), runner.charged_s)


def _settings_dict(settings: SweepSettings) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(settings))  # type: ignore[return-value]


def _with_settings(plan: SweepPlan, settings: SweepSettings) -> SweepPlan:
    from dataclasses import replace

    return replace(plan, settings=settings)


def replay_peer(grid: Grid, seed: int, n_trials: int) -> Outcome:
    """Hydra's Optuna sweeper: TPE with Optuna's defaults, one fixed measurement per trial."""
    rng = random.Random(seed)
    log: list[tuple[float, float | None]] = []
    spent = 0.0
    choices = {"loader.batch_size": [32, 64, 128, 256, 512, 1024], "loader.num_workers": [0, 1, 2, 3, 4],
               "backend.threads": [1, 2], "backend.precision": ["fp32", "bf16"]}

    def objective(trial: optuna.Trial) -> float:
        nonlocal spent
        knobs = {k: trial.suggest_categorical(k, v) for k, v in choices.items()}
        true = grid.figure(knobs) or 0.0
        spent += PEER_S
        noise = math.exp(rng.gauss(0.0, RUN_CV) + rng.gauss(0.0, WINDOW_CV / math.sqrt(PEER_S / 0.5)))
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
    cells = [name]
    for share in (0.90, 0.95):
        hits = [o.reached[share] for o in outcomes]
        found = [h for h in hits if h is not None]
        share_found = len(found) / len(hits)
        if found:
            trials, secs = [h[0] for h in found], [h[1] for h in found]
            cells.append(f"{share_found:.0%}: {statistics.median(trials):.0f} / {_q(trials, 0.9):.0f} trials, "
                         f"{statistics.median(secs):.0f} / {_q(secs, 0.9):.0f} s")
        else:
            cells.append("never")
    picks = [o.pick for o in outcomes]
    cells.append(f"{statistics.median(picks):.3f} (p10 {_q(picks, 0.1):.3f})")
    cells.append(f"{statistics.median(o.seconds for o in outcomes):.0f}")
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str]) -> None:
    args = list(argv)
    n_trials = 20
    chosen = list(STRATEGIES)
    if "--trials" in args:
        i = args.index("--trials")
        n_trials = int(args[i + 1])
        del args[i:i + 2]
    if "--strategies" in args:
        i = args.index("--strategies")
        chosen = args[i + 1].split(",")
        del args[i:i + 2]
    seeds = int(args[0]) if args else 100
    grid = Grid.read(Path(args[1]) if len(args) > 1 else GRID)
    resolvers.register()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    started = time.monotonic()
    print(f"grid {GRID.name if len(args) < 2 else args[1]}: {len(grid.points)} points, best {grid.best:,.0f} samples/s; "
          f"{seeds} seeds, {n_trials} trials; noise: run {RUN_CV:.0%}, window {WINDOW_CV:.0%}")
    print("| strategy | to 90% of the best: found / median / p90 trials, seconds | to 95% | final pick / grid best "
          "(median) | measured s, whole sweep (median) |")
    print("|---|---|---|---|---:|")
    print(summarize("peer: TPE defaults, fixed 3.3 s, no reuse", [replay_peer(grid, s, n_trials) for s in range(seeds)]))
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            outcomes = [replay_sweeper(grid, STRATEGIES[name], s, n_trials, Path(tmp)) for s in range(seeds)]
            print(summarize(f"sweeper: {name}", outcomes), flush=True)
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
