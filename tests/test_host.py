"""The machine as sweeper.host reads it from /proc and /sys, and the plan a sweep makes for it:
five machines' trees (this VM's recorded, four servers written as the kernel lays them out,
tests/machine_trees.py) read as the descriptions that ship in examples/machines, and each
description's plan as `hydra.sweeper.plan=<file>` prints it, against the rules of
sweeper.search.scaling and the recipes."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from machine_trees import recorded, write_server

from sweeper import share
from sweeper.description import from_description, load_description
from sweeper.host import Host, read_host
from sweeper.runner import lock

ROOT = Path(__file__).resolve().parent.parent
MACHINES = ROOT / "examples" / "machines"

H100 = "NVIDIA H100 80GB HBM3"
H100_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
SERVERS = {
    "gpu-16core-1gpu": dict(
        hostname="gpu-16core-1gpu", sockets=1, cores_per_socket=16, threads=1, nodes=1, memory_gb=128,
        gpus=[("NVIDIA H200", "0000:18:00.0", 0)],
    ),
    "dual-socket-64core-smt": dict(
        hostname="dual-socket-64core-smt", sockets=2, cores_per_socket=32, threads=2, nodes=2, memory_gb=512
    ),
    "gpu-node-128core-8gpu": dict(
        hostname="gpu-node-128core-8gpu", sockets=2, cores_per_socket=64, threads=2, nodes=2, memory_gb=2048,
        gpus=[(H100, f"0000:{bus:02x}:00.0", i // 4) for i, bus in enumerate(H100_BUSES)],
    ),
    "quota-64core-4cpu": dict(
        hostname="quota-64core-4cpu", sockets=1, cores_per_socket=64, threads=1, nodes=1, memory_gb=256,
        quota_cpus=4, memory_limit_gb=16,
    ),
}  # fmt: skip


def _tree(name: str, root: Path) -> Path:
    return recorded(name, root) if name == "vm-2core" else write_server(root, **SERVERS[name])  # type: ignore[arg-type]


def _as_read(host: Host) -> Host:
    """What a tree cannot say: the GPUs' memory (NVML's, on the machine) and a node's share of
    the memory (a VM's firmware splits it its own way)."""
    return dataclasses.replace(
        host,
        nodes=tuple(dataclasses.replace(n, memory_gb=None) for n in host.nodes),
        gpus=tuple(dataclasses.replace(g, memory_gb=None) for g in host.gpus),
    )


@pytest.mark.parametrize("name", ["vm-2core", *SERVERS])
def test_each_machines_tree_reads_as_the_description_that_ships(tmp_path: Path, name: str) -> None:
    read = read_host(_tree(name, tmp_path))
    assert _as_read(read) == _as_read(load_description(MACHINES / f"{name}.yaml"))


def test_the_servers_trees_say_smt_sockets_nodes_gpus_and_the_quota(tmp_path: Path) -> None:
    big = read_host(_tree("gpu-node-128core-8gpu", tmp_path / "a"))
    assert (big.physical, big.logical, big.smt, big.sockets, len(big.nodes)) == (128, 256, 2, 2, 2)
    assert big.cores[0].cpus == (0, 128)  # a core and its sibling, numbered as Linux does
    assert [g.numa_node for g in big.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert big.nodes[1].cpus[:2] == (64, 65) and 192 in big.nodes[1].cpus
    quota = read_host(_tree("quota-64core-4cpu", tmp_path / "b"))
    assert (quota.physical, quota.cpu_quota, quota.memory_limit_gb) == (64, 4.0, 16.0)
    assert (quota.usable_physical, quota.usable_logical) == (4, 4)
    assert "a CPU quota of 4, a memory limit of 16 GB" in quota.describe()


def test_this_machine_reads_as_the_counts_sweeper_already_uses() -> None:
    here = read_host("/")
    assert here.usable_logical == share.cores_here()
    assert set(here.cpus) == set(os.sched_getaffinity(0))
    assert here.physical <= here.logical and here.memory_gb


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"cores_per_socket": 0}, "cores_per_socket=0 is invalid: expected a whole number >= 1"),
        ({"cores_per_socket": 6, "numa_nodes": 4}, "numa_nodes=4 does not split 6 cores evenly"),
        ({"cores_per_socket": 8, "gpus": [{"name": "A", "numa_node": 2}]}, "numa_node=2 of A is not a node (0-0)"),
        ({"cores_per_socket": 8, "cpus": 8}, "unknown key 'cpus'"),
        ({"cores_per_socket": 8, "cpu_quota": -1}, "cpu_quota=-1 is invalid: expected a number > 0, or null"),
    ],
)
def test_a_wrong_description_is_one_line_naming_the_value(given: dict, said: str) -> None:
    with pytest.raises(ValueError, match="machine description") as caught:
        from_description(given)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_ranks_on_several_gpus_claim_one_free_gpu_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lock.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert lock.claim_for("cuda", gpus=8, ranks=2) == lock.DeviceClaim("gpu0", "0,1", ("gpu0", "gpu1"))
    busy = lock.MeasureLock("gpu0", {"what": "another sweep"})
    assert busy.try_acquire()
    try:
        assert lock.claim_for("cuda", gpus=8, ranks=2).pin == "1,2"  # the free ones
        assert lock.claim_for("cuda", gpus=8, ranks=1).env == {"CUDA_VISIBLE_DEVICES": "1"}
    finally:
        busy.release()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # the user's choice wins
    assert lock.claim_for("cuda", gpus=4, ranks=8).locks == ("gpu4", "gpu5", "gpu6", "gpu7")
    with lock.held(("gpu5", "gpu4"), "a test", on_wait=print) as got:
        assert got and not lock.MeasureLock("gpu4", {}).try_acquire()
    assert lock.MeasureLock("gpu4", {}).try_acquire()


