"""Interleaved re-measurement of the top candidates and the baseline (A B base, B base A, base A B, ...),
so that a winner is crowned on numbers taken side by side, not on one lucky run. Only candidates
that beat the baseline in the search are confirmed: a runner-up that costs less from the first
round (the cheaper of equals), the others only when the first round does not decide, and rounds
stop once the one test (sweeper.verdict) has decided the leader against the baseline, and each
candidate that costs less than the leader against the leader."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from .. import verdict
from ..noise import Noise
from ..store.confirmation import Confirmation, medians, paired_ratios, round_evidence
from ..store.record import TrialRecord
from ..store.study import StoredStudy
from ..store.trials import config_key, config_of, levels, primary_value, ranked, search_interval
from . import progress
from .cheapest import Cost, against_fastest, cheaper_rivals, cheaper_runners_up, cheapest_of_equals
from .confirm_time import no_round_line, rounds_that_fit
from .held_back import Tries, kept_tries
from .launch import JobRunner, measure_overrides
from .plan import SweepPlan
from .settings import RUNNERS_UP


def round_order(candidates: Sequence[int], baseline: int, r: int) -> list[int]:
    """Round `r`'s runs: every candidate and the baseline, the order rotated from round to round
    (A B base, B base A, base A B) so that position effects (a machine warming up, a neighbour's
    cron job) fall on each in turn."""
    members = [c for c in candidates if c != baseline] + [baseline]
    return [members[(r + i) % len(members)] for i in range(len(members))]


def decide(
    rounds: Mapping[int, Sequence[float | None]], baseline: int, noise: Noise, settled: bool = True
) -> Confirmation | None:
    """The winner is the highest median over rounds; None if the baseline never ran. `decided`
    says whether the test decided it against the baseline (faster, slower or the same): `settled`
    by the rounds, or on all of them. On a machine too noisy to rank (Noise.too_noisy) an
    undecided lead is no winner the sweep can defend: the baseline is kept."""
    figures = medians(rounds)
    if baseline not in figures:
        return None
    winner = max(figures, key=lambda t: figures[t])
    lead = verdict.paired(paired_ratios(rounds, winner, baseline), noise.sigma).verdict
    defended = settled or winner == baseline or lead.decided
    winner = baseline if not defended and noise.too_noisy else winner
    return Confirmation.of(rounds, winner, baseline, decided=defended)


def own_figure(trial: FrozenTrial) -> float:
    """A trial's figure from its own run alone."""
    return primary_value(trial) or 0.0


def beat_baseline(
    trials: Sequence[FrozenTrial],
    baseline: FrozenTrial,
    most: int,
    figure: Callable[[FrozenTrial], float] = own_figure,
) -> list[FrozenTrial]:
    """The fastest `most` configurations by `figure` that beat the baseline in the search (a
    slower one can only lose the confirmation), each once: with hydra.sweeper.reuse=none a study
    holds several runs of one configuration, and its fastest stands for it (the baseline's own
    configuration is the baseline)."""
    base = primary_value(baseline) or 0.0
    seen = {config_key(baseline)}
    chosen = []
    for t in sorted(ranked(trials), key=lambda t: -figure(t)):
        if figure(t) > base and config_key(t) not in seen:
            seen.add(config_key(t))
            chosen.append(t)
    return chosen[:most]


def left_behind(
    beat: Sequence[FrozenTrial], noise: Noise, figure: Callable[[FrozenTrial], float] = own_figure
) -> list[FrozenTrial]:
    """Those the leader (the first) already left behind as racing judges: their interval wholly
    below the leader's, widened for the run-to-run noise. They could not win the rounds. A
    leader whose point was measured twice has its interval moved to its `figure` (the two runs'
    mean), the spread of its windows kept."""
    lead = search_interval(beat[0]) if beat else None
    if lead is None:
        return []
    first = own_figure(beat[0])
    if first and 0 < figure(beat[0]) < first:
        lead = (lead[0] * figure(beat[0]) / first, lead[1] * figure(beat[0]) / first)
    floor = verdict.widened(lead, noise.sigma)[0]
    return [t for t in beat[1:] if (own := search_interval(t)) is not None and own[1] < floor]


