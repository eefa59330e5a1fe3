"""The faults a lab server has at night: the study's database restarts, the disk under the outputs
fills. A sweep rides out a storage that comes back, stops with one line and its own exit code
when it does not or when the disk is full, and loses nothing it measured."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from test_watch import NIGHTLY

from conftest import TINY, child_pythonpath
from sweeper.errors import EXIT_DISK_FULL, EXIT_STORAGE_DOWN, DiskFull, StorageUnreachable, is_disk_full
from sweeper.search.disk import free_bytes, out_of_room, room
from sweeper.store.record import TrialRecord
from sweeper.store.retry import RetryingStorage, transient


class OperationalError(Exception):
    """What SQLAlchemy raises for a server gone or a connection lost (by its name)."""


class UpdateFinishedTrialError(RuntimeError):
    pass


class Flaky:
    """A storage whose calls fail `times` times, then answer."""

    def __init__(self, times: int, error: Exception) -> None:
        self.times, self.error, self.calls = times, error, 0

    def get_trial(self, number: int) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return f"trial {number}"

    set_trial_state_values = get_trial


def _storage(inner: object, budget: float | None = None) -> tuple[RetryingStorage, list[str], list[float]]:
    said: list[str] = []
    slept: list[float] = []
    clock = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    storage = RetryingStorage(inner, "postgresql://lab@db:5432/sweeps", sleep=sleep, clock=lambda: clock[0])
    storage.ride_out(said.append, lambda: "sweeper -m hydra.sweeper.n_trials=8", lambda: budget)
    return storage, said, slept


def test_a_storage_that_goes_away_and_comes_back_is_waited_out_and_said_twice():
    lost = OperationalError("server closed the connection unexpectedly")
    storage, said, slept = _storage(Flaky(4, lost))
    assert storage.get_trial(3) == "trial 3"
    assert said == [
        "the study's storage postgresql://lab@db:5432/sweeps is unreachable (OperationalError: server closed "
        "the connection unexpectedly): retrying for up to 10 min",
        "the study's storage answers again after 8 s",
    ]
    assert slept == [0.5, 1.0, 2.0, 4.0]  # backoff, doubling
    # Optuna wraps a failed commit in StorageInternalError: its cause decides
    wrapped = RuntimeError("An exception is raised during the commit.")
    wrapped.__cause__ = lost
    assert transient(wrapped) and not transient(ValueError("invalid data"))


def test_past_the_bound_one_line_names_the_storage_and_the_command_that_resumes():
    storage, said, _ = _storage(Flaky(10_000, OperationalError("connection refused")), budget=45.0)
    with pytest.raises(StorageUnreachable) as stop:
        storage.get_trial(1)
    assert said == [
        "the study's storage postgresql://lab@db:5432/sweeps is unreachable (OperationalError: connection "
        "refused): retrying for up to 45 s"
    ]
    line = str(stop.value)
    assert "has been unreachable for 45 s" in line and "run sweeper -m hydra.sweeper.n_trials=8 to go on" in line
    assert stop.value.exit_code == EXIT_STORAGE_DOWN
    # the sweep's budget bounds the wait, but never below half a minute
    short, said, _ = _storage(Flaky(10_000, OperationalError("refused")), budget=3.0)
    with pytest.raises(StorageUnreachable):
        short.get_trial(1)
    assert said[0].endswith("retrying for up to 30 s")


def test_what_the_storage_says_about_its_data_is_not_retried_and_a_told_trial_stays_told():
    storage, said, _ = _storage(Flaky(1, KeyError("no such study")))
    with pytest.raises(KeyError):
        storage.get_trial(1)
    assert said == []
    # the connection dropped after the storage had stored the trial's end: telling again is no error
    told = Flaky(2, OperationalError("closed"))
    told.error_after = UpdateFinishedTrialError("trial #1 has already finished")
    storage, _, _ = _storage(told)

    def set_trial_state_values(*args: object) -> bool:
        told.calls += 1
        raise told.error if told.calls == 1 else told.error_after

    told.set_trial_state_values = set_trial_state_values
    assert storage.set_trial_state_values(1, "COMPLETE") is True
    # before the sweep rides out outages (while it opens the study), an error is the error, at once
    unopened = RetryingStorage(Flaky(1, OperationalError("refused")), "x")
    with pytest.raises(OperationalError):
        unopened.get_trial(1)


def test_a_full_disk_is_told_apart_and_never_waited_for():
    full = OSError(errno.ENOSPC, "No space left on device")
    assert is_disk_full(full) and not is_disk_full(OSError(errno.EACCES, "denied"))
    sqlite = RuntimeError("An exception is raised during the commit.")
    sqlite.__cause__ = Exception("(sqlite3.OperationalError) database or disk is full")
    assert is_disk_full(sqlite)
    storage, said, slept = _storage(Flaky(1, sqlite))
    with pytest.raises(DiskFull) as stop:
        storage.get_trial(1)
    assert slept == [] and said == [] and stop.value.exit_code == EXIT_DISK_FULL


def test_the_room_a_sweep_needs_is_read_where_it_writes(tmp_path):
    found = room(tmp_path / "sweeps" / "new", f"sqlite:///{tmp_path / 'db' / 'study.db'}", runs=20)
    assert found.path == tmp_path and found.free == free_bytes(tmp_path)[1]
    assert found.needs > found.needs_first > 0
    line = out_of_room(tmp_path / "s", "postgresql://lab:s3cret@db/sweeps", OSError(errno.ENOSPC, "full"))
    assert "s3cret" not in line and f"python -m sweeper.report {tmp_path / 's'}" in line


# --- for real: a PostgreSQL server stopped mid-sweep, a tmpfs that fills ----------------------

POSTGRES = os.environ.get("SWEEPER_TEST_POSTGRES")


def _postgres_cluster() -> list[str] | None:
    """pg_ctlcluster's version and name of the server on loopback (Debian's), where it may be stopped."""
    if not POSTGRES or shutil.which("pg_ctlcluster") is None or os.geteuid() != 0:
        return None
    versions = sorted(os.listdir("/etc/postgresql"), key=float) if os.path.isdir("/etc/postgresql") else []
    return [versions[-1], "main"] if versions else None


def need_postgres() -> list[str]:
    cluster = _postgres_cluster()
    if cluster is None:
        if os.environ.get("CI"):
            pytest.fail("CI must stop and start its PostgreSQL: .ci/run starts it as root, SWEEPER_TEST_POSTGRES set")
        pytest.skip("needs a PostgreSQL cluster this user may stop (root, pg_ctlcluster, SWEEPER_TEST_POSTGRES)")
    return cluster


def _pg(cluster: list[str], action: str) -> None:
    """Stop or start the cluster; a start of one already running (a test that failed before its
    stop) is no error."""
    stop = action == "stop"
    subprocess.run(["pg_ctlcluster", *cluster, action, *(["-m", "fast"] if stop else [])], check=stop)


def _sweep(tmp_path: Path, name: str, storage: str, *extra: str) -> subprocess.Popen:
    args = [
        *TINY,
        "search=none",
        "loader.batch_size=choice(16,32,64,128,256,512,1024,2048)",
        "hydra.sweeper.converge=false",
        f"hydra.sweep.dir={tmp_path / name}",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=outage",
        *extra,
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
    )


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never came in {path}")


def _study(sweep_dir: Path, storage: str) -> optuna.Study:
    info = json.loads((sweep_dir / "sweep.json").read_text())
    return optuna.load_study(study_name=info["study"], storage=storage)


def _fresh(storage: str) -> None:
    for name in optuna.get_all_study_names(storage):
        if name.startswith("outage"):
            optuna.delete_study(study_name=name, storage=storage)


@pytest.mark.slow
def test_a_database_stopped_mid_sweep_costs_the_sweep_nothing(tmp_path):
    cluster = need_postgres()
    _fresh(POSTGRES)
    proc = _sweep(tmp_path, "s", POSTGRES, "hydra.sweeper.n_trials=6", "hydra.sweeper.confirm=2")
    try:
        _wait_for(tmp_path / "s" / "sweep.log", "trial 3/6", proc)  # two trials told
        _pg(cluster, "stop")
        time.sleep(8)  # a restart in a maintenance window
    finally:
        _pg(cluster, "start")
    out, err = proc.communicate(timeout=600)
    log = (tmp_path / "s" / "sweep.log").read_text()
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and "is unreachable" in log and "answers again after" in log
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["measured"] == 6 and (tmp_path / "s" / "report.html").is_file()


@pytest.mark.slow
def test_a_database_down_past_the_bound_stops_with_one_line_and_a_rerun_loses_nothing(tmp_path):
    cluster = need_postgres()
    _fresh(POSTGRES)
    sweep = ("hydra.sweeper.n_trials=5", "hydra.sweeper.confirm=0", "hydra.sweeper.timeout=25s")
    proc = _sweep(tmp_path, "down", POSTGRES, *sweep)
    try:
        _wait_for(tmp_path / "down" / "sweep.log", "trial 2/5", proc)  # the baseline told, one measuring
        _pg(cluster, "stop")
        out, err = proc.communicate(timeout=300)  # the budget's floor: 30 s of retries
    finally:
        _pg(cluster, "start")
    assert proc.returncode == EXIT_STORAGE_DOWN, out[-2000:] + err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the study's storage"), err
    assert "password" not in lines[0] and "to go on" in lines[0] and "Traceback" not in err
    measured = [p for p in (tmp_path / "down").glob("[0-9]*/result.json")]
    again = _sweep(tmp_path, "again", POSTGRES, *sweep)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, out[-2000:] + err[-2000:]
    trials = {t.number: t for t in _study(tmp_path / "again", POSTGRES).trials}
    for path in measured:  # every run that left its result is a trial with that very figure (pruned ones too)
        figure = json.loads(path.read_text())["throughput"]["samples_per_sec"]
        assert TrialRecord.of(trials[int(path.parent.name)]).samples_per_sec == pytest.approx(figure)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A small disk of its own at `path` while inside, unmounted after."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root and must mount a tmpfs: {done.stderr.decode().strip()}")
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _report_written(sweep_dir: Path, cwd: Path) -> None:
    """`python -m sweeper.report <dir>`, once there is room again, writes the sweep's report."""
    report = subprocess.run(
        [sys.executable, "-m", "sweeper.report", str(sweep_dir)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
    )
    assert report.returncode == 0 and (sweep_dir / "report.html").is_file(), report.stderr


def _fill(path: Path, leave: int) -> Path:
    """A file that leaves `leave` bytes free on path's disk, or none where the sweep, writing
    meanwhile, took them first (the write then stops short, or finds the disk full)."""
    filler = path / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            f.write(b"\0" * max(0, shutil.disk_usage(path).free - leave))
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


@pytest.mark.slow
def test_a_disk_that_fills_mid_sweep_stops_it_with_one_line_and_the_report_comes_later(tmp_path):
    disk = tmp_path / "disk"
    with _tmpfs(disk, "8m"):
        proc = _sweep(disk, "s", f"sqlite:///{tmp_path / 'study.db'}", "hydra.sweeper.n_trials=8")
        _wait_for(disk / "s" / "sweep.log", "trial 4/8", proc)  # three trials told
        filler = _fill(disk, 4_000)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == EXIT_DISK_FULL, out[-2000:] + err[-2000:]
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "no space left on the disk of" in lines[0], err
        assert "Traceback" not in err and "python -m sweeper.report" in lines[0]
        study = _study(disk / "s", f"sqlite:///{tmp_path / 'study.db'}")
        told = [t for t in study.trials if t.state.is_finished()]
        assert len(told) >= 3
        launched_after = len(study.trials) - len(told)
        assert launched_after <= 1  # at most the run in flight when the disk filled
        filler.unlink()
        _report_written(disk / "s", tmp_path)


@pytest.mark.slow
def test_a_study_file_on_a_full_disk_is_one_line_not_a_traceback(tmp_path):
    disk = tmp_path / "disk"
    with _tmpfs(disk, "4m"):
        proc = _sweep(tmp_path, "s", f"sqlite:///{disk / 'study.db'}", "hydra.sweeper.n_trials=8")
        _wait_for(tmp_path / "s" / "sweep.log", "trial 2/8", proc)
        _fill(disk, 0)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == EXIT_DISK_FULL, out[-2000:] + err[-2000:]
        assert "Traceback" not in err and "error: the disk under the study's storage" in err, err


def _night(sweep_dir: Path, storage: str, *extra: str) -> subprocess.Popen:
    """A sweep of the nightly tests' workload, whose steps sleep: batch 128 beats 16 every time,
    so the first sweep confirms a winner and the next night watches it."""
    nightly = [a for a in NIGHTLY if not a.startswith("hydra.sweeper.watch=")]
    args = [
        *nightly,
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=outage",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "sweeper", "-m", *args, *extra],
        cwd=sweep_dir.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": child_pythonpath(), "SWEEPER_TEST_STEP_SLEEP_S": "0.005"},
    )


def _to_the_phase(tmp_path: Path, storage: str, phase: str, sweep_dir: Path) -> tuple[subprocess.Popen, str]:
    """A sweep started toward its confirmation, or a night's watch of the winner a first night
    confirmed; the log line that says the phase is under way."""
    if phase == "watch":
        first = _night(tmp_path / "first", storage, "hydra.sweeper.watch=true")
        out, err = first.communicate(timeout=600)
        assert first.returncode == 0 and "confirmed over" in out, out[-2000:] + err[-2000:]
        return _night(sweep_dir, storage, "hydra.sweeper.watch=true"), "watch round 1"
    return _night(sweep_dir, storage), "confirm round 1/"


def _wait_for_outage(log: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the sweep has met the stopped storage (or ended): whenever the phase next calls it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if "is unreachable" in log.read_text(errors="replace"):
            time.sleep(3)  # down a little longer: a few retries
            return
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["confirm", "watch"])
def test_a_database_restart_during_the_confirmation_or_the_watch_costs_nothing(tmp_path, phase):
    cluster = need_postgres()
    _fresh(POSTGRES)
    proc, mark = _to_the_phase(tmp_path, POSTGRES, phase, tmp_path / "s")
    try:
        _wait_for(tmp_path / "s" / "sweep.log", mark, proc)
        _pg(cluster, "stop")
        _wait_for_outage(tmp_path / "s" / "sweep.log", proc)
    finally:
        _pg(cluster, "start")
    out, err = proc.communicate(timeout=600)
    log = (tmp_path / "s" / "sweep.log").read_text()
    assert proc.returncode in ((0, 3) if phase == "watch" else (0,)), out[-2000:] + err[-2000:]  # 3: it drifted
    assert "Traceback" not in err and "is unreachable" in log and "answers again after" in log
    assert (tmp_path / "s" / "report.html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["confirm", "watch"])
def test_a_disk_that_fills_during_the_confirmation_or_the_watch_stops_with_one_line(tmp_path, phase):
    disk = tmp_path / "disk"
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with _tmpfs(disk, "8m"):
        proc, mark = _to_the_phase(tmp_path, storage, phase, disk / "s")
        _wait_for(disk / "s" / "sweep.log", mark, proc)
        filler = _fill(disk, 4_000)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == EXIT_DISK_FULL, out[-2000:] + err[-2000:]
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "no space left on the disk of" in lines[0] and "Traceback" not in err, err
        filler.unlink()
        _report_written(disk / "s", tmp_path)
