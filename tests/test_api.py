"""sweeper from Python: measure, sweep and load, on the command line's paths, with its errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sweeper
from conftest import ROOT, TINY
from sweeper.result import Status

QUICK = [*TINY, "search=quick", "task.num_samples=2048", "hydra.sweeper.confirm=1"]


def cli_error(*args: str) -> str:
    """The one line the command line prints for this input."""
    proc = subprocess.run([sys.executable, "-m", "sweeper", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    return proc.stderr.strip().splitlines()[-1].removeprefix("error: ")


def test_measure_returns_the_run_result_and_keeps_its_files(tmp_path):
    result = sweeper.measure([*TINY, "loader.batch_size=32"], out_dir=tmp_path / "run")
    assert result.status == Status.OK and result.measurement is not None
    assert result.measurement.throughput.samples_per_sec > 0
    assert (tmp_path / "run" / "result.json").is_file()
    # the caller is left as it was: no fork server or run left as its child (a notebook's kernel)
    me = os.getpid()
    assert Path(f"/proc/{me}/task/{me}/children").read_text().split() == []


def test_bad_input_raises_the_line_the_command_line_prints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outputs/, where a call's own directory goes
    with pytest.raises(sweeper.ConfigError) as bad:
        sweeper.measure(["loader.batch_size=0"], out_dir=tmp_path / "run")
    assert str(bad.value) == cli_error("loader.batch_size=0")
    with pytest.raises(sweeper.ConfigError) as unknown:
        sweeper.measure(["loader.batchsize=8"])
    assert str(unknown.value) == cli_error("loader.batchsize=8")
    with pytest.raises(sweeper.ConfigError):
        sweeper.sweep(["hydra.sweeper.n_trials=0"])
    assert not (tmp_path / "outputs").exists(), "bad input left a directory behind"
    with pytest.raises(sweeper.ConfigError) as swept:
        sweeper.sweep(["hydra.sweeper.n_trials=0"], sweep_dir=tmp_path / "s")
    assert str(swept.value) == cli_error("-m", "hydra.sweeper.n_trials=0")
    assert not (tmp_path / "run" / "result.json").exists()


def test_sweep_then_load_its_directory_and_its_study(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outputs/ (the study, index.html) as a notebook's working directory has it
    done = sweeper.sweep([*QUICK, "loader.batch_size=2"], n_trials=3)
    # where the command line's sweeps go, for the morning: outputs/sweeps/<date>/<time>
    assert done.sweep_dir is not None and done.sweep_dir.resolve().parent.parent == tmp_path / "outputs" / "sweeps"
    assert done.winner is not None and done.summary is not None and done.summary.counts.measured == 3
    assert len(done.trials) >= 3 and {"number", "status", "samples_per_sec", "loader.batch_size"} <= set(done.trials)
    assert done.report is not None and done.report.is_file()
    assert done.winner_knobs["loader.batch_size"] == int(
        done.trials.loc[done.trials["number"] == done.winner, "loader.batch_size"].iloc[0]
    )
    again = sweeper.load(done.sweep_dir)
    assert (again.study, again.winner, again.speedup) == (done.study, done.winner, done.speedup)
    stored = sweeper.load(done.study)  # the study in outputs/sweeper.db, the default storage
    assert stored.winner == done.winner and len(stored.trials) == len(done.trials)
    with pytest.raises(sweeper.ConfigError, match="no study 'nope'"):
        sweeper.load("nope")


def test_a_sweep_where_nothing_completed_returns_its_trials_and_no_winner(tmp_path, monkeypatch):
    """The command line exits 1 when no configuration completed; from Python that is a result
    like any other, its trials holding the reasons, not an exception."""
    monkeypatch.chdir(tmp_path)
    fake = f"python {ROOT / 'tests' / 'fake_script.py'} untracked --batch ${{loader.batch_size}}"
    done = sweeper.sweep([*TINY, "task=script", f"task.command={fake}", "search=quick"], n_trials=5)
    assert done.winner is None and done.speedup is None and done.winner_knobs == {}
    assert len(done.trials) == 3 and set(done.trials["status"]) == {"error"}, done.trials["status"]
    assert "failed alike" in done.summary.stopped
