"""Beyond one machine: trials as SLURM jobs through Hydra's submitit launcher, on a real one-node
SLURM (tests/slurm_cluster.py), n_jobs at once; and what is refused before trial 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, TINY, load_study
from slurm_cluster import cluster, jobs, why_not
from sweeper.store.record import TrialRecord

QUICK = ["search=quick", "task.num_samples=2048"]
SLURM = ["hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    why = why_not()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the SLURM tests: {why}")
        pytest.skip(why)
    with cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def sweep(tmp: Path, env: dict[str, str], *overrides: str, name: str = "s") -> subprocess.Popen:
    args = [*TINY, *overrides, f"hydra.sweep.dir={tmp / name}", f"hydra.sweeper.storage=sqlite:///{tmp / 'study.db'}",
            "hydra.sweeper.study_name=test"]
    return subprocess.Popen([sys.executable, "-m", "sweeper", "-m", *args], cwd=tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])})


def finished(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    return out, err


def _result(trial) -> dict:
    return json.loads((Path(TrialRecord.of(trial).job_dir) / "result.json").read_text())


@pytest.mark.slow
def test_trials_run_as_slurm_jobs_two_at_once_and_take_turns_on_the_node(tmp_path, slurm):
    out, _ = finished(sweep(tmp_path, slurm, *SLURM, *QUICK, "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=4",
                            "hydra.sweeper.confirm.top_k=1", "hydra.sweeper.confirm.rounds=1"))
    trials = load_study(tmp_path).trials
    measured = [t for t in trials if TrialRecord.of(t).measured]
    assert len(measured) == 4, [(t.number, t.user_attrs.get("status"), t.user_attrs.get("reason")) for t in trials]
    # every measured trial was a SLURM job of its own, on this machine's one node
    ids = [TrialRecord.of(t).scheduler_job for t in measured]
    assert all(i and i.startswith("slurm:") for i in ids) and len(set(ids)) == 4
    # no configuration measured twice: a repeat was answered from its twin
    knobs = [json.dumps(TrialRecord.of(t).knobs, sort_keys=True) for t in measured]
    assert len(set(knobs)) == len(knobs)
    # the jobs ran side by side, but their measurements took turns on the node's lock
    spans = sorted((_result(t)["started_at"], _result(t)["ended_at"]) for t in measured)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
    assert all(TrialRecord.of(t).queue_wait_s is not None for t in measured)
    assert (tmp_path / "s" / "report.html").is_file() and "jobs waited" in (tmp_path / "s" / "report.html").read_text()
    assert "browse it with: optuna-dashboard" in out


@pytest.mark.slow
def test_a_partition_that_does_not_exist_fails_each_trial_in_one_line(tmp_path, slurm):
    finished(sweep(tmp_path, slurm, *SLURM, *QUICK, "hydra.launcher.partition=nope", "hydra.sweeper.n_trials=2",
                   "hydra.sweeper.confirm.top_k=0"))
    trials = load_study(tmp_path).trials
    assert len(trials) == 2 and all(t.state.name == "FAIL" for t in trials)
    for t in trials:
        reason = TrialRecord.of(t).reason
        assert reason.startswith("the launcher lost the job:") and "partition" in reason and "\n" not in reason


@pytest.mark.slow
def test_a_cancelled_job_and_a_killed_sweep_lose_nothing(tmp_path, slurm):
    """scancel of a running job: its trial says so, the sweep goes on. kill -9 of the submitting
    sweep while its job runs: the job finishes on its node, and the next sweep reads its result."""
    command = [*SLURM, *QUICK, "hydra.sweeper.n_trials=3", "hydra.sweeper.confirm.top_k=0", "measure.windows=6",
               "measure.min_windows=6"]
    # an earlier test's job may still be ending on the node (its result delivered, its process
    # exiting): the job cancelled below must be this sweep's own (CI once cancelled another's)
    _wait_for(lambda: not jobs(slurm), timeout=120)
    first = sweep(tmp_path, slurm, *command)
    running = _wait_for(lambda: [j for j, state in jobs(slurm) if state == "RUNNING"])
    subprocess.run(["scancel", running[0]], env={**os.environ, **slurm}, check=True)
    second = _wait_for(lambda: [j for j, state in jobs(slurm) if state == "RUNNING" and j != running[0]])
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    _wait_for(lambda: not jobs(slurm), timeout=300)  # the orphaned job measures on to its end
    out, _ = finished(sweep(tmp_path, slurm, *command))
    trials = load_study(tmp_path).trials
    by_job = {TrialRecord.of(t).scheduler_job: t for t in trials}
    cancelled = [t for t in trials if "CANCELLED" in str(TrialRecord.of(t).reason)]
    assert len(cancelled) == 1 and cancelled[0].state.name == "FAIL", [(t.number, t.state.name, TrialRecord.of(t).reason)
                                                                        for t in trials]
    recovered = by_job.get(f"slurm:{second[0]}")
    assert recovered is not None and recovered.state.name == "COMPLETE", out
    assert "its job finished after its sweep stopped" in out
    assert sum(TrialRecord.of(t).measured for t in trials) == 3
    assert all(t.state.name != "RUNNING" for t in trials)


def _wait_for(found, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := found():
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout:.0f} s in vain")


def test_n_jobs_with_the_basic_launcher_is_refused_before_trial_1(tmp_path):
    proc = sweep(tmp_path, {}, "hydra.sweeper.n_jobs=2")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.strip().startswith("error: hydra.sweeper.n_jobs=2 launches that many trials")


def test_a_launcher_that_is_not_installed_is_one_line(tmp_path):
    proc = sweep(tmp_path, {}, "hydra/launcher=ray")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.strip() == ("error: hydra/launcher=ray is not installed (installed: basic, "
                                                    "submitit_local, submitit_slurm): pip install hydra-ray-launcher.")
