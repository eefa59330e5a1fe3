"""A study's storage that goes away and comes back: a database restarting in its maintenance
window, a connection dropped, a journal file on a shared filesystem briefly unwritable.

Every call to the storage is retried with backoff for up to 10 minutes (less where the sweep's
budget has less left, but at least half a minute), said once in the log and again when the
storage answers. Past the bound, StorageUnreachable (exit 69) names the
storage and the command that resumes: the run in flight's result waits in its result.json, and the
next sweep of the study reads it (search/unfinished.py). A full disk under an SQLite or journal
file is DiskFull at once (exit 74): waiting frees no space. What the storage itself says about
data (a duplicate study, a finished trial) is never retried.

SQLAlchemy's pool checks a connection before each use (`pool_pre_ping`), so a restarted server's
dead connections are replaced, not handed out; Optuna's own retries cover heartbeats of trials run
under `study.optimize`, which a sweep's ask-and-tell does not use.
"""

from __future__ import annotations

import errno
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import DiskFull, StorageUnreachable, is_disk_full

# how long a sweep waits for its storage to answer again before it stops (seconds): at most this,
# within the sweep's budget, and never less than the floor
BOUND_S, FLOOR_S = 600.0, 30.0
_FIRST_WAIT_S, _LONGEST_WAIT_S = 0.5, 15.0
# SQLAlchemy's (and the DB-API's) words for a server gone or a connection lost
_GONE = {"OperationalError", "InterfaceError", "DisconnectionError", "TimeoutError"}
# an OS's words for a file briefly out of reach on a shared filesystem
_OUT_OF_REACH = {errno.EIO, errno.EAGAIN, errno.ESTALE, errno.ETIMEDOUT, errno.EACCES, errno.EPERM, errno.ENOENT}


def transient(exc: BaseException) -> bool:
    """Whether an error from the storage says it could not be reached (retry), not what it
    holds: a lost connection, a server restarting, a locked SQLite file, a journal out of reach."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ in _GONE:
            return True
        if isinstance(current, OSError) and current.errno in _OUT_OF_REACH:
            return True
        current = current.__cause__ or current.__context__
    return False


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:.0f} s"


def first_line(exc: BaseException) -> str:
    """The error that stands for an outage, in a line: the driver's own words where it gave any."""
    cause = exc.__cause__ or exc.__context__ or exc
    lines = str(cause).splitlines()
    text = re.sub(r"^\([\w.]+\) ", "", " ".join(lines[0].split()) if lines else "")  # SQLAlchemy's "(driver.Error) "
    return f"{type(cause).__name__}: {text[:200]}"


class RetryingStorage:
    """An Optuna storage (any: RDB, cached or not, journal) whose calls ride out an outage.
    `say` tells the log; `resume` is the command that resumes the sweep, for the last line. Until a
    sweep calls ride_out, an error is raised at once (bound 0): a wrong URL is one line, not a wait."""

    def __init__(
        self,
        inner: Any,
        shown: str,
        *,
        bound_s: float = 0.0,
        say: Callable[[str], None] = print,
        resume: Callable[[], str] = lambda: "the same command",
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner, self.shown, self.bound_s = inner, shown, bound_s
        self._say, self._resume, self._sleep, self._clock = say, resume, sleep, clock
        self._down_since: float | None = None
        self._bound_now = 0.0  # the bound of the outage under way
        self._budget_left: Callable[[], float | None] = lambda: None
        self._lock = threading.Lock()

    def ride_out(
        self, say: Callable[[str], None], resume: Callable[[], str], budget_left: Callable[[], float | None]
    ) -> None:
        """From now on, outages are waited out for BOUND_S, or the sweep's `budget_left()` if less
        (at least FLOOR_S), said through `say`; past it the stop names `resume()`, the command
        that goes on."""
        self._say, self._resume, self._budget_left = say, resume, budget_left
        self.bound_s = BOUND_S

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, attr, args, kwargs)

        return call

    def _call(self, name: str, method: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        wait, failed = _FIRST_WAIT_S, False
        while True:
            try:
                result = method(*args, **kwargs)
            except Exception as exc:
                if is_disk_full(exc):
                    raise DiskFull(
                        f"the disk under the study's storage {self.shown} is full ({first_line(exc)}): "
                        "free some space, then run the same command again to go on"
                    ) from exc
                if failed and name == "set_trial_state_values" and type(exc).__name__ == "UpdateFinishedTrialError":
                    return True  # the connection dropped after the storage had stored it
                if not transient(exc) or self.bound_s <= 0:
                    raise
                failed = True
                left = self._down(exc)
                self._sleep(min(wait, left))
                wait = min(2 * wait, _LONGEST_WAIT_S)
                continue
            if failed:
                self._up()
            return result

    def _down(self, exc: BaseException) -> float:
        """Say the outage once; the seconds the sweep may still wait, or StorageUnreachable."""
        now = self._clock()
        with self._lock:
            if self._down_since is None:
                self._down_since, self._bound_now = now, self._outage_bound()
                self._say(
                    f"the study's storage {self.shown} is unreachable ({first_line(exc)}): "
                    f"retrying for up to {_duration(self._bound_now)}"
                )
            since, bound = self._down_since, self._bound_now
        left = bound - (now - since)
        if left <= 0:
            raise StorageUnreachable(
                f"the study's storage {self.shown} has been unreachable for {_duration(bound)} "
                f"({first_line(exc)}); nothing measured is lost (a run's result waits in its result.json): "
                f"once it is back, run {self._resume()} to go on"
            ) from exc
        return left

    def _outage_bound(self) -> float:
        left = self._budget_left()
        return self.bound_s if left is None else max(FLOOR_S, min(self.bound_s, left))

    def _up(self) -> None:
        with self._lock:
            if self._down_since is not None:
                self._say(f"the study's storage answers again after {self._clock() - self._down_since:.0f} s")
                self._down_since = None
