"""The nightly watch (hydra.sweeper.watch=true): before a night's search, the winner the study
confirmed and your configuration are measured side by side, interleaved, and compared with the
figures they were confirmed at. The night then holds (it ends without a search), drifted (it
re-tunes afresh in the study) or changed (the fingerprint changed in a fact that decides speed:
it re-tunes, warm-started from the earlier study). Reading a night is pure (`night_reading`,
and `rounds_enough` for when its rounds stop); `watch` measures.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from .. import verdict
from ..machine import Change, Fingerprint, changes
from ..noise import Noise
from ..store.nights import Night, Outcome, study_nights
from ..store.record import TrialRecord
from ..store.study import StoredStudy, sibling_names, split_class
from ..store.trials import config_key, config_of, figures_by_config, repeated_figures
from . import progress
from .launch import JobRunner, measure_overrides
from .plan import SweepPlan

# rounds before a night may decide: one run of each is one mood, not a level
MIN_ROUNDS = 2


@dataclass(frozen=True)
class Reference:
    """What a night compares with: a study's last settled figures for its winner and for your
    configuration (the confirmation's medians, or a re-measuring night's where the re-tune kept
    your configuration), over how many runs, and the fingerprint they were measured on."""

    study: str
    winner_knobs: dict[str, Any]
    baseline_knobs: dict[str, Any]
    winner: float
    baseline: float
    winner_runs: int
    baseline_runs: int
    fingerprint: Fingerprint
    noise: Noise  # the study's: its prior and its estimate
    # the study's configurations measured more than once, their runs' figures: what tonight's
    # repeats are pooled with (a night's few runs alone would judge on too little)
    repeats: tuple[tuple[float, ...], ...] = ()


def _count(runs: Sequence[float | None]) -> int:
    return sum(1 for r in runs if r)


def study_reference(stored: StoredStudy, plan: SweepPlan) -> Reference | None:
    """The study's own reference for this setup: its confirmed winner and baseline, each at its
    level over every run the study has of it (the confirmation's rounds and its own complete
    runs: one round can catch a configuration at a high or low mood); else the last night that
    measured afresh (drifted or changed); None when it holds neither."""
    trials = stored.trials(plan.setup)
    by_number = {t.number: t for t in stored.trials()}
    conf = stored.confirmation(plan.setup)
    noise = plan.noise(trials, conf)
    repeats = tuple(tuple(r) for r in repeated_figures(trials, conf))
    nights = study_nights(stored.study, plan.setup)
    if conf is not None and conf.winner in by_number and conf.baseline in by_number:
        base, won = by_number[conf.baseline], by_number[conf.winner]
        runs = figures_by_config(trials, conf)
        winner_runs = runs.get(config_key(won)) or [conf.median[conf.winner]]
        baseline_runs = runs.get(config_key(base)) or [conf.median[conf.baseline]]
        # the last night's fingerprint where one was watched (it holds the driver and the kernel)
        measured = nights[-1].fingerprint if nights else TrialRecord.of(base).fingerprint or Fingerprint()
        return Reference(
            stored.name,
            config_of(won),
            config_of(base),
            statistics.median(winner_runs),
            statistics.median(baseline_runs),
            len(winner_runs),
            len(baseline_runs),
            measured,
            noise,
            repeats,
        )
    remeasured = [
        n for n in nights if n.outcome in (Outcome.drifted, Outcome.changed) and n.winner_now and n.baseline_now
    ]
    if not remeasured:
        return None
    night = remeasured[-1]
    assert night.winner_now is not None and night.baseline_now is not None
    return Reference(
        stored.name,
        dict(night.winner_knobs),
        dict(night.baseline_knobs),
        night.winner_now,
        night.baseline_now,
        _count(night.winner_runs),
        _count(night.baseline_runs),
        night.fingerprint,
        noise,
        repeats,
    )


def find_reference(stored: StoredStudy, plan: SweepPlan) -> Reference | None:
    """This study's reference, else that of the nearest earlier fingerprint: the sibling study
    (the same study on another hardware class) whose last sweep ended most recently."""
    own = study_reference(stored, plan)
    if own is not None:
        return own
    siblings = []
    for name in sibling_names(stored.storage, stored.name):
        other = StoredStudy(optuna.load_study(study_name=name, storage=stored.storage), stored.storage)
        span = other.sweep_span(plan.setup)
        if span is not None and (ref := study_reference(other, plan)) is not None:
            siblings.append((span.ended_at or span.started_at, ref))
    return max(siblings, key=lambda pair: pair[0])[1] if siblings else None


@dataclass(frozen=True)
class Reading:
    """The night's outcome, the log's words for it, and the facts that changed."""

    outcome: Outcome
    words: str
    changes: tuple[str, ...]


def _noise_of(ref: Reference, tonight: Sequence[Sequence[float | None]]) -> Noise:
    """The study's noise estimate, its repeats pooled with tonight's (each configuration's runs
    tonight a group of their own: a level that moved between nights is what is being judged, not
    noise), and never below the prior: a sweep's repeats are minutes apart, two nights a day, and
    hydra.sweeper.run_noise is the user's word for this machine's spread between runs. Where the
    noise is not modelled (run_noise=0), tonight's runs' own spread (a night can't be judged on
    no noise at all)."""
    repeats = [[r for r in runs if r] for runs in tonight]
    if ref.noise.prior > 0:
        pooled = Noise.estimate(ref.noise.prior, [*ref.repeats, *repeats])
        return replace(pooled, sigma=max(pooled.sigma, pooled.prior))
    logs = [statistics.stdev(math.log(r) for r in runs) for runs in repeats if len(runs) > 1]
    return Noise(max(logs, default=0.0), 0.0)


def _difference(now: Sequence[float | None], before: float, runs_before: int, noise: Noise) -> verdict.Difference:
    """Tonight's runs against the reference figure of `runs_before` runs, by the test."""
    done = [r for r in now if r]
    return verdict.figures(statistics.median(done), len(done), before, runs_before, noise.sigma)


