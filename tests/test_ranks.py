"""Processes per node, CPU topology and the OpenMP environment: the pure parts (fast), and real
data-parallel runs on this machine's cores (slow)."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, TINY
from sweeper import topology
from sweeper.errors import InvalidConfig
from sweeper.measurement import Measurement, Memory, RunFacts, Throughput, Utilization
from sweeper.measuring import timing
from sweeper.measuring.ranks import RANK_MODULE, RankResult, check_gpus, combine, forks_ranks
from sweeper.result import RunResult, Status
from sweeper.search.plan import Learned

# --- the measuring loop over a group of ranks ------------------------------------------------


class TwinGroup:
    """Rank 0 of two, whose twin is `slower` times as slow: decisions are rank 0's, the
    twin's window takes longer and finishes the same samples."""

    def __init__(self, slower: float) -> None:
        self.slower, self.agreed, self.totals = slower, [], []

    def agree(self, value: int) -> int:
        self.agreed.append(value)
        return value

    def total(self, elapsed: float, samples: int) -> tuple[float, int]:
        self.totals.append((elapsed, samples))
        return elapsed * self.slower, samples * 2


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ranks_are_measured_as_one_group_in_common_windows():
    clock = StepClock()

    def step(batch):
        clock.now += 0.01  # 10 ms a step, 32 samples: 3,200 samples/s on this rank

    group = TwinGroup(slower=1.25)
    rule = timing.Rule(warmup_s=0.1, warmup_steps=2, max_windows=4, window_s=0.1, warmup_max_s=1.0, min_windows=4)
    t = timing.measure(lambda: None, step, lambda b: 32, lambda: None, rule, clock=clock, group=group)
    # windows of rank 0's step count for window_s (10 steps), the same on every rank
    assert all(s == 320 for _, s in group.totals) and len(group.totals) == 4
    # the group's rate: both ranks' samples over the slower rank's time
    assert t.window_samples_per_sec == pytest.approx([640 / (0.1 * 1.25)] * 4)
    assert t.own_window_samples_per_sec == pytest.approx([3200.0] * 4)
    figures = t.throughput()
    assert figures.own_samples_per_sec == pytest.approx(3200.0)
    assert figures.samples_per_sec == pytest.approx(5120.0)
    assert group.agreed  # warm-up's decisions went through rank 0


def _rank(rate: float, rss: float, cpus: str = "0") -> RankResult:
    measured = Measurement(
        throughput=Throughput(samples_per_sec=2 * rate, own_samples_per_sec=rate),
        memory=Memory(peak_memory_mb=rss, peak_rss_mb=rss, dataloader_processes=2),
        utilization=Utilization(cpu_util_main_pct=90.0, cpu_util_workers_pct=10.0),
        run=RunFacts(cpus_allowed_main=cpus, cpus_allowed_workers=("1",), rank=0),
    )
    return RankResult(RunResult(Status.OK, measurement=measured))


def _failed(status: str, reason: str, at: float) -> RankResult:
    return RankResult(RunResult(Status(status), reason), failed_at=at)


def test_a_group_result_holds_the_total_each_rank_and_the_memory_of_all():
    out = combine({0: _rank(100.0, 700.0), 1: _rank(95.0, 690.0, cpus="1")}, 2, {}, 1500.0)
    measured = out.measurement
    assert out.status == "ok" and out.samples_per_sec == 200.0
    assert measured.throughput.rank_samples_per_sec == (100.0, 95.0) and measured.run.nproc_per_node == 2
    assert measured.memory.peak_rss_mb == 1500.0 and measured.memory.rank_peak_rss_mb == (700.0, 690.0)
    assert measured.memory.dataloader_processes == 4 and measured.utilization.cpu_util_main_pct == 180.0
    assert measured.run.rank_cpus_allowed == ("0", "1") and measured.run.rank is None
    assert measured.throughput.own_samples_per_sec is None  # the group's result is all of them


def test_the_cause_of_a_group_failure_names_it():
    peer = _failed("error", "RuntimeError: Connection closed by peer [127.0.0.1]:1", 1.0)
    own = _failed("oom", "RuntimeError: can't allocate memory", 2.0)
    # the rank that saw its peer vanish failed first, but the cause is the other's
    out = combine({0: peer, 1: own}, 2, {0: 1, 1: 1}, 0.0)
    assert out.status == "oom" and out.reason.startswith("rank 1 of 2: RuntimeError: can't allocate")
    # a rank killed by a signal of its own beats the agent's SIGTERM to the others
    out = combine({}, 2, {0: -signal.SIGTERM, 1: -signal.SIGABRT}, 0.0)
    assert out.status == "crash" and out.reason.startswith("rank 1 of 2 killed by SIGABRT")
    out = combine({0: _rank(1.0, 1.0)}, 2, {1: 3}, 0.0)
    assert out.status == "error" and "rank 1 of 2 exited with code 3" in out.reason


