"""Failures and hostile input: a result received stands, a stop never waits a whole
timeout, nothing escapes a run, the kernel's OOM kill is called oom, failures are measured
again rather than reused forever, bad input and bad environments are one line before trial 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState, create_trial

from conftest import ROOT, TINY, run_multirun
from sweeper.runner import evidence, isolation
from sweeper.runner.isolation import run_isolated

FAKE = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_result_received_stands_when_a_stop_comes_after(tmp_path):
    flight = isolation.InFlight()  # the runs this test stops: none of the process's others
    timer = threading.Timer(1.0, flight.stop, args=("the sweep was stopped by SIGTERM",))
    timer.start()
    result = run_isolated(
        {"mode": "oom_result_then_linger"}, timeout_s=30, log_path=tmp_path / "w.log", command=FAKE, in_flight=flight
    )
    timer.join()
    assert result.status == "oom" and "out of memory" in result.reason
    # any later run of a stopped process ends at once, interrupted
    later = run_isolated({"mode": "ok"}, timeout_s=30, log_path=tmp_path / "x.log", command=FAKE, in_flight=flight)
    assert later.status == "interrupted" and later.reason == "the sweep was stopped by SIGTERM"


def test_a_run_killed_after_some_windows_says_what_they_read(tmp_path):
    result = run_isolated({"mode": "windows_then_hang"}, timeout_s=3, log_path=tmp_path / "w.log", command=FAKE)
    assert result.status == "timeout"
    assert result.reason == (
        "no result within measure.timeout_s=3 s (last phase: window 4; 3 windows had read 110 samples/s "
        "(median)); its process group was killed"
    )


def test_a_stop_right_after_the_child_starts_does_not_wait_for_the_timeout(tmp_path, monkeypatch):
    real_popen = subprocess.Popen
    flight = isolation.InFlight()

    def popen_then_signal(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        flight.stop("the sweep was stopped by SIGTERM")  # before the group is registered
        return proc

    monkeypatch.setattr(isolation.subprocess, "Popen", popen_then_signal)
    started = time.monotonic()
    result = run_isolated(
        {"mode": "hang_with_children", "pid_file": str(tmp_path / "p")},
        timeout_s=60,
        log_path=tmp_path / "w.log",
        command=FAKE,
        in_flight=flight,
    )
    assert result.status == "interrupted" and time.monotonic() - started < 10


def test_a_descendant_that_leaves_the_process_group_is_killed_too(tmp_path):
    pid_file = tmp_path / "escaped"
    result = run_isolated(
        {"mode": "escape", "pid_file": str(pid_file)}, timeout_s=3, log_path=tmp_path / "w.log", command=FAKE
    )
    assert result.status == "timeout"
    escaped = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(escaped) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(escaped)


def test_a_crash_is_a_crash_while_a_descendant_holds_the_event_pipe(tmp_path):
    started = time.monotonic()
    result = run_isolated({"mode": "abort_with_fd_holder"}, timeout_s=30, log_path=tmp_path / "w.log", command=FAKE)
    assert result.status == "crash" and "SIGABRT" in result.reason
    assert time.monotonic() - started < 10


def test_a_sigkill_with_the_cgroup_oom_counter_risen_is_oom(tmp_path, monkeypatch):
    counts = iter([3, 4])
    monkeypatch.setattr(isolation, "oom_kills", lambda: next(counts))
    result = run_isolated({"mode": "sigkill_self"}, timeout_s=30, log_path=tmp_path / "w.log", command=FAKE)
    assert result.status == "oom" and "OOM killer" in result.reason and "SIGKILL" in result.reason
    still = iter([3, 3])
    monkeypatch.setattr(isolation, "oom_kills", lambda: next(still))
    result = run_isolated({"mode": "sigkill_self"}, timeout_s=30, log_path=tmp_path / "w2.log", command=FAKE)
    assert result.status == "crash"


@pytest.mark.parametrize(
    ("proc_cgroup", "files"),
    [
        pytest.param("0::/user.slice/s.scope\n", ["memory.events", "unified/memory.events"], id="v2"),
        pytest.param(
            "4:memory:/docker/abc\n0::/\n",
            ["memory/docker/abc/memory.oom_control", "memory.events", "unified/memory.events"],
            id="v1-and-v2",
        ),
    ],
)
def test_where_the_oom_counter_lives(proc_cgroup, files):
    got = evidence.memory_cgroup_files(proc_cgroup, root=Path("/cg"))
    assert [str(p.relative_to("/cg")).replace("user.slice/s.scope/", "") for p in got] == files
    assert evidence.parse_oom_kills("low 0\nhigh 0\nmax 2\noom 2\noom_kill 1\n") == 1
    assert evidence.parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n") == 7
    assert evidence.oom_killed(1, 2) and not evidence.oom_killed(None, 2) and not evidence.oom_killed(2, 2)


def _trial(number, status, knobs=None, reason="r"):
    state = TrialState.COMPLETE if status == "ok" else TrialState.FAIL
    t = create_trial(
        state=state,
        values=[1.0] if status == "ok" else None,
        user_attrs={
            "knobs": knobs or {"loader.batch_size": 64},
            "status": status,
            "reason": reason,
            "fixed_overrides": [],
        },
    )
    t.number = number
    return t


@pytest.mark.parametrize(
    ("status", "reused"),
    [
        ("ok", True),
        ("invalid", True),
        ("oom", True),
        ("timeout", False),
        ("crash", False),
        ("error", False),
        ("surplus", False),
        ("interrupted", False),
    ],
)
def test_only_deterministic_outcomes_are_reused(status, reused):
    from sweeper.search import history

    trials = [_trial(0, status)]
    knobs = {"loader.batch_size": 64}
    assert (history.find_measured(trials, knobs, []) is not None) == reused
    why = history.rerun_reason(trials, knobs, [])
    assert (why is None) == reused or status == "interrupted" and why is not None
    if not reused:
        assert why.startswith(f"measured again: trial 0 ended {status}")


def test_a_skipped_oom_is_not_reused_as_a_measured_one():
    from sweeper.search import history
    from sweeper.store.record import TrialRecord

    predicted = _trial(0, "oom-predicted", reason="batch 128 >= 64 which ran out of memory in trial 3")
    assert history.find_measured([predicted], {"loader.batch_size": 64}, []) is None
    assert not TrialRecord.of(predicted).measured


@pytest.mark.slow
def test_every_grammar_form_on_every_knob_works_or_is_one_line():
    """The fault campaign's grammar fuzz (benchmarks/faults.py grammar): 0 tracebacks."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "faults.py"), "grammar"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])
    assert counts["tracebacks"] == 0 and counts["cases"] > 500 and counts["ran"] > 100


