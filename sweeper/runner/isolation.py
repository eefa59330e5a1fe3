"""Run one measurement in a fresh child process and always come back with an outcome.

Why a child: thread pools and OMP settings are fixed at first use, an OOM or a segfault must
not kill the sweep, a hung DataLoader must be killable with its workers, and memory must be
measured per configuration. The child gets its own session and process group; the whole group
is killed on timeout and after every run. Descendants that leave the group (setsid) come back
to this process, a child subreaper, and are found by the run's mark in their environment and
killed too: no DataLoader worker or helper outlives its trial.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import topology
from ..outcome import classify_exit
from ..protocol import (
    DEADLINE_ENV,
    EVENT_FD_ENV,
    MACHINE_CPUS_ENV,
    PARENT_PID_ENV,
    RUN_MARK_ENV,
    RUN_ROOT_ENV,
    SCRATCH_ENV,
    WINDOW_EVENT,
    WINDOW_RATE,
    WORKER_MODULE,
    process_name,
    pythonpath_with_cwd,
)
from ..result import RunResult, Status
from .evidence import oom_killed, oom_kills
from .fork_servers import ForkedTrial, ZygoteUnavailable, zygote_for
from .leftovers import become_subreaper, kill_group, kill_leftovers, make_scratch, remove_scratch

_LOG_TAIL_BYTES = 8192
# after its result, a child gets this long to shut down before its group is killed
_EXIT_GRACE_S = 10.0
# how often the child's liveness is checked while no event comes
_POLL_S = 0.5


class InFlight:
    """The process groups of this process's runs in flight, and the stop that ends them: a
    signal handler calls stop(), and every run in flight, and any started later, ends
    interrupted with its reason. One per process (IN_FLIGHT); a test may hold its own."""

    def __init__(self) -> None:
        self._groups: set[int] = set()
        self.stopped: str | None = None  # why, once stopped

    def stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
        for pgid in list(self._groups):
            kill_group(pgid)

    @contextlib.contextmanager
    def holding(self, pgid: int) -> Iterator[None]:
        """While a run's group lives; a stop that came while it was starting kills it at once."""
        self._groups.add(pgid)
        if self.stopped is not None:
            kill_group(pgid)
        try:
            yield
        finally:
            self._groups.discard(pgid)


IN_FLIGHT = InFlight()


def interrupt(reason: str) -> None:
    """Stop every run in flight (and any later one) now: called from a SIGTERM/SIGINT handler."""
    IN_FLIGHT.stop(reason)


def _read_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class _EventReader:
    """JSON lines from the child's event pipe: phases and windows to `on_event`, the result kept,
    and each window's rate (what a run killed before its result had measured)."""

    def __init__(self, fd: int, on_event: Callable[[dict[str, Any]], None] | None) -> None:
        self.fd, self.on_event = fd, on_event
        self.buffer = b""
        self.result: dict[str, Any] | None = None
        self.phase = "start"
        self.window_rates: list[float] = []

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            event = json.loads(line)
            self.phase = event.get("phase", self.phase)
            if event.get("event") == "result":
                self.result = event
                continue
            if event.get("event") == WINDOW_EVENT and isinstance(event.get(WINDOW_RATE), (int, float)):
                self.window_rates.append(float(event[WINDOW_RATE]))
            if self.on_event is not None:
                self.on_event(event)

    def drain(self) -> None:
        """Read what the child wrote before it died, without waiting on a descendant that still
        holds the pipe open."""
        os.set_blocking(self.fd, False)
        try:
            while chunk := os.read(self.fd, 65536):
                self.feed(chunk)
        except BlockingIOError:
            pass


@dataclass(frozen=True)
class Started:
    """A run's child, started: forked from the zygote or spawned."""

    proc: Any  # subprocess.Popen or ForkedTrial
    read_fd: int  # the event pipe's read end
    mark: str  # NAME=value every process of the run inherits
    note: str | None  # why a run asked to be forked was spawned
    deadline: float  # time.monotonic() when the run is killed
    scratch: str | None  # the run's scratch directory (protocol.SCRATCH_ENV), removed with the run

    @property
    def pgid(self) -> int:
        return self.proc.pid

    @property
    def name(self) -> str:
        return process_name(self.mark.partition("=")[2])


