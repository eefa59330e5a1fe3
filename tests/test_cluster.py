"""Beyond one machine: trials as SLURM jobs through Hydra's submitit launcher, on a real one-node
SLURM (tests/slurm_cluster.py), n_jobs at once; and what is refused before trial 1."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, TINY, load_study
from slurm_cluster import cancel_every_job, cluster, jobs, stop, why_not
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


# the sweeps a test started: one a failed test left running would hold the queue and the
# node's lock for the tests after it, and each of those would fail in turn
_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _nothing_left_running(request):
    """After each test, a sweep it left running is stopped and its jobs are cancelled, so that
    a failure is one test's, not the next ones' too."""
    yield
    left = [p for p in _STARTED if p.poll() is None]
    _STARTED.clear()
    stop(left, timeout_s=60)  # a sweep's stop signal ends its fork servers with it
    if left and "slurm" in request.fixturenames:
        cancel_every_job(request.getfixturevalue("slurm"))


def sweep(tmp: Path, env: dict[str, str], *overrides: str, name: str = "s") -> subprocess.Popen:
    args = [
        *TINY,
        *overrides,
        f"hydra.sweep.dir={tmp / name}",
        f"hydra.sweeper.storage=sqlite:///{tmp / 'study.db'}",
        "hydra.sweeper.study_name=test",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])},
    )
    _STARTED.append(proc)
    return proc


def finished(proc: subprocess.Popen, timeout: float = 600, code: int = 0) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == code, out[-3000:] + err[-3000:]
    return out, err


def _result(trial) -> dict:
    return json.loads((Path(TrialRecord.of(trial).job_dir) / "result.json").read_text())


@pytest.mark.slow
def test_trials_run_as_slurm_jobs_two_at_once_and_take_turns_on_the_node(tmp_path, slurm):
    out, _ = finished(
        sweep(
            tmp_path,
            slurm,
            *SLURM,
            *QUICK,
            "hydra.sweeper.n_jobs=2",
            "hydra.sweeper.n_trials=4",
            "hydra.sweeper.confirm=1",
        )
    )
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
    _, err = finished(
        sweep(
            tmp_path,
            slurm,
            *SLURM,
            *QUICK,
            "hydra.launcher.partition=nope",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.confirm=0",
        ),
        code=1,  # no configuration completed
    )
    assert err.strip().splitlines()[-1].startswith("error: no configuration completed"), err
    trials = load_study(tmp_path).trials
    assert len(trials) == 2 and all(t.state.name == "FAIL" for t in trials)
    for t in trials:
        reason = TrialRecord.of(t).reason
        assert reason.startswith("the launcher lost the job:") and "partition" in reason and "\n" not in reason


# jobs wait until the test releases them (scontrol ... StartTime=now): the test decides the order
HELD = ["+hydra.launcher.additional_parameters.begin=now+3600"]
LONGER = ["measure.windows=6", "measure.min_windows=6", "measure.window_s=1"]


@pytest.mark.slow
def test_a_lost_job_never_decides_its_siblings_and_a_requeued_job_is_followed(tmp_path, slurm):
    """The order that lost a finished result: the first job of a batch is lost (cancelled here;
    a node failure, which one node cannot show apart, ends the same way in submitit) while its
    sibling has not run. The sibling is waited for, requeued by SLURM halfway through its run,
    followed through the rerun, and its figure is kept and ranked."""
    _wait_for(lambda: not jobs(slurm), timeout=120)
    proc = sweep(
        tmp_path,
        slurm,
        *SLURM,
        *QUICK,
        *HELD,
        *LONGER,
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.confirm=0",
        "hydra.sweeper.race=false",  # the kept job's run ends complete, however loaded the machine
    )
    (baseline,) = _wait_for(lambda: _tasks(slurm, "PENDING"), proc=proc)
    _release(slurm, baseline)
    first, second = _wait_for(
        lambda: pair if len(pair := _tasks(slurm, "PENDING")) == 2 else None, timeout=300, proc=proc
    )
    _release(slurm, first)
    _wait_for(lambda: first in _tasks(slurm, "RUNNING"), proc=proc)
    _scontrol(slurm, "scancel", first)
    lost = _wait_for(lambda: _trial_of(tmp_path, first), proc=proc)
    # the launcher gave it up: seen within its state checks (scheduled.STATE_CHECK_S), however
    # long after the batch's submission the job was lost
    _wait_for(lambda: (tmp_path / "s" / str(lost) / "launcher.log").is_file(), timeout=120, proc=proc)
    _release(slurm, second)
    _wait_for(lambda: second in _tasks(slurm, "RUNNING"), proc=proc)
    time.sleep(3)  # into its run
    _scontrol(slurm, "scontrol", "requeue", second)
    _wait_for(lambda: second in _tasks(slurm, "PENDING"), proc=proc)
    _release(slurm, second)
    out, _ = finished(proc)
    by_job = {TrialRecord.of(t).scheduler_job: t for t in load_study(tmp_path).trials}
    gone, kept = by_job[f"slurm:{first}"], by_job[f"slurm:{second}"]
    reason = TrialRecord.of(gone).reason
    assert gone.state.name == "FAIL" and "CANCELLED" in reason and len(reason) < 160 and "\n" not in reason, reason
    assert kept.state.name == "COMPLETE" and TrialRecord.of(kept).samples_per_sec > 0, out
    assert kept.values and kept.values[0] == TrialRecord.of(kept).samples_per_sec  # ranked by its own figure
    table = (tmp_path / "s" / "trials.csv").read_text().splitlines()[0].split(",")
    assert {"scheduler_job", "queue_wait_s"} <= set(table)


@pytest.mark.slow
def test_a_cancelled_job_says_so_and_a_rerun_after_kill_9_waits_for_the_running_job(tmp_path, slurm):
    """scancel mid-trial: the trial says it was cancelled (failed, or its figure kept if the
    measurement ended inside SLURM's grace). kill -9 of the sweep while its next job is still
    queued, and a rerun at once: the rerun waits for that job, reads its result, and measures
    no configuration twice."""
    command = [
        *SLURM,
        *QUICK,
        *LONGER,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.confirm=0",
        "hydra.sweeper.race=false",  # the cancelled job still measures when cancelled, however loaded the machine
    ]
    _wait_for(lambda: not jobs(slurm), timeout=120)
    first = sweep(tmp_path, slurm, *command, *HELD)
    (baseline,) = _wait_for(lambda: _tasks(slurm, "PENDING"), proc=first)
    _release(slurm, baseline)
    cancelled = _wait_for(lambda: [j for j in _tasks(slurm, "PENDING") if j != baseline], timeout=300, proc=first)[0]
    _release(slurm, cancelled)
    _wait_for(lambda: cancelled in _tasks(slurm, "RUNNING"), proc=first)
    time.sleep(4)  # into its measurement
    _scontrol(slurm, "scancel", cancelled)
    orphan = _wait_for(
        lambda: [j for j in _tasks(slurm, "PENDING") if j not in (baseline, cancelled)], timeout=300, proc=first
    )[0]
    # killed once its trial names the job (sbatch has answered and the sweep has written it down;
    # killed in between, the trial is failed and a later sweep recovers the job's result instead)
    _wait_for(lambda: _trial_of(tmp_path, orphan) is not None, proc=first)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    rerun = sweep(tmp_path, slurm, *command, name="again")  # its own jobs run at once
    _wait_for(lambda: "is still PENDING" in _read(tmp_path / "again" / "sweep.log"), proc=rerun)
    _release(slurm, orphan)
    out, _ = finished(rerun)
    trials = load_study(tmp_path).trials
    by_job = {TrialRecord.of(t).scheduler_job: t for t in trials}
    said = TrialRecord.of(by_job[f"slurm:{cancelled}"]).reason or ""
    assert "cancel" in said.lower(), said
    if by_job[f"slurm:{cancelled}"].state.name == "COMPLETE":
        assert said.startswith("cancelled by the scheduler after measuring")
    recovered = by_job[f"slurm:{orphan}"]
    # its job's own outcome, read: complete, or pruned where its configuration ran behind the best
    assert recovered.state.name in ("COMPLETE", "PRUNED") and "its job finished after its sweep stopped" in out, out
    assert TrialRecord.of(recovered).samples_per_sec, TrialRecord.of(recovered).reason
    measured = [t for t in trials if TrialRecord.of(t).measured and t.state.name != "FAIL"]
    knobs = [json.dumps(TrialRecord.of(t).knobs, sort_keys=True) for t in measured]
    assert len(set(knobs)) == len(knobs)  # no configuration measured twice
    assert all(t.state.name != "RUNNING" for t in trials)


@pytest.mark.slow
def test_sigterm_while_a_job_is_queued_exits_143_and_the_next_sweep_reads_the_job(tmp_path, slurm):
    """A sweep stopped while the launcher waits on a queued job (for hours, on a busy
    partition) stops at once: the trial is stored as interrupted with its job named, the
    results are written, exit 143; the job stays queued, and the next sweep reads its result."""
    command = [*SLURM, *QUICK, "hydra.sweeper.n_trials=1", "hydra.sweeper.confirm=0"]
    _wait_for(lambda: not jobs(slurm), timeout=120)
    first = sweep(tmp_path, slurm, *command, *HELD)
    (queued,) = _wait_for(lambda: _tasks(slurm, "PENDING"), proc=first)
    _wait_for(lambda: _trial_of(tmp_path, queued) is not None, proc=first)
    time.sleep(1)  # into the launcher's wait
    first.send_signal(signal.SIGTERM)
    try:
        out, err = first.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        first.kill()
        raise AssertionError(f"the sweep ignored SIGTERM while {queued} was queued") from None
    assert first.returncode == 143, out[-2000:] + err[-2000:]
    (trial,) = load_study(tmp_path).trials
    record = TrialRecord.of(trial)
    assert trial.state.name == "FAIL" and record.scheduler_job == f"slurm:{queued}", record.reason
    assert "still PENDING when the sweep stopped" in (record.reason or ""), record.reason
    assert (tmp_path / "s" / "trials.csv").is_file()
    assert queued in _tasks(slurm, "PENDING")  # left to run: the next sweep reads it
    _release(slurm, queued)
    out, _ = finished(sweep(tmp_path, slurm, *command, name="again"))
    stand_in = [t for t in load_study(tmp_path).trials if t.number != trial.number]
    assert [t.state.name for t in stand_in] == ["COMPLETE"], out
    assert TrialRecord.of(stand_in[0]).samples_per_sec and f"trial #{trial.number}'s job wrote" in out, out


def _tasks(env: dict[str, str], state: str) -> list[str]:
    """The queue's jobs in `state`, array tasks one by one (4242_0, 4242_1), in order."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-t", state, "-o", "%i"], env={**os.environ, **env}, capture_output=True, text=True
    ).stdout
    return sorted(out.split())


