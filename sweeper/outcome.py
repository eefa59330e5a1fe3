"""What a measured run can end as, and how a failed run is recognised (pure, no torch)."""

from __future__ import annotations

import signal
from typing import Final

OK: Final = "ok"
OOM: Final = "oom"
TIMEOUT: Final = "timeout"
CRASH: Final = "crash"
ERROR: Final = "error"
INVALID: Final = "invalid"
PRUNED: Final = "pruned"
INTERRUPTED: Final = "interrupted"  # stopped by SIGTERM/SIGINT of the sweep or run
STATUSES: Final = (OK, OOM, TIMEOUT, CRASH, ERROR, INVALID, PRUNED, INTERRUPTED)

# Texts by which PyTorch, CUDA and Python say "out of memory" (as Lightning and accelerate do).
_OOM_MARKERS: Final = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "memoryerror",
    "std::bad_alloc",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
)


def looks_like_oom(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _OOM_MARKERS)


def classify_exit(returncode: int, log_tail: str) -> tuple[str, str]:
    """Status and reason for a worker that ended without sending a result."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        if looks_like_oom(log_tail):
            return OOM, f"killed by {name} after running out of memory"
        hint = " (the kernel's OOM killer sends this when memory runs out)" if name == "SIGKILL" else ""
        return CRASH, f"killed by {name}{hint}"
    last = last_line(log_tail) or "no message"
    if looks_like_oom(log_tail):
        return OOM, f"exited with code {returncode}: {last}"
    return ERROR, f"exited with code {returncode} without a result: {last}"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
