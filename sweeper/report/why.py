"""The report's "why": where a trial's step time goes, and what the evidence says to try (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from ..knobs import Knob
from ..measurement import DATA_BOUND_THRESHOLD
from ..store.record import TrialRecord

# within this of the threshold, a verdict is called borderline
BORDERLINE = 0.03
# waiting below this share of the step: the loader is out of the picture
NEAR_ZERO = 0.05
# the compute-only bound this far above the full pipeline: the data path is the limit
FAR_ABOVE = 0.5


@dataclass(frozen=True)
class StepBreakdown:
    """Where one step's time goes, for the 'why' section."""

    label: str
    number: int
    step_ms: float
    wait_ms: float
    compute_ms: float
    wait_fraction: float
    verdict: str
    compute_bound_samples_per_sec: float | None
    data_path_cost: float | None  # the measurement's: the share of the compute-only rate the data path costs
    samples_per_sec: float
    utilization: str  # what top and nvidia-smi would have shown during the windows; "" if not recorded
    level: tuple[float, int] | None = None  # measured more than once: the mean of its runs, and their count


def verdict(
    wait: float,
    *,
    workers: int | None = None,
    cores: int | None = None,
    data_path_cost: float | None = None,
    ranks: int = 1,
) -> str:
    """What the measured split says, and what would change it, from this trial's own evidence.
    `workers` are each rank's loader workers: with data-parallel ranks, every rank has as many,
    so the loader processes on the machine are ranks x workers."""
    borderline = abs(wait - DATA_BOUND_THRESHOLD) < BORDERLINE
    edge = f" (borderline: the line is {DATA_BOUND_THRESHOLD:.0%})" if borderline else ""
    if wait > DATA_BOUND_THRESHOLD:
        said = f"data-bound: {wait:.0%} of each step waits for the next batch{edge}"
        n, per_rank = (workers or 0) * ranks, f"{workers} for each of {ranks} ranks" if ranks > 1 else ""
        if workers is not None and cores is not None and n >= cores:
            counted = f"{n} loader workers" + (f" ({per_rank})" if per_rank else "")
            return (
                f"{said}; the {counted} already match the {cores} cores, so more would compete with compute: "
                "make each sample cheaper (a cheaper transform, decoded samples cached)"
            )
        each = f", {per_rank}" if per_rank else ""
        if data_path_cost is not None and data_path_cost >= FAR_ABOVE:
            more = f", or more workers ({n} of {cores} cores{each})" if workers is not None and cores else ""
            return (
                f"{said}; a batch held in memory runs {1 / (1 - data_path_cost):.1f}x faster, so the data path "
                f"is the limit: a cheaper per-sample transform or cached decoded samples{more}"
            )
        used = f" ({n} now{each}, {cores} cores)" if workers is not None and cores else ""
        return f"{said}; more loader workers{used} or a cheaper per-sample transform would help"
    if wait < NEAR_ZERO:
        return (
            f"compute-bound: the loader keeps up ({wait:.0%} of each step waits); the step itself decides: "
            "precision, batch size, channels_last or compile"
        )
    return (
        f"compute-bound{edge}: the loader mostly keeps up ({wait:.0%} of each step waits); precision, "
        "channels_last, compile or a bigger batch change the step itself"
    )


def breakdown(label: str, number: int, record: TrialRecord) -> StepBreakdown | None:
    """Where trial `number`'s step time goes (None: it has no step time to split)."""
    measured = record.measurement
    if measured is None or not measured.throughput.samples_per_sec or not measured.timing.step_time_p50_ms:
        return None
    figures, timing = measured.throughput, measured.timing
    knobs = record.knobs or {}
    batch = knobs.get(Knob.LOADER_BATCH_SIZE)
    wait = timing.waiting_share
    # mean step time from throughput when the batch is known, else the median step
    step_ms = 1e3 * batch / figures.samples_per_sec if batch else timing.step_time_p50_ms
    # the workers the trial asked for; the processes counted under it also hold a fork server's
    # or spawn's helpers, so they are the fallback only
    workers = knobs.get(Knob.LOADER_NUM_WORKERS, measured.memory.dataloader_processes)
    cores = record.fingerprint.cpus_available if record.fingerprint is not None else None
    text = verdict(
        wait,
        workers=int(workers) if workers is not None else None,
        cores=cores,
        data_path_cost=figures.data_path_cost,
        ranks=int(knobs.get(Knob.DIST_NPROC_PER_NODE) or 1),
    )
    return StepBreakdown(
        label=label,
        number=number,
        step_ms=step_ms,
        wait_ms=step_ms * wait,
        compute_ms=step_ms * (1 - wait),
        wait_fraction=wait,
        verdict=text,
        compute_bound_samples_per_sec=figures.compute_bound_samples_per_sec,
        data_path_cost=figures.data_path_cost,
        samples_per_sec=figures.samples_per_sec,
        utilization=measured.utilization.describe(timing.device_busy_fraction),
    )
