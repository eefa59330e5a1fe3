"""What the report says in words, apart from its figures: the advice a reader acts on (nothing
beat your configuration, the batch changed, the top two need more rounds, the winner is
unconfirmed), and the notes on how the search went (points queued, substituted or tried later,
other hardware, noisy trials), which the page keeps below the answer."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from optuna.trial import FrozenTrial

from ..jobtime import STARTUP_JITTER_S, samples_text
from ..knobs import Knob
from ..overrides import config_word
from ..result import Status
from ..stats import IQR_WARN_THRESHOLD, Spread, rounds_to_separate
from ..store.confirmation import Confirmation
from ..store.record import TrialRecord, Why
from .contents import JobLengths

# beyond this many interleaved rounds, two configurations are equal on this machine
MAX_USEFUL_ROUNDS = 50


Records = Mapping[int, TrialRecord]  # trial number -> its record, read once by the report


def separation_note(confirmation: Confirmation | None) -> str | None:
    """When the interleaved rounds of the top two are noisy, how many rounds would tell them apart."""
    if confirmation is None or len(confirmation.median) < 2:
        return None
    rounds, medians = confirmation.rounds, confirmation.median
    first, second = sorted(medians, key=lambda n: -medians[n])[:2]
    ratios = [a / b for a, b in zip(rounds.get(first, []), rounds.get(second, [])) if a and b]
    spreads = [Spread.of(ratios).relative_iqr] if ratios else []
    spreads += [Spread.of([v for v in rounds[n] if v]).relative_iqr for n in (first, second) if any(rounds.get(n, []))]
    needed = rounds_to_separate(ratios)
    if needed is None or not spreads or max(spreads) <= IQR_WARN_THRESHOLD:
        return None
    done = len(ratios)
    gap = medians[first] / medians[second] - 1
    pair = (
        f"The top two of the confirmation (#{first} and #{second}) differ by {gap:.1%} with a spread above "
        f"{IQR_WARN_THRESHOLD:.0%}"
    )
    if needed > MAX_USEFUL_ROUNDS:
        return (
            f"{pair}: more than {MAX_USEFUL_ROUNDS} interleaved rounds would be needed to tell them apart "
            "on this machine; treat them as equal."
        )
    more = max(0, math.ceil(needed) - done)
    if more == 0:
        return f"{pair}, yet their {done} interleaved rounds are enough to tell them apart (95% confidence)."
    return (
        f"{pair}: about {more} more interleaved round(s) would tell them apart (95% confidence; "
        f"hydra.sweeper.confirm={done + more})."
    )


def batch_note(baseline: TrialRecord | None, winner: TrialRecord | None) -> str | None:
    """When the winner changes the batch (or the ranks that each take one), what that means for
    the optimizer (one sentence)."""
    if baseline is None or winner is None or baseline.measurement is None or winner.measurement is None:
        return None
    before = (baseline.knobs or {}).get(Knob.LOADER_BATCH_SIZE)
    after = (winner.knobs or {}).get(Knob.LOADER_BATCH_SIZE)
    was, now = baseline.measurement.run, winner.measurement.run
    ranks_before, ranks_after = was.nproc_per_node, now.nproc_per_node
    if not before or not after or (before, ranks_before) == (after, ranks_after):
        return None

    def batch(b: int, n: int) -> str:
        return f"batch {b}" + (f" on each of {n} ranks" if n > 1 else "")

    held = now.effective_batch
    if held and held == was.effective_batch:
        return (
            f"The winner runs {batch(after, ranks_after)} instead of {batch(before, ranks_before)} with "
            f"{held // (after * ranks_after)} gradient accumulation step(s): the effective batch stays {held}, "
            "so the optimizer sees what it saw before."
        )
    ratio = (after * ranks_after) / (before * ranks_before)
    return (
        f"The winner trains with {batch(after, ranks_after)} instead of {batch(before, ranks_before)}: the "
        f"optimizer sees a different batch, so scale the learning rate with it (the linear scaling rule, "
        f"x{ratio:g}, is the usual start) or keep the effective batch with gradient accumulation "
        "(train.effective_batch)."
    )


def advice(
    kept: str | None,
    baseline: TrialRecord | None,
    winner: TrialRecord | None,
    confirmation: Confirmation | None,
) -> tuple[str, ...]:
    """What the reader of the answer needs to know to act on it (`kept`: the sentence, if any,
    that nothing beat the user's configuration: the headline's, computed once)."""
    notes = [kept] if kept else []
    notes += [note] if (note := batch_note(baseline, winner)) else []
    notes += [note] if (note := separation_note(confirmation)) else []
    if confirmation is not None and confirmation.cheaper is not None:
        notes.append(
            f"The cheaper of equals: {confirmation.cheaper}. The rounds could not tell the two apart; the "
            f"faster, #{confirmation.faster}, is in the table beside it."
        )
    if confirmation is None and winner is not None and not kept:
        notes.append(
            "The winner was not confirmed by interleaved re-measurement: the speedup is from single search runs."
        )
    return tuple(notes)


def search_notes(trials: Sequence[FrozenTrial], done: Sequence[FrozenTrial], records: Records) -> tuple[str, ...]:
    """How the search went: points it queued, substituted, tried later or measured once more,
    trials on other hardware, noisy trials."""
    notes: list[str] = []
    queued = [(t.number, r) for t in trials if (r := records[t.number]).origin]
    proposed = [(n, r) for n, r in queued if r.again is None]
    if started := [f"#{n} ({r.origin})" for n, r in proposed]:
        notes.append(f"Queued after the baseline, before the sampler's own picks: {'; '.join(started)}.")
    if orphans := [f"#{r.again.of}'s point as #{n}" for n, r in queued if r.again and r.again.why == Why.ORPHANED]:
        notes.append(
            f"Measured again, their sweep having stopped while they ran and left no result: {'; '.join(orphans)}."
        )
    if fitted := [f"#{n} ({r.origin})" for n, r in queued if r.in_place_of is not None]:
        notes.append(
            "Measured in place of points skipped as oversubscribed, their nearest point within the cores: "
            f"{'; '.join(fitted)}."
        )
    if tried := [f"#{n} ({r.origin})" for n, r in queued if r.probe_knob is not None]:
        notes.append(f"Knobs searched only later, tried first at the best so far: {'; '.join(tried)}.")
    if second := [(n, r, first) for n, r in queued if (first := r.recheck_of) is not None]:
        notes.append(
            "Measured once more, the best against the start points resting on too few runs to tell (one run "
            "can read low, or high): "
            + "; ".join(
                f"#{first}'s point as #{n} ({_rate(r)} against {_rate(records[first]) if first in records else '?'})"
                for n, r, first in second
            )
            + ". Such a run is kept from the sampler and not ranked; the test reads it with the point's other "
            "runs."
        )
    if kept := [f"#{t.number} {r.reason}" for t in trials if (r := records[t.number]).status == Status.NOT_RANKED]:
        notes.append(f"{len(kept)} trial(s) kept and not ranked, their figures in trials.csv: {'; '.join(kept)}.")
    if again := [f"#{t.number} ({r.measured_again})" for t in trials if (r := records[t.number]).measured_again]:
        notes.append(
            "Measured again once the machine was quiet, their first run taken under other processes' load: "
            + "; ".join(again)
            + "."
        )
    noisy = [t.number for t in done if (m := records[t.number].measurement) is not None and m.throughput.noisy]
    if noisy:
        notes.append(
            f"{len(noisy)} trial(s) had a window spread above {IQR_WARN_THRESHOLD:.0%} of their median "
            "(noisy machine): " + _listed([f"#{n}" for n in noisy], ", ")
        )
    if changing := _changing_note(done, records):
        notes.append(changing)
    return tuple(notes)


def _changing_note(done: Sequence[FrozenTrial], records: Records) -> str | None:
    """Which runs were still changing as they ran (a loop still starting up): their figure is of
    their later windows and their run took longer, which the reader should not have to find in
    result.json."""
    changing = [
        f"#{t.number} ({note})"
        for t in done
        if (m := records[t.number].measurement) is not None and (note := m.throughput.drift_note)
    ]
    if not changing:
        return None
    return (
        f"{len(changing)} trial(s) were still changing as they ran (measure.drift_tol): their earlier windows "
        "are left out of the figure, and they measured on for longer: " + _listed(changing, "; ") + "."
    )


def _listed(items: Sequence[str], sep: str, at_most: int = 10) -> str:
    """The first `at_most` items joined, "..." after them where there are more: a note names a
    few trials and leaves the rest to trials.csv."""
    return sep.join(items[:at_most]) + ("..." if len(items) > at_most else "")


def _rate(record: TrialRecord) -> str:
    return f"{record.samples_per_sec:,.0f} samples/s" if record.samples_per_sec is not None else str(record.status)


def _differs(knobs: Mapping[int, Mapping[str, object]], was: int, now: int) -> str:
    """`backend.compile=default, loader.num_workers=2`: what trial `now` sets that `was` does not."""
    a, b = knobs.get(was, {}), knobs.get(now, {})
    changed = [f"{k}={config_word(v)}" for k, v in b.items() if a.get(k) != v]
    return ", ".join(changed) or "its own start-up"


def job_sentences(job: JobLengths) -> tuple[str, ...]:
    """Which configuration finishes a job first, from which job length on, and why: "backend.compile=
    default pays for itself after 1.4 M samples: #12 starts 24.1 s later than #4 and runs 1.32x its
    rate"."""
    first = job.leads[0].line
    if len(job.leads) == 1:
        return (
            f"#{first.number} finishes first at every job length: it starts within "
            f"{STARTUP_JITTER_S:.1f} s of the quickest to start ({first.startup_s:.1f} s of start-up) "
            f"and runs at the highest rate ({first.rate:,.0f} samples/sec).",
        )
    said = [
        f"#{first.number} finishes first for the shortest jobs: {first.startup_s:.1f} s of start-up, "
        f"then {first.rate:,.0f} samples/sec."
    ]
    for was, now in zip(job.leads, job.leads[1:]):
        a, b = was.line, now.line
        said.append(
            f"{_differs(job.knobs, a.number, b.number)} pays for itself after {samples_text(now.from_samples)} "
            f"samples (a job of {b.time_s(now.from_samples):,.0f} s): #{b.number} starts "
            f"{b.startup_s - a.startup_s:.1f} s later than #{a.number} and runs {b.rate / a.rate:.2f}x its rate, "
            "so it finishes first from there on."
        )
    return tuple(said)