def decided(
    rounds: Mapping[int, Sequence[float | None]],
    upto: int,
    baseline: int,
    noise: Noise = Noise(0.0, 0.0),
    searched: Mapping[int, float] | None = None,
) -> bool:
    """After the first `upto` rounds: whether the test has decided the
    leader's standing (highest median) against the baseline, or, when the baseline leads,
    against every other: faster, slower or the same, not "cannot tell yet", on their paired
    per-round ratios (verdict.paired). One round has no spread of its own: the two's ratio in
    the search (`searched`, not side by side) is the second ratio the test reads, and one round
    decides only where it agrees with the search."""
    done = {t: list(runs[:upto]) for t, runs in rounds.items()}
    figures = medians(done)
    if upto < 1 or baseline not in figures:
        return False
    leader = max(figures, key=lambda t: figures[t])
    rivals = [t for t in done if t != leader] if leader == baseline else [baseline]
    evidence = (round_evidence(done, leader, t, searched, noise.sigma) for t in rivals)
    return all(verdict.paired(ratios, noise.sigma).verdict.decided for ratios in evidence)


@dataclass
class Rounds:
    """The confirmation's rounds as a pure planner: which run comes next, given the figures so
    far; when the runners-up join; when the rounds stop (the lead over the baseline decided, and
    each member that costs less than the leader told from it, or the rounds run out).
    `run_confirmation` measures what it says, and nothing else decides."""

    chosen: list[int]  # the candidates, the search's fastest first
    baseline: int
    rounds: int
    waiting: list[int]  # runners-up that join only if the first round does not decide
    searched: Mapping[int, float]  # each one's figure in the search
    noise: Noise = Noise(0.0, 0.0)
    costs: Mapping[int, Cost | None] = field(default_factory=dict)  # what each candidate takes of the machine
    members: list[int] = field(init=False)
    measured: dict[int, list[float | None]] = field(init=False)
    ran: set[tuple[int, int]] = field(default_factory=set, init=False)
    round: int = field(default=0, init=False)
    joined: tuple[list[int], str] | None = field(default=None, init=False)  # who joined, and why

    def __post_init__(self) -> None:
        self.members = [n for n in self.chosen if n not in self.waiting]
        self.measured = {n: [None] * self.rounds for n in [*self.chosen, self.baseline]}

    def settled(self, upto: int) -> bool:
        """Whether the first `upto` rounds answer both questions the rounds are for: the leader
        against the baseline, and each member that costs less than the leader against it (the
        cheaper of equals): "cannot tell yet" on either asks for another round."""
        if not self._lead_settled(upto):
            return False
        leader, cheaper = self.cheaper_in_question(upto)
        done = self._first(upto)
        return all(against_fastest(done, n, leader, self.noise, self.searched).decided for n in cheaper)

    def cheaper_in_question(self, upto: int) -> tuple[int, list[int]]:
        """The leader after the first `upto` rounds, and the members that cost less than it."""
        done = self._first(upto)
        figures = medians(done)
        leader = max(figures, key=lambda t: figures[t], default=self.baseline)
        return leader, cheaper_rivals(leader, done, self.baseline, self.costs)

    def _first(self, upto: int) -> dict[int, list[float | None]]:
        """The members' and the baseline's figures in the first `upto` rounds."""
        return {n: self.measured[n][:upto] for n in [*self.members, self.baseline]}

    def _lead_settled(self, upto: int) -> bool:
        runs = {n: self.measured[n] for n in [*self.members, self.baseline]}
        return decided(runs, upto, self.baseline, self.noise, self.searched)

    def next_run(self) -> tuple[int, int] | None:
        """(round, trial) to measure next; None once the rounds are over."""
        while self.round < self.rounds:
            r = self.round
            if r and not any(done == r for done, _ in self.ran) and self.settled(r):
                return None
            pending = [n for n in round_order(self.members, self.baseline, r) if (r, n) not in self.ran]
            if pending:
                return r, pending[0]
            if self.waiting:  # the first round is in: the runners-up join where it did not decide
                joining, self.waiting = ([] if self._lead_settled(r + 1) else self.waiting), []
                if joining:
                    self.members += joining
                    self.joined = (joining, "did not decide")
                    continue
            self.round += 1
        return None

    def record(self, run: tuple[int, int], figure: float | None) -> None:
        r, number = run
        self.measured[number][r] = figure
        self.ran.add(run)

    @property
    def rounds_run(self) -> int:
        return max((r for r, _ in self.ran), default=-1) + 1

    def decision(self) -> Confirmation | None:
        done = self.rounds_run
        runs = {n: self.measured[n][:done] for n in [*self.members, self.baseline]}
        return decide(runs, self.baseline, self.noise, self.settled(done))