def _fork(
    spec: Mapping[str, Any],
    child_env: Mapping[str, str],
    log_path: Path,
    write_fd: int,
    mark: str,
    preload: Sequence[str],
    started_with: Mapping[str, str],
) -> tuple[Any, str | None]:
    """A trial forked from the zygote of its start environment, or (None, why not): a zygote
    that died is replaced once."""
    why = None
    for _ in range(2):
        try:
            zygote = zygote_for(preload, started_with)
            if zygote.hazard:
                return None, f"spawned: forking is unsafe here ({zygote.hazard})"
            return zygote.fork(spec, child_env, str(log_path), write_fd, process_name(mark.partition("=")[2])), None
        except ZygoteUnavailable as exc:
            why = str(exc)
    return None, f"spawned: the zygote failed twice ({why})"


def start(
    spec: Mapping[str, Any],
    log_path: Path,
    env: Mapping[str, str] | None,
    command: list[str] | None,
    isolation: str,
    preload: Sequence[str],
    timeout_s: float,
    started_with: Mapping[str, str] | None = None,
) -> Started:
    """The child, in its own session and process group, with the event pipe's write end and the
    spec (on stdin when spawned; with the fork request when forked). The run's timeout counts
    from here: a zygote that first has to start (import torch) is sweeper's cost, not the run's."""
    become_subreaper()
    if isolation == "fork" and command is None:
        with contextlib.suppress(ZygoteUnavailable):
            zygote_for(preload, started_with)
    deadline = time.monotonic() + timeout_s
    mark = f"{RUN_MARK_ENV}={uuid.uuid4().hex}"
    scratch = make_scratch()
    read_fd, write_fd = os.pipe()
    child_env = {
        **os.environ,
        **(env or {}),
        EVENT_FD_ENV: str(write_fd),
        PARENT_PID_ENV: str(os.getpid()),
        RUN_ROOT_ENV: str(os.getpid()),
        RUN_MARK_ENV: mark.partition("=")[2],
        **({SCRATCH_ENV: scratch} if scratch else {}),
        "PYTHONPATH": pythonpath_with_cwd(),
        DEADLINE_ENV: f"{deadline:.3f}",
        MACHINE_CPUS_ENV: topology.cpulist(sorted(os.sched_getaffinity(0))),
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    proc, note = None, None
    if isolation == "fork" and command is None:
        log_path.write_bytes(b"")
        proc, note = _fork(spec, child_env, log_path, write_fd, mark, preload, started_with or {})
    if proc is None:
        proc = _spawn(spec, command or [sys.executable, "-m", WORKER_MODULE], child_env, log_path, write_fd)
    os.close(write_fd)
    return Started(proc, read_fd, mark, note, deadline, scratch)


def wait_for_result(run: Started, reader: _EventReader) -> bool:
    """Read events until the result, the child's death or the run's deadline; then give the
    child its grace to exit. True if the run timed out without a result."""
    while reader.result is None:
        remaining = run.deadline - time.monotonic()
        if remaining <= 0:
            return True
        ready, _, _ = select.select([run.read_fd], [], [], min(remaining, _POLL_S))
        if not ready:
            if run.proc.poll() is not None:  # died; a descendant may still hold the pipe open
                reader.drain()
                break
            continue
        chunk = os.read(run.read_fd, 65536)
        if not chunk:
            break  # the child (and anything holding the fd) closed it
        reader.feed(chunk)
    grace = run.deadline - time.monotonic()
    if reader.result is not None:
        grace = min(grace, _EXIT_GRACE_S)
    try:
        run.proc.wait(timeout=max(0.1, grace))
    except subprocess.TimeoutExpired:
        return reader.result is None
    return False


def clean_up(run: Started) -> None:
    """Kill the run's group (DataLoader workers and anything else the child started), reap the
    child, kill what escaped the group, and remove the run's scratch directory."""
    kill_group(run.pgid)
    if run.proc.poll() is None:  # a forked trial stopped before it made its own group
        try:
            os.kill(run.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run.proc.wait()
    os.close(run.read_fd)
    kill_leftovers(run.pgid, run.mark, run.name)
    remove_scratch(run.scratch)


def outcome(
    run: Started,
    reader: _EventReader,
    timed_out: bool,
    stopped: str | None,
    timeout_s: float,
    log_path: Path,
    oom_before: int | None,
) -> RunResult:
    """What the run ended as: its own result, else interrupted, timeout or what its exit says;
    a crash or error while the kernel's OOM killer struck is an oom."""
    exited = None
    if reader.result is not None:
        result = RunResult.from_json(reader.result)
    elif stopped is not None:
        result = RunResult(Status.INTERRUPTED, stopped)
    elif timed_out:
        measured = ""
        if reader.window_rates:  # said, so that what the run measured before it hung is not lost
            n, median = len(reader.window_rates), statistics.median(reader.window_rates)
            measured = f"; {n} window{'s' * (n > 1)} had read {median:,.0f} samples/s (median)"
        result = RunResult(
            Status.TIMEOUT,
            f"no result within measure.timeout_s={timeout_s:g} s "
            f"(last phase: {reader.phase}{measured}); its process group was killed",
        )
    else:
        exited = classify_exit(run.proc.returncode, _read_tail(log_path))
        result = RunResult(exited.status, exited.reason)
    if result.status in (Status.CRASH, Status.ERROR) and oom_killed(oom_before, oom_kills()):
        how = "SIGKILL" if exited is not None and exited.signal == "SIGKILL" else result.reason
        result = result.replace(
            status=Status.OOM,
            reason=f"killed by the kernel's OOM killer: the memory cgroup's oom_kill count rose during the run ({how})",
        )
    return result


def run_isolated(
    spec: Mapping[str, Any],
    *,
    timeout_s: float,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    command: list[str] | None = None,
    isolation: str = "spawn",
    preload: Sequence[str] = (),
    started_with: Mapping[str, str] | None = None,
    in_flight: InFlight = IN_FLIGHT,
) -> RunResult:
    """Run the worker on `spec`; return its result, or a failure with status and reason.

    `isolation="fork"` forks the run from a zygote that has imported torch and `preload` and
    started with `started_with` in its environment (what a process reads at its start),
    falling back to a fresh process, with the reason recorded, where that is unsafe;
    `command` replaces the worker (tests use fake workers); the child reads `spec` as JSON and
    writes JSON lines on the fd named by $SWEEPER_EVENT_FD, the last one the result. A result
    received stands, whatever happens after; a stop of `in_flight` interrupts the run.
    """
    if in_flight.stopped is not None:
        return RunResult(Status.INTERRUPTED, in_flight.stopped, log=str(log_path))
    oom_before = oom_kills()
    began = time.monotonic()
    run = start(spec, log_path, env, command, isolation, preload, timeout_s, started_with)
    reader = _EventReader(run.read_fd, on_event)
    with in_flight.holding(run.pgid):
        try:
            timed_out = wait_for_result(run, reader)
        finally:
            clean_up(run)
    result = outcome(run, reader, timed_out, in_flight.stopped, timeout_s, log_path, oom_before)
    wall_s, ended_at = time.monotonic() - began, time.time()
    return result.replace(
        isolation="fork" if isinstance(run.proc, ForkedTrial) else "spawn",
        isolation_note=run.note,
        wall_s=wall_s,
        started_at=ended_at - wall_s,
        ended_at=ended_at,
        log=str(log_path),
    )


def _spawn(
    spec: Mapping[str, Any], words: list[str], env: Mapping[str, str], log_path: Path, write_fd: int
) -> subprocess.Popen[bytes]:
    """The child spawned afresh (a command of its own, isolation=spawn, or no zygote), in its own
    session and group so that it is killed as one, the spec on its stdin."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            words,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            pass_fds=(write_fd,),
            start_new_session=True,
        )
    assert proc.stdin is not None  # stdin=PIPE
    try:
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc
