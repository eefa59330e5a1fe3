"""SIGTERM/SIGINT while measuring: kill the running process group, remember the signal, let
the caller write what was measured and exit 128 + the signal (errors.Interrupted)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import signal_name
from .isolation import interrupt


@dataclass
class StopRequest:
    """Set by the handler; read by whoever decides what to run next."""

    what: str
    signum: int | None = None

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

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
