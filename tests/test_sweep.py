"""Real tiny sweeps through `python -m sweeper -m`, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml

from conftest import ROOT, load_study, run_multirun
from sweeper.store.record import TrialRecord

pytestmark = pytest.mark.slow

QUICK = ["search=quick", "task.num_samples=2048", "hydra.sweeper.confirm=1"]


def sweep(tmp_path: Path, *overrides: str, name: str = "s", check: bool = True) -> subprocess.CompletedProcess:
    return run_multirun(tmp_path, *overrides, name=name, check=check)


def load(tmp_path: Path) -> optuna.Study:
    return load_study(tmp_path)


def test_quick_sweep_then_continue(tmp_path):
    # batch 2: a baseline that batch 64 or 256 beats, so that there is something to confirm (only
    # candidates faster than the baseline are confirmed); the baseline's batch 2 joins the space, so
    # the sampler's seed is fixed to one whose first two trials take 64 and 256 (a CI run once drew
    # batch 2 with a worker twice: nothing beat the baseline)
    proc = sweep(tmp_path, *QUICK, "hydra.sweeper.n_trials=3", "loader.batch_size=2", "hydra.sweeper.sampler.seed=0")
    out = tmp_path / "s"
    # the lines are sweeper's own: no library's log record (Hydra's "[date][name]" format) among them
    assert proc.stdout.startswith("sweeper: study ")
    assert not [line for line in proc.stdout.splitlines() if line.startswith("[")]
    study = load(tmp_path)
    trials = study.get_trials()
    measured = [t for t in trials if t.user_attrs.get("reused_from") is None]
    assert len(measured) == 3

    # trial 0 is the baseline: the config exactly as composed (batch 2 is not in quick's choices)
    baseline = trials[0]
    assert baseline.user_attrs["baseline"] is True
    assert baseline.user_attrs["knobs"]["loader.batch_size"] == 2
    assert baseline.state == optuna.trial.TrialState.COMPLETE

    # samples/sec alone by default (Hydra's single-objective results file); the peak memory is
    # measured all the same, for the report's speed-against-memory front
    assert len(study.directions) == 1
    results = yaml.safe_load((out / "optimization_results.yaml").read_text())
    assert results["best_params"] and results["best_value"] > 0
    assert all(TrialRecord.of(t).measurement.memory.peak_memory_mb > 0 for t in measured if t.state.name == "COMPLETE")

    # confirmation ran and crowned a winner against the baseline
    summary = json.loads((out / "summary.json").read_text())
    assert summary["confirmation"]["baseline"] == 0
    assert summary["confirmation"]["speedup"] > 0
    assert "confirm round 1/1" in proc.stdout
    assert list((out / "confirm").iterdir())

    # the trials table
    table = pd.read_csv(out / "trials.csv")
    assert {"number", "state", "status", "loader.batch_size", "samples_per_sec", "fp_cpu"} <= set(table.columns)
    assert len(pd.read_parquet(out / "trials.parquet")) == len(table)

    # the winner YAML composes back into the winner's config
    winner = study.get_trials()[summary["winner"]]
    composed = subprocess.run(
        [sys.executable, "-m", "sweeper", "--config-dir", str(out), "--config-name", "winner", "--cfg", "job"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    cfg = yaml.safe_load(composed.stdout)
    for key, value in winner.user_attrs["knobs"].items():
        group, leaf = key.split(".")
        assert cfg[group][leaf] == value, key
    assert cfg["task"]["num_samples"] == 2048
    assert summary["command"].startswith("python -m sweeper ")
    assert (out / "winner_command.txt").read_text().strip() == summary["command"]

    # running the same command again continues the study up to the new total
    sweep(tmp_path, *QUICK, "hydra.sweeper.n_trials=5", "loader.batch_size=2", name="s2")
    again = load(tmp_path).get_trials()
    assert [t.user_attrs["knobs"] for t in again[: len(trials)]] == [t.user_attrs["knobs"] for t in trials]
    assert sum(t.user_attrs.get("reused_from") is None for t in again) == 5
    assert sum(bool(t.user_attrs.get("baseline")) for t in again) == 1  # the baseline is not re-run


def test_failed_trials_are_recorded_and_the_sweep_goes_on(tmp_path):
    # the baseline (batch 64) runs out of memory; batch 16 aborts the process; batch 8 runs
    proc = sweep(
        tmp_path,
        "search=none",
        "task=custom",
        "task.factory=misbehaving:fails_at_batch",
        "+task.params.crash=16",
        "+task.params.oom_from=64",
        "loader.batch_size=64",
        "loader.batch_size=choice(8,16,64,128)",
        "hydra.sweeper.sampler._target_=optuna.samplers.GridSampler",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.confirm=0",
    )
    trials = load(tmp_path).get_trials()
    assert trials[0].user_attrs["baseline"] and trials[0].user_attrs["status"] == "oom"
    by_batch = {
        t.user_attrs["knobs"]["loader.batch_size"]: t for t in trials if t.user_attrs.get("reused_from") is None
    }
    assert by_batch[8].user_attrs["status"] == "ok"
    assert by_batch[16].user_attrs["status"] == "crash"
    assert "SIGABRT" in by_batch[16].user_attrs["reason"]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in [by_batch[16], by_batch[64], by_batch[128]])
    # once batch 64 ran out of memory, 128 with the same memory settings is not measured
    assert by_batch[128].user_attrs["status"] == "oom-predicted"
    assert by_batch[128].user_attrs["reason"].startswith("batch 128 >= 64 which ran out of memory in trial 0")
    # the summary counts it apart: not measured, not failed, not reused
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert (summary["measured"], summary["failed"], summary["predicted_oom"], summary["reused"]) == (3, 2, 1, 1)
    assert (
        "winner: trial #" in proc.stdout
        and "loader.batch_size=8" in (tmp_path / "s" / "winner_command.txt").read_text()
    )


@pytest.mark.parametrize(
    "sampler",
    [
        "optuna.samplers.TPESampler",
        "optuna.samplers.NSGAIISampler",
        "optuna.samplers.GPSampler",
        "optuna.samplers.RandomSampler",
        "optuna.samplers.GridSampler",
    ],
)
def test_samplers(tmp_path, sampler):
    proc = sweep(
        tmp_path,
        *QUICK,
        f"hydra.sweeper.sampler._target_={sampler}",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.confirm=0",
        "search.recipes=false",  # the trial after the baseline is the sampler's own
    )
    trials = load(tmp_path).get_trials()
    assert sum(t.user_attrs.get("reused_from") is None for t in trials) == 2
    # the study asked this sampler, not the default: the log names the study's own sampler object,
    # and the samplers that leave a mark on their trials left it
    assert f"; sampler {sampler.rsplit('.', 1)[1]}" in " ".join(proc.stdout.split())
    marks = {"GridSampler": "grid_id", "NSGAIISampler": "NSGAIISampler:generation"}
    if (mark := marks.get(sampler.rsplit(".", 1)[1])) is not None:
        assert any(mark in t.system_attrs for t in trials if "fixed_params" not in t.system_attrs)


def test_single_objective_on_p95_latency(tmp_path):
    sweep(tmp_path, *QUICK, "hydra.sweeper.objectives=[step_time_p95_ms]", "hydra.sweeper.n_trials=2")
    study = load(tmp_path)
    assert [d.name for d in study.directions] == ["MINIMIZE"]
    results = yaml.safe_load((tmp_path / "s" / "optimization_results.yaml").read_text())
    assert set(results) == {"name", "best_params", "best_value"}


def test_a_limit_no_run_can_meet_keeps_every_run_and_ranks_none(tmp_path):
    """A 10 MB memory cap (hydra.sweeper.constraints, a figure and its limit): each run is measured
    and kept, past the limit, and none is ranked or named the winner; the log and summary.json
    count them, and the sweep fails as one where none completed."""
    proc = sweep(
        tmp_path, *QUICK, "+hydra.sweeper.constraints.peak_memory_mb=10", "hydra.sweeper.n_trials=2", check=False
    )
    trials = load(tmp_path).get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert complete and all(t.constraints["peak_memory_mb"] > 0 for t in complete)
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["winner"] is None and summary["infeasible"] == len(complete)
    assert "past the limit of peak_memory_mb: kept, not ranked" in proc.stdout
    assert f"{len(complete)} of them past a limit (hydra.sweeper.constraints)" in proc.stdout
    assert proc.returncode == 1 and "no configuration completed within hydra.sweeper.constraints" in proc.stdout


def test_bad_search_param_is_one_line_before_any_trial(tmp_path):
    proc = sweep(tmp_path, *QUICK, "loader.batchsize=choice(1,2)", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: search param 'loader.batchsize' is not a key of the config (typo?)."
    ]
    assert not (tmp_path / "s" / "sweep.json").exists()


def test_plugin_is_discovered():
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    names = [p.__name__ for p in Plugins.instance().discover(Sweeper)]
    assert "ThroughputSweeper" in names


def test_plugin_works_from_another_hydra_app(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "other_app" / "app.py"),
            "-m",
            f"hydra.sweep.dir={tmp_path / 's'}",
            f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
            "hydra.sweeper.study_name=test",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    trials = [t for t in load(tmp_path).get_trials() if t.user_attrs.get("reused_from") is None]
    assert len(trials) == 6 and trials[0].user_attrs["knobs"] == {"x": 1, "mode": "slow"}  # the baseline
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert (tmp_path / "s" / "report.html").exists()
    assert "confirm round 1/1" in proc.stdout


def test_hopeless_trials_are_pruned_but_never_the_baseline(tmp_path):
    # batch 1 and 2 against a baseline at 512, nothing else searched: the MLP's per-step cost
    # makes them run at a small fraction of its samples/sec, far below the race's floor (0.80 of
    # the best), so both stop early (512 again is the baseline's result, reused)
    sweep(
        tmp_path,
        *QUICK,
        "search=none",
        "loader.batch_size=512",
        "loader.batch_size=choice(1,2)",
        "search.recipes=false",  # the recipes' largest batch is the baseline's 512
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.confirm=0",
        "measure.windows=4",
    )
    trials = [t for t in load(tmp_path).get_trials() if t.user_attrs.get("reused_from") is None]
    assert trials[0].user_attrs["baseline"] and trials[0].state.name == "COMPLETE"
    assert [t.state.name for t in trials[1:]] == ["PRUNED", "PRUNED"]
    # a tenth of the floor at most: far below it, so stopped after 1 window of 4 (a run nearer
    # the floor gets two: tests/test_pure.py)
    assert all(
        t.user_attrs["reason"].startswith("pruned: ")
        and " after 1 window is below " in t.user_attrs["reason"]
        and ", slower by the test than the floor " in t.user_attrs["reason"]
        for t in trials[1:]
    )
    assert all(t.user_attrs["metrics"]["windows_measured"] == 1 for t in trials[1:])


def test_an_effective_batch_is_held_by_every_trial(tmp_path):
    sweep(
        tmp_path,
        "search=none",
        "loader.batch_size=64",
        "loader.batch_size=choice(32,64,96,128)",
        "dist.nproc_per_node=choice(1,2)",
        "backend.threads=1",
        "train.effective_batch=256",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.confirm=0",
    )
    measured = [t for t in load(tmp_path).get_trials() if t.user_attrs.get("reused_from") is None]
    assert len(measured) == 4
    for t in measured:
        batch = t.user_attrs["knobs"]["loader.batch_size"]
        nproc = t.user_attrs["knobs"].get("dist.nproc_per_node", 1)
        metrics = t.user_attrs["metrics"]
        assert batch != 96  # does not divide 256: never sampled
        assert metrics["nproc_per_node"] == nproc
        assert metrics["effective_batch"] == batch * metrics["grad_accum_steps"] * nproc == 256


def test_a_second_machine_class_starts_from_the_first_ones_winner(tmp_path):
    """Warm start: the study's winner on another hardware class is measured right after the
    baseline, said so in the log, and marked on its trial."""
    # neither floor nor racing: the first sweep's one trial besides the baseline must complete
    common = [
        *QUICK,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.confirm=0",
        "loader.batch_size=64",
        "hydra.sweeper.race=false",
    ]
    run_multirun(tmp_path, *common, name="first", study="first")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    mine = load_study(tmp_path, "first")
    winner = next(t for t in mine.get_trials() if not t.user_attrs["baseline"])
    # the same study as a lab's other machine class left it: its winner's knobs, stored there, at
    # the batch the baseline does not run (a winner at the baseline's own point is not queued)
    params = {**winner.params, "loader.batch_size": 256}
    other = optuna.create_study(
        storage=storage, study_name="second@00000000e1", directions=[d.name.lower() for d in mine.directions]
    )
    moved = optuna.trial.create_trial(
        params=params,
        distributions=winner.distributions,
        values=winner.values,
        user_attrs={
            **winner.user_attrs,
            "hardware_class": "elsewhere",
            "knobs": {**winner.user_attrs["knobs"], **params},
        },
    )
    other.add_trial(moved)
    other.set_user_attr("winner_trial", 0)
    # and a class whose winner is the baseline's own point: the study holds it once the baseline
    # is asked, so nothing is queued, and the log must say so (it once said "queued")
    base = mine.get_trials()[0]
    home = optuna.create_study(
        storage=storage, study_name="second@00000000f1", directions=[d.name.lower() for d in mine.directions]
    )
    home.add_trial(
        optuna.trial.create_trial(
            params=base.params,
            distributions=base.distributions,
            values=base.values,
            user_attrs={**base.user_attrs, "hardware_class": "home"},
        )
    )
    home.set_user_attr("winner_trial", 0)

    proc = run_multirun(tmp_path, *common, name="second", study="second")
    assert "queued after the baseline:" in proc.stdout and "warm start: the winner on elsewhere" in proc.stdout
    own = "(warm start: the winner on home (study second@00000000f1, trial #0)) is your config's own point"
    assert own in proc.stdout
    trials = load_study(tmp_path, "second").get_trials()
    started = trials[1]
    assert started.user_attrs["origin"].startswith("warm start: the winner on elsewhere (study second@00000000e1")
    assert started.params == params
    assert "Queued after the baseline" in (tmp_path / "second" / "report.html").read_text()


@pytest.mark.slow
def test_every_trials_stored_params_are_what_it_ran(tmp_path):
    """For every trial of a real sweep (the default preset, with its recipes queued): the knobs it
    stores, and the params optuna-dashboard shows (sampled and queued), are the values its job
    ran with, as Hydra recorded the job's config."""
    from omegaconf import OmegaConf

    proc = sweep(
        tmp_path,
        "task.num_samples=2048",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.confirm=0",
        "hydra.sweeper.sampler.seed=0",
    )
    checked = 0
    for t in load(tmp_path).get_trials():
        record = TrialRecord.of(t)
        if record.job_dir is None or record.reused:
            continue
        config = OmegaConf.load(Path(record.job_dir) / ".hydra" / "config.yaml")
        ran = {k: OmegaConf.select(config, k) for k in record.knobs}
        assert record.knobs == ran, (t.number, record.knobs, ran)
        shown = {**t.system_attrs.get("fixed_params", {}), **t.params}
        assert {k: ran[k] for k in shown} == shown, (t.number, shown)
        checked += 1
    assert checked >= 3 and "queued after the baseline" in proc.stdout