def moved(now: Sequence[float | None], before: float, runs_before: int, noise: Noise) -> float | None:
    """Tonight's median over the reference figure, where the test finds it faster or slower
    (None: the same, or it cannot tell). A configuration that failed every run tonight moved
    without bound (0.0)."""
    if not any(now):
        return 0.0
    difference = _difference(now, before, runs_before, noise)
    return difference.ratio if difference.verdict.apart else None


def rounds_enough(ref: Reference, winner: Sequence[float | None], baseline: Sequence[float | None]) -> bool:
    """Whether more rounds would not change the night's outcome: after MIN_ROUNDS rounds, the
    test finds a side moved (faster or slower: the night drifted), or has decided both (the
    same: it holds). "Cannot tell yet" asks for another round."""
    if len(baseline) < MIN_ROUNDS:
        return False
    noise = _noise_of(ref, [winner, baseline])
    sides = ((winner, ref.winner, ref.winner_runs), (baseline, ref.baseline, ref.baseline_runs))
    found = [_difference(now, before, k0, noise).verdict for now, before, k0 in sides if any(now)]
    return any(v.apart for v in found) or all(v.decided for v in found)


def _side(name: str, now: Sequence[float | None], before: float, ratio: float | None) -> str:
    done = [r for r in now if r]
    if not done:
        return f"{name} failed every run (it read {before:,.0f} samples/s)"
    median = statistics.median(done)
    state = "cannot tell by the test" if ratio is None else ("faster" if ratio > 1 else "slower") + " by the test"
    return f"{name} runs at {median:,.0f} samples/s against {before:,.0f} ({median / before - 1:+.0%}, {state})"


def night_reading(
    ref: Reference,
    winner: Sequence[float | None],
    baseline: Sequence[float | None],
    now: Fingerprint,
    other_study: bool = False,
) -> Reading:
    """The night's outcome from tonight's runs and the reference (pure): changed where a fact
    that decides speed changed (a reference in another study is on another hardware class, even
    where its record is too old to say which fact); else drifted where either side moved beyond
    the noise; else holds."""
    found = changes(ref.fingerprint, now)
    if other_study and not any(c.decides for c in found):
        found.insert(0, Change("hardware_class", split_class(ref.study)[1] or ref.study, now.hardware_class, True))
    noise = _noise_of(ref, [winner, baseline])
    w = moved(winner, ref.winner, ref.winner_runs, noise) if winner else None
    b = moved(baseline, ref.baseline, ref.baseline_runs, noise)
    sides = ([_side("the winner", winner, ref.winner, w)] if winner else []) + [
        _side("your configuration", baseline, ref.baseline, b)
    ]
    allowed = f"the run-to-run noise {noise.sigma:.1%} a run"
    said = [str(c) for c in found]
    if any(c.decides for c in found):
        outcome, lead = Outcome.changed, f"changed: {', '.join(said)}"
    elif w is not None or b is not None:
        outcome, lead = Outcome.drifted, "drifted"
    else:
        outcome, lead = Outcome.holds, "holds"
    also = f"; also {', '.join(said)}" if said and outcome != Outcome.changed else ""
    return Reading(outcome, f"{lead}{also}: {'; '.join(sides)} ({allowed})", tuple(said))


