"""What sweeper itself runs beside the loop it measures, and what that costs during the windows.

sweeper's own threads in the measuring process (the memory and GPU samplers) start through
`own_thread`, which keeps their ids; `HarnessMonitor` reads their CPU and that of the process
that started the run (the sweep, or `python -m sweeper`) over the windows, through Linux's
per-thread and per-process CPU clocks (nanoseconds, where /proc counts 10 ms ticks). Where the
loop runs in a process of its own (a user's script), the whole measuring process is sweeper's.
On a machine whose cores the loop keeps full, every share of a core sweeper takes is taken from
the loop: result.json's `harness_cpu_pct` says how much that was.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ..measurement import Utilization
from ..protocol import PARENT_PID_ENV

# the native ids of sweeper's own threads in this process, and the CPU seconds of those that ended
_RUNNING: set[int] = set()
_ENDED: dict[int, float] = {}


def own_thread(target: Callable[[], None]) -> threading.Thread:
    """A daemon thread of sweeper's own (not yet started), whose CPU is counted apart from the loop's."""

    def run() -> None:
        tid = threading.get_native_id()
        _RUNNING.add(tid)
        try:
            target()
        finally:
            _RUNNING.discard(tid)
            _ENDED[tid] = time.thread_time()

    return threading.Thread(target=run, daemon=True)


def _clock_s(clock_id: int) -> float:
    try:
        return time.clock_gettime(clock_id)
    except (OSError, AttributeError):  # gone, or no such clock on this OS
        return 0.0


def thread_cpu_s(tid: int) -> float:
    """CPU seconds of a thread of this process (Linux's CPUCLOCK_SCHED, per thread); 0 when gone."""
    return _clock_s((~tid << 3) | 6)


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a process, all its threads (Linux's CPUCLOCK_SCHED, per process); 0 when gone."""
    return _clock_s((~pid << 3) | 2)


def harness_cpu_s(parent: int | None, whole_process: bool = False) -> float:
    """CPU seconds so far of sweeper's own threads here (of this whole process, where the loop
    runs in another) and of the process that started the run."""
    if whole_process:
        here = process_cpu_s(os.getpid())
    else:
        here = sum(thread_cpu_s(tid) for tid in list(_RUNNING)) + sum(_ENDED.values())
    return here + (process_cpu_s(parent) if parent else 0.0)


def run_parent() -> int | None:
    """The process that started this run (protocol.PARENT_PID_ENV); None for a run started by hand."""
    parent = int(os.environ.get(PARENT_PID_ENV) or 0)
    return parent if parent and parent != os.getpid() else None


class HarnessMonitor:
    """harness_cpu_pct over the windows: sweeper's own CPU beside the loop, percent of one core."""

    def __init__(
        self,
        parent: int | None = None,
        *,
        whole_process: bool = False,
        read: Callable[[int | None], float] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._parent = parent if parent is not None else run_parent()
        self._read = read or (lambda parent: harness_cpu_s(parent, whole_process))
        self._clock = clock
        self._start = (0.0, 0.0)

    def start(self) -> None:
        self._start = (self._clock(), self._read(self._parent))

    def stop(self) -> Utilization:
        began, used = self._start
        elapsed = self._clock() - began
        if elapsed <= 0:
            return Utilization()
        return Utilization(harness_cpu_pct=100 * max(0.0, self._read(self._parent) - used) / elapsed)
