"""A study in its storage, through Optuna's public API: create or load it, write attributes on
a trial by number, fail a trial with its reason."""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, check_distribution_compatibility, distribution_to_json
from optuna.trial import FrozenTrial, TrialState

from ..result import Status
from .confirmation import Confirmation
from .record import TrialAttrs, TrialRecord
from .storage import open_storage
from .trials import current, of_setup

# study attributes: spelled here only (trial attributes: sweeper.store.record.TrialRecord)
_OBJECTIVES, _HARDWARE_CLASS = "objectives", "hardware_class"
_WORKLOAD, _MACHINE, _BASELINE, _WINNER = "workload", "machine", "baseline_trial", "winner_trial"
# the winner's one figure, which it is, and the confirmed speedup (summary.json says the same)
_WINNER_FIGURE, _WINNER_FIGURE_OF, _SPEEDUP = "winner_samples_per_sec", "winner_figure", "confirmed_speedup"


@dataclass(frozen=True)
class SweepSpan:
    """A setup's latest sweep as its study keeps it: when it started and ended (epoch seconds;
    ended None while it runs), why its search stopped, and the trial it chose as the winner (a
    report written later shows the same one; None: none, or a sweep of an earlier version)."""

    started_at: float
    ended_at: float | None = None
    stopped_because: str | None = None
    winner_trial: int | None = None
    # the run-to-run noise the sweep's decisions read at its end (relative sigma, sweeper.noise)
    noise: float | None = None
    # the limits it held the figures to (hydra.sweeper.constraints): figure -> limit
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def wall_s(self) -> float | None:
        return self.ended_at - self.started_at if self.ended_at is not None else None


