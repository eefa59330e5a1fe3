"""A study's nights: what each watched night measured and decided, kept in the study's storage
(one study attribute per night, so that hosts sharing a PostgreSQL or journal study never
overwrite each other's), and read back as the history the report and the index draw."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna

from ..choice import Choice
from ..machine import Fingerprint
from .study import sibling_names

_PREFIX = "night:"


class Outcome(Choice):
    """What a watched night found, each with its own exit code (sweeper.errors)."""

    holds = "holds"  # the same fingerprint, neither figure faster or slower than the stored confirmation's by the test
    drifted = "drifted"  # the same fingerprint, the winner or the baseline faster or slower by the test
    changed = "changed"  # the fingerprint changed in a fact that decides speed
    first = "first"  # nothing confirmed to watch yet: the night tuned


@dataclass(frozen=True)
class Night:
    """One night as the study keeps it: when, on what, what it measured against what it compared
    with, and what it decided. Figures are samples/sec: each round's, and the medians."""

    started_at: float  # epoch seconds
    outcome: Outcome
    fingerprint: Fingerprint
    # the study whose confirmation the night compared with (this one, or the study of the
    # nearest earlier fingerprint), and its figures there: the confirmed medians
    reference: str | None = None
    winner_knobs: dict[str, Any] = field(default_factory=dict)
    baseline_knobs: dict[str, Any] = field(default_factory=dict)
    winner_before: float | None = None
    baseline_before: float | None = None
    # tonight's runs of the watched winner and of the baseline, side by side (None: a failed run)
    winner_runs: list[float | None] = field(default_factory=list)
    baseline_runs: list[float | None] = field(default_factory=list)
    words: str = ""  # the log's sentence: what moved, by how much, or what changed
    changes: list[str] = field(default_factory=list)  # the fingerprint's differences, deciding first
    # after a re-tune: whether the watched winner is still the winner, and the new confirmed figure
    still_winner: bool | None = None
    winner_after: float | None = None

    @property
    def winner_now(self) -> float | None:
        return _median(self.winner_runs)

    @property
    def baseline_now(self) -> float | None:
        return _median(self.baseline_runs)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        d["fingerprint"] = self.fingerprint.to_dict()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Night:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in d.items() if k in known}
        return cls(
            **{
                **values,
                "outcome": Outcome(values["outcome"]),
                "fingerprint": Fingerprint.from_dict(values.get("fingerprint")),
            }
        )


def _median(runs: Sequence[float | None]) -> float | None:
    done = [r for r in runs if r]
    return statistics.median(done) if done else None


def _key(fixed: Sequence[str], started_at: float) -> str:
    return f"{_PREFIX}{json.dumps(list(fixed))}:{started_at:.3f}"


def save_night(study: optuna.Study, fixed: Sequence[str], night: Night) -> None:
    study.set_user_attr(_key(fixed, night.started_at), night.to_json())


def study_nights(study: optuna.Study, fixed: Sequence[str]) -> list[Night]:
    """The nights of one setup (fixed overrides) in a study, oldest first."""
    return nights_of(study.user_attrs, fixed)


def nights_of(attrs: Mapping[str, Any], fixed: Sequence[str]) -> list[Night]:
    """The nights of one setup (fixed overrides) among a study's attributes, oldest first."""
    mine = f"{_PREFIX}{json.dumps(list(fixed))}:"
    nights = [Night.from_json(v) for k, v in attrs.items() if k.startswith(mine) and isinstance(v, dict)]
    return sorted(nights, key=lambda n: n.started_at)


def history(storage: Any, study_name: str, fixed: Sequence[str]) -> list[tuple[str, Night]]:
    """Every night of this setup in the study and in its siblings (the same study on other
    hardware classes), oldest first, each with its study: a study's history runs on across the
    fingerprint changes that start a new study."""
    found = []
    for name in [study_name, *sibling_names(storage, study_name)]:
        study = optuna.load_study(study_name=name, storage=storage)
        found += [(name, n) for n in study_nights(study, fixed)]
    return sorted(found, key=lambda pair: pair[1].started_at)
