"""SIGTERM/SIGINT while measuring: kill the running process group, remember the signal, let
the caller write what was measured and exit 128 + the signal (errors.Interrupted). A wait inside
library code that never reads the request (submitit polling a scheduler's queue) is broken by
raising StopWaiting into it."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import signal_name
from .isolation import interrupt


class StopWaiting(BaseException):
    """Raised by the signal handler into a wait armed with StopRequest.break_waits. A
    BaseException, as KeyboardInterrupt is: a library's `except Exception` (submitit passes
    over a failed sacct call) must not swallow it."""


@dataclass
class StopRequest:
    """Set by the handler; read by whoever decides what to run next."""

    what: str
    signum: int | None = None
    breaks_waits: bool = False  # armed: the next stop signal raises StopWaiting

    def break_waits(self) -> None:
        """Arm: until disarmed, a stop signal raises StopWaiting here in the main thread, into
        whatever waits. Raises at once if the stop came already."""
        self.breaks_waits = True
        if self.requested:
            self.breaks_waits = False
            raise StopWaiting(self.reason)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def reason(self) -> str:
        return f"{self.what} was stopped by {signal_name(self.signum)}"


@contextlib.contextmanager
def stop_on_signals(what: str) -> Iterator[StopRequest]:
    """While inside, SIGTERM/SIGINT interrupt every run in flight (and any later one)."""
    stop = StopRequest(what)

    def handler(signum: int, frame: Any) -> None:
        if stop.signum is None:
            stop.signum = signum
            interrupt(stop.reason)
        if stop.breaks_waits:  # once: the caller's own clean-up runs unbroken
            stop.breaks_waits = False
            raise StopWaiting(stop.reason)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
