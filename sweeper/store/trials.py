"""Reading the trials of a study (pure: FrozenTrial lists in, answers out). The report and the
sweep read trials only through these and TrialRecord."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..measurement import Measurement, RunFacts
from ..result import Status
from .confirmation import Confirmation
from .record import Owner, TrialRecord


def config_of(trial: FrozenTrial) -> dict[str, Any]:
    """Every knob a trial set: sampled params plus the neutral values of dead knobs."""
    knobs = TrialRecord.of(trial).knobs
    return knobs if knobs is not None else dict(trial.params)


def config_key(trial: FrozenTrial) -> str:
    """The trial's configuration as one comparable string: equal for two runs of one configuration."""
    return json.dumps(config_of(trial), sort_keys=True, default=str)


def current(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trials, less those failed as lost whose job's late result a later trial holds (a
    finished trial cannot change in Optuna; the recovered one stands in its place)."""
    replaced = {r.recovered_from for t in trials if (r := TrialRecord.of(t)).recovered_from is not None}
    return [t for t in trials if t.number not in replaced] if replaced else list(trials)


def same_setup(trial: FrozenTrial, fixed: Sequence[str]) -> bool:
    """Run with the same fixed overrides: a study can hold several setups."""
    return TrialRecord.of(trial).fixed_overrides == tuple(fixed)


def of_setup(trials: Sequence[FrozenTrial], fixed: Sequence[str]) -> list[FrozenTrial]:
    return [t for t in trials if same_setup(t, fixed)]


def primary_value(trial: FrozenTrial) -> float | None:
    """samples/sec of a completed trial."""
    return TrialRecord.of(trial).samples_per_sec if trial.state == TrialState.COMPLETE else None


def search_interval(trial: FrozenTrial) -> tuple[float, float] | None:
    """The 95% interval of samples/sec its run measured (None: too few windows, or not ours)."""
    measured = TrialRecord.of(trial).measurement
    return measured.throughput.interval if measured is not None else None


def runs_of(trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trial and the second runs of its point (the convergence stop's rechecks)."""
    return [trial, *(t for t in trials if t.number != trial.number and TrialRecord.of(t).recheck_of == trial.number)]


def level(trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> float:
    """What the trial's point runs at: the mean of its runs' figures (one run, or with its second):
    of a point measured twice, its first run alone may be the one that read high."""
    return levels([trial, *(t for t in trials if t.number != trial.number)])[trial.number]


def levels(trials: Sequence[FrozenTrial]) -> dict[int, float]:
    """level() of every trial, in one pass over the study (a rule that ranks many trials reads
    them all, and level() alone reads the study once a trial)."""
    figures: dict[int, list[float]] = {t.number: [] for t in trials}
    for t in trials:
        record = TrialRecord.of(t)
        if (f := record.samples_per_sec) is None:
            continue
        figures[t.number].append(f)
        if (of := record.recheck_of) is not None and of != t.number and of in figures:
            figures[of].append(f)
    return {n: sum(fs) / len(fs) if fs else 0.0 for n, fs in figures.items()}


def unconfirmed_winner(trials: Sequence[FrozenTrial], standing_in: Collection[int] = ()) -> FrozenTrial | None:
    """The winner when no confirmation decided: the point at the highest level (a point measured
    twice at its runs' mean, as the convergence stop and the confirmation count it), the trials
    in `standing_in` left out (a later knob's try that was no gain: its point stands for it)."""
    best, at = [t for t in ranked(trials) if t.number not in standing_in], levels(trials)
    return max(best, key=lambda t: at[t.number], default=None)


def run_facts(trial: FrozenTrial) -> RunFacts | None:
    """What the trial's run said about the workload and how it ran (a convolutional model, a
    script that applied the first-step knobs), a run kept and not ranked too: load or another
    machine moves the figures, not these."""
    record = TrialRecord.of(trial)
    if record.measurement is not None:
        return record.measurement.run
    if record.figures and record.status == Status.NOT_RANKED:
        return Measurement.from_flat(record.figures).run
    return None


def feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0 for v in trial.constraints.values()) if trial.constraints else True


def was_measured(trial: FrozenTrial) -> bool:
    """Ran a measurement (or is running one): not a reused result, not a trial answered without
    running (a predicted OOM, a skipped or surplus trial), not interrupted (measured again when
    the sweep resumes), not a point still queued (counted, a point queued in place of a skipped
    one at the last slot once ended the sweep one trial short of n_trials)."""
    return trial.state != TrialState.WAITING and TrialRecord.of(trial).measured


