"""The isolated run always returns an outcome and leaves no process behind (fake workers)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from sweeper.protocol import thread_env
from sweeper.runner.isolation import run_isolated

FAKE = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_ok_result_and_events(tmp_path):
    events = []
    result = run_isolated(
        {"mode": "ok"},
        timeout_s=20,
        log_path=tmp_path / "w.log",
        command=FAKE,
        env=thread_env(3),
        on_event=events.append,
    )
    assert result.status == "ok"
    assert result.samples_per_sec == 10.0
    assert result.fingerprint.threads == 3  # thread env reached the child before it started
    assert [e["event"] for e in events] == ["phase", "window"]


def test_a_killed_runs_scratch_directory_goes_with_it(tmp_path, monkeypatch):
    import tempfile

    def killed_run_phases() -> list:
        """A fake run that writes into its scratch directory, says where, and hangs until killed."""
        phases = []
        result = run_isolated(
            {"mode": "scratch"}, timeout_s=3, log_path=tmp_path / "w.log", command=FAKE,
            on_event=lambda e: phases.append(e.get("phase")),
        )  # fmt: skip
        assert result.status == "timeout"
        return phases

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    phases = killed_run_phases()
    assert phases and phases[0].startswith(str(tmp_path / "tmp" / "sweeper-scratch-")), phases
    assert not any((tmp_path / "tmp").iterdir())  # the file the killed run left there, gone with its directory
    # where no scratch directory can be made, the run goes on without one
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    assert killed_run_phases() == ["no scratch"]


def test_hang_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "pids.json"
    result = run_isolated(
        {"mode": "hang_with_children", "pid_file": str(pid_file)},
        timeout_s=2,
        log_path=tmp_path / "w.log",
        command=FAKE,
    )
    assert result.status == "timeout"
    assert "window 1" in result.reason
    assert result.wall_s < 15
    pids = json.loads(pid_file.read_text())
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]


@pytest.mark.parametrize(
    ("mode", "status", "reason_part"),
    [
        pytest.param("abort", "crash", "SIGABRT", id="abort"),
        pytest.param("oom_message", "oom", "can't allocate memory", id="oom-text"),
        pytest.param("exit_error", "error", "something broke badly", id="exit-code"),
    ],
)
def test_failures_are_classified(tmp_path, mode, status, reason_part):
    result = run_isolated({"mode": mode}, timeout_s=20, log_path=tmp_path / "w.log", command=FAKE)
    assert result.status == status
    assert reason_part in result.reason


def test_result_counts_even_if_a_grandchild_holds_the_pipe(tmp_path):
    started = time.monotonic()
    result = run_isolated({"mode": "result_then_linger"}, timeout_s=30, log_path=tmp_path / "w.log", command=FAKE)
    assert result.status == "ok"
    assert time.monotonic() - started < 20
