"""Peak memory of a run: RSS of the process plus its DataLoader workers, sampled in a thread."""

from __future__ import annotations

import resource
import threading

import psutil


def tree_rss_bytes(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


class PeakRSS:
    """Samples the process tree's RSS every `interval_s`. RSS double-counts pages forked
    workers share with the parent, so the figure is an upper bound of what the run needs."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self._proc = psutil.Process()
        self._interval = interval_s
        self._stop = threading.Event()
        self.peak_bytes = 0
        self.peak_workers = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(self._proc))
        try:
            self.peak_workers = max(self.peak_workers, len(self._proc.children(recursive=True)))
        except psutil.NoSuchProcess:
            pass

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        self.peak_bytes = max(self.peak_bytes, own_peak)
