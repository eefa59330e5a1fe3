"""Jobs a scheduler holds: the handles Hydra's submitit launcher makes as it submits a batch,
each job's name and state as the scheduler tells them, and each job followed to its own end.

Hydra's launcher keeps its job handles to itself, waits on a batch's jobs in order and raises
at the first one lost (cancelled, its node failed). The others are still the scheduler's and
may still be measuring: each is followed for itself, from the handle submitit gave for it, so
that one lost job never decides its siblings' outcome."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# SLURM's states of a job that may still run (a requeued job goes back to PENDING)
ACTIVE = frozenset(
    {
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "COMPLETING",
        "CONFIGURING",
        "SUSPENDED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "READY",
    }
)
# ... of those, a job that waits to run (again, once requeued)
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
POLL_S = 2.0
# the longest the launcher's wait goes without asking the scheduler about its jobs (one sacct
# call for the batch): submitit alone asks at doubling intervals from a batch's submission, up
# to ten minutes apart, so that a job lost minutes into its batch was seen lost minutes later
STATE_CHECK_S = 30


def slurm_job_name(env: Mapping[str, str]) -> str | None:
    """The job as SLURM names it to sacct and scancel: `4242_1` for task 1 of array 4242 (whose
    SLURM_JOB_ID is a number of its own), else SLURM_JOB_ID; None outside a SLURM job."""
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return env.get("SLURM_JOB_ID") or None


def name_of(handle: Any) -> str:
    """A submitit job as sweeper records it: `slurm:4242_1`, `local:<pid>`."""
    kind = type(handle).__name__.removesuffix("Job").lower() or "job"
    return f"{kind}:{handle.job_id}"


def job_state(name: str) -> str | None:
    """The scheduler's state of a recorded job (`slurm:4242_1`: sacct's State, its first word;
    `local:<pid>`: RUNNING while the process lives, else ENDED). None: nobody here can tell."""
    kind, _, job_id = name.partition(":")
    if kind == "slurm":
        return _slurm_state(job_id)
    if kind == "local" and job_id.isdigit():
        import psutil

        return "RUNNING" if psutil.pid_exists(int(job_id)) else "ENDED"
    return None


def _slurm_state(job_id: str) -> str | None:
    for command in (
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id],  # the accounting's word
        ["squeue", "-h", "-o", "%T", "-j", job_id],
    ):  # a job accounting has not heard of yet
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            words = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.split()
            if words:
                return words[0].upper()
    return None


def is_active(state: str | None) -> bool:
    return state in ACTIVE


@contextlib.contextmanager
def submitted(on_submit: Callable[[list[Any]], None]) -> Iterator[list[Any]]:
    """The submitit jobs submitted while inside, in the order of the batch; `on_submit` sees
    them as soon as they are submitted (before the launcher starts waiting on them). Empty for
    a launcher that is not submitit's, or where submitit is not installed. While inside, the
    launcher asks SLURM about its jobs at least every STATE_CHECK_S: a lost job ends its wait."""
    try:
        from submitit.core.core import Executor
        from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob
    except ImportError:
        yield []
        return
    handles: list[Any] = []
    original, watcher = Executor.map_array, SlurmJob.watcher

    def capture(executor: Any, fn: Any, *iterable: Any) -> Any:
        jobs = original(executor, fn, *iterable)
        handles.extend(jobs)
        on_submit(list(jobs))
        return jobs

    Executor.map_array = capture  # type: ignore[method-assign,assignment]
    SlurmJob.watcher = SlurmInfoWatcher(delay_s=STATE_CHECK_S)
    try:
        yield handles
    finally:
        Executor.map_array = original  # type: ignore[method-assign]
        SlurmJob.watcher = watcher


@dataclass(frozen=True)
class Ended:
    """How a followed job ended: its return (a Hydra JobReturn) or the exception it raised, or
    no result at all, with the scheduler's last word on it."""

    name: str
    state: str | None
    returned: Any = None
    raised: BaseException | None = None

    @property
    def has_result(self) -> bool:
        return self.returned is not None or self.raised is not None

    @property
    def still_active(self) -> bool:
        """Still queued or running when following stopped (the sweep's stop or budget)."""
        return not self.has_result and is_active(self.state)


def follow(handle: Any, *, give_up: Callable[[], bool], poll_s: float = POLL_S) -> Ended:
    """Wait for one job to end on its own: a result (or the exception its function raised)
    once submitit has it; a job the scheduler requeued is followed through its new run; no
    result once the scheduler says the job is over. Stops waiting when `give_up` says so."""
    name = name_of(handle)
    while True:
        if handle.paths.result_pickle.exists():
            try:
                return Ended(name, job_state(name), returned=handle.result())
            except Exception as exc:  # noqa: BLE001 - the job's own failure is its outcome
                return Ended(name, job_state(name), raised=exc)
        state = job_state(name)
        if state is not None and not is_active(state):
            # the result file may land after the scheduler's last word (a shared filesystem)
            deadline = time.monotonic() + 3 * poll_s
            while not handle.paths.result_pickle.exists() and time.monotonic() < deadline:
                time.sleep(poll_s / 4)
            if not handle.paths.result_pickle.exists():
                return Ended(name, state)
            continue
        if give_up():
            return Ended(name, state)
        time.sleep(poll_s)


def launcher_log(handle: Any) -> str:
    """What submitit kept of the job's run: its stderr, else its stdout's end (for the trial's
    log, not its reason)."""
    with contextlib.suppress(Exception):
        text = handle.stderr() or handle.stdout() or ""
        return text[-20_000:]
    return ""