def _rounds(
    plan: SweepPlan, run: JobRunner, ref: Reference, remaining: Callable[[], float | None], stopped: Callable[[], bool]
) -> tuple[list[float | None], list[float | None]]:
    """The winner and your configuration, interleaved (W B, B W, ...), up to hydra.sweeper.confirm
    rounds (at least MIN_ROUNDS), fewer once more would not change the verdict."""
    keys = {*plan.space, *plan.baseline_knobs}
    knobs = {"winner": {k: v for k, v in ref.winner_knobs.items() if k in keys}, "baseline": dict(plan.baseline_knobs)}
    same = {**plan.baseline_knobs, **knobs["winner"]} == dict(plan.baseline_knobs)
    runs: dict[str, list[float | None]] = {"winner": [], "baseline": []}
    for r in range(max(MIN_ROUNDS, plan.settings.confirm)):
        order = ["baseline"] if same else (["winner", "baseline"] if r % 2 == 0 else ["baseline", "winner"])
        for who in order:
            if stopped():
                return runs["winner"], runs["baseline"]
            point = plan.overrides_for({**plan.baseline_knobs, **knobs[who]})
            point += measure_overrides(plan, None, remaining())
            result = run(point, job_idx=r, subdir=f"watch/round{r + 1}-{who}")
            runs[who].append(result.samples_per_sec if result.ok else None)
            shown = f"{result.samples_per_sec:,.0f} samples/s" if result.ok else f"{result.status}: {result.reason}"
            name = "your configuration" if who == "baseline" else "the winner"
            progress.say(f"  watch round {r + 1} {name}: {shown}")
        if rounds_enough(ref, [] if same else runs["winner"], runs["baseline"]):
            break
    return ([] if same else runs["winner"]), runs["baseline"]


def watch(
    stored: StoredStudy,
    plan: SweepPlan,
    run: JobRunner,
    *,
    remaining: Callable[[], float | None],
    stopped: Callable[[], bool],
) -> Night:
    """Measure the reference's winner and your configuration side by side, decide, say it, and
    keep the night in the study (a first night, with nothing confirmed to watch, only says so)."""
    started_at = time.time()
    now = plan.machine.fingerprint
    ref = find_reference(stored, plan)
    if ref is None:
        progress.say(f"watch: study {stored.name!r} has no confirmed winner to watch yet: the night tunes")
        return Night(started_at, Outcome.first, now, words="tuned: nothing was confirmed to watch yet")
    where = "" if ref.study == stored.name else f" of study {ref.study!r} (the nearest earlier fingerprint)"
    progress.say(
        f"watch: the confirmed winner{where} and your configuration, side by side, against "
        f"{ref.winner:,.0f} and {ref.baseline:,.0f} samples/s"
    )
    winner, baseline = _rounds(plan, run, ref, remaining, stopped)
    reading = night_reading(ref, winner, baseline, now, other_study=ref.study != stored.name)
    progress.say(f"watch: the night {reading.words}")
    return Night(
        started_at,
        reading.outcome,
        now,
        reference=ref.study,
        winner_knobs=ref.winner_knobs,
        baseline_knobs=dict(plan.baseline_knobs),
        winner_before=ref.winner,
        baseline_before=ref.baseline,
        winner_runs=winner,
        baseline_runs=baseline,
        words=reading.words,
        changes=list(reading.changes),
    )


def still_winner(night: Night, winner: FrozenTrial | None, figure: float | None) -> Night:
    """The night after its re-tune: whether the watched winner is still the winner (the same
    knobs), and the new winner's figure."""
    same = winner is not None and all(config_of(winner).get(k) == v for k, v in night.winner_knobs.items())
    return replace(night, still_winner=same, winner_after=figure)
