"""An installed sweeper (a wheel, not this checkout) finds its configs and its Hydra plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT, TINY

pytestmark = pytest.mark.slow


def test_wheel_runs_outside_the_checkout(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "whl"), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "whl").glob("torch_sweeper-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "sweeper" / "conf" / "config.yaml").is_file()
    assert (site / "hydra_plugins" / "throughput_sweeper" / "throughput_sweeper.py").is_file()
    assert not (site / "hydra_plugins" / "__init__.py").exists()  # a namespace package, as Hydra needs

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import sweeper.paths as p; print(p.config_dir())"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(site / "sweeper" / "conf")
    job = subprocess.run(
        [sys.executable, "-m", "sweeper", "task=language_model", "--cfg", "job"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "seq_len" in job.stdout
    hydra_cfg = subprocess.run(
        [sys.executable, "-m", "sweeper", "--cfg", "hydra"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "ThroughputSweeper" in hydra_cfg.stdout
    run = subprocess.run(
        [sys.executable, "-m", "sweeper", *TINY, "task.num_samples=512", f"hydra.run.dir={work / 'r'}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert (work / "r" / "result.json").is_file()


def test_without_pyarrow_the_table_is_csv_and_the_sweep_says_which_extra(tmp_path, monkeypatch):
    from sweeper.store import table

    monkeypatch.setattr(table, "parquet_available", lambda: False)
    table.write_table(table.trials_frame([]), tmp_path)
    assert (tmp_path / "trials.csv").is_file() and not (tmp_path / "trials.parquet").exists()
    assert "torch-sweeper[parquet]" in table.PARQUET_MISSING


def test_gpsampler_without_scipy_is_one_line_naming_the_extra(monkeypatch):
    import importlib.util
    from types import SimpleNamespace

    from sweeper.errors import ConfigError
    from sweeper.search import opening

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "scipy" else real(name, *a))
    settings = SimpleNamespace(sampler={"_target_": "optuna.samplers.GPSampler"}, grid=False, n_jobs=1)
    with pytest.raises(ConfigError, match=r"needs scipy: pip install 'torch-sweeper\[gp\]'"):
        opening.make_sampler(SimpleNamespace(settings=settings, space={}))


def test_the_distribution_carries_its_licence_and_metadata():
    from importlib.metadata import metadata

    meta = metadata("torch-sweeper")
    assert meta["License-Expression"] == "MIT" or meta["License"] == "MIT"
    assert "Operating System :: POSIX :: Linux" in meta.get_all("Classifier")
    assert set(meta.get_all("Provides-Extra")) >= {"parquet", "gp", "postgres", "slurm", "dashboard", "gpu"}