@dataclass
class StoredStudy:
    study: optuna.Study
    storage: Any  # the optuna storage object the study was opened on

    @classmethod
    def open(
        cls, url: str, name: str, *, directions: Sequence[str] | None = None, sampler: Any = None, create: bool = True
    ) -> StoredStudy:
        storage = open_storage(url)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if create:
            study = optuna.create_study(
                storage=storage,
                sampler=sampler,
                study_name=name,
                directions=[optuna.study.StudyDirection[d.upper()] for d in directions or ["maximize"]],
                load_if_exists=True,
            )
        else:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        return cls(study, storage)

    @property
    def name(self) -> str:
        return self.study.study_name

    @cached_property
    def study_id(self) -> int:
        return self.storage.get_study_id_from_name(self.name)

    def trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def trials(self, fixed: Sequence[str] | None = None) -> list[FrozenTrial]:
        """The study's trials (of one setup, since it last started afresh), a trial recovered
        later standing for the one it replaces."""
        every = current(self.study.get_trials(deepcopy=False))
        if fixed is None:
            return every
        first = first_trial(self.study, fixed)
        return [t for t in of_setup(every, fixed) if t.number >= first]

    def stand_in(self, failed: FrozenTrial) -> optuna.Trial:
        """A new running trial with a failed trial's params and attributes, to be told the
        result its job wrote late (a finished trial cannot be told again)."""
        template = optuna.trial.create_trial(
            state=TrialState.RUNNING,
            params=failed.params,
            distributions=failed.distributions,
            user_attrs={**failed.user_attrs, **TrialAttrs.recovered(failed.number)},
        )
        return optuna.Trial(self.study, self.study._storage.create_new_trial(self.study_id, template_trial=template))

    def trial(self, number: int) -> FrozenTrial:
        return self.storage.get_trial(self.trial_id(number))

    def set_attrs(self, number: int, attrs: Mapping[str, Any]) -> None:
        trial_id = self.trial_id(number)
        for key, value in attrs.items():
            self.storage.set_trial_user_attr(trial_id, key, value)

    # ---- study attributes: what the sweep stores beside the trials ----
    @staticmethod
    def _confirmation_key(fixed: Sequence[str]) -> str:
        return f"confirmation:{json.dumps(list(fixed))}"

    def save_confirmation(self, fixed: Sequence[str], decision: Confirmation) -> None:
        self.study.set_user_attr(self._confirmation_key(fixed), decision.to_json())

    def confirmation(self, fixed: Sequence[str]) -> Confirmation | None:
        """The interleaved confirmation of this setup's last sweep."""
        stored = self.study.user_attrs.get(self._confirmation_key(fixed))
        return Confirmation.from_json(stored) if stored else None

    @staticmethod
    def _span_key(fixed: Sequence[str]) -> str:
        return f"sweep:{json.dumps(list(fixed))}"

    def save_sweep_span(self, fixed: Sequence[str], span: SweepSpan) -> None:
        self.study.set_user_attr(self._span_key(fixed), asdict(span))

    def sweep_span(self, fixed: Sequence[str]) -> SweepSpan | None:
        """This setup's latest sweep, as save_sweep_span kept it (None: no sweep yet)."""
        stored = self.study.user_attrs.get(self._span_key(fixed))
        if not isinstance(stored, dict) or "started_at" not in stored:
            return None
        ended, why, winner, noise = (
            stored.get(key) for key in ("ended_at", "stopped_because", "winner_trial", "noise")
        )
        limits = {str(k): float(v) for k, v in (stored.get("constraints") or {}).items()}
        return SweepSpan(float(stored["started_at"]), ended, why, winner, noise, limits)

    def describe(
        self, objectives: Sequence[str], hardware_class: str, *, workload: str = "", machine: str = ""
    ) -> None:
        """What the study is, where Optuna's tools show it: the objectives' names (optuna-dashboard's
        axes) and, as study attributes, the workload, the hardware class and the machine."""
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and what the dashboard reads
            warnings.simplefilter("ignore")
            self.study.set_metric_names(list(objectives))
        self.study.set_user_attr(_OBJECTIVES, list(objectives))
        self.study.set_user_attr(_HARDWARE_CLASS, hardware_class)
        if workload:
            self.study.set_user_attr(_WORKLOAD, workload)
        if machine:
            self.study.set_user_attr(_MACHINE, machine)

    def save_outcome(
        self,
        baseline: int | None,
        winner: int | None,
        samples_per_sec: float | None = None,
        figure: str | None = None,
        speedup: float | None = None,
    ) -> None:
        """The last sweep's baseline and winner trials, and the winner's one figure (the
        confirmed median, or its search run, said which), as study attributes: what
        optuna-dashboard shows beside the trials."""
        self.study.set_user_attr(_BASELINE, baseline)
        self.study.set_user_attr(_WINNER, winner)
        self.study.set_user_attr(_WINNER_FIGURE, round(samples_per_sec) if samples_per_sec else None)
        self.study.set_user_attr(_WINNER_FIGURE_OF, figure)
        self.study.set_user_attr(_SPEEDUP, round(speedup, 2) if speedup is not None else None)

    def outcome(self) -> tuple[int | None, float | None]:
        """The last sweep's winner trial and confirmed speedup, as save_outcome stored them."""
        return self.study.user_attrs.get(_WINNER), self.study.user_attrs.get(_SPEEDUP)

    def last_winner(self) -> int | None:
        """The winner trial of the study's last sweep (None: no sweep has ended with one)."""
        return self.study.user_attrs.get(_WINNER)

    def objectives(self, default: Sequence[str]) -> list[str]:
        """The figures the study's values are, in order (a study made elsewhere: `default`)."""
        return list(self.study.user_attrs.get(_OBJECTIVES, default))

    def fail(self, number: int, status: Status, reason: str) -> None:
        """End a RUNNING trial as failed, with why."""
        self.set_attrs(number, TrialAttrs.ended(status, reason))
        self.study.tell(number, state=TrialState.FAIL)


def _afresh_key(fixed: Sequence[str]) -> str:
    return f"afresh:{json.dumps(list(fixed))}"


def start_afresh(stored: StoredStudy, fixed: Sequence[str]) -> int:
    """From now on this setup's figures are the trials numbered from here, and no confirmation
    stands: the machine drifted, and the older figures no longer say how fast it runs. They stay
    in the study, where the sampler learns from them (a warm start), but no ranking, reuse or
    report reads them. Returns the first trial number of the fresh start."""
    first = len(stored.study.get_trials(deepcopy=False))
    stored.study.set_user_attr(_afresh_key(fixed), first)
    stored.study.set_user_attr(StoredStudy._confirmation_key(fixed), None)
    return first


