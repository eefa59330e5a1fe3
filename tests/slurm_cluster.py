"""A one-node SLURM cluster on this machine for the tests (Debian's slurm-wlm, slurmdbd, munge
and mariadb-server, which .ci/run installs): munged, MariaDB, slurmdbd, slurmctld and slurmd
started by hand (no systemd), a slurm.conf for this host written at run time (its CPUs and
memory read here; no cgroups: proctrack/pgid, task/none), stopped afterwards. Accounting is on,
as on a lab's cluster: submitit reads a job's state with sacct (a cancelled job is known so)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

DAEMONS = (
    "munged",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "mariadbd",
    "mariadb-install-db",
    "sbatch",
    "sinfo",
    "srun",
    "sacctmgr",
)


def why_not() -> str | None:
    """Why a cluster cannot start here (one line), or None."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return (
            f"needs Debian's slurm-wlm, slurmdbd, munge and mariadb-server ({', '.join(missing)} missing; "
            ".ci/run installs them)"
        )
    if os.geteuid() != 0:
        return "slurmd runs jobs as their user and must start as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(root: Path, dbd_port: int) -> str:
    host = socket.gethostname()
    cpus = len(os.sched_getaffinity(0))
    with open("/proc/meminfo") as f:
        memory_mb = int(next(int(line.split()[1]) for line in f if line.startswith("MemTotal")) / 1024 * 0.9)
    return "\n".join(
        [
            "ClusterName=sweepertest",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "MpiDefault=none",
            "KillWait=5",
            "InactiveLimit=0",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={dbd_port}",
            f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _munge_works() -> bool:
    try:
        token = subprocess.run(["munge", "-n"], capture_output=True, timeout=10).stdout
        return subprocess.run(["unmunge"], input=token, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _database(root: Path, started: list[subprocess.Popen]) -> int:
    """MariaDB for slurmdbd, on loopback; its port."""
    data, sock, port = root / "mysql", root / "mysql.sock", _free_port()
    subprocess.run(
        [
            "mariadb-install-db",
            "--user=root",
            f"--datadir={data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        capture_output=True,
    )
    started.append(
        subprocess.Popen(
            [
                "mariadbd",
                "--user=root",
                f"--datadir={data}",
                f"--socket={sock}",
                f"--port={port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={root / 'mysql.pid'}",
                "--skip-grant-tables=0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    sql = (
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';"
    )
    _until(
        lambda: (
            subprocess.run(["mariadb", f"--socket={sock}", "-u", "root", "-e", sql], capture_output=True).returncode
            == 0
        ),
        "MariaDB to answer",
    )
    return port


def _accounting(root: Path, port: int, db_port: int, started: list[subprocess.Popen], env: dict[str, str]) -> None:
    """slurmdbd on `port`, its database MariaDB's, this cluster registered in it."""
    conf = root / "slurmdbd.conf"
    conf.write_text(
        "\n".join(
            [
                "AuthType=auth/munge",
                "DbdHost=localhost",
                f"DbdPort={port}",
                "SlurmUser=root",
                f"LogFile={root / 'slurmdbd.log'}",
                f"PidFile={root / 'slurmdbd.pid'}",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={db_port}",
                "StorageUser=slurm",
                "StoragePass=slurm",
                "StorageLoc=slurm_acct_db",
                "",
            ]
        )
    )
    conf.chmod(0o600)
    started.append(
        subprocess.Popen(
            ["slurmdbd", "-D"],
            env=env,  # slurmdbd.conf beside $SLURM_CONF stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    _until(
        lambda: (
            subprocess.run(
                ["sacctmgr", "-i", "add", "cluster", "sweepertest"], env=env, capture_output=True, timeout=30
            ).returncode
            in (0, 1)
            and "sweepertest"
            in subprocess.run(
                ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
        ),
        "slurmdbd to register the cluster",
    )


@contextmanager
def cluster(root: Path) -> Iterator[dict[str, str]]:
    """The cluster, up and idle; yields the environment its clients need (SLURM_CONF)."""
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[subprocess.Popen] = []
    try:
        if not _munge_works():
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            started.append(
                subprocess.Popen(
                    ["munged", "--foreground", "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
            _until(_munge_works, "munged to answer")
        dbd_port = _free_port()
        conf.write_text(_config(root, dbd_port))  # sacctmgr, slurmctld: where slurmdbd is
        _accounting(root, dbd_port, _database(root, started), started, env)
        for daemon in ("slurmctld", "slurmd"):
            started.append(
                subprocess.Popen(
                    [daemon, "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
        _until(
            lambda: (
                subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
                == "idle"
            ),
            "the node to be idle in sinfo",
        )
        _until(
            lambda: subprocess.run(["srun", "hostname"], env=env, capture_output=True, timeout=30).returncode == 0,
            "srun hostname to answer",
        )
        yield {"SLURM_CONF": str(conf)}
    finally:
        cancel_every_job(env)
        stop(reversed(started), timeout_s=15)


def cancel_every_job(env: dict[str, str]) -> None:
    subprocess.run(["scancel", "--full", "--user=root"], env={**os.environ, **env}, capture_output=True)


def stop(procs: Iterable[subprocess.Popen], timeout_s: float) -> None:
    """Each process stopped as a stop signal stops it (its own clean-up runs), else killed."""
    for proc in procs:
        proc.terminate()
        try:
            proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _until(ready, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (OSError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the test cluster did not come up: waited {timeout_s:.0f} s for {what}")


def jobs(env: dict[str, str]) -> list[tuple[str, str]]:
    """(job id, state) of the queue."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env={**os.environ, **env}, capture_output=True, text=True)
    return [tuple(line.split()) for line in out.stdout.splitlines() if line.strip()]  # type: ignore[misc]
