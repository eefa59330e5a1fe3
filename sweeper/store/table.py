"""The trials of a study as one table (pandas): written as trials.csv/trials.parquet by the
sweep and shown, a selection of its columns, in the report. One row per trial: its number,
state, status and reason, every knob (`group.key` columns), every stored figure, the machine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from optuna.trial import FrozenTrial

from .record import TrialRecord
from .trials import config_of

# the fingerprint's columns, prefixed fp_
FINGERPRINT_COLUMNS = ("hostname", "cpu", "cpus_available", "gpu", "torch", "cuda")
# the columns before the knobs, in order
LEADING = ("number", "state", "status", "reason", "baseline", "reused_from")


def trial_row(trial: FrozenTrial) -> dict[str, Any]:
    record = TrialRecord.of(trial)
    row: dict[str, Any] = {
        "number": trial.number,
        "state": trial.state.name,
        "status": record.status.value if record.status is not None else None,
        "reason": record.reason,
        "baseline": record.baseline,
        "reused_from": record.reused_from,
    }
    row.update(config_of(trial))
    row.update(record.figures)
    fingerprint = record.fingerprint.to_dict() if record.fingerprint is not None else {}
    row.update({f"fp_{k}": fingerprint.get(k) for k in FINGERPRINT_COLUMNS})
    row["hardware_class"] = record.hardware_class
    row["fixed_overrides"] = " ".join(record.fixed_overrides)
    row["sweep_dir"] = record.sweep_dir
    row["borrowed_from"] = record.borrowed_from
    row["scheduler_job"] = record.scheduler_job
    row["queue_wait_s"] = record.queue_wait_s
    row["duration_s"] = trial.duration.total_seconds() if trial.duration else None
    return row


def trials_frame(trials: Sequence[FrozenTrial]) -> pd.DataFrame:
    """Every trial, ordered by number, values as stored (Python objects: a knob set to null is
    None, a column a trial lacks is NaN); write_table gives the columns their types."""
    return pd.DataFrame(
        [trial_row(t) for t in sorted(trials, key=lambda t: t.number)],
        columns=None if trials else list(LEADING),
        dtype=object,
    )


def knob_columns(frame: pd.DataFrame) -> list[str]:
    """The knobs' columns (`loader.batch_size`, `backend.threads`, ...), sorted."""
    return sorted(c for c in frame.columns if "." in c)


PARQUET_MISSING = "trials.parquet not written: pip install 'torch-sweeper[parquet]' (pyarrow) for it"


def parquet_available() -> bool:
    """Whether pandas can write Parquet here (pyarrow is the `[parquet]` extra)."""
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def write_table(frame: pd.DataFrame, out_dir: Any) -> None:
    """trials.csv, and trials.parquet where pyarrow is installed; each column with the type its
    values share."""
    frame = frame.infer_objects()
    frame["reused_from"] = frame["reused_from"].astype("Int64")
    frame.to_csv(out_dir / "trials.csv", index=False)
    if not parquet_available():
        return
    # Parquet needs one type per column: knobs such as threads mix null, ints and strings
    frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object}).to_parquet(
        out_dir / "trials.parquet", index=False
    )
