"""The warm trial engine: trials forked from a zygote keep every isolation guarantee of a
spawned worker (real runs, so marked slow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, TINY
from sweeper.paths import config_dir
from sweeper.runner import fork_servers as zygote
from sweeper.runner.run import checked_spec, measure_spec

pytestmark = pytest.mark.slow

MISBEHAVING = ["task=custom", "task.factory=misbehaving:count_builds"]


def spec(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return checked_spec(compose("config", overrides=[*TINY, *overrides]))


@pytest.fixture(autouse=True)
def _tests_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    yield
    zygote.close_all()


def test_forked_trials_run_with_the_threads_they_ask_for(tmp_path):
    results = {
        n: measure_spec(spec("task.num_samples=2048", f"backend.threads={n}"), tmp_path / str(n)) for n in (1, 2)
    }
    for n, result in results.items():
        assert result.status == "ok" and result.isolation == "fork", result.reason
        assert result.fingerprint.threads == n  # torch.get_num_threads() in the trial
        assert result.measurement.run.cuda_initialized_at_start is False  # the zygote never touched CUDA
    # the OpenMP pool really is the size asked for: one more thread in the process with 2
    assert results[2].measurement.memory.process_threads_peak > results[1].measurement.memory.process_threads_peak


def test_a_trial_cannot_change_the_zygote_and_a_dead_zygote_is_replaced(tmp_path):
    out = tmp_path / "builds.txt"
    run = lambda name: measure_spec(spec(*MISBEHAVING, f"+task.params.out={out}"), tmp_path / name)  # noqa: E731
    first = run("a")
    assert first.status == "ok" and first.isolation == "fork", first.reason
    (engine,) = zygote._ZYGOTES.values()
    second = run("b")
    assert second.isolation == "fork"
    # each trial saw the module as the zygote imported it, not as the trial before left it
    assert out.read_text().split() == ["1", "1"]
    os.kill(engine.pid, signal.SIGKILL)
    engine._proc.wait()
    third = run("c")
    assert third.status == "ok" and third.isolation == "fork", third.reason
    (replacement,) = zygote._ZYGOTES.values()
    assert replacement.pid != engine.pid and replacement.alive()
    assert out.read_text().split() == ["1", "1", "1"]


def test_knobs_read_at_process_start_fork_from_a_zygote_started_with_them(tmp_path):
    """OMP_PROC_BIND is read by OpenMP when the process loads it: a trial forked from the plain
    zygote would run unbound; one forked from a zygote started with it runs bound, as a spawned
    process would, its thread pinned as one (the zygote imports the rest unpinned, then pins
    itself again). Each start environment keeps its zygote (the second bound trial reuses it)."""
    out = tmp_path / "bind.txt"

    def run(name, *extra):
        return measure_spec(
            spec("task=custom", "task.factory=misbehaving:openmp_binding", f"+task.params.out={out}", *extra),
            tmp_path / name,
        )

    plain, bound, again = run("plain"), run("bound", "backend.omp_bind=spread"), run("again", "backend.omp_bind=spread")
    assert [r.isolation for r in (plain, bound, again)] == ["fork"] * 3, [r.reason for r in (plain, bound, again)]
    binds = [line.split() for line in out.read_text().splitlines()]
    assert [b for b, _, _ in binds] == ["0", "4", "4"]  # omp_proc_bind_false, then omp_proc_bind_spread
    assert {libgomps for _, _, libgomps in binds} == {"1"}  # the one torch loads, started early or not
    assert plain.isolation_note is None and "backend.omp_bind=spread" in bound.isolation_note
    assert len(zygote._ZYGOTES) == 2
    spawned = measure_spec(
        spec(
            "task=custom",
            "task.factory=misbehaving:openmp_binding",
            f"+task.params.out={out}",
            "backend.omp_bind=spread",
            "measure.isolation=spawn",
        ),
        tmp_path / "spawned",
    )
    # the same as a fresh process: bound, and pinned where libgomp put it as torch loaded
    assert spawned.isolation == "spawn" and out.read_text().splitlines()[-1].split() == binds[1]
    assert binds[0][1] == ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))  # unbound: every CPU


def test_an_early_zygote_is_adopted_by_the_first_run_with_its_environment(tmp_path, monkeypatch):
    """`python -m sweeper` starts a zygote before Hydra composes (its torch import beside the
    composition); the first run whose start environment it has adopts it, names its modules, and
    forks from it. One whose environment changed meanwhile is killed, and a fresh one started."""
    out = tmp_path / "builds.txt"
    zygote.start_early()
    (early,) = zygote._EARLY
    assert early.modules is None and early.alive()
    result = measure_spec(spec(*MISBEHAVING, f"+task.params.out={out}"), tmp_path / "a")
    assert result.status == "ok" and result.isolation == "fork", result.reason
    (engine,) = zygote._ZYGOTES.values()
    assert engine is early and engine.modules and not zygote._EARLY
    assert out.read_text().split() == ["1"]
    zygote.close_all()

    zygote.start_early()
    (early,) = zygote._EARLY
    monkeypatch.setenv("SWEEPER_TEST_CHANGED", "1")
    assert zygote.zygote_for(["json"]) is not early
    early._proc.wait(timeout=5)
    assert not early.alive() and not zygote._EARLY


def test_zygotes_past_the_cap_close_the_least_recently_used(monkeypatch):
    monkeypatch.setattr(zygote, "MAX_ZYGOTES", 2)
    first = zygote.zygote_for([], {"KMP_BLOCKTIME": "0"})
    second = zygote.zygote_for([], {"KMP_BLOCKTIME": "1"})
    assert zygote.zygote_for([], {"KMP_BLOCKTIME": "0"}) is first  # now the most recently used
    zygote.zygote_for([], {"KMP_BLOCKTIME": "2"})
    assert first.alive() and not second.alive() and len(zygote._ZYGOTES) == 2
    with open(f"/proc/{first.pid}/environ", "rb") as environ:
        assert b"KMP_BLOCKTIME=0" in environ.read().split(b"\0")


def test_a_zygote_that_starts_brings_the_expected_ones_up_beside_it_one_per_idle_core(monkeypatch):
    """A start environment's zygote is a torch import on one core while the others wait: the
    sweep's other expected environments start beside it, one per idle core, and are ready
    (imported, idle) when it returns; a later run in one of them forks at once."""
    zygote.close_all()
    monkeypatch.setattr(zygote.os, "sched_getaffinity", lambda pid: {0, 1, 2})  # two idle cores
    envs = [{}, {"KMP_BLOCKTIME": "1"}, {"KMP_BLOCKTIME": "2"}, {"KMP_BLOCKTIME": "3"}]
    zygote.expect(envs)
    try:
        needed = zygote.zygote_for([], {"KMP_BLOCKTIME": "2"})
        alive = {dict(key[1]).get("KMP_BLOCKTIME"): z for key, z in zygote._ZYGOTES.items()}
        # the needed one, and the first two expected ones without a zygote: your config's and "1"
        assert set(alive) == {None, "1", "2"} and all(z.alive() for z in alive.values())
        assert alive["2"] is needed and list(zygote._ZYGOTES.values())[-1] is needed  # the most recent
        assert zygote.zygote_for([], {"KMP_BLOCKTIME": "1"}) is alive["1"]  # no new start
        with open(f"/proc/{alive['1'].pid}/environ", "rb") as environ:
            assert b"KMP_BLOCKTIME=1" in environ.read().split(b"\0")
        # room for no more than the needed one: nothing starts beside it
        monkeypatch.setattr(zygote, "MAX_ZYGOTES", 4)
        zygote.zygote_for([], {"KMP_BLOCKTIME": "3"})
        assert len(zygote._ZYGOTES) == 4
    finally:
        zygote.expect([])
        zygote.close_all()


def test_a_sweeps_expected_environments_last_as_long_as_it():
    with pytest.raises(RuntimeError), zygote.expecting([{"KMP_BLOCKTIME": "1"}]):
        assert zygote._EXPECTED == [{"KMP_BLOCKTIME": "1"}]
        raise RuntimeError("the sweep failed")
    assert zygote._EXPECTED == []  # a later run in this process starts no spares


def test_zygotes_that_bind_openmp_start_side_by_side_only_where_their_import_runs_unpinned(monkeypatch):
    """With OMP_PROC_BIND set, libgomp pins the importing process to the first place as it starts.
    Where torch ships its own libgomp, the zygote starts it first and unpins at once, so bound
    zygotes import side by side like any; where it does not, two bound ones started together
    would import one after the other on one core, and at most one starts beside another."""
    close, spread = {"OMP_PROC_BIND": "close"}, {"OMP_PROC_BIND": "spread"}
    pre = {"LD_PRELOAD": "libjemalloc.so.2"}
    monkeypatch.setattr(zygote.os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(zygote, "zygote_room", lambda alive: 9)
    monkeypatch.setattr(zygote, "_ZYGOTES", {})
    monkeypatch.setattr(zygote, "_EXPECTED", [{}, close, spread, pre, {**pre, **close}, {**pre, **spread}])
    monkeypatch.setattr(zygote, "_own_openmp", lambda: None)
    assert zygote._spare_environments([], spread) == [{}, pre]
    assert zygote._spare_environments([], pre) == [{}, close]
    monkeypatch.setattr(zygote, "_own_openmp", lambda: "/site-packages/torch/lib/libgomp.so.1")
    assert zygote._spare_environments([], spread) == [{}, close, pre, {**pre, **close}, {**pre, **spread}]
    monkeypatch.setattr(zygote.os, "sched_getaffinity", lambda pid: {0, 1})
    assert zygote._spare_environments([], pre) == [{}]  # one idle core


def test_zygotes_kept_alive_are_nine_at_most_fewer_where_memory_is_short(monkeypatch):
    """Each idle zygote holds its private memory (an imported torch): they may hold a quarter of
    what is available, as the live ones measure, never fewer than two."""

    class Live:
        def __init__(self, pid):
            self.pid = pid

    gib = 1 << 30
    available = {"MemAvailable": 22 * gib}
    monkeypatch.setattr(zygote, "_meminfo_bytes", lambda field, path="/proc/meminfo": available[field])
    monkeypatch.setattr(zygote, "_private_bytes", lambda pid: gib // 2)
    assert zygote.zygote_room([]) == 9  # a 24 GB machine: all nine start environments
    available["MemAvailable"] = 3 * gib
    assert zygote.zygote_room([Live(1), Live(2)]) == 2  # (3 + 1) / 4 GB: two of 0.5 GB
    available["MemAvailable"] = 5 * gib
    assert zygote.zygote_room([Live(1), Live(2), Live(3)]) == 3  # (5 + 1.5) / 4: three
    available["MemAvailable"] = gib // 4
    assert zygote.zygote_room([]) == 2
    # the real machine's figures: a number in range
    monkeypatch.undo()
    assert 2 <= zygote.zygote_room([]) <= zygote.MAX_ZYGOTES


def test_a_workload_that_starts_threads_at_import_is_spawned_and_says_so(tmp_path):
    result = measure_spec(spec("task=custom", "task.factory=threads_at_import:build"), tmp_path)
    assert result.status == "ok", result.reason
    assert result.isolation == "spawn"
    assert "started 1 thread(s) at import" in result.isolation_note


def test_spawn_on_request(tmp_path):
    result = measure_spec(spec("task.num_samples=2048", "measure.isolation=spawn"), tmp_path)
    assert result.status == "ok" and result.isolation == "spawn" and not result.isolation_note


def test_a_forked_trial_finds_the_imports_collected_and_frozen(tmp_path):
    """Its collection before warm-up scans only what the trial built (0.2-0.35 s a trial when it
    scanned the imports' 340,000 objects too); a spawned trial has nothing frozen. Either runs
    with the collector on, as a user's process does (the zygote imports with it off)."""
    for isolation in ("fork", "spawn"):
        out = tmp_path / f"{isolation}.txt"
        result = measure_spec(
            spec(
                "task=custom",
                "task.factory=misbehaving:frozen_heap",
                f"+task.params.out={out}",
                f"measure.isolation={isolation}",
            ),
            tmp_path / isolation,
        )
        assert result.status == "ok" and result.isolation == isolation, result.reason
        frozen, enabled = out.read_text().split()
        assert int(frozen) > 100_000 if isolation == "fork" else int(frozen) == 0
        assert enabled == "True"


def _live_descendants_besides(keep: int) -> list[int]:
    from sweeper import procs

    def live(pid: int) -> bool:
        info = procs.stat(pid)
        return info is not None and info.state != "Z"

    return [p for p in procs.tree(os.getpid())[1:] if p != keep and live(p)]


def test_a_forked_hang_is_killed_with_its_workers_and_an_abort_is_a_crash(tmp_path):
    hung = measure_spec(
        spec("task=custom", "task.factory=misbehaving:hang", "loader.num_workers=2", "measure.timeout_s=8"),
        tmp_path / "hang",
    )
    assert hung.status == "timeout" and hung.isolation == "fork"
    (engine,) = zygote._ZYGOTES.values()
    # nothing of the run is left (the trial, its DataLoader workers): only the zygote remains
    assert _live_descendants_besides(engine.pid) == []
    aborted = measure_spec(spec("task=custom", "task.factory=misbehaving:abort"), tmp_path / "abort")
    assert aborted.status == "crash" and "SIGABRT" in aborted.reason and aborted.isolation == "fork"


def test_the_machine_probe_is_asked_once_per_machine_and_the_factory_still_checked(tmp_path, monkeypatch):
    from sweeper.errors import ConfigError
    from sweeper.runner import probe as probe_module

    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path))
    asked = []
    real_ask = probe_module._ask
    monkeypatch.setattr(probe_module, "_ask", lambda *a: asked.append(a) or real_ask(*a))
    first = probe_module.probe("auto", "sweeper.tasks.mnist_mlp:build", "fork")
    second = probe_module.probe("auto", "sweeper.tasks.mnist_mlp:build", "fork")
    assert len(asked) == 1 and first == second and first.device == "cpu"
    # bf16 runs on any CPU, and is computed in hardware where the CPU has the instructions for
    # it (cpu_computes_bf16): the recipes read that, the space the first
    import torch

    from sweeper.measuring.probe import cpu_computes_bf16

    onednn = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert first.bf16 and first.bf16_fast == cpu_computes_bf16(onednn, torch.cpu.get_capabilities())
    assert list((tmp_path / "machines").glob("*.json"))
    # cached machine, broken factory: found in the zygote the trials would fork from
    with pytest.raises(ConfigError, match="module 'sweeper.tasks.mnist_mlp' has no attribute 'nope'"):
        probe_module.probe("auto", "sweeper.tasks.mnist_mlp:nope", "fork")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module'"):
        probe_module.probe("auto", "no_such_module:build", "spawn")
    assert len(asked) == 2  # spawned runs: the factory is checked in a probe child


