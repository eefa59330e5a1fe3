"""Peak memory of a run: RSS of the process plus its DataLoader workers, sampled in a thread.

The sampler must not slow the run it measures: psutil's children() scans every process in
/proc while holding the GIL (measured: -10% samples/sec at 20 samples a second). On Linux we
read the kernel's own child lists and statm instead, a few small reads per sample.
"""

from __future__ import annotations

import os
import resource
import threading

import psutil

from .. import procs
from .harness import own_thread

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree(pid: int) -> list[int]:
    """pid and all its descendants (a process that is gone has none)."""
    if not os.path.exists("/proc/self/task"):  # not Linux: psutil, slower but correct
        try:
            return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            return [pid]
    return procs.tree(pid)


def tree_rss_bytes(pid: int) -> tuple[int, int]:
    """(RSS of pid and its descendants, number of descendants)."""
    pids = tree(pid)
    if os.path.exists(f"/proc/{pid}/statm"):
        return sum(_rss(p) for p in pids), len(pids) - 1
    total = 0
    for p in pids:
        try:
            total += psutil.Process(p).memory_info().rss
        except psutil.Error:
            pass
    return total, len(pids) - 1


# how often the tree's RSS is read: a sample costs its thread about 0.4 ms of a core on a VM
# (the wake-up more than the reads), 0.2% at five a second, beside a loop that may keep every
# core busy (benchmarks/script_harness.py); a training loop's memory holds its level from step to
# step, so two samples a second over windows of seconds still find its peak
SAMPLE_S = 0.5


class PeakRSS:
    """Samples the process tree's RSS every `interval_s` (this process's, or `pid`'s: a script's);
    this process's own peak comes exactly from getrusage. RSS counts pages forked workers share
    with the parent in each of them, so the figure is an upper bound of what the run needs."""

    def __init__(self, interval_s: float = SAMPLE_S, pid: int | None = None) -> None:
        self._pid = pid or os.getpid()
        self._own = self._pid == os.getpid()
        self._interval = interval_s
        self._stop = threading.Event()
        self.peak_bytes = 0
        self.peak_workers = 0
        self.peak_threads = 0  # of the measuring process itself: its thread pools as they ran
        self._thread = own_thread(self._run)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        total, workers = tree_rss_bytes(self._pid)
        self.peak_bytes = max(self.peak_bytes, total)
        self.peak_workers = max(self.peak_workers, workers)
        try:
            self.peak_threads = max(self.peak_threads, len(os.listdir(f"/proc/{self._pid}/task")))
        except OSError:
            pass

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        if self._own:  # this process's exact peak (another's is known by sampling only)
            own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            self.peak_bytes = max(self.peak_bytes, own_peak)
