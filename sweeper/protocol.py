"""The wire between the sweep's side and the measuring child (no torch).

The parent starts `python -m sweeper.measuring.worker` with the run's spec as JSON on stdin and
an inherited pipe whose number is in $SWEEPER_EVENT_FD; the child writes JSON lines on it
(phases, windows) and last {"event": "result", ...}.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import NamedTuple

EVENT_FD_ENV = "SWEEPER_EVENT_FD"
# a measured window's event, and its key for the window's samples/s: the parent keeps the rates,
# so that a run killed before its result still says what it had measured
WINDOW_EVENT, WINDOW_RATE = "window", "rate"
# when the parent kills the run (time.monotonic(), which every process of the machine shares):
# what the child must have said by then, it says a little before
DEADLINE_ENV = "SWEEPER_DEADLINE"
# the parent's pid: the child dies with it, and at once if it is already gone
PARENT_PID_ENV = "SWEEPER_PARENT_PID"
# the pid of the process that started the run (the sweep, `python -m sweeper`): its tree is the
# run's own when other processes' load is counted (sweeper.foreign)
RUN_ROOT_ENV = "SWEEPER_RUN_ROOT"
# a mark every process of one run inherits: escapees from its process group are found by it
RUN_MARK_ENV = "SWEEPER_RUN_MARK"
# a directory the parent makes for each run and removes after it, however the run ended: the
# run's own temporary files (the ranks' logs, a script's step FIFO, multiprocessing's sockets)
# go there, so that a run killed on a crash or a hang leaves nothing in the temporary directory
SCRATCH_ENV = "SWEEPER_SCRATCH"
WORKER_MODULE = "sweeper.measuring.worker"
PROBE_MODULE = "sweeper.measuring.probe"
# the fork server of forked trials (measure.isolation=fork) and its socket's fd number
ZYGOTE_MODULE = "sweeper.measuring.fork_server"
ZYGOTE_FD_ENV = "SWEEPER_ZYGOTE_FD"
# fixed before torch is imported in the child: OpenMP/MKL read them once
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def seconds_until_killed() -> Callable[[], float | None]:
    """The seconds left, when called, before the parent kills this run ($SWEEPER_DEADLINE, read
    once here); None outside a run."""
    killed_at = os.environ.get(DEADLINE_ENV)
    if not killed_at:
        return lambda: None
    at = float(killed_at)
    return lambda: at - time.monotonic()


def scratch_dir() -> str | None:
    """The run's scratch directory ($SWEEPER_SCRATCH); None outside a run (the system's temporary
    directory then)."""
    return os.environ.get(SCRATCH_ENV) or None


def process_name(mark: str) -> str:
    """The process name a run's processes take (PR_SET_NAME, 15 characters) from its mark."""
    return f"sw-{mark[:12]}"


def pythonpath_with_cwd() -> str:
    """PYTHONPATH for a child that must import the user's modules from where sweeper runs."""
    return os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment that fixes intra-op threads before torch is imported in the child."""
    if threads is None:
        return {}
    return {name: str(threads) for name in THREAD_ENV_VARS}


# the CPUs the run may use, as its parent found them ("0-3,8"): an OpenMP runtime told to bind
# (OMP_PROC_BIND) pins the measuring process's own thread to one core when torch starts it, so
# the child cannot read the machine's cores from its own affinity
MACHINE_CPUS_ENV = "SWEEPER_MACHINE_CPUS"

# ---- a user's training script (task=script) and the measuring child ----

# the path of the FIFO a script's sweeper.track / sweeper.step write their steps to
STEPS_ENV = "SWEEPER_STEPS"
# the per-process settings sweeper.track (and sweeper.step) apply inside a script at its first
# step, as JSON: {"flush_denormal": true, "threads": 2, "cudnn_benchmark": true, "tf32": true};
# only the values a trial sets away from PyTorch's defaults (a default leaves the script's own)
FIRST_STEP_ENV = "SWEEPER_FIRST_STEP"
# the cores the script's DataLoader workers run on (backend.affinity), e.g. "2,3"
LOADER_CPUS_ENV = "SWEEPER_LOADER_CPUS"
# the line a script that cannot call sweeper.track prints after each step, on its stdout
LINE_PREFIX = "sweeper:"
LINE_FORMAT = "sweeper: samples=<integer>[ wait=<seconds>]"
_NO_WAIT = -1.0


class Step(NamedTuple):
    """One step as the script reported it."""

    rank: int
    ended: float  # time.monotonic(), the clock every process of this machine shares
    wait_s: float | None  # waiting for the batch (None: not reported)
    samples: int


# a step as sweeper.track sends it down the FIFO: a fixed-size record (rank, end time, loader
# wait or -1, samples), one write shorter than PIPE_BUF, so atomic among ranks. Binary, so that
# the measuring process turns a batch of them into steps with one struct call: text lines cost
# it about 2 µs a step to split and convert, a share of a core at thousands of steps a second
# (benchmarks/script_harness.py)
STEP_RECORD = struct.Struct("<iddq")


def step_record(rank: int, ended: float, wait_s: float | None, samples: int) -> bytes:
    """One step as sweeper.track sends it."""
    return STEP_RECORD.pack(rank, ended, _NO_WAIT if wait_s is None else wait_s, samples)


def parse_step_records(data: bytes) -> tuple[list[Step], bytes]:
    """The whole steps in `data` (records as read from the FIFO, in order) and the bytes of a
    record not yet whole, which the next read completes. ValueError where the first of them is
    no step record (a script importing another version of sweeper, which sent text lines): one
    record a batch is checked, since whatever misreads them misreads every one."""
    whole = len(data) - len(data) % STEP_RECORD.size
    records = STEP_RECORD.iter_unpack(data[:whole])
    steps = [Step(rank, ended, None if wait < 0 else wait, samples) for rank, ended, wait, samples in records]
    if steps and not _plausible(steps[0]):
        raise ValueError(
            f"the script's steps came as {data[:24]!r}, which this sweeper cannot read: the script imports "
            "another version of sweeper than the one measuring it (run it with the same environment's python)"
        )
    return steps, data[whole:]


def _plausible(step: Step) -> bool:
    """Whether a step's fields are what sweeper.track sends: a rank, a monotonic time, a wait
    (or none), a count of samples. Text read as a record fails the first: its bytes make a rank
    of hundreds of millions."""
    wait_ok = step.wait_s is None or 0.0 <= step.wait_s < 1e6
    return 0 <= step.rank < 1 << 16 and 0.0 < step.ended < 1e12 and wait_ok and 0 <= step.samples < 1 << 40


def parse_stdout_line(line: str) -> tuple[int, float | None] | None:
    """A script's `sweeper: samples=N[ wait=S]` line as (samples, wait or None); None for a line
    that is not for sweeper; ValueError (naming the line) for one that is, but garbled."""
    text = line.strip()
    if not text.startswith(LINE_PREFIX):
        return None
    fields = dict(part.partition("=")[::2] for part in text[len(LINE_PREFIX) :].split())
    try:
        samples = int(fields.pop("samples"))
        wait = float(fields.pop("wait")) if "wait" in fields else None
        if samples < 0 or fields or (wait is not None and wait < 0):
            raise ValueError
    except (KeyError, ValueError):
        raise ValueError(f"the script printed {text[:80]!r}, which is not {LINE_FORMAT!r}") from None
    return samples, wait
