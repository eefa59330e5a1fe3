"""The warm trial engine's parent side: one fork server per set of preloaded modules and
start-time environment (an allocator's LD_PRELOAD, OpenMP's binding: read once, when a process
starts), started on first use, replaced when it dies, the least recently used closed past
zygote_room (nine, fewer where memory is short), and the trials it forks handled like our own
children.

A forked trial skips the interpreter start, the torch import and the workload module's import
(seconds per trial); it is re-parented to this process (a child subreaper), so its exit status,
its session and its kill are ours exactly as for a spawned worker (sweeper.measuring.fork_server).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import share, topology
from ..protocol import PARENT_PID_ENV, THREAD_ENV_VARS, ZYGOTE_FD_ENV, ZYGOTE_MODULE, pythonpath_with_cwd

# starting the zygote imports torch: generous, it happens once per sweep
_READY_TIMEOUT_S = 120.0


class ZygoteUnavailable(Exception):
    """The zygote could not start or fork; the reason says why (the run is spawned instead)."""


class ForkedTrial:
    """A forked trial with the part of subprocess.Popen's interface the isolation uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """A running fork server (sweeper.measuring.fork_server) that has imported `modules`; started with
    None, it imports torch at once and the modules when `load` names them. With wait=False it is
    started and not waited for: wait_ready before its first fork."""

    def __init__(self, modules: Sequence[str] | None, env: Mapping[str, str], wait: bool = True) -> None:
        self.env = dict(env)
        self.modules: tuple[str, ...] | None = None
        # why forking it is unsafe (threads or CUDA at import), or None
        self.hazard: str | None = None
        # what failed to import: module or "module:function" -> the error, one line
        self.failed: dict[str, str] = {}
        ours, theirs = socket.socketpair()
        self._channel = ours
        self._buffer = b""
        child_env = {**env, ZYGOTE_FD_ENV: str(theirs.fileno()), PARENT_PID_ENV: str(os.getpid())}
        self._stderr = tempfile.TemporaryFile()  # read only when it fails to start
        self._proc = subprocess.Popen(
            [sys.executable, "-m", ZYGOTE_MODULE, *([json.dumps(list(modules))] if modules is not None else [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=child_env,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        # the modules it was started with, until its ready line is read (wait_ready)
        self._pending: tuple[str, ...] | None = None
        if modules is not None:
            self._pending = tuple(modules)
            if wait:
                self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until a zygote started with its modules has imported them (at once when it has)."""
        if self._pending is not None:
            modules, self._pending = self._pending, None
            self._ready(modules)

    def load(self, modules: Sequence[str]) -> None:
        """Name the modules of an early-started zygote and wait until it has imported them."""
        try:
            self._channel.sendall((json.dumps({"preload": list(modules)}) + "\n").encode())
        except OSError as exc:
            raise ZygoteUnavailable(f"the zygote is gone ({exc})") from exc
        self._ready(modules)

    def _ready(self, modules: Sequence[str]) -> None:
        ready = self._reply(_READY_TIMEOUT_S)
        self.modules = tuple(modules)
        self.hazard = ready.get("hazard")
        self.failed = ready.get("failed") or {}

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        self._channel.settimeout(timeout_s)
        while b"\n" not in self._buffer:
            try:
                self._channel.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = self._channel.recv(65536)
            except (TimeoutError, OSError) as exc:
                raise ZygoteUnavailable(f"the zygote did not answer ({exc})") from exc
            if not chunk:
                raise ZygoteUnavailable(f"the zygote exited ({self._stderr_tail()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _stderr_tail(self) -> str:
        if self._proc.poll() is None:
            return "still running"
        self._stderr.seek(0)
        tail = self._stderr.read()[-300:].decode(errors="replace").strip()
        return tail.splitlines()[-1] if tail else f"exit status {self._proc.returncode}"

    def fork(
        self, spec: Mapping[str, Any], env: Mapping[str, str], log_path: str, event_fd: int, name: str
    ) -> ForkedTrial:
        """A trial measuring `spec`, forked, in its own session, re-parented to this process."""
        request = {"spec": spec, "env": dict(env), "log": log_path, "name": name}
        try:
            socket.send_fds(self._channel, [(json.dumps(request) + "\n").encode()], [event_fd])
        except OSError as exc:
            raise ZygoteUnavailable(f"the zygote is gone ({exc})") from exc
        pid = int(self._reply(60.0).get("pid") or 0)
        if not pid:
            raise ZygoteUnavailable(f"the zygote would not fork: {self.hazard}")
        return ForkedTrial(pid)

    def close(self) -> None:
        if self.modules is None:  # an early one, maybe still importing torch: nothing of it is needed
            self._proc.kill()
        self._channel.close()  # the zygote exits at the end of its requests
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()

    def kill(self) -> None:
        """Now, without waiting for it to finish its requests: the process is leaving."""
        self._proc.kill()
        self._proc.wait()
        self._channel.close()
        self._stderr.close()


def zygote_env(started_with: Mapping[str, str] | None = None) -> dict[str, str]:
    """The fork server's environment: ours, the working directory importable, no per-run
    thread settings (each trial applies its own), and what its trials need from their start."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV_VARS}
    env["PYTHONPATH"] = pythonpath_with_cwd()
    return {**env, **(started_with or {})}


# zygotes kept alive at once: a search over the three allocators and three OpenMP bindings
# meets up to nine start environments, and a zygote closed for room costs the next trial that
# needs it a torch import (seconds) again
MAX_ZYGOTES = 9
# what an idle zygote is taken to hold (its private memory: an imported torch and torchvision,
# about 0.4 GB) until a live one says
_ZYGOTE_BYTES = 512 << 20


def _meminfo_bytes(field: str, path: str = "/proc/meminfo") -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    return None


def _private_bytes(pid: int) -> int | None:
    return _meminfo_bytes("RssAnon", f"/proc/{pid}/status")


def zygote_room(alive: Sequence[Zygote]) -> int:
    """How many zygotes may live at once: MAX_ZYGOTES, fewer where idle ones would hold more than
    a quarter of the memory available to trials (each one's private memory as the live ones hold
    it), and at least two (the plain one and the trial's)."""
    available = _meminfo_bytes("MemAvailable")
    if available is None:
        return MAX_ZYGOTES
    held = [b for z in alive if (b := _private_bytes(z.pid))]
    each = max(sum(held) / len(held), 1 << 20) if held else _ZYGOTE_BYTES
    # the live ones' memory is not available now, but is theirs to keep
    fits = int((available + sum(held)) / 4 // each)
    return max(2, min(MAX_ZYGOTES, fits))


# a zygote's key: the modules it imported, and its start environment
_Key = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]
_ZYGOTES: dict[_Key, Zygote] = {}
# the start environments a sweep's space can ask for (expect): a zygote that has to start starts
# some of these beside it, on the cores that would wait idle meanwhile
_EXPECTED: list[dict[str, str]] = []
# a zygote started before the workload was known (start_early), adopted by the first zygote_for
# whose environment it has
_EARLY: list[Zygote] = []
_OWNER = os.getpid()  # the process whose zygotes these are


def start_early() -> None:
    """Start a zygote now, so that its torch import (about 2 s) runs on another core while this
    process imports Hydra and composes its config; the first zygote_for with the same
    environment adopts it. Unadopted (a spawned or scripted run), it dies with this process."""
    if not _EARLY and not _ZYGOTES:
        with contextlib.suppress(OSError):
            _EARLY.append(Zygote(None, zygote_env()))


def expect(environments: Sequence[Mapping[str, str]]) -> None:
    """The start environments this process's runs may ask for (a sweep's space: its allocators
    by its OpenMP bindings), most likely first."""
    _EXPECTED[:] = [dict(e) for e in environments]


@contextlib.contextmanager
def expecting(environments: Sequence[Mapping[str, str]]) -> Iterator[None]:
    """expect these for the block's runs (a sweep's), and nothing after it."""
    expect(environments)
    try:
        yield
    finally:
        expect([])


def _key(modules: Sequence[str], started_with: Mapping[str, str] | None) -> _Key:
    return tuple(modules), tuple(sorted((started_with or {}).items()))


def zygote_for(modules: Sequence[str], started_with: Mapping[str, str] | None = None) -> Zygote:
    """The live zygote that has imported `modules` and started with `started_with` in its
    environment, started (again) when there is none. A zygote that has to start is a torch import
    on one core while the others wait: zygotes of the expected environments not yet alive start
    beside it, one per idle core (within zygote_room, _spare_environments), and all are waited
    for before it is returned, so that none is still importing while a run is measured."""
    key = _key(modules, started_with)
    found = _ZYGOTES.pop(key, None)
    if found is not None and found.alive():
        _ZYGOTES[key] = found  # the most recently used last
        return found
    if found is not None:
        found.close()
    while _ZYGOTES and len(_ZYGOTES) >= zygote_room(list(_ZYGOTES.values())):
        _ZYGOTES.pop(next(iter(_ZYGOTES))).close()
    env = zygote_env(started_with)
    needed = _adopted(modules, env) or Zygote(modules, env, wait=False)
    spares = []
    for other in _spare_environments(modules, started_with or {}):
        with contextlib.suppress(OSError):
            spares.append((_key(modules, other), Zygote(modules, zygote_env(other), wait=False)))
    try:
        needed.wait_ready()
    except ZygoteUnavailable:
        needed.close()
        raise
    finally:
        for spare_key, spare in spares:  # one that fails is left out: a run that needs it starts it
            try:
                spare.wait_ready()
            except ZygoteUnavailable:
                spare.close()
            else:
                _ZYGOTES[spare_key] = spare
    _ZYGOTES[key] = needed  # the most recently used last
    return needed


def _bound(env: Mapping[str, str]) -> bool:
    """Whether OpenMP binds threads in this environment and pins the zygote's import: GNU's
    libgomp pins the process's own thread to the first place as it starts, so two such zygotes
    would import torch on one core, one after the other. Not where torch ships its own libgomp:
    the zygote starts it before torch and unpins at once (measuring.fork_server.openmp_first)."""
    binds = env.get("OMP_PROC_BIND", "false").lower() not in ("false", "")
    return binds and _own_openmp() is None


@functools.cache
def _own_openmp() -> str | None:
    return topology.torch_gnu_openmp()


def _spare_environments(modules: Sequence[str], needed: Mapping[str, str]) -> list[dict[str, str]]:
    """The expected environments to start beside a needed zygote: those without a live zygote,
    as many as the cores beyond one, within the room left (the needed one counted), at most one
    of them and the needed one binding OpenMP's threads (they would share a core)."""
    room = min(share.cores_here() - 1, zygote_room(list(_ZYGOTES.values())) - len(_ZYGOTES) - 1)
    chosen: list[dict[str, str]] = []
    bound = _bound(needed)
    for env in _EXPECTED:
        if len(chosen) >= room:
            break
        if _key(modules, env) in _ZYGOTES or env == dict(needed) or (bound and _bound(env)):
            continue
        bound = bound or _bound(env)
        chosen.append(env)
    return chosen


def _adopted(modules: Sequence[str], env: Mapping[str, str]) -> Zygote | None:
    """The early zygote, given `modules`, when it started with `env`; else it is closed."""
    early = _EARLY.pop() if _EARLY else None
    if early is None:
        return None
    if early.env == dict(env) and early.alive():
        try:
            early.load(modules)
            return early
        except ZygoteUnavailable:
            pass
    early.close()
    return None


def close_all() -> None:
    """Every zygote closed once its requests are done (a test's clean slate)."""
    while _EARLY:
        _EARLY.pop().close()
    while _ZYGOTES:
        _ZYGOTES.popitem()[1].close()


@atexit.register
def kill_all() -> None:
    """At exit, every zygote killed and reaped: none outlives the command that started it (their
    parent-death signal alone comes a moment after the command has returned). Not in a process
    forked from this one: the zygotes are not its own."""
    if os.getpid() != _OWNER:
        return
    while _EARLY:
        _EARLY.pop().kill()
    while _ZYGOTES:
        _ZYGOTES.popitem()[1].kill()
