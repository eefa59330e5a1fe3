"""How a run that sent no result is classified, from its exit and its log (pure)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from .result import Status, looks_like_oom


@dataclass(frozen=True)
class Exit:
    """How a worker that sent no result ended: its status and its cause as fields; the reason
    is the sentence made from them (and nothing reads the sentence back)."""

    status: Status
    signal: str | None = None  # the signal that killed it (SIGKILL, SIGSEGV, ...)
    code: int | None = None  # its exit code, when it exited
    message: str = ""  # its log's last line, when it exited
    oom_in_log: bool = False  # its log says it ran out of memory

    @property
    def reason(self) -> str:
        if self.signal is not None:
            if self.oom_in_log:
                return f"killed by {self.signal} after running out of memory"
            hint = " (the kernel's OOM killer sends this when memory runs out)" if self.signal == "SIGKILL" else ""
            return f"killed by {self.signal}{hint}"
        if self.oom_in_log:
            return f"exited with code {self.code}: {self.message}"
        return f"exited with code {self.code} without a result: {self.message}"


def classify_exit(returncode: int, log_tail: str) -> Exit:
    """Status and cause for a worker that ended without sending a result."""
    oom = looks_like_oom(log_tail)
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return Exit(Status.OOM if oom else Status.CRASH, signal=name, oom_in_log=oom)
    return Exit(
        Status.OOM if oom else Status.ERROR,
        code=returncode,
        message=last_line(log_tail) or "no message",
        oom_in_log=oom,
    )


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