def _run_rounds(
    planner: Rounds,
    plan: SweepPlan,
    run: JobRunner,
    baseline: FrozenTrial,
    by_number: Mapping[int, FrozenTrial],
    remaining: Callable[[], float | None],
    stopped: Callable[[], bool],
) -> None:
    """The rounds as `planner` orders them, side by side on the machine the baseline ran on, each
    result told to the planner; the log says who joins, each run, and a lead decided early."""
    node = baseline_record.fingerprint.hostname if (baseline_record := TrialRecord.of(baseline)).fingerprint else None
    with run.on_node(node):
        while not stopped() and (step := planner.next_run()) is not None:
            if planner.joined is not None:
                joining, why = planner.joined
                progress.say(f"  the first round {why}: {_trials(joining)} {_join(joining)} the rounds")
                planner.joined = None
            r, number = step
            overrides = [*plan.overrides_for(config_of(by_number[number])), *measure_overrides(plan, None, remaining())]
            result = run(overrides, job_idx=number, subdir=f"confirm/round{r + 1}-trial{number}")
            planner.record(step, result.samples_per_sec if result.ok else None)
            progress.confirm_line(r, planner.rounds, number, result)
    if 0 < planner.rounds_run < planner.rounds and not stopped():
        one = " (in line with the search's figures)" if planner.rounds_run == 1 else ""
        cheaper = planner.cheaper_in_question(planner.rounds_run)
        also = f", and {_trials(cheaper[1])} (costs less) against #{cheaper[0]}" if cheaper[1] else ""
        progress.say(
            f"confirmation: the test decided the winner against the baseline{also} at {verdict.CONFIDENCE:.0%} "
            f"after {planner.rounds_run} of {planner.rounds} rounds{one}"
        )


@dataclass(frozen=True)
class _Candidates:
    """Who the confirmation measures: the baseline, the trials that beat it in the search (the
    fastest first) less those the leader left behind, and the figure each is ranked by: its runs'
    mean where its point ran more than once."""

    baseline: FrozenTrial | None
    chosen: list[int]
    behind: list[int]
    figure: Callable[[FrozenTrial], float]


def _candidates(every: Sequence[FrozenTrial], kept: Mapping[int, Tries], noise: Noise) -> _Candidates:
    """The candidates among `every`, less `kept`: later knobs' tries that were no gain, which
    their points stand for."""
    trials = [t for t in every if t.number not in kept]
    baseline = next((t for t in trials if TrialRecord.of(t).baseline and t.state == TrialState.COMPLETE), None)
    of_every = levels(every)
    at = {t.number: of_every[t.number] for t in ranked(trials)}

    def figure(trial: FrozenTrial) -> float:
        return at.get(trial.number) or own_figure(trial)

    beat = beat_baseline(trials, baseline, 1 + RUNNERS_UP, figure) if baseline else []
    behind = [t.number for t in left_behind(beat, noise, figure)]
    return _Candidates(baseline, [t.number for t in beat if t.number not in behind], behind, figure)


