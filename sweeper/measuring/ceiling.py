"""The ceilings of a data path on files, beside the compute-only bound (measure.compute_bound):
what the files alone give, read cold by as many threads as the run has loader workers, and what
the loader alone gives with the files in the page cache (decoding, transforms, collation: the run
without its step). The run's own figure against the two says which one limits it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import page_cache


@dataclass(frozen=True)
class Ceilings:
    disk_samples_per_sec: float
    disk_mb_per_sec: float
    decode_samples_per_sec: float


def _read(path: str) -> int:
    with open(path, "rb", buffering=0) as f:
        return len(f.read())


def disk_rate(files: Sequence[str], readers: int, seconds: float) -> tuple[float, float]:
    """(bytes/s, files/s) reading whole files cold, `readers` at once, for about `seconds` or
    until every file was read once."""
    page_cache.evict(files)
    done_bytes = done_files = 0
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=readers) as pool:
        for start in range(0, len(files), 4 * readers):
            sizes = list(pool.map(_read, files[start : start + 4 * readers]))
            done_bytes, done_files = done_bytes + sum(sizes), done_files + len(sizes)
            if time.perf_counter() - began >= seconds:
                break
    elapsed = max(1e-9, time.perf_counter() - began)
    return done_bytes / elapsed, done_files / elapsed


def loader_rate(next_batch: Callable[[], Any], samples_of: Callable[[Any], int], seconds: float) -> float:
    """samples/s of the loader alone: batches taken and dropped, no step, after one to start."""
    next_batch()
    samples, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        samples += samples_of(next_batch())
    return samples / max(1e-9, time.perf_counter() - began)


def measure(
    files: Sequence[str],
    stored_samples: int,
    readers: int,
    seconds: float,
    next_batch: Callable[[], Any],
    samples_of: Callable[[Any], int],
) -> Ceilings:
    """Both ceilings: the loader's with the files read in first, then the disk's, cold (the
    files' bytes per stored sample turn bytes/s into samples/s)."""
    page_cache.read_in(files)
    decode = loader_rate(next_batch, samples_of, seconds)
    per_second, _ = disk_rate(files, readers, seconds)
    data_bytes = sum(os.path.getsize(f) for f in files)
    per_sample = data_bytes / max(1, stored_samples)
    return Ceilings(per_second / per_sample, per_second / 1e6, decode)
