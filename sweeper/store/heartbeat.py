"""Is anyone still running this trial? A sweep beats a heartbeat (a trial attribute, so every
storage hears it: RDB and journal alike) while its trial waits for the machine and runs; a
RUNNING trial nobody beats for is an orphan, failed by the next sweep of the study, on any host.
On the sweep's own host the answer is quicker: its process is gone."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from optuna.trial import FrozenTrial, TrialState

from .record import TrialAttrs, TrialRecord
from .study import StoredStudy

HEARTBEAT_S = 30
# a RUNNING trial with no heartbeat for this long is failed by the next sweep, on any host
GRACE_S = 120
DIED = "its sweep process died"
SILENT = "its sweep stopped sending heartbeats (killed, or its host went down)"


@contextlib.contextmanager
def heartbeat(stored: StoredStudy, number: int | None, interval_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Beat for trial `number` while inside (nothing for None: a confirmation run)."""
    if number is None:
        yield
        return
    trial_id = stored.trial_id(number)
    stop = threading.Event()
    # a beat missed in an outage is missed, not waited out: the sweep's own calls wait for it
    storage = getattr(stored.storage, "inner", stored.storage)

    def beat() -> None:
        while True:
            try:
                for key, value in TrialAttrs.heartbeat(time.time()).items():
                    storage.set_trial_user_attr(trial_id, key, value)
            except Exception:  # noqa: BLE001 - a missed beat must not stop a measurement
                pass
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def orphans(
    trials: Sequence[FrozenTrial],
    *,
    host: str,
    now: float,
    alive: Callable[[int, float | None], bool],
    told: Callable[[str], bool] = lambda job: True,
    grace_s: float = GRACE_S,
) -> list[tuple[FrozenTrial, str]]:
    """RUNNING trials with no live sweep behind them, each with why (pure). On the sweep's own
    host a dead process is enough, unless the trial's scheduler job is one whose state nobody
    here can tell (`told` says False): then, as on other hosts, only GRACE_S without a beat. A
    queued point claimed by a sweep that died before it wrote its owner names its claimant."""
    found = []
    for t in trials:
        if t.state != TrialState.RUNNING:
            continue
        record = TrialRecord.of(t)
        claimant = record.claimed_by if record.host is None else None
        if claimant is not None and claimant.host == host and not alive(claimant.pid, claimant.started):
            found.append((t, DIED))  # killed as it took the point from the queue
            continue
        if (
            record.host == host
            and record.sweeper_pid is not None
            and (record.scheduler_job is None or told(record.scheduler_job))
        ):
            if not alive(record.sweeper_pid, record.sweeper_started):
                found.append((t, DIED))
            continue
        last = record.heartbeat_at or (t.datetime_start.timestamp() if t.datetime_start else None)
        if last is not None and now - last > grace_s:
            found.append((t, SILENT))
    return found


def process_started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def process_alive(pid: int, started: float | None) -> bool:
    """The process that ran the trial is still alive (not merely its pid, reused after a reboot)."""
    now = process_started(pid)
    return now is not None and (started is None or abs(now - float(started)) < 1.0)