# --- cores, NUMA, OpenMP -----------------------------------------------------------------------


def test_each_rank_gets_its_share_of_the_cores():
    assert [topology.rank_cores(range(8), 2, r) for r in (0, 1)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [topology.rank_cores(range(5), 2, r) for r in (0, 1)] == [(0, 1, 2), (3, 4)]
    assert [topology.rank_cores([0, 1], 4, r) for r in range(4)] == [(0,), (1,), (0,), (1,)]
    assert topology.threads_per_rank(None, 8, 2) == 4 and topology.threads_per_rank(3, 8, 2) == 3
    assert topology.threads_per_rank(None, 8, 1) is None


def test_oversubscription_is_ranks_times_threads_or_workers_beyond_the_cores():
    assert not topology.oversubscribes(1, 8, 8, 2)  # one process keeps its preset's ranges
    assert not topology.oversubscribes(2, 1, 1, 2) and not topology.oversubscribes(2, None, 0, 2)
    assert topology.oversubscribes(2, 2, 0, 2) and topology.oversubscribes(2, 1, 2, 2)


def test_numa_nodes_are_read_from_sysfs_and_ranks_bound_with_numactl(tmp_path):
    for node, cpus in ((0, "0-3,8"), (1, "4-7,9"), (2, "")):  # node 2: memory only
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (tmp_path / "possible").write_text("0-2\n")
    nodes = topology.numa_nodes(str(tmp_path))
    assert nodes == {0: (0, 1, 2, 3, 8), 1: (4, 5, 6, 7, 9)}
    assert topology.numa_modes(str(tmp_path)) == ("none", "node")
    assert [topology.rank_node([0, 1], 4, r) for r in range(4)] == [0, 0, 1, 1]
    assert topology.numactl_command(1, ["python", "-m", "x"]) == [
        "numactl",
        "--cpunodebind=1",
        "--membind=1",
        "python",
        "-m",
        "x",
    ]
    (tmp_path / "node1" / "cpulist").write_text("")
    assert topology.numa_modes(str(tmp_path)) == ("none",)  # one node: not offered
    assert topology.numa_nodes(str(tmp_path / "absent")) == {}


def test_the_openmp_environment_follows_the_runtime():
    gnu = "7f00-7f10 r-xp 0 0:0 1 /venv/torch/lib/libgomp.so.1\n"
    intel = "7f00-7f10 r-xp 0 0:0 1 /opt/intel/lib/libiomp5.so\n"
    assert topology.openmp_runtime(gnu) == "gnu" and topology.openmp_runtime(intel) == "intel"
    assert topology.openmp_runtime("libc.so.6") == "none"
    assert topology.openmp_env("default") == {}
    assert topology.openmp_env("close") == {
        "OMP_PROC_BIND": "close",
        "OMP_PLACES": "cores",
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
    }
    assert topology.openmp_env("spread", 0)["KMP_BLOCKTIME"] == "0"


def test_ranks_are_forked_on_the_cpu_and_fresh_interpreters_under_numactl():
    from sweeper.config import BackendConf

    assert forks_ranks(BackendConf(device="cpu", numa="none"))
    assert not forks_ranks(BackendConf(device="cpu", numa="node"))  # numactl execs the rank


def test_knobs_read_at_process_start_make_the_run_spawned():
    from test_validation import with_

    from sweeper.runner.run import start_env

    env, why = start_env(with_("backend.omp_bind", "close"))
    assert env["OMP_PROC_BIND"] == "close" and "backend.omp_bind=close are read by OpenMP" in why
    assert start_env(with_("backend.omp_bind", "default")) == ({}, None)


def test_an_openmp_bound_run_is_on_the_machine_s_hardware_class(sweeper_run):
    """OMP_PROC_BIND pins the measuring process's thread to one core when torch starts OpenMP;
    the run must still see (and fingerprint) the machine's cores, so that it is ranked with the
    others, not kept apart as another hardware class (found running the README's main job)."""
    plain = sweeper_run("task.num_samples=1024", "backend.threads=1")
    bound = sweeper_run("task.num_samples=1024", "backend.threads=1", "backend.omp_bind=spread")
    assert plain.returncode == 0 and bound.returncode == 0, bound.stderr
    assert bound.result.isolation == "fork" and "omp_bind=spread" in bound.result.isolation_note
    print("BOUND", bound.result.measurement.run.cpus_allowed_main, plain.result.measurement.run.cpus_allowed_main)
    cores = len(os.sched_getaffinity(0))
    assert bound.result.fingerprint.cpus_available == plain.result.fingerprint.cpus_available == cores
    assert bound.result.fingerprint.hardware_class == plain.result.fingerprint.hardware_class


# --- real data-parallel runs (slow) ----------------------------------------------------------


def _spec(*overrides: str) -> dict:
    from sweeper.paths import config_dir
    from sweeper.runner.run import checked_spec

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return checked_spec(compose("config", overrides=[*TINY, *overrides]))


@pytest.fixture
def tests_on_path(monkeypatch):
    from sweeper.runner import fork_servers as zygote

    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    yield
    zygote.close_all()


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_two_ranks_on_two_cores_report_each_rank_and_the_total(tests_on_path, tmp_path):
    from sweeper.runner.run import measure_spec

    run = measure_spec(
        _spec(
            "dist.nproc_per_node=2",
            "backend.affinity=compact",
            "loader.num_workers=1",
            "train.effective_batch=256",
            "loader.batch_size=64",
        ),
        tmp_path,
    )
    assert run.status == Status.OK, run.reason
    measured = run.measurement
    ranks = measured.throughput.rank_samples_per_sec
    assert measured.run.nproc_per_node == 2 and len(ranks) == 2 and all(r > 0 for r in ranks)
    assert run.samples_per_sec > max(ranks)  # the total over both
    assert measured.run.effective_batch == 64 * measured.run.grad_accum_steps * 2 == 256
    cores = sorted(os.sched_getaffinity(0))
    # compact within each rank's share: one core each, the worker sharing it
    assert measured.run.rank_cpus_allowed == (str(cores[0]), str(cores[1]))
    # processes under the ranks: one worker each, and sometimes multiprocessing's resource tracker
    assert measured.memory.dataloader_processes >= 2
    assert measured.memory.peak_rss_mb > max(measured.memory.rank_peak_rss_mb)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_ranks_whose_store_port_was_taken_meanwhile_start_on_another(tests_on_path, monkeypatch):
    """The OS may hand the free port to another process before the ranks' store binds it: the
    group starts on another port instead of failing the trial."""
    from sweeper import protocol
    from sweeper.measuring import ranks
    from sweeper.measuring.events import Events

    for key in (protocol.PARENT_PID_ENV, *protocol.THREAD_ENV_VARS):  # launch sets them for its ranks
        monkeypatch.setenv(key, os.environ.get(key, ""))
    tried: list[int] = []
    with socket.socket() as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1], ranks.free_port()])
        monkeypatch.setattr(ranks, "free_port", lambda: tried.append(next(ports)) or tried[-1])
        run = ranks.launch(_spec("dist.nproc_per_node=2"), Events(os.devnull))
    assert run.status == Status.OK, run.reason
    assert len(tried) == 2 and run.measurement is not None and run.measurement.run.nproc_per_node == 2


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_ranks_started_as_fresh_interpreters_meet_and_measure(tests_on_path, tmp_path):
    """The launch a GPU or numactl takes (each rank `python -m sweeper.measuring.ranks`, not a
    fork), run on the CPU: the ranks find the launcher's store and each leaves its result."""
    import json

    from sweeper.measuring import ranks

    (tmp_path / "spec.json").write_text(json.dumps(_spec("dist.nproc_per_node=2").to_json()))
    assert ranks._run_group(2, str(tmp_path), fork=False) == {}
    results = [RankResult.from_json(json.loads((tmp_path / f"rank{r}.json").read_text())) for r in range(2)]
    assert [r.result.status for r in results] == [Status.OK, Status.OK], [r.result.reason for r in results]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat"):
            return True  # a zombie still has a stat: it must have been reaped too
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "status", "reason"),
    [
        ("abort", Status.CRASH, "rank 1 of 2 killed by SIGABRT"),
        ("raise", Status.ERROR, "rank 1 of 2: ValueError: rank 1 failed on purpose"),
        ("hang", Status.TIMEOUT, "no result within measure.timeout_s=15 s"),
    ],
)
def test_a_rank_that_fails_takes_the_group_down_and_leaves_no_process(tests_on_path, tmp_path, how, status, reason):
    from sweeper.runner.run import measure_spec

    pids = tmp_path / "pids"
    before = _temporaries()
    run = measure_spec(
        _spec(
            "task=custom",
            "task.factory=misbehaving:fails_on_rank",
            f"+task.params.how={how}",
            f"+task.params.pids={pids}",
            "dist.nproc_per_node=2",
            "loader.num_workers=1",
            "measure.timeout_s=15",
        ),
        tmp_path / "run",
    )
    assert run.status == status and reason in run.reason, run.reason
    ranks = [p.read_text().split(" ", 1) for p in Path(pids).iterdir()]
    assert len(ranks) == 2 and not any(_alive(int(pid)) for pid, _ in ranks)
    # on the CPU the ranks are forks of the launcher, not fresh interpreters
    assert not any(RANK_MODULE in cmdline for _, cmdline in ranks), ranks
    # nor a file: the ranks' logs, the loader workers' sockets, the run's scratch directory
    assert _temporaries() <= before, _temporaries() - before


