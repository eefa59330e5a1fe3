"""The share of the machine a run may use: a cgroup CPU quota counts as fewer cores, read from
cgroup trees the tests make (v1 and v2) and from a real cgroup the test joins."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import child_pythonpath
from sweeper import share

V1_MOUNTS = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / {root}/memory rw,relatime - cgroup cgroup rw,memory
"""
V2_MOUNTS = "29 23 0:26 / {root} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"


def _tree(tmp_path: Path, files: dict[str, str], mounts: str, cgroup: str) -> tuple[str, str]:
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "mountinfo").write_text(mounts.format(root=tmp_path / "fs"))
    (tmp_path / "cgroup").write_text(cgroup)
    return str(tmp_path / "cgroup"), str(tmp_path / "mountinfo")


@pytest.mark.parametrize(
    ("files", "mounts", "cgroup", "quota"),
    [
        pytest.param(
            {"cpu,cpuacct/job/cpu.cfs_quota_us": "150000", "cpu,cpuacct/job/cpu.cfs_period_us": "100000"},
            V1_MOUNTS,
            "4:memory:/job\n3:cpu,cpuacct:/job\n0::/\n",
            1.5,
            id="v1",
        ),
        pytest.param(
            {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
            V1_MOUNTS,
            "3:cpu,cpuacct:/\n",
            None,
            id="v1-unlimited",
        ),
        pytest.param({"pod/ctr/cpu.max": "200000 100000"}, V2_MOUNTS, "0::/pod/ctr\n", 2.0, id="v2"),
        pytest.param({"cpu.max": "max 100000"}, V2_MOUNTS, "0::/\n", None, id="v2-max"),
        pytest.param(  # a parent's quota binds its children
            {"pod/cpu.max": "50000 100000", "pod/ctr/cpu.max": "max 100000"},
            V2_MOUNTS,
            "0::/pod/ctr\n",
            0.5,
            id="v2-parent",
        ),
        pytest.param({}, V2_MOUNTS, "0::/pod\n", None, id="no-files"),
    ],
)
def test_the_quota_is_the_tightest_of_the_cgroup_and_its_parents(tmp_path, files, mounts, cgroup, quota):
    assert share.quota_cpus(*_tree(tmp_path, files, mounts, cgroup)) == quota


@pytest.mark.parametrize(
    ("files", "mounts", "cgroup", "limit"),
    [
        pytest.param(
            {"memory/job/memory.limit_in_bytes": "2147483648"}, V1_MOUNTS, "4:memory:/job\n", 2 << 30, id="v1"
        ),
        pytest.param(  # v1's "no limit"
            {"memory/memory.limit_in_bytes": "9223372036854771712"}, V1_MOUNTS, "4:memory:/\n", None, id="v1-unlimited"
        ),
        pytest.param(  # a parent's limit binds its children; the cpu controller's files are not read
            {"pod/memory.max": "1073741824", "pod/ctr/memory.max": "max", "pod/ctr/cpu.max": "100000 100000"},
            V2_MOUNTS,
            "0::/pod/ctr\n",
            1 << 30,
            id="v2-parent",
        ),
        pytest.param({"memory.max": "max"}, V2_MOUNTS, "0::/\n", None, id="v2-max"),
    ],
)
def test_the_memory_limit_is_the_tightest_of_the_cgroup_and_its_parents(tmp_path, files, mounts, cgroup, limit):
    assert share.memory_limit_bytes(*_tree(tmp_path, files, mounts, cgroup)) == limit


def test_a_quota_is_whole_cores_at_least_one_never_more_than_the_affinity():
    assert share.usable_cores(8, None) == 8
    assert share.usable_cores(8, 2.0) == 2 and share.usable_cores(8, 2.5) == 2  # half a CPU more: throttled
    assert share.usable_cores(8, 0.5) == 1 and share.usable_cores(2, 16.0) == 2
    assert share.quota_cpus("/nonexistent/cgroup", "/nonexistent/mountinfo") is None


def _limited_cgroup(controller: str, limit: int) -> Path | None:
    """A real cgroup made here with a limit of `controller` (cpu: quota_us per 100 ms; memory:
    bytes), v1's controller or v2's with it delegated; None where this machine does not let the
    test make one."""
    name = f"sweeper-test-{uuid.uuid4().hex[:8]}"
    files = {
        ("cpu", False): ("cpu.cfs_quota_us", str(limit)),
        ("cpu", True): ("cpu.max", f"{limit} 100000"),
        ("memory", False): ("memory.limit_in_bytes", str(limit)),
        ("memory", True): ("memory.max", str(limit)),
    }
    for parent, v2 in ((Path("/sys/fs/cgroup") / controller, False), (Path("/sys/fs/cgroup"), True)):
        try:
            control = parent / "cgroup.subtree_control"
            if v2 and controller not in control.read_text().split():
                control.write_text(f"+{controller}")  # the root cgroup may delegate it: no process rule there
            group = parent / name
            group.mkdir()
        except OSError:
            continue
        try:
            filename, text = files[controller, v2]
            (group / filename).write_text(text)
            return group
        except OSError:
            group.rmdir()
    return None


def test_a_run_and_a_sweeps_presets_count_the_cores_a_cgroup_quota_gives(sweeper_run, tmp_path):
    """Inside a real cgroup with a quota of 1.5 CPUs (docker --cpus=1.5): the run's fingerprint
    says 1 core and the quota, its terminal summary says so, and search=cpu offers threads up to 1."""
    if os.geteuid() != 0 or (group := _limited_cgroup("cpu", 150_000)) is None:
        pytest.skip("making a cgroup with a CPU quota needs root and a writable cpu controller (.ci/run has both)")
    join = ["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh"]
    try:
        run = sweeper_run("measure.windows=3", "measure.min_windows=3", wrap=join)
        assert run.returncode == 0, run.stderr[-2000:]
        fingerprint = run.result.fingerprint
        assert fingerprint is not None and fingerprint.cpu_quota == 1.5 and fingerprint.cpus_available == 1
        assert "1 cores (a CPU quota of 1.5)" in run.stdout
        presets = subprocess.run(
            [*join, sys.executable, "-m", "sweeper", "--cfg", "job", "--resolve", "search=cpu"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": child_pythonpath()},
        )
        assert "backend.threads: choice(1)" in presets.stdout, presets.stdout + presets.stderr
    finally:
        group.rmdir()


def test_in_a_real_cgroup_with_a_memory_limit_the_page_cache_holds_at_most_the_limit(tmp_path):
    """Inside a real cgroup with a memory limit (docker --memory=256m) on a host with far more
    free: the memory the page cache could hold is the limit, so measure.page_cache=auto makes a
    set larger than it cold."""
    if os.geteuid() != 0 or (group := _limited_cgroup("memory", 256 << 20)) is None:
        pytest.skip(
            "making a cgroup with a memory limit needs root and a writable memory controller (.ci/run has both)"
        )
    limit = 256 << 20
    try:
        read = subprocess.run(
            [
                "sh",
                "-c",
                f'echo $$ > {group / "cgroup.procs"} && exec "$@"',
                "sh",
                sys.executable,
                "-c",
                "from sweeper.measuring import page_cache as p; a = p.memory_available_bytes(); "
                "print(a, p.chosen('auto', a + 1, a), p.chosen('auto', a - 1, a))",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": child_pythonpath()},
        )
        assert read.stdout.split() == [str(limit), "cold", "warm"], read.stdout + read.stderr
    finally:
        group.rmdir()