def measured_results(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Trials that hold their own result (a reused result counts once, at its source)."""
    return [t for t in trials if not TrialRecord.of(t).reused]


def ranked(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Completed, feasible trials, fastest first; a reused result counts once."""
    done = [t for t in measured_results(trials) if primary_value(t) is not None and feasible(t)]
    return sorted(done, key=lambda t: -primary_value(t))  # type: ignore[operator]


def repeated_figures(trials: Sequence[FrozenTrial], confirmation: Confirmation | None = None) -> list[list[float]]:
    """samples/sec of each configuration measured more than once, one list a configuration: its own
    complete runs (a run measured again, a proposal's second run) and its confirmation rounds.
    What the run-to-run noise is estimated from (sweeper.noise); reused results are not runs."""
    return [figures for figures in figures_by_config(trials, confirmation).values() if len(figures) > 1]


def figures_by_config(
    trials: Sequence[FrozenTrial], confirmation: Confirmation | None = None
) -> dict[str, list[float]]:
    """samples/sec of every run of each configuration (config_key): its own complete runs and its
    confirmation rounds, reused results left out."""
    groups: dict[str, list[float]] = {}
    key_of: dict[int, str] = {}
    for t in trials:
        record = TrialRecord.of(t)
        key = key_of[t.number] = config_key(t)
        own = not record.reused and record.borrowed_from is None
        if own and record.status == Status.OK and record.samples_per_sec:
            groups.setdefault(key, []).append(record.samples_per_sec)
    if confirmation is not None:
        for number, figures in confirmation.rounds.items():
            if number in key_of:
                groups.setdefault(key_of[number], []).extend(f for f in figures if f)
    return groups


# how a baseline may fail that the next sweep measures again: its sweep stopped, or the workload
# failed whatever its knobs (a script mended since, say); running out of memory or time is a
# figure of the configuration, and stands
REMEASURED_BASELINE = (Status.INTERRUPTED, Status.ERROR, Status.CRASH)


def baseline_of(trials: Sequence[FrozenTrial], *, sweep: Owner | None = None) -> FrozenTrial | None:
    """The baseline trial (possibly answered from an earlier sweep's identical run): the first
    whose run stands. A baseline that failed as REMEASURED_BASELINE is measured again by the
    next sweep: for that sweep (`sweep`, its process) a baseline another sweep failed is none;
    every other reader takes the last baseline when none stands."""
    baselines = [t for t in trials if TrialRecord.of(t).baseline]
    failed = [t for t in baselines if TrialRecord.of(t).status in REMEASURED_BASELINE]
    standing = [t for t in baselines if t not in failed]
    if standing:
        return standing[0]
    if sweep is None:
        return baselines[-1] if baselines else None
    return next((t for t in reversed(failed) if _run_by(TrialRecord.of(t), sweep)), None)


def _run_by(record: TrialRecord, sweep: Owner) -> bool:
    return (record.host, record.sweeper_pid, record.sweeper_started) == (sweep.host, sweep.pid, sweep.started)


def baseline_kept(trials: Sequence[FrozenTrial], confirmation: Confirmation | None) -> str | None:
    """One sentence when nothing beat the user's own configuration: in the search (nothing to
    confirm), or in the confirmation's side-by-side rounds. None when something did."""
    baseline, best = baseline_of(trials), ranked(trials)
    if baseline is None or primary_value(baseline) is None:
        return None
    yours = f"Your configuration (the baseline, trial #{baseline.number})"
    if confirmation is not None:
        if confirmation.winner != confirmation.baseline:
            return None
        others = {n: m for n, m in confirmation.median.items() if n != confirmation.baseline}
        base = confirmation.median.get(confirmation.baseline)
        if not others or not base:
            return None
        runner_up = max(others, key=lambda n: others[n])
        if not confirmation.decided and others[runner_up] > base:
            return (
                f"{yours} is kept: the best candidate, trial #{runner_up}, ran at {others[runner_up] / base:.2f}x "
                f"of it over {confirmation.over_rounds} side by side, which the test cannot tell on a machine "
                "too noisy to rank: no winner can be defended (a quieter machine would tell)."
            )
        return (
            f"{yours} stayed the fastest when re-measured side by side: the best candidate, trial #{runner_up}, "
            f"ran at {others[runner_up] / base:.2f}x of it over {confirmation.over_rounds}."
        )
    if not best or best[0].number != baseline.number:
        return None
    rest = [t for t in best if t.number != baseline.number]
    if not rest:
        behind = sum(was_measured(t) and t.state == TrialState.PRUNED for t in trials)
        if behind:
            who = "the other one measured was" if behind == 1 else f"the {behind} others measured were"
            return f"{yours} is the fastest found: {who} stopped early, behind it; nothing to confirm."
        return f"{yours} is the only one that completed: nothing to compare it with."
    base, second = primary_value(baseline) or 0.0, primary_value(rest[0]) or 0.0
    return (
        f"{yours} is already the fastest found: the best other, trial #{rest[0].number}, trailed it by "
        f"{1 - second / base:.0%} in the search ({second:,.0f} against {base:,.0f} samples/s); nothing to confirm."
    )


def pareto_trials(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> list[FrozenTrial]:
    """The Pareto-optimal trials among these (one setup's own results), as Optuna decides them:
    `Study.best_trials` honours the directions and the constraints (infeasible trials never
    make the front). Computed on an in-memory copy, so other setups of the study don't count."""
    import optuna

    done = [t for t in measured_results(trials) if t.state == TrialState.COMPLETE]
    if not done:
        return []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    copy = optuna.create_study(directions=[optuna.study.StudyDirection[d.upper()] for d in directions])
    copy.add_trials(done)  # numbered 0.. in this order
    return [done[t.number] for t in copy.best_trials]


def speed_memory_front(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The Pareto-optimal trials on the measured speed against peak memory, whatever the study
    optimised (a samples/sec-only search still shows its memory trade-off): the same Optuna
    call as pareto_trials, on copies of the trials with those two figures as their values."""
    import optuna

    pairs = []
    for t in measured_results(trials):
        measured = TrialRecord.of(t).measurement
        if t.state == TrialState.COMPLETE and measured is not None and measured.memory.peak_memory_mb is not None:
            pairs.append(
                (
                    t,
                    optuna.trial.create_trial(
                        values=[measured.throughput.samples_per_sec, measured.memory.peak_memory_mb],
                        params=t.params,
                        distributions=t.distributions,
                        system_attrs=t.system_attrs,
                    ),
                )
            )
    front = {id(c) for c in pareto_trials([c for _, c in pairs], ["maximize", "minimize"])}
    return [t for t, c in pairs if id(c) in front]


@dataclass(frozen=True)
class Counts:
    """How a setup's trials ended, counted one way for the sweep's summary and the report."""

    trials: int  # every trial of the setup
    measured: int  # ran a measurement of their own (count toward n_trials)
    failed: int  # of those, failed (crash, oom, timeout, error, invalid), each with its reason
    running: int  # of those, still running: another sweep's, which shares the study
    stopped_early: int  # of those, stopped early behind the best (racing, the prune floor): pruned
    reused: int  # answered with the result of an identical configuration measured before
    skipped: int  # not run: a point the preset does not sample
    predicted_oom: int  # not run: a smaller batch with the same memory settings ran out of memory
    surplus: int  # not run: n_trials reached by another process
    interrupted: int  # stopped by a signal or a dead sweep; measured again on resume
    infeasible: int = 0  # of the complete ones, past a limit of hydra.sweeper.constraints: kept, not ranked

    def measured_words(self, failed: str = "failed") -> list[str]:
        """The measured trials in words that each mean one thing, for the log and the report."""
        complete = self.measured - self.failed - self.running - self.stopped_early
        return [f"{complete} complete"] + [
            f"{k} {what}"
            for k, what in (
                (self.infeasible, "of them past a limit (hydra.sweeper.constraints), kept and not ranked"),
                (self.stopped_early, "stopped early behind the best"),
                (self.failed, failed),
                (self.running, "still running in another sweep"),
            )
            if k
        ]


def count(trials: Sequence[FrozenTrial]) -> Counts:
    records = [(t, TrialRecord.of(t)) for t in trials]
    statuses = [r.status for _, r in records if not r.reused and r.borrowed_from is None]
    return Counts(
        trials=len(records),
        measured=sum(was_measured(t) for t, _ in records),
        failed=sum(
            was_measured(t) and t.state not in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
            for t, _ in records
        ),
        running=sum(was_measured(t) and t.state == TrialState.RUNNING for t, _ in records),
        stopped_early=sum(was_measured(t) and t.state == TrialState.PRUNED for t, _ in records),
        reused=sum(r.reused or r.borrowed_from is not None for _, r in records),
        skipped=statuses.count(Status.SKIPPED),
        predicted_oom=statuses.count(Status.OOM_PREDICTED),
        surplus=statuses.count(Status.SURPLUS),
        interrupted=statuses.count(Status.INTERRUPTED),
        infeasible=sum(was_measured(t) and t.state == TrialState.COMPLETE and not feasible(t) for t, _ in records),
    )


def measured_since(trials: Sequence[FrozenTrial], started_at: float) -> int:
    """How many of the trials that ran a measurement began at or after `started_at` (time.time()):
    a sweep's own, and those of other hosts that share its study meanwhile."""
    return sum(
        was_measured(t) and t.datetime_start is not None and t.datetime_start.timestamp() >= started_at for t in trials
    )


def changed_knobs(baseline: FrozenTrial | None, winner: FrozenTrial) -> dict[str, Any]:
    """The winner's knobs that differ from the baseline's: the rest of the winner is your config."""
    knobs = config_of(winner)
    if baseline is None:
        return knobs
    base = config_of(baseline)
    return {k: v for k, v in knobs.items() if k not in base or base[k] != v}