def test_a_forked_trial_knows_its_intermediate_however_soon_that_exits(tmp_path):
    """The trial waits to be re-parented to the sweep (away from the intermediate that forked
    it). It once read the intermediate's pid itself: when the intermediate had exited already,
    that was the sweep's, and the trial waited out the full 5 s (4 runs in 100 of a race)."""
    import socket

    from sweeper.measuring import fork_server as child_side

    def become(request, event_fd, intermediate, channel):
        deadline = time.monotonic() + 2
        while os.getppid() == intermediate and time.monotonic() < deadline:  # re-parented once it exits
            time.sleep(0.001)
        written = Path(request["out"] + ".part")  # renamed whole: the test never reads it half-written
        written.write_text(f"{intermediate} {os.getppid()}")
        written.replace(request["out"])

    ours, _ = socket.socketpair()
    forks = 20
    for n in range(forks):
        read_fd, event_fd = os.pipe()
        trial = child_side._fork_trial({"out": str(tmp_path / str(n))}, event_fd, ours, become)
        os.close(read_fd)
        deadline = time.monotonic() + 10
        while not (tmp_path / str(n)).exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        with_parent = (tmp_path / str(n)).read_text().split()
        # the pid passed is the intermediate's: never this process, nor the trial's parent now
        assert int(with_parent[0]) not in (os.getpid(), int(with_parent[1]), trial)
        try:
            os.waitpid(trial, 0)  # re-parented here when this process is a subreaper
        except ChildProcessError:
            pass


def test_no_zygote_outlives_the_command_that_started_it(tmp_path):
    """At the exit of the process that started them, its zygotes are killed and reaped, not left
    to their parent-death signal, which comes a moment after the command has returned. A hook
    registered before the module's runs after its own, while the process still lives."""
    program = """
import atexit, os, sys
seen = {}
def check():
    try:
        os.kill(seen["pid"], 0)
        print("alive at exit")
    except ProcessLookupError:
        print("gone at exit")
atexit.register(check)
from sweeper.runner import fork_servers as zygote
seen["pid"] = zygote.zygote_for(["torch"]).pid
print("started", seen["pid"])
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == "started" and proc.stdout.strip().endswith("gone at exit"), proc.stdout
