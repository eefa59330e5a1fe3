"""How a run that sent no result is classified, from its exit and its log (pure)."""

from __future__ import annotations

import signal

from .result import Status, looks_like_oom


def classify_exit(returncode: int, log_tail: str) -> tuple[Status, str]:
    """Status and reason for a worker that ended without sending a result."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        if looks_like_oom(log_tail):
            return Status.OOM, f"killed by {name} after running out of memory"
        hint = " (the kernel's OOM killer sends this when memory runs out)" if name == "SIGKILL" else ""
        return Status.CRASH, f"killed by {name}{hint}"
    last = last_line(log_tail) or "no message"
    if looks_like_oom(log_tail):
        return Status.OOM, f"exited with code {returncode}: {last}"
    return Status.ERROR, f"exited with code {returncode} without a result: {last}"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
