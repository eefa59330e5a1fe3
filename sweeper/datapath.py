"""A run's data path in words: the files it read against memory and the page-cache state it began
in, and which of the disk and the decoding limits it (pure: the run's summary and the report
both say these)."""

from __future__ import annotations

from .measurement import RunFacts, Throughput


def data_words(run: RunFacts) -> str | None:
    """'400 files, 44.2 MB against 24.3 GB of memory available: cold, evicted from the page cache
    before the run and each epoch (3% cached as it began)'; None where the workload read no files."""
    if run.page_cache is None:
        return None
    began = {
        "cold": "evicted from the page cache before the run and each epoch",
        "warm": "read into the page cache before the run",
    }.get(run.page_cache, "")
    return (
        f"{run.data_files or 0:,} files, {(run.data_bytes or 0) / 1e6:,.1f} MB against "
        f"{(run.memory_available_bytes or 0) / 1e9:,.1f} GB of memory available: {run.page_cache}, "
        f"{began} ({100 * (run.data_cached_at_start or 0.0):.0f}% cached as it began)"
    )


def ceiling_words(f: Throughput) -> str | None:
    """Which of the disk and the decoding limits the data path, against the run's own figure;
    None where the ceilings were not measured (measure.compute_bound on files)."""
    disk, decode = f.disk_samples_per_sec, f.decode_samples_per_sec
    if disk is None or decode is None:
        return None
    run, mb = f.running_rate, f.disk_mb_per_sec or 0.0
    if disk < decode:
        return (
            f"the disk gives at most {disk:,.0f} samples/s cold ({mb:,.0f} MB/s), and the run reaches "
            f"{run:,.0f} (decoding alone would give {decode:,.0f} with the files cached)"
        )
    return (
        f"decoding, not the disk, is what limits: the loader alone gives {decode:,.0f} samples/s with the "
        f"files cached, the disk {disk:,.0f} cold ({mb:,.0f} MB/s); the run reaches {run:,.0f}"
    )
