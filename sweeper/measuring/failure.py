"""An exception in the measuring child as an outcome (status and reason): every failure is data."""

from __future__ import annotations

import re
import traceback

from ..errors import InvalidConfig
from ..result import RunResult, Status, looks_like_oom

# torch's words for a DataLoader worker that died (a signal, the OOM killer, a segfault)
_LOADER_DIED = re.compile(r"DataLoader worker \(pid.*?\) (is killed by signal|exited unexpectedly)")


def failure_of(exc: BaseException) -> RunResult:
    """invalid (this machine can't run it), oom, crash (a loader worker died; the parent makes it
    oom when the kernel's OOM killer did it) or error, with the message's first line."""
    if isinstance(exc, InvalidConfig):
        return RunResult(Status.INVALID, str(exc))
    message = f"{type(exc).__name__}: {exc}".strip()
    traceback.print_exception(exc)
    if isinstance(exc, MemoryError) or looks_like_oom(message):
        status = Status.OOM
    elif _LOADER_DIED.search(message):
        status = Status.CRASH
    else:
        status = Status.ERROR
    return RunResult(status, message.splitlines()[0][:500] if message else str(status))