def _temporaries() -> set[str]:
    """What a killed run's processes would leave in the temporary directory: sweeper's own
    directories and multiprocessing's (a DataLoader worker's socket for passing tensors)."""
    tmp = Path(tempfile.gettempdir())
    return {p.name for pattern in ("pymp-*", "sweeper-*") for p in tmp.glob(pattern)}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the preset offers ranks with two cores or more")
def test_search_cpu_grows_ranks_and_openmp_binding_and_skips_what_it_should_not_measure(tmp_path):
    import hydra_plugins.throughput_sweeper.config  # noqa: F401  (hydra/sweeper=throughput)
    from sweeper import resolvers
    from sweeper.machine import Fingerprint, Machine
    from sweeper.paths import config_dir
    from sweeper.search.plan import make_plan
    from sweeper.search.settings import SweepSettings

    resolvers.register()
    machine = Machine(
        device="cpu", cuda=False, bf16=True, fingerprint=Fingerprint(hardware_class="x", cpus_available=2)
    )
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        plan = make_plan(
            SweepSettings(),
            ["search=cpu", "train.effective_batch=128", "loader.batch_size=64"],
            compose=lambda overrides: compose("config", overrides=list(overrides)),
            app_name="sweeper",
            sweep_dir=tmp_path,
            probe_machine=lambda *probed: machine,
        )
    assert {"dist.nproc_per_node", "backend.omp_bind"} <= set(plan.space)
    assert "backend.kmp_blocktime" not in plan.space  # GNU's OpenMP here: KMP_BLOCKTIME means nothing
    if len(topology.numa_nodes()) < 2:
        assert "backend.numa" not in plan.space
    base = {"loader.batch_size": 64, "loader.num_workers": 0, "backend.threads": 1}
    assert plan.unsampled_reason({**base, "dist.nproc_per_node": 2}) is None
    assert "oversubscribe" in plan.unsampled_reason({**base, "dist.nproc_per_node": 2, "backend.threads": 2})
    assert "does not divide train.effective_batch=128" in plan.unsampled_reason(
        {**base, "loader.batch_size": 128, "dist.nproc_per_node": 2}
    )

    # an oversubscribed point is skipped, and its nearest point within the cores is queued, to
    # be measured next and whole: the sampler learns what 2 ranks run at, not only that the
    # points it drew with them were skipped
    import optuna
    from optuna.trial import TrialState

    from sweeper.search.answer import answer
    from sweeper.search.trials import ask
    from sweeper.store.record import TrialRecord
    from sweeper.store.study import StoredStudy

    over = {**base, "dist.nproc_per_node": 2, "backend.threads": 2, "loader.num_workers": 2}
    fitted = {**over, "backend.threads": 1, "loader.num_workers": 1}
    assert plan.within_cores(over) == fitted
    assert plan.within_cores({**base, "dist.nproc_per_node": 2}) is None  # not oversubscribed
    storage = optuna.storages.InMemoryStorage()
    stored = StoredStudy(optuna.create_study(storage=storage), storage)
    said: list[str] = []
    told = answer(stored, plan, stored.study.ask(), over, [], say=lambda key, line: said.append(line))
    assert said == [
        "#0 skipped (2 ranks x (2 threads, 2 loader workers) oversubscribe the 2 cores): its point with "
        "num_workers=1, threads=1 queued instead"
    ]
    record = TrialRecord.of(told.trial)
    assert told.trial.state == TrialState.PRUNED and record.status == Status.SKIPPED
    assert record.reason.endswith("its nearest point within the cores (num_workers=1, threads=1) is queued")
    queued, knobs = ask(stored, plan, plan.context(Learned(convolutional=False)), baseline=False)
    assert {k: knobs[k] for k in fitted} == fitted and TrialRecord.of(queued).in_place_of == 0
    # queued once: another skipped point with the same nearest point queues nothing more
    again = answer(stored, plan, stored.study.ask(), {**over, "loader.num_workers": 3}, [])
    assert not stored.study.get_trials(states=(TrialState.WAITING,))
    assert TrialRecord.of(again.trial).reason.endswith(
        "its nearest point within the cores (num_workers=1, threads=1) is in the study already"
    )


def test_more_ranks_than_gpus_is_a_config_error(monkeypatch):
    """One rank per GPU: the launcher refuses more ranks than the driver reports GPUs, with the
    one line the command line prints (on a real GPU: tests/test_gpu.py)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_gpus("cuda", 1)
    check_gpus("cpu", 4)  # CPU ranks are processes, not GPUs
    with pytest.raises(InvalidConfig, match=r"dist.nproc_per_node=2 runs one rank per GPU and 1 are visible"):
        check_gpus("cuda", 2)
