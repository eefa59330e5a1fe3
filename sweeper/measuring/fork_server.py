"""The warm trial engine's child side: `python -m sweeper.measuring.fork_server`, a fork server.

It imports torch, torchvision and the workload's modules once per sweep and builds nothing
that holds threads or a device, then forks one trial per request. The trial is forked twice
(zygote -> intermediate -> trial) and the intermediate exits at once, so the trial is re-parented
to the sweep's process (a child subreaper): the sweep waits for it, reads its exit status and
kills its session like any child of its own. The trial starts its own session, takes its
environment, thread settings and log from the request, and measures exactly as a spawned worker.

Requests and replies are JSON lines on a socket ($SWEEPER_ZYGOTE_FD); each request carries the
run's event pipe as a passed file descriptor. Started without modules (early, while the sweep's
process composes its config), it imports torch at once and reads the modules from a first
request ({"preload": [...]}).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..protocol import EVENT_FD_ENV, PARENT_PID_ENV, ZYGOTE_FD_ENV
from ..topology import torch_gnu_openmp
from .lifeline import die_with_parent, name_process

# the trial waits at most this long to be re-parented to the sweep after the intermediate exits
_REPARENT_S = 5.0


def thread_count() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1


def fork_hazard(allowed_threads: int) -> str | None:
    """Why forking this process would be unsafe, or None: a thread beyond numpy's OpenBLAS pool
    (which shuts itself down at fork: pthread_atfork), whose locks would be copied mid-use, or an
    initialized CUDA context."""
    threads = thread_count()
    if threads > allowed_threads:
        return f"the workload's modules started {threads - allowed_threads} thread(s) at import"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "the workload's modules initialized CUDA at import"
    return None


def preload(modules: list[str]) -> dict[str, str]:
    """Import what every trial needs (a "module:function" task factory is looked up too); what
    fails is reported to the sweep, which refuses to start, and left to any trial to report."""
    from ..errors import InvalidConfig
    from .workload import load_factory

    failed = {}
    for name in modules:
        try:
            if ":" in name:
                load_factory(name)
            else:
                importlib.import_module(name)
        except InvalidConfig as exc:
            failed[name] = str(exc)
        except BaseException as exc:  # noqa: BLE001 - the trial reports it as data
            failed[name] = f"{type(exc).__name__}: {exc}"
    return failed


def openmp_first() -> set[int] | None:
    """Where an OpenMP binding is set, start torch's own GNU OpenMP runtime before torch: its
    start pins this thread, which is unpinned at once, so that torch's import (seconds) runs on
    any core and two bound zygotes import side by side rather than on one core. Returns the
    affinity the binding gave, None where nothing was loaded (no binding, or no libgomp of
    torch's own: torch's import then starts it, pinned)."""
    if os.environ.get("OMP_PROC_BIND", "false").lower() in ("false", ""):
        return None
    library = torch_gnu_openmp()
    if library is None:
        return None
    free = os.sched_getaffinity(0)
    try:
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    bound = os.sched_getaffinity(0)
    os.sched_setaffinity(0, free)
    return bound


def _become_trial(request: dict[str, Any], event_fd: int, intermediate: int, channel: socket.socket) -> None:
    """In the forked trial: own session, the run's log and environment, then measure."""
    channel.close()
    os.setsid()
    deadline = time.monotonic() + _REPARENT_S
    while os.getppid() == intermediate and time.monotonic() < deadline:
        time.sleep(0.001)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    env = dict(request["env"])
    env[EVENT_FD_ENV] = str(event_fd)
    os.environ.clear()
    os.environ.update(env)
    die_with_parent(int(env.get(PARENT_PID_ENV) or 0))
    name_process(request.get("name"))

    from .events import Events
    from .worker import serve

    serve(request["spec"], Events())


def _fork_trial(
    request: dict[str, Any],
    event_fd: int,
    channel: socket.socket,
    become: Callable[[dict[str, Any], int, int, socket.socket], None] | None = None,
) -> int:
    """Fork the trial through an intermediate that exits at once; return the trial's pid. The
    trial runs `become` (the trial's life: _become_trial) with the intermediate's pid."""
    become = become or _become_trial
    read_pid, write_pid = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        try:
            os.close(read_pid)
            # taken here: read in the trial, its parent could already be the sweep (the
            # intermediate gone), and the trial would wait out _REPARENT_S for nothing
            me = os.getpid()
            trial = os.fork()
            if trial == 0:
                os.close(write_pid)
                try:
                    become(request, event_fd, me, channel)
                except BaseException:  # noqa: BLE001 - reported in the run's log; exit status 70
                    traceback.print_exc()
                os._exit(70)
            os.write(write_pid, str(trial).encode())
        finally:
            os._exit(0)
    os.close(write_pid)
    os.close(event_fd)
    data = b""
    while chunk := os.read(read_pid, 64):
        data += chunk
    os.close(read_pid)
    os.waitpid(intermediate, 0)  # once reaped, the trial has been re-parented to the sweep
    return int(data or 0)


def _lines(channel: socket.socket):
    """(request, passed fds) per line from the sweep; ends when the sweep closes its side."""
    buffer = b""
    fds: list[int] = []
    while True:
        data, new_fds, _, _ = socket.recv_fds(channel, 1 << 20, 4)
        if not data:
            return
        fds += new_fds
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line), fds.pop(0) if fds else -1


def main() -> None:
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or 0))
    # the imports leave some 340,000 objects and free few: the collector's passes over them
    # cost about a sixth of a zygote's start, which a sweep waits for; it collects once below
    gc.disable()
    channel = socket.socket(fileno=int(os.environ.pop(ZYGOTE_FD_ENV)))
    requests = _lines(channel)
    failed = preload(["numpy"])
    allowed = thread_count()
    free = os.sched_getaffinity(0)
    # with OMP_PROC_BIND set, libgomp pins this thread to the binding's first place as it starts:
    # the imports run on any core (beside other zygotes starting), and the trials start pinned
    # where the binding put them, as the user's process would (below)
    bound = openmp_first()
    failed.update(preload(["torch"]))
    bound = bound or os.sched_getaffinity(0)  # libgomp started as torch loaded: pinned till here
    os.sched_setaffinity(0, free)
    failed.update(preload(["torchvision"]))
    if len(sys.argv) > 1:
        modules = json.loads(sys.argv[1])
    else:  # started early, before the sweep knew its workload: its modules come as the first request
        first = next(requests, None)
        if first is None:
            return
        modules = first[0]["preload"]
    failed.update(preload(modules))
    os.sched_setaffinity(0, bound)
    hazard = fork_hazard(allowed)
    # the imports' objects, collected once and frozen here rather than scanned again by every
    # trial's collection before its warm-up (stages.time_windows: 0.2-0.35 s a trial); a script
    # with the report's code has them frozen too (report/code.py). The trials fork with the
    # collector on, as a user's process runs
    gc.enable()
    gc.collect()
    gc.freeze()
    channel.sendall((json.dumps({"ready": True, "hazard": hazard, "failed": failed}) + "\n").encode())
    for request, event_fd in requests:
        pid = _fork_trial(request, event_fd, channel) if hazard is None else 0
        channel.sendall((json.dumps({"pid": pid}) + "\n").encode())


if __name__ == "__main__":
    main()
