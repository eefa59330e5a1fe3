"""The data set's files in the page cache, set the same way before every run (measure.page_cache).

The first run of a sweep would read the files from disk and every later run from the page cache:
the baseline, measured first, would pay alone for the disk, and every speedup over it would be
inflated wherever the disk is slower than the rest of the data path. So each run, the
confirmation's included, starts from one state: `cold`, its files evicted
(posix_fadvise(DONTNEED), after their dirty pages are written: no root needed), as a data set
larger than memory is in every epoch; or `warm`, its files read in first, as a small set is from
its second epoch on. `auto` is cold where the set is larger than the memory the page cache could
hold (MemAvailable, at most the cgroup's memory limit), warm otherwise. The share of its pages
cached when the run began is measured (mincore), so result.json says what each figure stood on,
not only what was asked.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass

from .. import share
from ..config import PageCache
from ..errors import InvalidConfig
from ..validation import check_page_cache


@dataclass(frozen=True)
class CacheState:
    """What the run's data set was against memory, and the state it began in."""

    page_cache: str  # warm | cold
    files: int
    bytes: int
    memory_available_bytes: int
    cached_at_start: float  # the share of the files' pages in the page cache as the run began


def memory_available_bytes() -> int:
    """The memory the page cache could hold: the kernel's estimate of memory available without
    swapping, at most this process's cgroup memory limit (a container's --memory charges the
    cache it reads too)."""
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    try:
        with open("/proc/meminfo") as f:
            found = [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
        available = found[0] if found else available
    except OSError:
        pass
    limit = share.memory_limit_bytes()
    return available if limit is None else min(available, limit)


def chosen(asked: str, data_bytes: int, available_bytes: int) -> str:
    """The state a run begins in: `auto` is cold where the set cannot stay in the page cache."""
    if asked != PageCache.auto:
        return PageCache(asked).value
    return (PageCache.cold if data_bytes > available_bytes else PageCache.warm).value


def evict(paths: Sequence[str]) -> None:
    """Out of the page cache: each file's dirty pages written first (DONTNEED drops clean ones only)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_in(paths: Sequence[str], chunk: int = 1 << 20) -> None:
    """Into the page cache: every byte read once."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(chunk):
                pass


_libc = ctypes.CDLL(None, use_errno=True)


def cached_share(paths: Sequence[str]) -> float:
    """The share of the files' pages in the page cache now: mincore over a private mapping of
    each (mapping reads nothing in; writable only so that ctypes can take its address)."""
    page = mmap.PAGESIZE
    cached = total = 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        pages = (size + page - 1) // page
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            vec = (ctypes.c_ubyte * pages)()
            start = ctypes.c_char.from_buffer(mapped)
            failed = _libc.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), vec)
            del start  # the buffer's export ends before the mapping closes
            if failed:
                raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
            cached += sum(v & 1 for v in vec)
        finally:
            mapped.close()
        total += pages
    return cached / total if total else 1.0


def prepare(asked: str, paths: Sequence[str]) -> CacheState | None:
    """Set the files' state for the run about to begin; None where the workload reads no files
    (then `warm` or `cold`, asked for by name, is a mistake worth one line)."""
    if not paths:
        check_page_cache(asked, reads_files=False, error=InvalidConfig)
        return None
    data_bytes = sum(os.path.getsize(p) for p in paths)
    available = memory_available_bytes()
    state = chosen(asked, data_bytes, available)
    if state == PageCache.cold:
        evict(paths)
    else:
        read_in(paths)
    return CacheState(state, len(paths), data_bytes, available, cached_share(paths))
