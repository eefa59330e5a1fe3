"""summary.json: what one sweep left, as the sweep writes it and the cross-sweep index reads it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..noise import Noise
from .confirmation import Confirmation
from .nights import Night
from .trials import Counts

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class SweepSummary:
    study: str
    storage: str  # the URL without its password
    stopped: str  # why the search stopped
    counts: Counts
    winner: int | None
    baseline: int | None
    confirmation: Confirmation | None
    fixed_overrides: tuple[str, ...]
    workload: str
    hardware_class: str
    machine: str  # the host's name
    command: str | None = None  # the winner's command line
    report: str | None = None  # the report's path
    # the winner's samples/sec, one figure everywhere: the confirmation's median where it ran,
    # else the winner's search run; `winner_figure` says which
    winner_samples_per_sec: float | None = None
    winner_figure: str | None = None  # "confirmed median" | "search run"
    # of counts.measured, those that began since this sweep did (a rerun of a stopped study: 0);
    # None in the summary of an earlier version
    measured_since_start: int | None = None
    # the run-to-run noise every decision read, as the sweep ended (None in an earlier version's)
    noise: Noise | None = None
    # the watched night this sweep began with (hydra.sweeper.watch; None: not watched)
    night: Night | None = None

    @staticmethod
    def winner_figure_of(
        confirmation: Confirmation | None, search_run: float | None
    ) -> tuple[float | None, str | None]:
        if confirmation is not None and confirmation.winner_samples_per_sec is not None:
            return confirmation.winner_samples_per_sec, "confirmed median"
        return (search_run, "search run") if search_run is not None else (None, None)

    @property
    def best_samples_per_sec(self) -> float | None:
        return self.confirmation.winner_samples_per_sec if self.confirmation is not None else None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("counts", "confirmation", "night")}
        out["fixed_overrides"] = list(self.fixed_overrides)
        out.update(dataclasses.asdict(self.counts))
        out["confirmation"] = self.confirmation.to_json() if self.confirmation is not None else None
        out["noise"] = self.noise.to_json() if self.noise is not None else None
        out["night"] = self.night.to_json() if self.night is not None else None
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SweepSummary:
        """From summary.json (one of an earlier sweep may lack counts added since: 0)."""
        values: dict[str, Any] = {f.name: d.get(f.name) for f in dataclasses.fields(cls)}
        conf = values["confirmation"]
        return cls(
            **{
                **values,
                "counts": Counts(**{f.name: int(d.get(f.name) or 0) for f in dataclasses.fields(Counts)}),
                "confirmation": Confirmation.from_json(conf) if conf else None,
                "noise": Noise(**values["noise"]) if values["noise"] else None,
                "night": Night.from_json(values["night"]) if values["night"] else None,
                "fixed_overrides": tuple(values["fixed_overrides"] or ()),
            }
        )

    def write(self, directory: Path) -> None:
        (directory / SUMMARY_FILE).write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")

    @classmethod
    def read(cls, path: Path) -> SweepSummary:
        return cls.from_json(json.loads(path.read_text()))