def first_trial(study: optuna.Study, fixed: Sequence[str]) -> int:
    """The first trial number of this setup's figures (0: every trial; see start_afresh)."""
    return int(study.user_attrs.get(_afresh_key(fixed)) or 0)


def space_conflict(
    trials: Sequence[FrozenTrial], space: Mapping[str, BaseDistribution]
) -> tuple[str, BaseDistribution, BaseDistribution] | None:
    """The first knob of `space` that the study's trials hold under a distribution Optuna does not
    let a study mix with the space's (other choices, another kind): (knob, the study's, the
    space's); None when every knob fits. A base config with another value of a swept knob makes
    one too: your value is always among the choices."""
    held: dict[str, BaseDistribution] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            held.setdefault(name, dist)
    for name, asked in space.items():
        if (study := held.get(name)) is None:
            continue
        try:
            check_distribution_compatibility(study, asked)
        except ValueError:
            return name, study, asked
    return None


def space_study_name(name: str, space: Mapping[str, BaseDistribution]) -> str:
    """Where a space that conflicts with study `name` keeps its trials: `name~<digest of the
    space>`, the same study for the same space every time it is swept."""
    spelled = json.dumps({k: distribution_to_json(d) for k, d in sorted(space.items())}, sort_keys=True)
    return f"{name}~{hashlib.sha1(spelled.encode()).hexdigest()[:8]}"


# a study's name ends in its hardware class: `<study_name>@<class>`, or by default
# `<task>-<mode>-<device>-<class>` (search/plan.py)
_CLASS_SUFFIX = re.compile(r"[@-]([0-9a-f]{10})$")


def split_class(name: str) -> tuple[str, str | None]:
    """A study's name as (what precedes its hardware class, the class); (name, None) for a
    name that ends in none (a study named elsewhere, a space's own study)."""
    found = _CLASS_SUFFIX.search(name)
    return (name[: found.start(1)], found.group(1)) if found else (name, None)


def sibling_names(storage: Any, name: str) -> list[str]:
    """The same study on the storage's other hardware classes: the names that differ from
    `name` in their class alone."""
    base, cls = split_class(name)
    if cls is None:
        return []
    return sorted(
        n for n in optuna.get_all_study_names(storage) if n != name and (b := split_class(n))[0] == base and b[1]
    )


def stored_name(storage: Any, name: str) -> str:
    """The stored study a user means by `name`: itself, or the one `name@<hardware class>` (a
    study is kept per hardware class); ConfigError listing them when there are several, KeyError
    when there is none."""
    from ..errors import ConfigError

    names = optuna.get_all_study_names(storage)
    if name in names:
        return name
    classes = sorted(n for n in names if n.split("@", 1)[0] == name and "@" in n)
    if len(classes) == 1:
        return classes[0]
    if classes:
        raise ConfigError(f"study {name!r} is kept per hardware class: {', '.join(classes)}; name one of them.")
    raise KeyError(name)


def kin_trials(stored: StoredStudy, workload: str, hardware_class: str) -> list[tuple[str, FrozenTrial]]:
    """The finished trials of the storage's other studies of the same workload and hardware
    class, each with its study's name (their own results, not ones they reused): what
    hydra.sweeper.reuse=studies lets a sweep take instead of measuring."""
    kin = []
    for summary in optuna.get_all_study_summaries(stored.storage, include_best_trial=False):
        attrs = summary.user_attrs
        if summary.study_name == stored.name or (attrs.get(_WORKLOAD), attrs.get(_HARDWARE_CLASS)) != (
            workload,
            hardware_class,
        ):
            continue
        study_id = stored.storage.get_study_id_from_name(summary.study_name)
        for t in current(stored.storage.get_all_trials(study_id, deepcopy=False)):
            record = TrialRecord.of(t)
            if t.state.is_finished() and not record.reused and record.borrowed_from is None:
                kin.append((summary.study_name, t))
    return kin
