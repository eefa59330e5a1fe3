"""What a run leaves behind, and its removal: processes that escaped its process group (a
setsid'd helper, a worker re-parented when its parent died) and the run's scratch directory,
where its own temporary files go (protocol.SCRATCH_ENV). A run killed on a crash, a hang or a
stop leaves neither."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

from .. import procs


def make_scratch() -> str | None:
    """A new scratch directory for one run, in the system's temporary directory; None where none
    can be made (a full or read-only disk): the run then makes its files where it would have."""
    try:
        return tempfile.mkdtemp(prefix="sweeper-scratch-")
    except OSError:
        return None


def remove_scratch(path: str | None) -> None:
    """Remove a run's scratch directory and whatever its processes left there."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def become_subreaper() -> None:
    """Linux: orphaned descendants (a setsid'd helper whose parent died) are re-parented to this
    process instead of init, so a run's escapees can still be found and killed."""
    procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)


def kill_leftovers(session: int, mark: str, name: str | None = None, rounds: int = 5) -> list[int]:
    """Kill and reap this process's children that belong to the run: in its session (the
    group's members, re-parented here when the child died) or carrying its mark (escapees:
    in their environment, or as the process name a forked trial's descendants inherit)."""
    killed: list[int] = []
    for _ in range(rounds):
        found = []
        for pid in procs.children(os.getpid()):
            info = procs.stat(pid)
            if info is not None and (
                info.session == session
                or procs.environ_has(pid, mark)
                or (name is not None and procs.comm(pid) == name)
            ):
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