@pytest.mark.slow
def test_threads_over_a_range_with_a_null_baseline(tmp_path):
    proc = run_multirun(
        tmp_path,
        "search=none",
        "task.num_samples=2048",
        "backend.threads=range(1,3)",
        "backend.interop_threads=shuffle(range(1,3))",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.confirm=0",
    )
    assert "Traceback" not in proc.stderr and "UserWarning" not in proc.stderr
    assert "baseline" in proc.stdout and "interop_threads=None threads=None" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["kill_loader_worker", "segfault_loader_worker"])
def test_a_loader_worker_that_dies_is_a_crash(sweeper_run, factory):
    run = sweeper_run("task=custom", f"task.factory=misbehaving:{factory}", "loader.num_workers=1")
    assert run.returncode == 1
    assert run.result.status == "crash", run.result
    assert "DataLoader worker" in run.result.reason


def _raised_while(outer: str, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as cause:
            raise RuntimeError(outer) from cause
    except RuntimeError as wrapped:
        return wrapped


@pytest.mark.parametrize(
    ("inner", "status"),
    [
        (RuntimeError("DataLoader worker (pid 41) is killed by signal: Segmentation fault."), "crash"),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
        (ValueError("a plain bug"), "error"),
    ],
)
def test_a_cause_python_wrapped_still_decides_the_outcome(inner, status):
    """torch raises a dead worker's error from a signal handler, wherever the main process is:
    while a class is being made, Python wraps it, and the wrapper alone says nothing."""
    from sweeper.measuring.failure import failure_of

    wrapped = _raised_while("Error calling __set_name__ on 'Field' instance 'samples'", inner)
    result = failure_of(wrapped)
    assert result.status == status
    expected = str(inner) if status != "error" else "__set_name__"
    assert expected in result.reason


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            ["hydra.sweeper.storage=postgresql://lab:s3cret@127.0.0.1:9/sweeps"],
            "cannot open study",
            id="unreachable-postgres",
        ),
        pytest.param(
            ["task=custom", "task.factory=broken_import:build"],
            "importing module 'broken_import' failed (RuntimeError: this module is broken on purpose)",
            id="factory-raises-on-import",
        ),
    ],
)
def test_bad_environments_are_one_line_before_trial_1(tmp_path, overrides, message):
    args = [*TINY, *overrides, f"hydra.sweep.dir={tmp_path / 's'}", "hydra.sweeper.study_name=x"]
    if not any(o.startswith("hydra.sweeper.storage") for o in overrides):
        args.append(f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}")
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])},
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert "s3cret" not in proc.stdout + proc.stderr
    assert not list((tmp_path / "s").glob("*/worker.log"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["-m", "backend.threads=choice(null,1)"], "NoneType is incompatible", id="null-in-choice"),
        pytest.param(["-m", "loader.batch_size=range(1,3"], "cannot read 'loader.batch_size=range(1,3'", id="unclosed"),
        pytest.param(["-m", "hydra.sweeper.study_name=a\nb"], "a value cannot hold a line break", id="newline"),
        pytest.param(["--config-name", "x=y", "-m", "loader.batch_size=choice()"], "empty choice", id="after-flags"),
    ],
)
def test_grammar_errors_are_one_line_before_hydra_starts(argv, message):
    from sweeper.errors import ConfigError
    from sweeper.preflight import check as check_overrides

    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        check_overrides(argv)
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_an_unwritable_sweep_directory_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    proc = run_multirun(tmp_path, "search=quick", "hydra.sweeper.n_trials=1", check=False, name="a-file/sweep")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "a-file is a file, not a directory" in lines[0], proc.stderr
