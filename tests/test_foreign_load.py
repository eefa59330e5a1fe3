"""Other people's load: counted from /proc beside a real busy process, said by a single run, and
never ranked by a sweep (it waits for quiet and measures again)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import load_study, run_multirun
from sweeper import foreign, topology
from sweeper.foreign import ForeignLoad, Snapshot
from sweeper.search import under_load

SPIN = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


class Neighbour:
    """Someone else's job: one spinning process on each of this machine's cores."""

    def __init__(self) -> None:
        cpus = topology.machine_cpus()
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(c)], start_new_session=True) for c in cpus]

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()

    def __enter__(self) -> Neighbour:
        time.sleep(0.5)  # running
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def test_the_load_is_the_cores_busy_time_less_the_runs_own():
    start = Snapshot(at=10.0, busy_s=100.0, own_s=50.0, others_s={7: 1.0, 8: 5.0})
    # 4 s of 2 cores: 6 s busy, 2.5 of them the run's own; pid 8 used 3 s, pid 9 (new) 0.4 s
    end = Snapshot(at=12.0, busy_s=106.0, own_s=52.5, others_s={7: 1.1, 8: 8.0, 9: 0.4})
    load = foreign.between(start, end)
    assert load.cpu_pct == pytest.approx(175.0)  # (6 - 2.5) s over 2 s
    assert (load.busiest_pid, load.busiest_cpu_pct) == (8, pytest.approx(150.0))
    # the run's own use beyond the cores' busy time (counters read a tick apart) is no load
    assert foreign.between(start, Snapshot(12.0, 101.0, 53.0, {})).cpu_pct == 0.0
    # a kernel thread's tick over the span (0.01 s of 2 s) is named nowhere
    assert foreign.between(start, Snapshot(12.0, 100.5, 50.5, {7: 1.01, 8: 5.0})).busiest is None


def test_the_load_since_a_sweeps_start_counts_its_own_children_as_its_own():
    """A sweep reads its start's load from its first snapshot on: its own children's work in that
    span (the zygote's imports) is no one else's. (A neighbour's is: the sweep below, with one.)"""
    cpus = topology.machine_cpus()
    start = foreign.snapshot(cpus, os.getpid())
    spin = "import time\nend = time.monotonic() + 0.8\nwhile time.monotonic() < end: pass"
    children = [subprocess.Popen([sys.executable, "-c", spin]) for _ in cpus]  # every core, ours
    for child in children:
        child.wait()
    assert foreign.since(start, cpus, 0.0).cpu_pct < 50
    # a span shorter than asked is slept out
    began = foreign.snapshot(cpus, os.getpid())
    foreign.since(began, cpus, 0.3)
    assert time.monotonic() - began.at >= 0.3


def test_a_quiet_machine_ends_the_wait_and_a_busy_one_is_said_and_bounded():
    clock = iter(range(0, 1000, 1))
    said: list[str] = []

    def loads(*values: float):
        it = iter(values)
        return lambda: ForeignLoad(next(it), 4242, 190.0, "python train.py")

    # busy, then quiet twice in a row: quiet after the third sample, the first busy one said
    waited = under_load.wait_for_quiet(50, 100, loads(190, 10, 10), said.append, clock=lambda: float(next(clock)))
    assert waited.quiet and said == [
        "waiting: other processes use 190% CPU (pid 4242 python train.py); at most 99 s more"
    ]
    # one quiet sample between busy ones is not quiet yet; the bound ends the wait, not quiet
    said.clear()
    clock = iter(range(0, 1000, 1))
    waited = under_load.wait_for_quiet(
        50, 4, loads(190, 10, 190, 190, 190, 190), said.append, clock=lambda: float(next(clock))
    )
    assert not waited.quiet and waited.last is not None and waited.last.cpu_pct == 190
    assert len(said) == 1  # not a line a sample


@pytest.mark.slow
def test_a_busy_neighbour_is_counted_named_and_said_by_a_single_run(sweeper_run):
    quiet_run = sweeper_run("task.num_samples=2048")
    assert quiet_run.returncode == 0, quiet_run.stderr[-2000:]
    calm = quiet_run.result_json["utilization"]
    with Neighbour() as neighbour:
        busy_run = sweeper_run("task.num_samples=2048")
    assert busy_run.returncode == 0, busy_run.stderr[-2000:]
    busy = busy_run.result_json["utilization"]
    assert busy["under_load"] is True and busy["foreign_cpu_pct"] > 50
    assert busy["foreign_cpu_pct"] > calm["foreign_cpu_pct"] + 50
    assert int(busy["foreign_process"].split()[1]) in neighbour.pids  # "pid 4242 python -c ..."
    assert "this figure was taken under load: other processes used" in busy_run.stdout
    assert calm["under_load"] is (calm["foreign_cpu_pct"] > 50)


def _wait_for(path: Path, text: str, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_sweep_waits_for_quiet_and_never_ranks_a_figure_taken_under_load(tmp_path):
    neighbour = Neighbour()
    log = tmp_path / "s" / "sweep.log"
    args = [
        "task.num_samples=2048",
        "hydra.sweeper.n_trials=1",
        "measure.quiet_wait_s=60",
        "hydra.sweeper.confirm=0",
    ]
    try:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "sweeper", "-m", *run_multirun_args(tmp_path, args)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1])]),
            },
        )
        # the neighbour stops once the sweep has seen it and waits: the baseline is measured again
        assert _wait_for(log, "waiting: other processes use", 240), log.read_text() if log.exists() else ""
    finally:
        neighbour.stop()
    out, _ = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, out[-3000:]
    text = log.read_text()
    assert "the machine is busy: other processes use" in text  # before trial 1
    assert re.search(r"#0: its figure was taken under load \([\d,]+ samples/s while other processes used", text)
    trial = load_study(tmp_path).trials[0]
    assert (
        trial.user_attrs["status"] == "ok"
        and " samples/s while other processes used" in trial.user_attrs["measured_again"]
    )
    assert trial.user_attrs["metrics"]["under_load"] is False
    report = (tmp_path / "s" / "report.html").read_text()
    assert "Measured again once the machine was quiet" in report
    assert re.search(r"#0 \([\d,]+ samples/s while other processes used", report)  # the loaded figure kept


def run_multirun_args(tmp_path: Path, overrides: list[str]) -> list[str]:
    """The overrides run_multirun gives a sweep, for a sweep started in the background."""
    from conftest import TINY

    return [
        *TINY,
        *overrides,
        f"hydra.sweep.dir={tmp_path / 's'}",
        f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
        "hydra.sweeper.study_name=test",
    ]


@pytest.mark.slow
def test_a_run_loaded_every_time_is_kept_and_not_ranked(tmp_path):
    with Neighbour():
        proc = run_multirun(
            tmp_path,
            "task.num_samples=2048",
            "hydra.sweeper.n_trials=1",
            "measure.quiet_wait_s=2",
            "hydra.sweeper.confirm=0",
            check=False,
        )
    assert proc.returncode == 1, proc.stderr[-3000:]  # no figure it could rank: no configuration completed
    trial = load_study(tmp_path).trials[0]
    assert trial.user_attrs["status"] == "not-ranked", proc.stdout[-3000:]
    assert trial.user_attrs["reason"].startswith("taken under load 2 times")
    assert trial.user_attrs["metrics"]["samples_per_sec"] > 0  # nothing measured is lost
    assert "still busy after" in proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["winner"] is None and summary["winner_samples_per_sec"] is None
