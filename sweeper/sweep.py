"""The search loop behind `python -m sweeper -m`: baseline first, Optuna ask/tell over isolated
trials, failures recorded as data, early stops, interleaved confirmation, outputs.

The Hydra plugin (hydra_plugins/throughput_sweeper) is a thin shell over `Sweep`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, Trial, TrialState

from . import confirm, history, objectives, progress, search_space, sweep_outputs
from .budget import parse_duration
from .fingerprint import host_fingerprint
from .probe import probe
from .run import worker_spec
from .storage import default_storage, has_password, heartbeat, open_storage, redact, scrub_files, stale_trial_ids
from . import isolation, lock as measure_lock
from .validation import ConfigError, check_config

log = logging.getLogger(__name__)
_MISSING = object()
# suggestions in a row that were all measured before: the space has nothing new left
EXHAUSTED_AFTER = 20
TPE_STARTUP_TRIALS = 5
LOCK_MODES = ("wait", "fail", "off")
# metrics stored on each trial (scalars of the worker's result)
METRIC_KEYS = (
    "samples_per_sec", "samples_per_sec_iqr", "samples_per_sec_rel_iqr", "step_time_p50_ms",
    "step_time_p95_ms", "data_wait_fraction", "bottleneck", "peak_memory_mb", "peak_rss_mb",
    "cuda_max_allocated_mb", "dataloader_processes", "warmup_s", "compile_s", "first_step_s",
    "compute_bound_samples_per_sec", "data_path_cost", "windows_measured", "wall_s", "device",
    "import_s", "build_s", "measure_s",
)


@dataclass
class SweepSettings:
    """The plugin's config, as plain values (see hydra_plugins/throughput_sweeper/config.py)."""

    sampler: dict[str, Any]
    direction: Any = None
    storage: str | None = None
    study_name: str | None = None
    n_trials: int = 20
    params: dict[str, str] = field(default_factory=dict)
    timeout: str | float | None = None
    objectives: list[str] = field(default_factory=lambda: ["samples_per_sec", "peak_memory_mb"])
    constraints: dict[str, Any] = field(default_factory=dict)
    confirm: dict[str, Any] = field(default_factory=dict)
    patience: int | None = None
    prune_ratio: float | None = 0.5
    remeasure: bool = False
    lock: str = "wait"


def suggest(trial: Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, list(dist.choices))
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    assert isinstance(dist, FloatDistribution)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)


def grid_space(space: Mapping[str, BaseDistribution]) -> dict[str, list[Any]]:
    """GridSampler's search_space from the distributions (ints expanded, floats refused)."""
    grid: dict[str, list[Any]] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            raise ConfigError(f"GridSampler needs finite choices: {key} is {dist}; use choice(...) or range(...).")
    return grid


