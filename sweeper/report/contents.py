"""What the report shows, in the parts the page draws (headline, winner, verdict, charts,
notes, table): typed and frozen, so that the page and its tests read named fields."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial

from ..jobtime import JobLine, Lead
from ..store.confirmation import Confirmation
from ..store.nights import Night
from ..store.trials import Counts, level
from .why import StepBreakdown


@dataclass(frozen=True)
class Point:
    number: int
    samples_per_sec: float
    peak_memory_mb: float
    p95_ms: float
    pareto: bool
    baseline: bool
    winner: bool
    stopped: bool = False  # pruned behind the best: its figure is from the windows it ran
    p99_ms: float = 0.0
    feasible: bool = True  # within every limit of hydra.sweeper.constraints


@dataclass(frozen=True)
class Failure:
    number: int
    status: str
    reason: str


@dataclass(frozen=True)
class Speedup:
    """The winner against the baseline: from the confirmation, or from single search runs."""

    confirmed: bool  # measured side by side in interleaved rounds
    winner_samples_per_sec: float | None
    baseline_samples_per_sec: float | None
    speedup: float | None
    speedup_low: float | None = None
    speedup_high: float | None = None
    wins: str | None = None  # Confirmation.wins
    rounds: int | None = None

    @classmethod
    def of(
        cls,
        confirmation: Confirmation | None,
        winner: FrozenTrial | None,
        baseline: FrozenTrial | None,
        trials: Sequence[FrozenTrial],
    ) -> Speedup:
        """The confirmation's medians, else each trial's level over the search (its runs' mean)."""
        if confirmation is not None:
            return cls(
                True,
                confirmation.winner_samples_per_sec,
                confirmation.baseline_samples_per_sec,
                confirmation.speedup,
                confirmation.speedup_low,
                confirmation.speedup_high,
                confirmation.wins,
                confirmation.rounds_run,
            )
        won = (level(winner, trials) or None) if winner else None
        base = (level(baseline, trials) or None) if baseline else None
        return cls(False, won, base, won / base if won and base else None)


@dataclass(frozen=True)
class Headline:
    """Which study, where and when, and how much it measured: the page's title and its search
    section."""

    title: str  # workload, machine and date: what a browser tab or a bookmark says
    study: str
    workload: str
    machine: str
    date: str
    counts: Counts
    budget_used_s: float  # from the first trial's start to the last trial's end
    # the last sweep of this setup, start to end, the confirmation included; None: not known
    sweep_wall_s: float | None
    sweep_finished: bool
    # the trials' jobs' time from submission to their run's start (a scheduler's queue, the lock)
    queue_wait_s: float = 0.0
    scheduled: int = 0  # trials a scheduler ran (SLURM jobs)
    stopped: str | None = None  # why the last sweep's search stopped (n_trials, converged, budget, ...)
    noise: float | None = None  # the run-to-run noise its decisions read (relative sigma; None: not known)
    # the files the baseline read and the page-cache state its runs began in (None: no files)
    data: str | None = None
    # which of the disk and the decoding limits the data path (measure.compute_bound on files)
    data_path: str | None = None


@dataclass(frozen=True)
class Winner:
    """The answer: which trial won, against which baseline, and how to use it."""

    number: int | None
    baseline: int | None
    memory_mb: float | None
    command: str | None  # `python -m sweeper` with what differs from the baseline
    yaml: str | None  # winner.yaml
    # the winner against the baseline as PyTorch lines: "-..." baseline, "+..." winner
    code_diff: tuple[str, ...] = ()
    # one sentence when nothing beat the user's own configuration (store.trials.baseline_kept)
    baseline_kept: str | None = None


@dataclass(frozen=True)
class JobLengths:
    """The leading configurations' time to finish a job, against the job's length: which one
    finishes first from which length on (sweeper.jobtime), from each one's search run."""

    lines: tuple[JobLine, ...]
    leads: tuple[Lead, ...]  # shortest jobs first
    knobs: dict[int, dict[str, Any]]  # trial -> its knobs, to say what a lead's change is
    job_samples: int | None = None  # the job the sweep ranked by (measure.job_samples); None: the rate
    baseline: int | None = None
    winner: int | None = None

    def label(self, number: int) -> str:
        """'#7 (winner)', '#0 (yours)', '#5': a line's name in the chart."""
        role = " (winner)" if number == self.winner else " (yours)" if number == self.baseline else ""
        return f"#{number}{role}"


@dataclass(frozen=True)
class Charts:
    """What the charts and the "why" draw."""

    points: tuple[Point, ...]
    failures: tuple[Failure, ...]
    # which chart draws the Pareto front ("memory", "latency"), None when no chart's axes are the objectives
    front_on: str | None
    breakdowns: tuple[StepBreakdown, ...]
    # knob -> [(value as text, samples/sec)]
    effects: dict[str, list[tuple[str, float]]]
    importances: dict[str, float]
    # (trial number, seconds since the first trial started, best samples/sec so far)
    history: tuple[tuple[int, float, float], ...]
    # data-parallel ranks, when trials ran with more than one count: (trial, nproc_per_node,
    # total samples/sec, one rank's mean samples/sec)
    ranks: tuple[tuple[int, int, float, float], ...] = ()
    # the limits the sweep held the figures to (hydra.sweeper.constraints): figure -> limit
    limits: dict[str, float] = field(default_factory=dict)
    # where start-up decides the winner, or the sweep ranked by a whole job's time; else None
    job: JobLengths | None = None


@dataclass(frozen=True)
class Notes:
    """The report's words apart from its figures."""

    # what the reader needs to act on the answer (report.notes.advice), shown beside it
    advice: tuple[str, ...] = ()
    # how the search went (report.notes.search_notes), kept below the answer
    search: tuple[str, ...] = ()
    # the same study on other hardware classes: (study, machine, best samples/sec, its knobs)
    siblings: tuple[tuple[str, str, float, str], ...] = ()


@dataclass(frozen=True)
class Table:
    """The trials table: a selection of the columns trials.csv holds, one row per trial."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, in the parts the page draws."""

    headline: Headline
    winner: Winner
    verdict: Speedup
    charts: Charts
    notes: Notes
    table: Table
    # the setup's watched nights, in this study and its siblings (hydra.sweeper.watch), oldest
    # first, each with its study
    nights: tuple[tuple[str, Night], ...] = ()