def run_confirmation(
    stored: StoredStudy,
    plan: SweepPlan,
    run: JobRunner,
    *,
    remaining: Callable[[], float | None],
    typical_wall_s: float,
    stopped: Callable[[], bool],
) -> Confirmation | None:
    """Re-measure the candidates that beat the baseline and the baseline, interleaved, as `Rounds`
    plans them; store and return the decision. None when there is nothing to confirm (the
    baseline is the fastest found: the sweep says so). The first round runs the search's fastest,
    the baseline and a runner-up that costs less (cheaper_runners_up); the others join (that
    round first) only when it does not decide. A later knob's try that was no
    gain is not a candidate: the point it was tried at stands for it (later.kept_tries)."""
    rounds = plan.settings.confirm
    every = stored.trials(plan.setup)
    by_number = {t.number: t for t in every}
    noise = plan.noise(every, stored.confirmation(plan.setup))
    kept = kept_tries(every, plan, noise)  # a later knob's try that was no gain: its point stands for it
    found = _candidates(every, kept, noise)
    baseline, chosen, behind, figure = found.baseline, found.chosen, found.behind, found.figure
    if baseline is None or rounds < 1 or not chosen:
        return None
    left = remaining()
    if (fits := rounds_that_fit(len(chosen) + 1, rounds, left, typical_wall_s)) == 0:
        progress.say(no_round_line(left or 0.0, typical_wall_s))
        return None
    costs = {n: Cost.of(TrialRecord.of(by_number[n])) for n in chosen}
    cheaper = cheaper_runners_up(costs[chosen[0]], {n: costs[n] for n in chosen[1:]})  # n -> its saving
    planner = Rounds(
        chosen=chosen,
        baseline=baseline.number,
        rounds=fits,
        waiting=[n for n in chosen[1:] if n not in cheaper],
        searched={n: v for n in [*chosen, baseline.number] if (v := figure(by_number[n])) > 0},
        noise=noise,
        costs=costs,
    )
    _say_plan(planner, behind, noise, cheaper)
    _say_kept(kept, by_number)
    _run_rounds(planner, plan, run, baseline, by_number, remaining, stopped)
    decision = planner.decision()
    if decision is not None:
        decision = cheapest_of_equals(decision, costs, noise, planner.searched)  # its candidates are among `chosen`
        stored.save_confirmation(plan.setup, decision)
    return decision


def _say_kept(kept: Mapping[int, Tries], by_number: Mapping[int, FrozenTrial]) -> None:
    """The later knobs' tries that were no gain: the point each was tried at stands for it."""
    for number, tries in kept.items():
        assert tries.at is not None
        progress.say(
            f"  not confirmed: trial #{number}, {tries.knob}={config_of(by_number[number]).get(tries.knob)} "
            f"at #{tries.at.number}, no gain there: #{tries.at.number} stands for it"
        )


def _say_plan(planner: Rounds, behind: Sequence[int], noise: Noise, cheaper: Mapping[int, str]) -> None:
    members, waiting = planner.members, planner.waiting
    progress.say(
        f"confirming: {_trials(members)} (faster than the baseline in the search) and baseline "
        f"{planner.baseline}, up to {planner.rounds} interleaved rounds (fewer once the test decides at 95%)"
    )
    for number, saving in cheaper.items():
        progress.say(
            f"  trial #{number} costs less than #{planner.chosen[0]}, with {saving}: in the rounds "
            "from the first, the cheaper of equals if the test finds it no slower"
        )
    if waiting:
        progress.say(f"  {_trials(waiting)} (also faster) {_join(waiting)} if the first round does not decide")
    if behind:
        progress.say(
            f"  not confirmed: trials {list(behind)}, faster than the baseline but behind trial #{planner.chosen[0]} "
            f"slower by the test ({noise.sigma:.1%} noise a run)"
        )


def _trials(numbers: Sequence[int]) -> str:
    return f"trial #{numbers[0]}" if len(numbers) == 1 else f"trials {list(numbers)}"


def _join(numbers: Sequence[int]) -> str:
    return "joins" if len(numbers) == 1 else "join"