def _plan(name: str, tmp_path: Path, *overrides: str) -> dict[str, str]:
    """`python -m sweeper -m hydra.sweeper.plan=<description>`, its lines by their first word
    (a knob's line by the knob)."""
    done = subprocess.run(
        [sys.executable, "-m", "sweeper", "-m", f"hydra.sweeper.plan={MACHINES / f'{name}.yaml'}", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines: dict[str, str] = {}
    for line in done.stdout.splitlines():
        words = line.replace("*", " ").split()
        key = words[0] if words else ""
        lines[key if not key.endswith(".") else f"recipe {key.rstrip('.')}"] = line
    return lines


def test_the_plan_on_this_vm_is_the_one_the_recorded_grids_were_measured_with(tmp_path: Path) -> None:
    plan = _plan("vm-2core", tmp_path)
    assert "choice(1,2," in plan["backend.threads"] and "range(0,5)" in plan["loader.num_workers"]
    assert "choice(1,2)" in plan["dist.nproc_per_node"] and "backend.numa" not in plan
    assert "num_workers=2, backend.threads=1" in plan["recipe 1"] and "backend.threads=2" in plan["recipe 2"]
    # data parallel on one NUMA node: two ranks, each with one thread on its core
    assert "data parallel: 2 ranks" in plan["recipe 3"] and "dist.nproc_per_node=2" in plan["recipe 3"]
    assert "backend.threads=1" in plan["recipe 3"] and "recipe 4" not in plan
    # spread places one or two threads on two CPUs where close does: close alone stands for both
    assert "choice(default,close)" in plan["backend.omp_bind"]


def test_a_two_socket_smt_server_counts_threads_on_physical_cores(tmp_path: Path) -> None:
    plan = _plan("dual-socket-64core-smt", tmp_path)
    assert plan["machine:"].endswith("2 sockets, 64 cores (128 logical CPUs, SMT 2), 2 NUMA nodes, no GPU")
    # threads over the physical cores, the siblings one choice more; workers to the logical CPUs
    assert "choice(1,2,4,8,16,32,64,128," in plan["backend.threads"]
    assert "choice(0,1,2,4,8,16,32,64,128)" in plan["loader.num_workers"]
    assert "choice(1,2,4,8,16,32,64)" in plan["dist.nproc_per_node"]  # one rank per physical core at most
    assert "choice(none,node)" in plan["backend.numa"]
    assert "choice(default,close,spread)" in plan["backend.omp_bind"]
    assert "loader.num_workers=64, backend.threads=1" in plan["recipe 1"]
    assert "backend.threads=64," in plan["recipe 2"]  # run_cpu's: the physical cores, not 128
    assert "dist.nproc_per_node=2, backend.numa=node" in plan["recipe 3"] and "threads=32" in plan["recipe 3"]
    assert "recipe 4" not in plan  # the ranks per node are the data-parallel recipe there
    assert "oversubscribe the 64 cores (128 logical CPUs)" in plan["skipped,"]


def test_a_gpu_node_searches_a_rank_per_gpu_bound_to_its_numa_node(tmp_path: Path) -> None:
    plan = _plan("gpu-node-128core-8gpu", tmp_path)
    assert "preset gpu" in plan["workload:"] and "8 GPUs (NVIDIA H100 80GB HBM3, 80 GB)" in plan["machine:"]
    assert "choice(1,2,4,8)" in plan["dist.nproc_per_node"]
    assert "choice(0,2,4,8,16,32,64,128,256)" in plan["loader.num_workers"]
    assert "one rank per GPU (8), each with 32 workers of the 256 CPUs, ranks bound to NUMA nodes" in plan["recipe 1"]
    assert "dist.nproc_per_node=8, backend.numa=node" in plan["recipe 1"]
    assert "estimate: made on the machine itself" in plan["estimate:"]


def test_one_gpu_keeps_the_gpu_presets_workers_and_searches_no_ranks(tmp_path: Path) -> None:
    plan = _plan("gpu-16core-1gpu", tmp_path)
    assert "choice(0,2,4,8,16)" in plan["loader.num_workers"] and "dist.nproc_per_node" not in plan
    assert "loader.num_workers=16" in plan["recipe 1"] and "recipe 2" not in plan


def test_a_cpu_quota_caps_every_count_whatever_the_host_has(tmp_path: Path) -> None:
    plan = _plan("quota-64core-4cpu", tmp_path)
    assert "choice(1,2,4," in plan["backend.threads"] and "range(0,5)" in plan["loader.num_workers"]
    assert "choice(1,2,4)" in plan["dist.nproc_per_node"]
    assert "backend.threads=4," in plan["recipe 2"]
    assert "oversubscribe the 4 cores;" in plan["skipped,"]


def test_the_estimate_counts_trials_and_confirmation_runs_and_what_a_budget_holds() -> None:
    from sweeper.search.preview import Estimate
    from sweeper.search.settings import SweepSettings

    settings = SweepSettings(n_trials=20)
    whole = Estimate.of(146.0, "a probe run", settings, None)
    assert (whole.trials, whole.confirm_runs, whole.total_s) == (20, 9, 146.0 * 29)
    hour = Estimate.of(146.0, "a probe run", settings, 3600.0)  # 24 runs fit: 20 trials, 4 confirmation runs
    assert (hour.trials, hour.confirm_runs) == (20, 4) and hour.total_s <= 3600
    assert "holds" not in hour.describe(20)
    short = Estimate.of(146.0, "a probe run", settings, 1800.0)
    assert short.trials == 9 and "holds 9 of the 20 trials" in short.describe(20)
    # runs of 87 s in 4 minutes: the baseline, then 153 s left, less than a run and a first round
    alone = Estimate.of(87.0, "a probe run", settings, 240.0)
    assert (alone.trials, alone.confirm_runs) == (1, 0)
    assert "holds your config's run alone" in alone.describe(20)


def test_the_plan_here_times_one_run_and_writes_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sweeper", "-m", "hydra.sweeper.plan=here", "hydra.sweeper.n_trials=6",
         "measure.warmup_s=0.3", "measure.window_s=0.3", "measure.windows=3"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "machine: " in done.stdout and "a probe run of your config): at most" in done.stdout
    assert "for 6 trials and 9 confirmation runs" in done.stdout
    # the probe said the MLP has no convolutions: the recipes show channels_last as it will run
    first = next(line for line in done.stdout.splitlines() if line.startswith("  1. "))
    assert "backend.allocator=tcmalloc" in first and "channels_last" not in first
    assert not (tmp_path / "outputs" / "sweeper.db").exists()  # no study created by looking


def test_a_description_that_cannot_be_read_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sweeper", "-m", f"hydra.sweeper.plan={tmp_path / 'nope.yaml'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "hydra.sweeper.plan: machine description" in done.stderr and "nope.yaml" in done.stderr


def test_python_m_sweeper_host_prints_a_description_that_reads_back(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from sweeper import host

    host.main()
    printed = capsys.readouterr().out
    assert printed.startswith("# ") and "cores" in printed.splitlines()[0]
    again = from_description(yaml.safe_load(printed))
    here = read_host("/")
    assert (again.physical, again.smt, again.memory_gb) == (here.physical, here.smt, here.memory_gb)


def test_ranks_on_an_smt_server_take_whole_cores_with_their_siblings(tmp_path: Path) -> None:
    """Linux numbers every core's second sibling after all the first ones: a slice of the CPU
    numbers would give one rank both sockets' first siblings and the other their twins."""
    from sweeper import topology

    server = read_host(_tree("dual-socket-64core-smt", tmp_path))
    physical = server.cores_among(server.cpus)
    assert len(physical) == 64 and physical[0] == (0, 64)
    first, second = (topology.rank_cores(server.cpus, 2, r, physical) for r in (0, 1))
    assert first == (*range(0, 32), *range(64, 96)) and second == (*range(32, 64), *range(96, 128))
    assert topology.rank_cores(server.cpus, 2, 0) == tuple(range(64))  # by number: the first siblings
    assert topology.threads_per_rank(None, len(physical), 2) == 32  # each rank's physical cores
    assert server.cores_among([0, 64, 5]) == ((0, 64), (5,))