class Sweep:
    def __init__(self, settings: SweepSettings) -> None:
        self.s = settings
        self.launcher: Launcher | None = None
        self.stop_signal: int | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        # one progress line per trial is ours; Hydra's "Launching 1 jobs locally" is noise
        logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)

    # ---- preparing: everything that can be wrong is found here, before trial 1 ----

    def _compose(self, overrides: Sequence[str]) -> DictConfig:
        try:
            return self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        except Exception as exc:  # noqa: BLE001 - Hydra's own message names the bad key
            raise ConfigError(" ".join(str(exc).split())) from exc

    def _split_arguments(self, arguments: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        parser = OverridesParser.create()
        fixed, swept = [], {}
        for override in parser.parse_overrides(list(arguments)):
            if override.is_sweep_override():
                swept[override.get_key_element()] = override.input_line.split("=", 1)[1]
            else:
                fixed.append(override.input_line)
        return fixed, swept

    def _preset_params(self, base: DictConfig, fixed: list[str], device_kind: str) -> dict[str, str]:
        if "search" not in base or base.search is None:
            return {}
        preset = base.search.get("preset")
        if preset == "auto":
            chosen = "gpu" if device_kind == "cuda" else "cpu"
            base = self._compose([*fixed, f"search={chosen}"])
        return {k: str(v) for k, v in (OmegaConf.to_container(base.search.params, resolve=True) or {}).items()}

    def _check_space(self, base: DictConfig, space: dict[str, BaseDistribution]) -> None:
        for key in space:
            if OmegaConf.select(base, key, default=_MISSING) is _MISSING:
                raise ConfigError(f"search param {key!r} is not a key of the config (typo?).")
        if not self.own_app:
            return
        spec = worker_spec(base)
        for key, dist in space.items():
            group, _, leaf = key.partition(".")
            if group not in spec or "." in leaf:
                continue
            if isinstance(dist, CategoricalDistribution):
                values = list(dist.choices)
            elif isinstance(dist, (IntDistribution, FloatDistribution)):
                values = [dist.low, dist.high]
            for value in values:
                trial_spec = json.loads(json.dumps(spec))
                trial_spec[group][leaf] = value
                if key in ("loader.prefetch_factor", "loader.persistent_workers"):
                    trial_spec["loader"]["num_workers"] = max(1, trial_spec["loader"]["num_workers"])
                try:
                    check_config(trial_spec)
                except ConfigError as exc:
                    raise ConfigError(f"search param {key}: {exc}") from exc

    def prepare(self, arguments: Sequence[str]) -> None:
        fixed, swept = self._split_arguments(arguments)
        self.fixed = fixed
        base = self._compose(fixed)
        self.base = base
        self.directions = objectives.resolve_directions(list(self.s.objectives), self.s.direction)
        self.deadline_s = parse_duration(self.s.timeout)
        if self.s.n_trials < 1:
            raise ConfigError(f"hydra.sweeper.n_trials={self.s.n_trials} is invalid: expected an integer >= 1.")
        # from another Hydra app (no task/loader/backend/measure), the job measures itself
        self.own_app = all(key in base for key in ("task", "loader", "backend", "measure"))
        if self.own_app:
            check_config(worker_spec(base))
            self.machine = probe(str(base.backend.device))
        else:
            self.machine = {"device": "cpu", "cuda": False, "bf16": True, "fingerprint": host_fingerprint()}
        params = {**self._preset_params(base, fixed, self.machine["device"]), **(self.s.params or {}), **swept}
        space = search_space.build_space(params)
        self._check_space(base, space)
        conv: bool | None = None
        if self.own_app:
            task = base.task
            self.workload = f"{task.name} {task.mode}" + (f" ({task.model})" if "model" in task else "")
            if task.name == "image_classification":
                conv = not str(task.model).startswith(("vit_", "swin_", "maxvit_"))
            elif task.name in ("mnist_mlp", "language_model"):
                conv = False
        else:
            self.workload = str(self.config.hydra.job.name)
        self.ctx = search_space.Context(cuda=self.machine["cuda"], bf16=self.machine["bf16"], convolutional=conv)
        space = search_space.restrict_to_machine(space, self.ctx)
        # the baseline is a point of the space
        self.baseline_knobs = {k: OmegaConf.select(base, k) for k in space}
        self.space = {k: search_space.include_value(d, self.baseline_knobs[k]) for k, d in space.items()}
        self.order = search_space.suggestion_order(list(self.space))
        fingerprint = self.machine["fingerprint"]
        self.hardware_class = fingerprint["hardware_class"]
        # numbers from different hardware never mix: one study per hardware class
        self.study_name = (
            f"{self.s.study_name}@{self.hardware_class}" if self.s.study_name
            else f"{self.workload.split(' (')[0].replace(' ', '-')}-{self.machine['device']}-{self.hardware_class}"
        )
        if self.s.lock not in LOCK_MODES:
            raise ConfigError(f"hydra.sweeper.lock={self.s.lock!r} is invalid: expected one of {', '.join(LOCK_MODES)}.")
        self.storage_url = self.s.storage or default_storage()
        self.study = self._load_study()

    def _load_study(self) -> optuna.Study:
        sampler_cfg = dict(self.s.sampler or {"_target_": "optuna.samplers.TPESampler"})
        target = str(sampler_cfg.get("_target_", ""))
        if target.endswith("GridSampler") and "search_space" not in sampler_cfg:
            sampler_cfg["search_space"] = grid_space(self.space)
        if target.endswith("TPESampler"):
            # a sweep has tens of trials, not hundreds: model the space sooner than TPE's 10
            sampler_cfg.setdefault("n_startup_trials", TPE_STARTUP_TRIALS)
        try:
            sampler = instantiate(sampler_cfg, _convert_="all")
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"hydra.sweeper.sampler: cannot instantiate {sampler_cfg.get('_target_')!r}: {exc}") from exc
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            storage=open_storage(self.storage_url),
            sampler=sampler,
            study_name=self.study_name,
            directions=self.directions,
            load_if_exists=True,
        )
        existing = [d.name.lower() for d in study.directions]
        if existing != self.directions:
            raise ConfigError(
                f"study {self.study_name!r} optimises {existing}, not {self.directions}: "
                "use another hydra.sweeper.study_name or the same objectives."
            )
        study.set_user_attr("objectives", list(self.s.objectives))
        study.set_user_attr("hardware_class", self.hardware_class)
        return study

    # ---- running ----

    def _setup_trials(self) -> list[FrozenTrial]:
        return [t for t in self.study.get_trials(deepcopy=False) if history.same_setup(t, self.fixed)]

    def _fail_orphans(self) -> None:
        """RUNNING trials whose sweep is gone: on any host, no heartbeat for the grace period
        (RDB storages); on this host, at once, when their sweep process is dead."""
        storage = self.study._storage
        for trial_id in stale_trial_ids(storage, self.study._study_id):
            storage.set_trial_user_attr(trial_id, "status", "interrupted")
            storage.set_trial_user_attr(trial_id, "reason", "its sweep stopped sending heartbeats (killed, or its host went down)")
            self._tell_study(storage.get_trial_number_from_id(trial_id), state=TrialState.FAIL)
        host = socket.gethostname()
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            pid = t.user_attrs.get("sweeper_pid")
            if t.user_attrs.get("host") != host or pid is None:
                continue
            if _pid_alive(int(pid), t.user_attrs.get("sweeper_started")):
                continue
            self.study._storage.set_trial_user_attr(t._trial_id, "status", "interrupted")
            self.study._storage.set_trial_user_attr(t._trial_id, "reason", "its sweep process died")
            self._tell_study(t.number, state=TrialState.FAIL)

    def _launch(self, overrides: list[str], job_idx: int, trial_id: int | None = None) -> dict[str, Any]:
        assert self.launcher is not None
        if self.stop_signal is not None:
            return self._interrupted_result()
        lock = None
        if self.s.lock != "off":
            lock = measure_lock.MeasureLock(self.lock_resource, {"what": f"study {self.study_name}"})
            waited = lock.acquire(
                on_wait=lambda h: progress.say(f"waiting: this machine is measuring for {measure_lock.describe(h)}"),
                should_stop=lambda: self.stop_signal is not None,
            )
            if not waited:
                return self._interrupted_result()
        try:
            with heartbeat(self.study._storage, trial_id):
                job = self.launcher.launch([overrides], initial_job_idx=job_idx)[0]
        finally:
            if lock is not None:
                lock.release()
        if job.status == JobStatus.COMPLETED:
            return as_result(job.return_value, self.s.objectives)
        exc = job._return_value
        status = "invalid" if isinstance(exc, ConfigError) else "error"
        return {"status": status, "reason": f"{type(exc).__name__}: {exc}".splitlines()[0]}

    def _interrupted_result(self) -> dict[str, Any]:
        return {"status": "interrupted", "reason": f"the sweep was stopped by {signal_name(self.stop_signal)}"}

    def _remaining(self) -> float | None:
        if self.deadline_s is None:
            return None
        return self.deadline_s - (time.monotonic() - self.started)

    def _typical_wall(self) -> float:
        walls = [float(t.user_attrs["metrics"]["wall_s"]) for t in self._setup_trials()
                 if t.user_attrs.get("metrics", {}).get("wall_s")]
        return sorted(walls)[len(walls) // 2] if walls else 0.0

    def _measure_overrides(self, prune_below: float | None) -> list[str]:
        extra: list[str] = []
        if not self.own_app:  # another app's jobs measure themselves
            return extra
        if prune_below is not None:
            extra.append(f"measure.prune_below={prune_below:.6g}")
        remaining = self._remaining()
        if remaining is not None:
            cap = max(10.0, remaining)
            if cap < float(self.base.measure.timeout_s):
                extra.append(f"measure.timeout_s={cap:.0f}")
        return extra

    def _ask(self, baseline: bool) -> tuple[Trial, dict[str, Any]]:
        if baseline:
            self.study.enqueue_trial({k: v for k, v in self.baseline_knobs.items()})
        trial = self.study.ask()
        chosen: dict[str, Any] = {}
        context = {k: OmegaConf.select(self.base, k) for k in search_space.NEUTRAL}
        context["loader.num_workers"] = OmegaConf.select(self.base, "loader.num_workers")
        for key in self.order:
            if search_space.is_active(key, {**context, **chosen}, self.ctx):
                chosen[key] = suggest(trial, key, self.space[key])
            else:
                chosen[key] = search_space.NEUTRAL[key]
        # dead knobs the user set outside the space go neutral too, or the trial can't run
        for key, neutral in (search_space.NEUTRAL.items() if self.own_app else ()):
            if key not in chosen and not search_space.is_active(key, {**context, **chosen}, self.ctx):
                if OmegaConf.select(self.base, key) != neutral:
                    chosen[key] = neutral
        trial.set_user_attr("baseline", baseline)
        trial.set_user_attr("knobs", chosen)
        trial.set_user_attr("fixed_overrides", list(self.fixed))
        trial.set_user_attr("workload", self.workload)
        trial.set_user_attr("sweep_dir", str(self.sweep_dir))
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("sweeper_pid", os.getpid())
        trial.set_user_attr("sweeper_started", _started(os.getpid()))
        trial.set_user_attr("hardware_class", self.hardware_class)
        return trial, chosen

    def _tell_study(self, trial: Trial | int, values: Sequence[float] | None = None,
                    state: TrialState | None = None) -> None:
        """study.tell, except that a sampler saying it is done (GridSampler calls study.stop(),
        which Optuna only allows inside optimize()) ends the sweep instead of crashing it; the
        trial itself is stored either way (Optuna saves it in a finally)."""
        try:
            self.study.tell(trial, values, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            self.sampler_done = True

    def _tell(self, trial: Trial, result: Mapping[str, Any]) -> FrozenTrial:
        status = result.get("status", "error")
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", result.get("reason"))
        metrics = {k: result[k] for k in METRIC_KEYS if result.get(k) is not None}
        trial.set_user_attr("metrics", metrics)
        for key in ("samples_per_sec", "samples_per_sec_rel_iqr"):
            if key in metrics:
                trial.set_user_attr(key, metrics[key])
        if "fingerprint" in result:
            trial.set_user_attr("fingerprint", json.dumps(result["fingerprint"]))
            trial.set_user_attr("hardware_class", result["fingerprint"].get("hardware_class"))
        if result.get("job_dir"):
            trial.set_user_attr("job_dir", result["job_dir"])
        if status == "ok":
            values = [result.get(o) for o in self.s.objectives]
            if all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                max_gb = (self.s.constraints or {}).get("max_memory_gb")
                if max_gb is not None:
                    trial.set_constraint("max_memory_gb", result["peak_memory_mb"] / 1024 - float(max_gb))
                self._tell_study(trial, values)
            else:
                trial.set_user_attr("status", "error")
                trial.set_user_attr("reason", f"non-finite objective values {values}")
                self._tell_study(trial, state=TrialState.FAIL)
        elif status == "pruned":
            self._tell_study(trial, state=TrialState.PRUNED)
        else:
            self._tell_study(trial, state=TrialState.FAIL)
        return self.study.get_trials(deepcopy=False)[trial.number]

    def _reuse(self, trial: Trial, source: FrozenTrial) -> FrozenTrial:
        trial.set_user_attr("reused_from", source.number)
        for key in ("status", "reason", "metrics", "samples_per_sec", "samples_per_sec_rel_iqr",
                    "fingerprint", "hardware_class"):
            if key in source.user_attrs:
                trial.set_user_attr(key, source.user_attrs[key])
        if source.state == TrialState.COMPLETE:
            for key, value in source.constraints.items():
                trial.set_constraint(key, value)
            self._tell_study(trial, list(source.values))
        else:
            self._tell_study(trial, state=source.state)
        return self.study.get_trials(deepcopy=False)[trial.number]

    def _skip(self, trial: Trial, status: str, reason: str) -> FrozenTrial:
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason)
        trial.set_user_attr("metrics", {})
        self._tell_study(trial, state=TrialState.FAIL)
        return self.study.get_trials(deepcopy=False)[trial.number]

    def run_trials(self) -> str:
        """Run until n_trials, the budget or patience ends it; returns why it stopped."""
        self._fail_orphans()
        self.sampler_done = False
        since_gain = 0
        unmeasured_in_a_row = 0
        while True:
            if self.stop_signal is not None:
                return f"stopped by {signal_name(self.stop_signal)}"
            trials = self._setup_trials()
            measured = [t for t in trials if history.was_measured(t)]
            if len(measured) >= self.s.n_trials:
                return f"n_trials={self.s.n_trials} reached"
            if self.sampler_done:
                return "the sampler has tried everything it had (grid exhausted)"
            if unmeasured_in_a_row >= EXHAUSTED_AFTER:
                return f"search space exhausted: the last {EXHAUSTED_AFTER} suggestions were all measured already"
            if self.s.patience is not None and since_gain >= self.s.patience:
                return f"patience: {since_gain} trials without a gain beyond the noise"
            remaining = self._remaining()
            if remaining is not None:
                reserve = self._typical_wall() * (1 + self._confirm_runs())
                if remaining <= reserve or remaining <= 0:
                    return "timeout budget reached (time kept for the confirmation)"
            has_baseline = any(t.user_attrs.get("baseline") for t in trials)
            best = next(iter(history.ranked(trials)), None)
            trial, knobs = self._ask(baseline=not has_baseline)
            ahead = [t for t in self._setup_trials() if t.number < trial.number and history.was_measured(t)]
            if len(ahead) >= self.s.n_trials:  # another process took the last slot meanwhile
                self._skip(trial, "surplus", "skipped: n_trials was reached by another process of this study")
                continue
            source = None if self.s.remeasure else history.find_measured(trials, knobs, self.fixed)
            dominating = history.oom_dominating(trials, knobs, self.fixed)
            if source is not None:
                done = self._reuse(trial, source)
            elif dominating is not None:
                done = self._skip(
                    trial, "oom",
                    f"skipped: batch {knobs[history.BATCH]} >= {config_of_batch(dominating)} which ran "
                    f"out of memory in trial {dominating.number} with the same memory settings",
                )
            else:
                prune_below = None
                if has_baseline and best is not None and self.s.prune_ratio and self.s.objectives[0] == "samples_per_sec":
                    prune_below = self.s.prune_ratio * history.primary_value(best)
                overrides = [*self.fixed, *history.to_overrides(knobs), *self._measure_overrides(prune_below)]
                result = self._launch(overrides, job_idx=trial.number, trial_id=trial._trial_id)
                done = self._tell(trial, result)
            unmeasured_in_a_row = 0 if history.was_measured(done) else unmeasured_in_a_row + 1
            if history.primary_value(done) is not None and done.user_attrs.get("reused_from") is None:
                since_gain = 0 if history.is_gain(done, best) else since_gain + 1
            elif not done.user_attrs.get("baseline"):
                since_gain += 1
            if history.was_measured(done) or done.user_attrs.get("status") == "oom":
                progress.trial_line(done, len(measured) + history.was_measured(done), self.s.n_trials,
                                    history.ranked(self._setup_trials()), self._remaining())

    # ---- confirming the winner ----

    def _confirm_runs(self) -> int:
        c = self.s.confirm or {}
        return (int(c.get("top_k", 3)) + 1) * int(c.get("rounds", 3))

    def confirm(self) -> confirm.Confirmation | None:
        c = self.s.confirm or {}
        top_k, rounds = int(c.get("top_k", 3)), int(c.get("rounds", 3))
        trials = self._setup_trials()
        baseline = next((t for t in trials if t.user_attrs.get("baseline") and t.state == TrialState.COMPLETE), None)
        candidates = [t for t in history.ranked(trials) if t.number != baseline.number][:top_k] if baseline else []
        if baseline is None or top_k < 1 or rounds < 1 or not candidates:
            return None
        by_number = {t.number: t for t in trials}
        order = confirm.interleaved_order([t.number for t in candidates], baseline.number, rounds)
        remaining = self._remaining()
        typical = self._typical_wall() or 1.0
        if remaining is not None and remaining < typical * len(order):
            rounds = max(1, int(remaining // (typical * (len(order) // rounds))))
            order = confirm.interleaved_order([t.number for t in candidates], baseline.number, rounds)
        progress.say(f"confirming: trials {[t.number for t in candidates]} and baseline {baseline.number}, "
                     f"{rounds} interleaved rounds")
        measured: dict[int, list[float | None]] = {n: [None] * rounds for _, n in order}
        for r, number in order:
            if self.stop_signal is not None:
                break
            overrides = [*self.fixed, *history.to_overrides(history.config_of(by_number[number])),
                         *self._measure_overrides(None), f"hydra.sweep.subdir=confirm/round{r + 1}-trial{number}"]
            result = self._launch(overrides, job_idx=number)
            measured[number][r] = result.get("samples_per_sec") if result.get("status") == "ok" else None
            progress.confirm_line(r, rounds, number, result)
        decision = confirm.decide(measured, baseline.number)
        if decision is not None:
            self.study.set_user_attr(f"confirmation:{json.dumps(self.fixed)}", decision.to_dict())
        return decision

    # ---- the whole sweep ----

    def sweep(self, arguments: Sequence[str]) -> dict[str, Any]:
        self.started = time.monotonic()
        self.prepare(arguments)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        (self.sweep_dir / "sweep.json").write_text(json.dumps({
            "study": self.study_name,
            "storage": redact(self.storage_url),
            "storage_has_password": has_password(self.storage_url),
            "fixed_overrides": self.fixed,
            "workload": self.workload,
            "hardware_class": self.hardware_class,
        }, indent=2) + "\n")
        progress.open_log(self.sweep_dir / "sweep.log")
        self._pin_device()
        progress.say(
            f"sweeper: study {self.study_name!r} in {redact(self.storage_url)}; "
            f"{len(self.space)} knobs: {', '.join(self.order)}; objectives "
            f"{', '.join(f'{o} ({d})' for o, d in zip(self.s.objectives, self.directions))}"
        )
        self._check_lock_at_start()
        with self._signals():
            why = self.run_trials()
            progress.say(f"stopped: {why}")
            decision = self.confirm() if self.stop_signal is None else None
            summary = self.write_outputs(decision, why)
        scrub_files(self.sweep_dir, self.storage_url)
        if self.stop_signal is not None:
            progress.say(f"interrupted by {signal_name(self.stop_signal)}: results and report are written")
            sys.exit(128 + self.stop_signal)
        return summary

    def _pin_device(self) -> None:
        """The lock names what is measured on: the CPU, or one GPU. On a machine with several
        GPUs, each sweep process takes a free one and pins its trials to it."""
        gpus = int(self.machine["fingerprint"].get("gpu_count") or 0) if self.machine["cuda"] else 0
        self.lock_resource = measure_lock.choose_resource(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if self.lock_resource.startswith("gpu") and gpus > 1:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.lock_resource.removeprefix("gpu")
            progress.say(f"pinned to GPU {self.lock_resource.removeprefix('gpu')} of {gpus}")

    def _check_lock_at_start(self) -> None:
        """lock=fail: a busy machine ends the sweep at once, with its own exit code (for cron)."""
        if self.s.lock != "fail":
            return
        probe_lock = measure_lock.MeasureLock(self.lock_resource, {"what": f"study {self.study_name}"})
        if not probe_lock.try_acquire():
            print(f"error: this machine is measuring for {measure_lock.describe(probe_lock.holder())}; "
                  f"hydra.sweeper.lock=fail: exiting with {measure_lock.EXIT_LOCKED}.", file=sys.stderr)
            sys.exit(measure_lock.EXIT_LOCKED)
        probe_lock.release()

    @contextlib.contextmanager
    def _signals(self):  # type: ignore[no-untyped-def]
        """SIGTERM/SIGINT: stop the running trial's process group, record it as interrupted,
        write what was measured, then exit with 128 + the signal number."""

        def handler(signum: int, frame: Any) -> None:
            if self.stop_signal is None:
                self.stop_signal = signum
                isolation.interrupt(f"the sweep was stopped by {signal_name(signum)}")

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def _write_report(self) -> Path | None:
        from .report import write_report
        from .report.load import load_report_data

        try:
            data = load_report_data(self.storage_url, self.study_name, self.fixed)
            return write_report(data, self.sweep_dir / "report.html")
        except Exception as exc:  # noqa: BLE001 - a report bug must not lose a night's results
            _report_failure("report", exc)
            return None

    def _write_index(self) -> None:
        from .report.index import write_index

        try:
            write_index(Path.cwd() / "outputs")
        except Exception as exc:  # noqa: BLE001
            _report_failure("outputs/index.html", exc)

    def write_outputs(self, decision: confirm.Confirmation | None, why: str) -> dict[str, Any]:
        trials = self._setup_trials()
        out = self.sweep_dir
        sweep_outputs.write_table(sweep_outputs.trials_table(trials), out)
        by_number = {t.number: t for t in trials}
        ranked = history.ranked(trials)
        winner = by_number[decision.winner] if decision else (ranked[0] if ranked else None)
        baseline = next((t for t in trials if t.user_attrs.get("baseline")), None)
        summary: dict[str, Any] = {
            "study": self.study_name,
            "storage": redact(self.storage_url),
            "stopped": why,
            "trials": len(trials),
            "measured": sum(history.was_measured(t) for t in trials),
            "reused": sum(not history.was_measured(t) for t in trials),
            "failed": sum(t.state != TrialState.COMPLETE and history.was_measured(t) for t in trials),
            "winner": winner.number if winner else None,
            "baseline": baseline.number if baseline else None,
            "confirmation": decision.to_dict() if decision else None,
        }
        pareto = [t for t in self.study.best_trials
                  if history.same_setup(t, self.fixed) and t.user_attrs.get("reused_from") is None] if trials else []
        results = sweep_outputs.optimization_results(self.study_name, self.s.objectives, pareto, winner)
        (out / "optimization_results.yaml").write_text(yaml.safe_dump(results, sort_keys=False))
        if winner is not None:
            knobs = history.config_of(winner)
            command = sweep_outputs.winner_command(self.fixed, knobs)
            note = f"winner of study {self.study_name}: trial {winner.number}"
            (out / "winner.yaml").write_text(sweep_outputs.winner_yaml(self.fixed, knobs, note))
            (out / "winner_command.txt").write_text(command + "\n")
            summary["command"] = command
        summary["fixed_overrides"] = list(self.fixed)
        summary["workload"] = self.workload
        summary["hardware_class"] = self.hardware_class
        summary["machine"] = self.machine["fingerprint"].get("hostname")
        report_path = self._write_report()
        if report_path is not None:
            summary["report"] = str(report_path)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        self._write_index()
        progress.final_summary(summary, winner, baseline, decision, out)
        return summary


def _report_failure(what: str, exc: Exception) -> None:
    print(f"warning: the {what} could not be written ({type(exc).__name__}: {exc}); "
          "the trials are stored, regenerate it with python -m sweeper.report", file=sys.stderr)


def config_of_batch(trial: FrozenTrial) -> Any:
    return history.config_of(trial).get(history.BATCH)


def _started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _pid_alive(pid: int, started: float | None) -> bool:
    """The process that ran the trial is still alive (not merely its pid, reused after a reboot)."""
    now = _started(pid)
    return now is not None and (started is None or abs(now - float(started)) < 1.0)


def as_result(value: Any, objectives: Sequence[str]) -> dict[str, Any]:
    """A job's return value as a result: sweeper's own dict, or what another Hydra app returns
    (a number for the first objective, or a mapping of objective names to numbers)."""
    if isinstance(value, Mapping):
        result = dict(value)
        result.setdefault("status", "ok")
        return result
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"status": "ok", objectives[0]: float(value)}
    return {"status": "error", "reason": f"the job returned {type(value).__name__}: expected a number or a dict "
            f"with {', '.join(objectives)}"}


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a signal"


def run_sweep(sweep: Sweep, arguments: Sequence[str]) -> dict[str, Any]:
    """Entry from the plugin: bad settings become one line on stderr and exit code 2."""
    try:
        return sweep.sweep(arguments)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