def _release(env: dict[str, str], job: str) -> None:
    _scontrol(env, "scontrol", "update", f"jobid={job}", "StartTime=now")


def _scontrol(env: dict[str, str], *command: str) -> None:
    subprocess.run(list(command), env={**os.environ, **env}, check=True, capture_output=True)


def _trial_of(tmp: Path, job: str) -> int | None:
    """The number of the trial that job `job` measures, once the sweep has recorded it."""
    import optuna

    with contextlib.suppress(Exception):
        study = optuna.load_study(
            study_name=optuna.get_all_study_names(f"sqlite:///{tmp / 'study.db'}")[0],
            storage=f"sqlite:///{tmp / 'study.db'}",
        )
        for t in study.get_trials(deepcopy=False):
            if TrialRecord.of(t).scheduler_job == f"slurm:{job}":
                return t.number
    return None


def _read(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _wait_for(found, timeout: float = 180, proc: subprocess.Popen | None = None):
    """found()'s first true value; fails after `timeout`, or at once with its output if the
    sweep `proc` has ended meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := found():
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the sweep ended (rc {proc.returncode}) first: {out[-2000:]} {err[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout:.0f} s in vain")


def test_the_launcher_asks_about_an_old_batch_every_half_minute_not_every_ten(tmp_path, monkeypatch):
    """submitit's wait asks sacct at doubling intervals from a batch's submission, up to ten
    minutes apart: a job lost an hour into its batch waited up to ten minutes to be seen. Inside
    scheduled.submitted it asks at least every STATE_CHECK_S (sacct here a script that counts
    its calls; the clock moved by hand), and submitit's own watcher is back after."""
    from submitit.core import core
    from submitit.slurm.slurm import SlurmJob

    from sweeper.search import scheduled

    calls = tmp_path / "calls"
    (tmp_path / "sacct").write_text(
        f"#!/bin/sh\necho . >> {calls}\necho 'JobID|State|NodeList'\necho '42|RUNNING|n1'\n"
    )
    (tmp_path / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    now = [1_000_000.0]
    monkeypatch.setattr(core, "_time", SimpleNamespace(time=lambda: now[0], sleep=time.sleep))  # submitit's clock
    own = SlurmJob.watcher
    with scheduled.submitted(on_submit=lambda handles: None):
        job = SlurmJob(tmp_path, "42")
        asked = []
        for _ in range(3):
            now[0] += 3600 if not asked else scheduled.STATE_CHECK_S + 1  # an hour in, then every half minute
            assert job.state == "RUNNING"
            asked.append(len(calls.read_text().split()))
    assert asked[1:] == [asked[0] + 1, asked[0] + 2], asked
    assert SlurmJob.watcher is own


def test_n_jobs_with_the_basic_launcher_is_refused_before_trial_1(tmp_path):
    proc = sweep(tmp_path, {}, "hydra.sweeper.n_jobs=2")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.strip().startswith("error: hydra.sweeper.n_jobs=2 launches that many trials")


def test_a_launcher_that_is_not_installed_is_one_line(tmp_path):
    proc = sweep(tmp_path, {}, "hydra/launcher=ray")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.strip() == (
        "error: hydra/launcher=ray is not installed (installed: basic, "
        "submitit_local, submitit_slurm): pip install hydra-ray-launcher."
    )
