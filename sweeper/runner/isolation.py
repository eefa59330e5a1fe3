"""Run one measurement in a fresh child process and always come back with an outcome.

Why a child: thread pools and OMP settings are fixed at first use, an OOM or a segfault must
not kill the sweep, a hung DataLoader must be killable with its workers, and memory must be
measured per configuration. The child gets its own process group; the whole group is killed
on timeout and after every run, so no DataLoader worker outlives its trial.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..protocol import EVENT_FD_ENV, WORKER_MODULE
from ..result import RunResult, Status
from .outcome import classify_exit

_LOG_TAIL_BYTES = 8192
# after its result, a child gets this long to shut down before its group is killed
_EXIT_GRACE_S = 10.0

# process groups of the runs in flight, and why they were interrupted (set by a signal handler)
_RUNNING: set[int] = set()
_INTERRUPTED: list[str] = []


def interrupt(reason: str) -> None:
    """Stop every run in flight (and any later one) now: called from a SIGTERM/SIGINT handler."""
    _INTERRUPTED.append(reason)
    for pgid in list(_RUNNING):
        kill_group(pgid)


def _child_setup(memory_limit_bytes: int | None) -> Callable[[], None]:
    def setup() -> None:
        if memory_limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
        _die_with_parent()

    return setup


def _die_with_parent() -> None:
    """Linux: SIGKILL the child if the parent dies, so a killed sweep leaves no measurer."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        pass


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def run_isolated(
    spec: Mapping[str, Any],
    *,
    timeout_s: float,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    memory_limit_gb: float | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    command: list[str] | None = None,
) -> RunResult:
    """Run the worker on `spec`; return its result, or a failure with status and reason.

    `command` replaces the worker (tests use fake workers); the child reads `spec` as JSON on
    stdin and writes JSON lines on the fd named by $SWEEPER_EVENT_FD, the last being
    {"event": "result", "status": ..., ...}.
    """
    if _INTERRUPTED:
        return RunResult(Status.INTERRUPTED, _INTERRUPTED[0], log=str(log_path))
    read_fd, write_fd = os.pipe()
    child_env = {**os.environ, **(env or {}), EVENT_FD_ENV: str(write_fd)}
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p
    )
    limit = int(memory_limit_gb * 2**30) if memory_limit_gb else None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command or [sys.executable, "-m", WORKER_MODULE],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            pass_fds=(write_fd,),
            start_new_session=True,
            preexec_fn=_child_setup(limit),
        )
    os.close(write_fd)
    pgid = proc.pid
    _RUNNING.add(pgid)
    result: dict[str, Any] | None = None
    phase = "start"
    timed_out = False
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        buffer = b""
        with os.fdopen(read_fd, "rb", buffering=0) as events:
            while True:
                remaining = timeout_s - (time.monotonic() - started)
                if remaining <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([events], [], [], min(remaining, 1.0))
                if not ready:
                    continue
                chunk = events.read(65536)
                if not chunk:
                    break  # the child (and anything holding the fd) closed it
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = json.loads(line)
                    phase = event.get("phase", phase)
                    if event.get("event") == "result":
                        result = event
                    elif on_event is not None:
                        on_event(event)
                if result is not None:
                    break  # forked DataLoader workers may still hold the fd open
        if not timed_out:
            grace = timeout_s - (time.monotonic() - started)
            if result is not None:
                grace = min(grace, _EXIT_GRACE_S)
            try:
                proc.wait(timeout=max(0.1, grace))
            except subprocess.TimeoutExpired:
                timed_out = result is None
    finally:
        kill_group(pgid)  # DataLoader workers and anything else the child started
        proc.wait()
        _RUNNING.discard(pgid)
    wall_s = time.monotonic() - started
    if _INTERRUPTED and (result is None or result.get("status") != Status.OK):
        run = RunResult(Status.INTERRUPTED, _INTERRUPTED[0])
    elif result is not None:
        run = RunResult.from_dict(result)
    elif timed_out:
        run = RunResult(Status.TIMEOUT, f"no result within measure.timeout_s={timeout_s:g} s "
                        f"(last phase: {phase}); its process group was killed")
    else:
        run = RunResult(*classify_exit(proc.returncode, _read_tail(log_path)))
    run.wall_s = wall_s
    run.ended_at = time.time()
    run.started_at = run.ended_at - wall_s
    run.log = str(log_path)
    return run
