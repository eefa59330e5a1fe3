"""The report's "why": where a trial's step time goes, and what the evidence says to try (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import FrozenTrial

from ..result import DATA_BOUND_THRESHOLD, TrialRecord, waiting_share
from ..store.trials import config_of

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
    samples_per_sec: float
    utilization: str  # what top and nvidia-smi would have shown during the windows; "" if not recorded


def utilization_text(metrics: dict) -> str:
    """CPU use of the run and its workers (percent of one core, as top), the device's busy share
    from step events, and NVML's GPU-Util, memory-controller use and power against the cap."""
    parts = []
    if metrics.get("cpu_util_main_pct") is not None:
        parts.append(f"CPU {metrics['cpu_util_main_pct']:.0f}% in the training process, "
                     f"{metrics.get('cpu_util_workers_pct', 0.0):.0f}% in loader workers (100% = one core)")
    if metrics.get("device_busy_fraction") is not None:
        parts.append(f"device busy {metrics['device_busy_fraction']:.0%} of the time")
    if metrics.get("gpu_util_pct") is not None:
        gpu = f"GPU-Util {metrics['gpu_util_pct']:.0f}%, memory controller {metrics.get('gpu_mem_util_pct', 0.0):.0f}%"
        if metrics.get("gpu_power_w") is not None:
            gpu += f", {metrics['gpu_power_w']:.0f} W"
            gpu += f" of a {metrics['gpu_power_cap_w']:.0f} W cap" if metrics.get("gpu_power_cap_w") else ""
        parts.append(gpu)
    return "; ".join(parts)


def verdict(wait: float, *, workers: int | None = None, cores: int | None = None,
            data_path_cost: float | None = None) -> str:
    """What the measured split says, and what would change it, from this trial's own evidence."""
    borderline = abs(wait - DATA_BOUND_THRESHOLD) < BORDERLINE
    edge = f" (borderline: the line is {DATA_BOUND_THRESHOLD:.0%})" if borderline else ""
    if wait > DATA_BOUND_THRESHOLD:
        said = f"data-bound: {wait:.0%} of each step waits for the next batch{edge}"
        if workers is not None and cores is not None and workers >= cores:
            return (f"{said}; the {workers} loader workers already match the {cores} cores, so more would compete "
                    "with compute: make each sample cheaper (a cheaper transform, decoded samples cached)")
        if data_path_cost is not None and data_path_cost >= FAR_ABOVE:
            more = f", or more workers ({workers} of {cores} cores)" if workers is not None and cores else ""
            return (f"{said}; a batch held in memory runs {1 / (1 - data_path_cost):.1f}x faster, so the data path "
                    f"is the limit: a cheaper per-sample transform or cached decoded samples{more}")
        used = f" ({workers} now, {cores} cores)" if workers is not None and cores else ""
        return f"{said}; more loader workers{used} or a cheaper per-sample transform would help"
    if wait < NEAR_ZERO:
        return (f"compute-bound: the loader keeps up ({wait:.0%} of each step waits); the step itself decides: "
                "precision, batch size, channels_last or compile")
    return (f"compute-bound{edge}: the loader mostly keeps up ({wait:.0%} of each step waits); precision, "
            "channels_last, compile or a bigger batch change the step itself")


def breakdown(label: str, trial: FrozenTrial) -> StepBreakdown | None:
    record = TrialRecord.of(trial)
    metrics = record.metrics
    sps, host_wait = metrics.get("samples_per_sec"), metrics.get("data_wait_fraction")
    batch = config_of(trial).get("loader.batch_size") or metrics.get("batch_size")
    if not sps or host_wait is None:
        return None
    wait = waiting_share(host_wait, metrics.get("device_busy_fraction"))
    # mean step time from throughput when the batch is known, else the median step
    step_ms = 1e3 * batch / sps if batch else float(metrics.get("step_time_p50_ms", 0.0))
    # the workers the trial asked for; the processes counted under it also hold a fork server's
    # or spawn's helpers, so they are the fallback only
    workers = config_of(trial).get("loader.num_workers", metrics.get("dataloader_processes"))
    text = verdict(wait, workers=int(workers) if workers is not None else None,
                   cores=record.fingerprint.get("cpus_available"), data_path_cost=metrics.get("data_path_cost"))
    return StepBreakdown(
        label=label, number=trial.number, step_ms=step_ms, wait_ms=step_ms * wait,
        compute_ms=step_ms * (1 - wait), wait_fraction=wait, verdict=text,
        compute_bound_samples_per_sec=metrics.get("compute_bound_samples_per_sec"), samples_per_sec=sps,
        utilization=utilization_text(metrics),
    )
