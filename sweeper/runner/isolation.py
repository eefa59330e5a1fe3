"""Run one measurement in a fresh child process and always come back with an outcome.

Why a child: thread pools and OMP settings are fixed at first use, an OOM or a segfault must
not kill the sweep, a hung DataLoader must be killable with its workers, and memory must be
measured per configuration. The child gets its own session and process group; the whole group
is killed on timeout and after every run. Descendants that leave the group (setsid) come back
to this process, a child subreaper, and are found by the run's mark in their environment and
killed too: no DataLoader worker or helper outlives its trial.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import procs
from ..protocol import EVENT_FD_ENV, PARENT_PID_ENV, RUN_MARK_ENV, WORKER_MODULE, process_name, pythonpath_with_cwd
from ..result import RunResult, Status
from .evidence import oom_killed, oom_kills
from .outcome import classify_exit
from .zygote import ForkedTrial, ZygoteUnavailable, zygote_env, zygote_for

_LOG_TAIL_BYTES = 8192
# after its result, a child gets this long to shut down before its group is killed
_EXIT_GRACE_S = 10.0
# how often the child's liveness is checked while no event comes
_POLL_S = 0.5

# process groups of the runs in flight, and why they were interrupted (set by a signal handler)
_RUNNING: set[int] = set()
_INTERRUPTED: list[str] = []


def interrupt(reason: str) -> None:
    """Stop every run in flight (and any later one) now: called from a SIGTERM/SIGINT handler."""
    _INTERRUPTED.append(reason)
    for pgid in list(_RUNNING):
        kill_group(pgid)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def become_subreaper() -> None:
    """Linux: orphaned descendants (a setsid'd helper whose parent died) are re-parented to this
    process instead of init, so a run's escapees can still be found and killed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_child_subreaper = 36
        libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def kill_leftovers(session: int, mark: str, name: str | None = None, rounds: int = 5) -> list[int]:
    """Kill and reap this process's children that belong to the run: in its session (the
    group's members, re-parented here when the child died) or carrying its mark (escapees:
    in their environment, or as the process name a forked trial's descendants inherit)."""
    killed: list[int] = []
    for _ in range(rounds):
        found = []
        for pid in procs.children(os.getpid()):
            info = procs.stat(pid)
            if info is not None and (info.session == session or procs.environ_has(pid, mark)
                                     or (name is not None and procs.comm(pid) == name)):
                found.append(pid)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in found:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        killed += found
    return killed


def _read_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class _EventReader:
    """JSON lines from the child's event pipe: phases and windows to `on_event`, the result kept."""

    def __init__(self, fd: int, on_event: Callable[[dict[str, Any]], None] | None) -> None:
        self.fd, self.on_event = fd, on_event
        self.buffer = b""
        self.result: dict[str, Any] | None = None
        self.phase = "start"

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            event = json.loads(line)
            self.phase = event.get("phase", self.phase)
            if event.get("event") == "result":
                self.result = event
            elif self.on_event is not None:
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


def _fork(spec: Mapping[str, Any], child_env: Mapping[str, str], log_path: Path, write_fd: int, mark: str,
          preload: Sequence[str]) -> tuple[Any, str | None]:
    """A trial forked from the zygote, or (None, why not): a zygote that died is replaced once."""
    why = None
    for _ in range(2):
        try:
            zygote = zygote_for(preload, zygote_env())
            if zygote.hazard:
                return None, f"spawned: forking is unsafe here ({zygote.hazard})"
            return zygote.fork(spec, child_env, str(log_path), write_fd, process_name(mark.partition('=')[2])), None
        except ZygoteUnavailable as exc:
            why = str(exc)
    return None, f"spawned: the zygote failed twice ({why})"


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
) -> RunResult:
    """Run the worker on `spec`; return its result, or a failure with status and reason.

    `isolation="fork"` forks the run from a zygote that has imported torch and `preload`
    (falling back to a fresh process, with the reason recorded, where that is unsafe);
    `command` replaces the worker (tests use fake workers); the child reads `spec` as JSON on
    stdin and writes JSON lines on the fd named by $SWEEPER_EVENT_FD, the last being
    {"event": "result", "status": ..., ...}. A result received stands, whatever happens after.
    """
    if _INTERRUPTED:
        return RunResult(Status.INTERRUPTED, _INTERRUPTED[0], log=str(log_path))
    become_subreaper()
    mark = f"{RUN_MARK_ENV}={uuid.uuid4().hex}"
    read_fd, write_fd = os.pipe()
    child_env = {**os.environ, **(env or {}), EVENT_FD_ENV: str(write_fd), PARENT_PID_ENV: str(os.getpid()),
                 RUN_MARK_ENV: mark.partition("=")[2]}
    child_env["PYTHONPATH"] = pythonpath_with_cwd()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    oom_before = oom_kills()
    started = time.monotonic()
    proc: Any = None
    note = None
    if isolation == "fork" and command is None:
        log_path.write_bytes(b"")
        proc, note = _fork(spec, child_env, log_path, write_fd, mark, preload)
    if proc is None:
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                command or [sys.executable, "-m", WORKER_MODULE],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                pass_fds=(write_fd,),
                start_new_session=True,  # its own session and group: killed as one
            )
        spec_pipe = proc.stdin
    else:
        spec_pipe = None
    os.close(write_fd)
    pgid = proc.pid
    _RUNNING.add(pgid)
    if _INTERRUPTED:  # a stop that came between Popen and registering the group
        kill_group(pgid)
    reader = _EventReader(read_fd, on_event)
    timed_out = False
    try:
        if spec_pipe is not None:
            try:
                spec_pipe.write(json.dumps(spec).encode())
                spec_pipe.close()
            except BrokenPipeError:
                pass
        while reader.result is None:
            remaining = timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([read_fd], [], [], min(remaining, _POLL_S))
            if not ready:
                if proc.poll() is not None:  # died; a descendant may still hold the pipe open
                    reader.drain()
                    break
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break  # the child (and anything holding the fd) closed it
            reader.feed(chunk)
        if not timed_out:
            grace = timeout_s - (time.monotonic() - started)
            if reader.result is not None:
                grace = min(grace, _EXIT_GRACE_S)
            try:
                proc.wait(timeout=max(0.1, grace))
            except subprocess.TimeoutExpired:
                timed_out = reader.result is None
    finally:
        kill_group(pgid)  # DataLoader workers and anything else the child started
        if proc.poll() is None:  # a forked trial stopped before it made its own group
            try:
                os.kill(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        _RUNNING.discard(pgid)
        os.close(read_fd)
        kill_leftovers(pgid, mark, process_name(mark.partition('=')[2]))
    wall_s = time.monotonic() - started
    if reader.result is not None:
        run = RunResult.from_dict(reader.result)
    elif _INTERRUPTED:
        run = RunResult(Status.INTERRUPTED, _INTERRUPTED[0])
    elif timed_out:
        run = RunResult(Status.TIMEOUT, f"no result within measure.timeout_s={timeout_s:g} s "
                        f"(last phase: {reader.phase}); its process group was killed")
    else:
        run = RunResult(*classify_exit(proc.returncode, _read_tail(log_path)))
    if run.status in (Status.CRASH, Status.ERROR) and oom_killed(oom_before, oom_kills()):
        how = "SIGKILL" if (run.reason or "").startswith("killed by SIGKILL") else run.reason
        run = RunResult(Status.OOM, f"killed by the kernel's OOM killer: the memory cgroup's oom_kill count rose "
                        f"during the run ({how})", figures=run.figures, fingerprint=run.fingerprint)
    run.figures["isolation"] = "fork" if isinstance(proc, ForkedTrial) else "spawn"
    if note:
        run.figures["isolation_note"] = note
    run.wall_s = wall_s
    run.ended_at = time.time()
    run.started_at = run.ended_at - wall_s
    run.log = str(log_path)
    return run
