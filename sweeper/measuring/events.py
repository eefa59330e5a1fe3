"""The measuring child's side of the event pipe (sweeper.protocol): JSON lines to the parent."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from ..protocol import EVENT_FD_ENV, WINDOW_EVENT, WINDOW_RATE


class Events:
    """JSON lines to the parent: on the inherited fd $SWEEPER_EVENT_FD, or on `path` (a rank
    opens the launcher's pipe by its /proc path), else on stdout."""

    def __init__(self, path: str | None = None) -> None:
        fd = os.environ.get(EVENT_FD_ENV)
        self._out: TextIO
        if path is not None:
            self._out = open(path, "w", buffering=1)
            if path != os.devnull:  # the fd loader workers let go of (loader.start_worker)
                os.environ[EVENT_FD_ENV] = str(self._out.fileno())
        else:
            self._out = os.fdopen(int(fd), "w", buffering=1) if fd else sys.stdout

    def send(self, **event: Any) -> None:
        self._out.write(json.dumps(event, default=str) + "\n")
        self._out.flush()

    def phase(self, name: str) -> None:
        self.send(event="phase", phase=name)

    def window(self, index: int, rate: float) -> None:
        """Window `index` (from 0) measured, at `rate` samples/s."""
        self.send(**{"event": WINDOW_EVENT, "phase": f"window {index + 1}", "index": index, WINDOW_RATE: rate})
