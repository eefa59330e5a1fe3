"""A measuring process dies with its parent: the kernel's parent-death signal (Linux), and an
exit at once when the parent is already gone by the time it asks."""

from __future__ import annotations

import os
import signal

from ..procs import PR_SET_NAME, PR_SET_PDEATHSIG, prctl


def die_with_parent(parent: int | None) -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent and os.getppid() != parent:
        os._exit(1)


def die_with_ancestor(ancestor: int) -> None:
    """For a process started by a server of `ancestor`'s (a multiprocessing fork server): die with
    that server, which exits with `ancestor`, and at once if `ancestor` is already gone."""
    die_with_parent(None)
    try:
        os.kill(ancestor, 0)
    except ProcessLookupError:
        os._exit(1)


def name_process(name: str | None) -> None:
    """The run's mark as the process name (protocol.process_name), which forked descendants
    inherit and a dead process keeps: escapees and a rank's remains are found by it (a forked
    process's /proc environ is the zygote's, not the run's; a zombie has none)."""
    if name:
        prctl(PR_SET_NAME, name.encode()[:15])
