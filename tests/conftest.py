"""Helpers to run sweeper as a user does: `python -m sweeper ...` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
# tiny measurement: real runs, seconds each
TINY = [
    "measure.warmup_s=0.2",
    "measure.warmup_steps=1",
    "measure.windows=2",
    "measure.window_s=0.3",
    "measure.warmup_max_s=1",  # steady or not, at most a second of warm-up
]


def child_pythonpath() -> str:
    """tests/ and the checkout first, then the caller's own PYTHONPATH: on a server where sweeper's
    needs were installed into a target folder (benchmarks/gpu/install.sh), that folder stays."""
    return os.pathsep.join(p for p in (str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def result(self) -> RunResult:
        return RunResult.from_json(self.result_json)

    @property
    def result_json(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "result.json").read_text())


def run_sweeper(
    tmp_path: Path,
    *overrides: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    tiny: bool = True,
    wrap: Sequence[str] = (),
) -> Run:
    """`python -m sweeper` with these overrides, its run directory in tmp_path; `wrap`: the command
    it runs under (a shell that joins a cgroup first, say)."""
    run_dir = tmp_path / "run"
    args = [*(TINY if tiny else []), *overrides, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(
        [*wrap, sys.executable, "-m", "sweeper", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": child_pythonpath(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, run_dir)


def run_multirun(
    tmp_path: Path, *overrides: str, name: str = "s", study: str = "test", check: bool = True
) -> subprocess.CompletedProcess:
    """`python -m sweeper -m` from tmp_path (so outputs/ is the test's), storage in tmp_path."""
    args = [
        *TINY,
        *overrides,
        f"hydra.sweep.dir={tmp_path / name}",
        f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
        f"hydra.sweeper.study_name={study}",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def load_study(tmp_path: Path, name: str = "s"):
    """The study a sweep in tmp_path/name used (its name carries the hardware class)."""
    import optuna

    info = json.loads((tmp_path / name / "sweep.json").read_text())
    return optuna.load_study(study_name=info["study"], storage=f"sqlite:///{tmp_path / 'study.db'}")


def running_attrs(host: str, pid: int) -> dict[str, Any]:
    """The attributes of a trial a sweep process (`host`, `pid`) is running, its knobs chosen."""
    from sweeper.store.record import Owner, TrialAttrs

    started = TrialAttrs.started(baseline=False, knobs={}, fixed=[], workload="w", sweep_dir="d", hardware_class="h")
    return started | Owner(host, pid, None).attrs()


@pytest.fixture(autouse=True, scope="session")
def _own_measurement_lock(tmp_path_factory):
    """Tests take turns among themselves, not with a real sweep that may run on this machine."""
    os.environ.setdefault("SWEEPER_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
    # the machine cache of this test session, not the user's
    os.environ.setdefault("SWEEPER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def sweeper_run(tmp_path):
    def _run(*overrides: str, **kw: Any) -> Run:
        return run_sweeper(tmp_path, *overrides, **kw)

    return _run


def pytest_collection_modifyitems(items):
    """The lint and type gate runs before the tests, so that a failing gate is the first thing read."""
    items.sort(key=lambda item: item.nodeid.split("::")[0] != "tests/test_lint.py")


@pytest.fixture
def allocators_installed(monkeypatch):
    """For a test that plans a search (nothing runs) whose space holds backend.allocator: the
    presets search it only where jemalloc and TCMalloc are installed, so the test plans as on a
    machine that has both, whether this one does or not."""
    from sweeper import topology

    found = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}
    monkeypatch.setattr(topology, "allocator_library", lambda name: found.get(name))
