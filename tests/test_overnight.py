"""Overnight on lab servers: one measurer per machine, clean stops, resume after kill -9,
many processes on one study (journal file, PostgreSQL), no password anywhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from conftest import ROOT, TINY, load_study, run_multirun, running_attrs
from sweeper.runner.lock import MeasureLock, choose_resources, claim_for
from sweeper.store import queue
from sweeper.store.record import Owner, TrialAttrs, TrialRecord

QUICK = ["search=quick", "task.num_samples=2048", "hydra.sweeper.confirm=0"]
HOLD_LOCK = """
import sys, time
from sweeper.runner.lock import MeasureLock
lock = MeasureLock("cpu", {"what": "test holder"})
assert lock.try_acquire()
print("held", flush=True)
time.sleep(600)
"""


def env_with(lock_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SWEEPER_LOCK_DIR": str(lock_dir),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
    }


def hold_lock(lock_dir: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK], env=env_with(lock_dir), stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def start_sweep(tmp_path: Path, *overrides: str, name: str, storage: str, lock_dir: Path) -> subprocess.Popen:
    args = [
        *TINY,
        *overrides,
        f"hydra.sweep.dir={tmp_path / name}",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=night",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp_path,
        env=env_with(lock_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def trial_running(sweep_dir: Path, number: int) -> bool:
    return (sweep_dir / str(number) / "worker.log").exists()


def test_a_dead_holders_lock_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPER_LOCK_DIR", str(tmp_path))
    holder = hold_lock(tmp_path)
    mine = MeasureLock("cpu", {"what": "me"})
    assert not mine.try_acquire()
    assert mine.holder()["pid"] == holder.pid and mine.holder()["what"] == "test holder"
    holder.kill()
    holder.wait()
    assert mine.try_acquire()  # the kernel dropped the dead process's flock
    mine.release()


def test_gpu_resources(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPER_LOCK_DIR", str(tmp_path))
    assert claim_for("cuda", gpus=0).resource == "cpu"
    assert choose_resources(2, "1", 1) == ["gpu1"]
    busy = MeasureLock("gpu0", {})
    assert busy.try_acquire()
    assert choose_resources(2, None, 1) == ["gpu1"]  # a second sweep process takes the free GPU
    busy.release()


@pytest.mark.slow
def test_lock_fail_exits_at_once_with_its_code(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        proc = start_sweep(
            tmp_path,
            *QUICK,
            "hydra.sweeper.lock=fail",
            name="s",
            storage=f"sqlite:///{tmp_path / 'study.db'}",
            lock_dir=tmp_path,
        )
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 75, out + err
        assert f"pid {holder.pid}" in err and "test holder" in err
    finally:
        holder.kill()


@pytest.mark.slow
def test_two_sweeps_on_one_machine_never_measure_at_the_same_time(tmp_path):
    # 8 windows of 0.3 s a trial: each sweep measures for longer than the other takes to start,
    # so that they contend (at 2 windows, one sweep could finish before the other's first trial)
    procs = [
        start_sweep(
            tmp_path,
            *QUICK,
            "hydra.sweeper.n_trials=3",
            "measure.windows=8",
            "measure.min_windows=8",
            name=f"s{i}",
            storage=f"sqlite:///{tmp_path / f'study{i}.db'}",
            lock_dir=tmp_path,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert any("waiting: this machine is measuring for pid" in out for out, _ in outputs)
    spans = []
    for i in range(2):
        for result in (tmp_path / f"s{i}").glob("*/result.json"):
            r = json.loads(result.read_text())
            spans.append((r["started_at"], r["ended_at"], i))
    spans.sort()
    assert len(spans) == 6
    for (s1, e1, _), (s2, e2, _) in zip(spans, spans[1:]):
        assert s2 >= e1 - 0.05, "two measurements overlapped"


@pytest.mark.slow
def test_kill_9_then_rerun_completes_the_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    slow = ["measure.windows=3", "measure.window_s=1"]
    proc = start_sweep(
        tmp_path, *QUICK, *slow, "hydra.sweeper.n_trials=3", name="a", storage=storage, lock_dir=tmp_path
    )
    # a trial after the baseline is being measured (a duplicate suggestion has no directory)
    wait_for(lambda: any((d / "worker.log").exists() for d in (tmp_path / "a").glob("[1-9]*")))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = load_study(tmp_path, "a").get_trials()
    running = [t.number for t in before if t.state.name == "RUNNING"]
    assert before[0].state.name == "COMPLETE" and len(running) == 1

    run_multirun(tmp_path, *QUICK, *slow, "hydra.sweeper.n_trials=3", name="b", study="night")
    after = load_study(tmp_path, "b").get_trials()
    for old in before:
        if old.state.is_finished():  # kept as they were, not measured again
            assert after[old.number].datetime_complete == old.datetime_complete
            assert after[old.number].user_attrs["knobs"] == old.user_attrs["knobs"]
        elif old.state.name == "WAITING":  # a recipe queued after the baseline: the rerun measures it
            assert (
                after[old.number].state.is_finished()
                and after[old.number].user_attrs["origin"] == (old.user_attrs["origin"])
            )
    orphan = after[running[0]]
    assert orphan.state.name == "FAIL" and orphan.user_attrs["status"] == "interrupted"
    measured = [
        t for t in after if t.user_attrs.get("reused_from") is None and t.user_attrs.get("status") != "interrupted"
    ]
    assert len(measured) == 3 and all(t.state.name in ("COMPLETE", "PRUNED", "FAIL") for t in after)


@pytest.mark.slow
def test_sigterm_stops_the_trial_writes_results_and_exits_143(tmp_path):
    proc = start_sweep(
        tmp_path,
        *QUICK,
        "measure.windows=20",
        "measure.window_s=1",
        "measure.rel_precision=null",
        "hydra.sweeper.n_trials=3",
        name="s",
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        lock_dir=tmp_path,
    )
    wait_for(lambda: trial_running(tmp_path / "s", 0))
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out + err
    assert "interrupted by SIGTERM" in out
    trials = load_study(tmp_path).get_trials()
    assert trials[0].user_attrs["status"] == "interrupted"
    assert (tmp_path / "s" / "report.html").exists() and (tmp_path / "s" / "trials.csv").exists()
    assert "stopped by SIGTERM" in (tmp_path / "s" / "sweep.log").read_text()


def _two_processes_one_study(tmp_path: Path, storage: str) -> list[optuna.trial.FrozenTrial]:
    # two "hosts": separate lock directories, one shared storage; on one machine each would see
    # the other's runs as load and keep no figure, so the load is not watched
    procs = [
        start_sweep(
            tmp_path,
            *QUICK,
            "hydra.sweeper.n_trials=4",
            "measure.foreign_cpu_max_pct=null",
            name=f"h{i}",
            storage=storage,
            lock_dir=tmp_path / f"host{i}",
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    study_name = json.loads((tmp_path / "h0" / "sweep.json").read_text())["study"]
    from sweeper.store.storage import open_storage

    trials = optuna.load_study(study_name=study_name, storage=open_storage(storage)).get_trials()
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    measured = [t for t in trials if TrialRecord.of(t).measured]
    assert len(measured) == 4, [(t.number, t.user_attrs.get("status"), t.user_attrs.get("reason")) for t in trials]
    assert all(t.state.name != "RUNNING" for t in trials)
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) >= 1
    return trials


@pytest.mark.slow
def test_journal_file_storage_across_two_processes(tmp_path):
    _two_processes_one_study(tmp_path, f"journal:{tmp_path / 'shared' / 'study.journal'}")


POSTGRES = os.environ.get("SWEEPER_TEST_POSTGRES")


@pytest.mark.slow
@pytest.mark.skipif(not POSTGRES and not os.environ.get("CI"), reason="set SWEEPER_TEST_POSTGRES (.ci/run does)")
def test_postgres_two_processes_and_no_password_anywhere(tmp_path):
    assert POSTGRES, ".ci/run starts PostgreSQL and sets SWEEPER_TEST_POSTGRES"
    password = POSTGRES.split(":")[2].split("@")[0]
    for name in optuna.get_all_study_names(POSTGRES):
        if name.startswith("night@"):
            optuna.delete_study(study_name=name, storage=POSTGRES)
    _two_processes_one_study(tmp_path, POSTGRES)
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and password in p.read_text(errors="ignore")]
    assert leaks == []


def test_a_trial_without_heartbeats_is_failed_on_the_next_start(tmp_path):
    """A sweep on another host died: no pid to check here, but its heartbeats stopped. One
    whose host still beats is left alone. Works on any storage (Optuna's public API only)."""
    from sweeper.search.unfinished import settle
    from sweeper.store.heartbeat import heartbeat
    from sweeper.store.record import TrialAttrs
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(f"journal:{tmp_path / 's.journal'}", "x")
    silent, beating = stored.study.ask(), stored.study.ask()
    for trial in (silent, beating):
        _started_on_the_login_node(trial, "d", {}, host="another-host")
    for key, value in TrialAttrs.heartbeat(time.time() - 600).items():
        silent.set_user_attr(key, value)
    with heartbeat(stored, beating.number):
        settle(stored, _plan(), give_up=lambda: True)
    after = {t.number: t for t in stored.trials()}
    assert after[silent.number].state.name == "FAIL"
    assert after[silent.number].user_attrs["status"] == "interrupted"
    assert "heartbeats" in after[silent.number].user_attrs["reason"]
    assert after[beating.number].state.name == "RUNNING"


def test_an_orphaned_trial_without_a_result_is_queued_again_with_its_reason(tmp_path):
    """A sampled trial whose sweep died mid-run, no result.json left: failed as interrupted, and its
    point queued again for this setup, the entry naming the trial it stands for; the next ask of
    the setup takes it. The baseline is asked again as the baseline: not queued."""
    import types

    from optuna.distributions import CategoricalDistribution

    from sweeper.search.unfinished import settle
    from sweeper.store.record import Why
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(f"journal:{tmp_path / 's.journal'}", "x")
    space = {"loader.batch_size": CategoricalDistribution([64, 128])}
    orphan = stored.study.ask(space)
    asked = orphan.params["loader.batch_size"]
    _started_on_the_login_node(orphan, tmp_path / "gone", {}, host="another-host")
    for key, value in TrialAttrs.heartbeat(time.time() - 600).items():
        orphan.set_user_attr(key, value)
    settle(stored, types.SimpleNamespace(**vars(_plan()), space=space), give_up=lambda: True)
    after = stored.trials()
    assert after[orphan.number].user_attrs["status"] == "interrupted"
    (queued,) = [t for t in after if t.state.name == "WAITING"]
    record = TrialRecord.of(queued)
    assert record.again is not None and record.again.why == Why.ORPHANED and record.again.of == orphan.number
    assert queued.system_attrs["fixed_params"] == orphan.params and "measured again" in (record.origin or "")
    taken = queue.ask(stored, (), Owner("here", 2, None))
    assert taken.number == queued.number and taken.suggest_categorical("loader.batch_size", [64, 128]) == asked


def _plan():
    import types

    from sweeper.search.settings import SweepSettings

    return types.SimpleNamespace(
        fixed=(),
        setup=(),  # a built-in workload: its setup is its fixed overrides
        objectives=["samples_per_sec", "peak_memory_mb"],
        settings=SweepSettings(),
        runs_here=False,
        hardware_class="h",
    )


def test_a_job_that_finished_after_its_sweep_was_killed_is_read_not_measured_again(tmp_path):
    """kill -9 of the submitting sweep, its job still running on a scheduler: the job writes its
    result.json where it ran; the next sweep of the study tells the trial that result."""
    from sweeper.measurement import Measurement, Memory, Throughput
    from sweeper.result import RunResult, Status
    from sweeper.search.unfinished import settle
    from sweeper.store.record import TrialAttrs, TrialRecord
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(f"sqlite:///{tmp_path / 's.db'}", "x", directions=["maximize", "minimize"])
    finished, lost = stored.study.ask(), stored.study.ask()
    for trial in (finished, lost):
        _started_on_the_login_node(trial, tmp_path / "sweep", TrialAttrs.heartbeat(time.time() - 600))
    job_dir = tmp_path / "sweep" / str(finished.number)
    job_dir.mkdir(parents=True)
    measured = Measurement(Throughput(samples_per_sec=123.0), memory=Memory(peak_memory_mb=45.0))
    (job_dir / "result.json").write_text(json.dumps(RunResult(Status.OK, measurement=measured, wall_s=3.0).to_json()))
    settle(stored, _plan(), give_up=lambda: True)
    after = {t.number: t for t in stored.trials()}
    assert after[finished.number].state.name == "COMPLETE" and after[finished.number].values == [123.0, 45.0]
    assert TrialRecord.of(after[finished.number]).samples_per_sec == 123.0
    assert after[lost.number].state.name == "FAIL" and after[lost.number].user_attrs["status"] == "interrupted"


def test_a_trial_failed_as_lost_whose_job_wrote_a_result_later_is_recovered_once(tmp_path):
    """A batch's job was failed as lost (or the sweep stopped while it was queued); it ran on
    and wrote an ok result.json. The next sweep recovers it: a trial holding that result stands
    in for the failed one, everywhere the study's trials are read, and only once."""
    from optuna.trial import TrialState

    from sweeper.measurement import Measurement, Memory, Throughput
    from sweeper.result import RunResult, Status
    from sweeper.search.unfinished import settle
    from sweeper.store.record import TrialAttrs, TrialRecord
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(f"sqlite:///{tmp_path / 's.db'}", "x", directions=["maximize", "minimize"])
    lost, crashed, errored = stored.study.ask(), stored.study.ask(), stored.study.ask()
    for trial in (lost, crashed, errored):
        trial.suggest_categorical("loader.batch_size", [64, 128])
        _started_on_the_login_node(trial, tmp_path / "sweep", TrialAttrs.submitted(f"slurm:9_{trial.number}"))
    stored.fail(lost.number, Status.ERROR, "the launcher lost the job: state NODE_FAIL")
    stored.fail(crashed.number, Status.CRASH, "killed by SIGSEGV")
    stored.fail(errored.number, Status.ERROR, "ValueError: the user's loop broke")  # its job's own verdict
    measured = Measurement(Throughput(samples_per_sec=321.0), memory=Memory(peak_memory_mb=12.0))
    written = {  # what each job wrote: the crash's and the error's own result.json say so: nothing came late
        lost: RunResult(Status.OK, measurement=measured, wall_s=3.0),
        crashed: RunResult(Status.CRASH, measurement=measured, wall_s=3.0),
        errored: RunResult(Status.ERROR, "ValueError: the user's loop broke", wall_s=3.0),
    }
    for trial, result in written.items():
        job_dir = tmp_path / "sweep" / str(trial.number)
        job_dir.mkdir(parents=True)
        (job_dir / "result.json").write_text(json.dumps(result.to_json()))
    for _ in range(2):
        settle(stored, _plan(), give_up=lambda: True)
    trials = stored.trials()
    assert [t.number for t in trials] == [crashed.number, errored.number, 3]  # #0 replaced by #3, once
    (recovered,) = [t for t in trials if t.state == TrialState.COMPLETE]
    record = TrialRecord.of(recovered)
    assert recovered.values == [321.0, 12.0] and recovered.params == lost.params
    assert record.recovered_from == lost.number and record.scheduler_job == "slurm:9_0"
    assert record.reason.startswith(f"recovered from #{lost.number}")
    assert len(stored.study.get_trials()) == 4  # the failed one is still in the storage, as Optuna keeps it


def test_a_trial_names_its_sweep_process_as_it_turns_running(tmp_path):
    """A sweep killed in the instant after a trial turns RUNNING, before its knobs are chosen,
    leaves a trial that the next sweep on this host fails at once (its process is dead), not
    one it must leave RUNNING for the heartbeat's 2 minutes: a queued point and a new trial."""
    import socket

    from sweeper.store.heartbeat import DIED, orphans
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(f"sqlite:///{tmp_path / 'study.db'}", "s")
    queue.enqueue(stored, {"loader.batch_size": 64}, "a recipe", ["task.epochs=1"])
    owner = Owner(socket.gethostname(), 4242, None)
    queued, new = queue.ask(stored, ["task.epochs=1"], owner), queue.ask(stored, ["task.epochs=1"], owner)
    found = orphans(stored.trials(), host=socket.gethostname(), now=time.time(), alive=lambda pid, started: False)
    assert sorted((t.number, why) for t, why in found) == [(queued.number, DIED), (new.number, DIED)]
    assert TrialRecord.of(stored.trial(queued.number)).origin == "a recipe"


def test_a_sweep_killed_between_a_queued_claim_and_its_owner_leaves_a_trial_named_dead(tmp_path, monkeypatch):
    """Claiming a queued point and naming its owner are separate writes. A sweep killed between
    them leaves a RUNNING trial that names its claimant: dead on this host, the next sweep fails
    it at once; alive (another process that lost the claim wrote last), the heartbeat decides."""
    import socket

    from optuna.trial import TrialState

    from sweeper.store.heartbeat import DIED, orphans
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(f"sqlite:///{tmp_path / 'study.db'}", "s")
    queue.enqueue(stored, {"loader.batch_size": 64}, "a recipe", ["task.epochs=1"])
    storage = stored.study._storage
    write = storage.set_trial_user_attr

    def killed_at_the_owner(trial_id, key, value):
        if key == "host":  # the owner's first write, after the claim: the sweep dies here
            raise KeyboardInterrupt
        write(trial_id, key, value)

    monkeypatch.setattr(storage, "set_trial_user_attr", killed_at_the_owner)
    with pytest.raises(KeyboardInterrupt):
        queue.ask(stored, ["task.epochs=1"], Owner(socket.gethostname(), 4242, None))
    monkeypatch.undo()
    (claimed,) = stored.trials()
    assert claimed.state == TrialState.RUNNING and TrialRecord.of(claimed).host is None
    here, now = socket.gethostname(), time.time()
    found = orphans(stored.trials(), host=here, now=now, alive=lambda pid, started: pid != 4242)
    assert [(t.number, why) for t, why in found] == [(claimed.number, DIED)]
    assert orphans(stored.trials(), host=here, now=now, alive=lambda pid, started: True) == []


def test_on_its_own_host_a_dead_sweeps_trial_waits_for_the_beat_when_its_job_cannot_be_asked_about():
    """A dead sweep process fails its trial at once, unless the trial's scheduler job is one
    nobody here can ask about: then only after the heartbeat window, as on another host."""
    import datetime as dt

    from optuna.trial import TrialState, create_trial

    from sweeper.store.heartbeat import DIED, SILENT, orphans
    from sweeper.store.record import TrialAttrs

    def running(job, beat):
        attrs = running_attrs("here", 4242)
        trial = create_trial(
            state=TrialState.RUNNING,
            user_attrs={**attrs, **TrialAttrs.heartbeat(beat), **(TrialAttrs.submitted(job) if job else {})},
        )
        trial.datetime_start = dt.datetime.fromtimestamp(beat)
        return trial

    now = 10_000.0
    trials = [
        running(None, now - 10),
        running("slurm:7_0", now - 10),
        running("slurm:7_1", now - 10),
        running("slurm:7_2", now - 600),
    ]
    found = orphans(
        trials,
        host="here",
        now=now,
        alive=lambda pid, started: False,
        told=lambda job: job != "slurm:7_1" and job != "slurm:7_2",
    )
    assert [(trials.index(t), why) for t, why in found] == [(0, DIED), (1, DIED), (3, SILENT)]


def _started_on_the_login_node(trial, sweep_dir, extra, host: str = "login-node") -> None:
    """A trial as a sweep on `host` (a login node) asks it, with `extra` attributes."""
    from sweeper.store.record import TrialAttrs

    attrs = (
        TrialAttrs.started(
            baseline=False,
            knobs={"loader.batch_size": 64},
            fixed=[],
            workload="w",
            sweep_dir=str(sweep_dir),
            hardware_class="h",
        )
        | Owner(host, 1, None).attrs()
    )
    for key, value in {**attrs, **extra}.items():
        trial.set_user_attr(key, value)
