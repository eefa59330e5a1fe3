"""An exception in the measuring child as an outcome (status and reason): every failure is data."""

from __future__ import annotations

import re
import traceback

from ..errors import InvalidConfig
from ..result import RunResult, Status, looks_like_oom

# torch's words for a DataLoader worker that died (a signal, the OOM killer, a segfault)
_LOADER_DIED = re.compile(r"DataLoader worker \(pid.*?\) (is killed by signal|exited unexpectedly)")


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, outermost first. torch raises a
    dead worker's error from its SIGCHLD handler, wherever the main process happens to be, so
    Python may wrap it (e.g. "Error calling __set_name__ ..." while a class is being made)."""
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and all(link is not s for s in seen):
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def failure_of(exc: BaseException) -> RunResult:
    """invalid (this machine can't run it), oom, crash (a loader worker died; the parent makes it
    oom when the kernel's OOM killer did it) or error, with the first line of the message that
    says why (a wrapped cause's where an outer one only wraps it)."""
    if isinstance(exc, InvalidConfig):
        return RunResult(Status.INVALID, str(exc))
    traceback.print_exception(exc)
    chain = _chain(exc)
    status, message = Status.ERROR, _message(exc)
    for link in chain:
        if isinstance(link, MemoryError) or looks_like_oom(_message(link)):
            status, message = Status.OOM, _message(link)
            break
        if _LOADER_DIED.search(_message(link)):
            status, message = Status.CRASH, _message(link)
            break
    return RunResult(status, message.splitlines()[0][:500] if message else str(status))
