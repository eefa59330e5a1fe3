"""The cheapest of equals: two configurations the confirmation cannot tell apart are not equal if
one needs fewer processes, fewer cores or much less memory. Among the candidates the one test
(sweeper.verdict) does not find slower than the fastest on their rounds, the one that costs least
is recommended, and the faster one named beside it; a runner-up that costs less is measured in
the rounds from the first. Pure: rounds, costs and the noise in, a decision out."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .. import verdict
from ..knobs import Knob
from ..noise import Noise
from ..store.confirmation import Confirmation, paired_ratios, round_evidence
from ..store.record import TrialRecord
from ..verdict import Verdict

# memory alone makes a configuration cheaper only when it saves at least this share: a few
# percent is the allocator's mood, not a cost a person would weigh against speed
MEMORY_SAVING = 0.10


@dataclass(frozen=True)
class Cost:
    """What a configuration takes of the machine: its processes (ranks, each with its loader
    workers), the cores its compute threads keep busy (over the ranks), its peak memory."""

    processes: int
    cores: int
    memory_mb: float

    @classmethod
    def of(cls, record: TrialRecord) -> Cost | None:
        """From a trial's run (None: it has no measurement)."""
        m = record.measurement
        if m is None:
            return None
        ranks = max(1, m.run.nproc_per_node)
        threads = record.fingerprint.threads if record.fingerprint is not None and record.fingerprint.threads else 1
        # the workers each rank asked for: the processes counted under a run also hold the
        # helpers of a worker's start, so they are the fallback only
        workers = (record.knobs or {}).get(Knob.LOADER_NUM_WORKERS)
        loaders = ranks * workers if isinstance(workers, int) else m.memory.dataloader_processes
        return cls(ranks + loaders, ranks * threads, m.memory.peak_memory_mb)

    def cheaper_than(self, other: Cost) -> bool:
        """Fewer processes; else as many and fewer cores; else as many of both and at least
        MEMORY_SAVING less memory."""
        if self.processes != other.processes:
            return self.processes < other.processes
        if self.cores != other.cores:
            return self.cores < other.cores
        return 0 < self.memory_mb <= (1 - MEMORY_SAVING) * other.memory_mb  # memory not recorded: no saving

    def saving(self, other: Cost) -> str:
        """What this one saves against `other`, in words, and what it takes more of, said apart:
        '1 process instead of 3 and 40% less memory', '2 processes instead of 3, though 2 cores
        instead of 1' (fewer processes count first: cheaper_than)."""
        said: list[str] = []
        more: list[str] = []
        for mine, theirs, what in ((self.processes, other.processes, "process"), (self.cores, other.cores, "core")):
            if mine != theirs:
                (said if mine < theirs else more).append(f"{_count(mine, what)} instead of {theirs}")
        if other.memory_mb > 0 and self.memory_mb <= (1 - MEMORY_SAVING) * other.memory_mb:
            said.append(f"{1 - self.memory_mb / other.memory_mb:.0%} less memory")
        return (" and ".join(said) or "the same cost") + (f", though {' and '.join(more)}" if more else "")


def cheaper_runners_up(fastest: Cost | None, runners_up: Mapping[int, Cost | None]) -> dict[int, str]:
    """The runners-up that cost less than the search's fastest (Cost.cheaper_than), each with
    what it saves: they join the confirmation from its first round, since only a candidate
    measured side by side can be found its equal. Others join only where the first round does
    not decide. Unknown costs: none."""
    if fastest is None:
        return {}
    return {n: c.saving(fastest) for n, c in runners_up.items() if c is not None and c.cheaper_than(fastest)}


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else ("es" if what.endswith("s") else "s"))


def cheaper_rivals(fastest: int, members: Iterable[int], baseline: int, costs: Mapping[int, Cost | None]) -> list[int]:
    """The members that cost less than the fastest (Cost.cheaper_than): each is the cheaper of
    equals if the test does not find it slower. The baseline is none: your own configuration
    tying the fastest is the confirmation's own verdict. Unknown costs: none."""
    own = costs.get(fastest)
    if fastest == baseline or own is None:
        return []
    found = ((n, costs.get(n)) for n in members if n not in (fastest, baseline))
    return [n for n, cost in found if cost is not None and cost.cheaper_than(own)]


def against_fastest(
    rounds: Mapping[int, Sequence[float | None]],
    n: int,
    fastest: int,
    noise: Noise,
    searched: Mapping[int, float] | None,
) -> Verdict:
    """The test on `n` against the fastest, on the evidence the confirmation's lead is judged on:
    their paired rounds, after one round with their search figures' ratio (round_evidence)."""
    return verdict.paired(round_evidence(rounds, n, fastest, searched, noise.sigma), noise.sigma).verdict


def cheapest_of_equals(
    decision: Confirmation,
    costs: Mapping[int, Cost | None],
    noise: Noise,
    searched: Mapping[int, float] | None = None,
) -> Confirmation:
    """The decision with its winner replaced by the cheapest candidate that costs less than it
    (cheaper_rivals) and that the test does not find slower (against_fastest: the rounds ask
    another round while it cannot tell yet, so this reads their last word); `faster` then names
    the fastest, and `cheaper` says what the recommended one saves. Unchanged where no such
    candidate is, or the costs are unknown."""
    fastest = decision.winner
    rivals = cheaper_rivals(fastest, decision.rounds, decision.baseline, costs)
    told = {n: against_fastest(decision.rounds, n, fastest, noise, searched) for n in rivals}
    equals = [(cost, n) for n in rivals if (cost := costs[n]) is not None and told[n] is not Verdict.SLOWER]
    if not equals:
        return decision
    own = costs[fastest]
    assert own is not None  # cheaper_rivals found some
    cost, chosen = min(equals, key=lambda e: (e[0].processes, e[0].cores, e[0].memory_mb))
    # the same, or still untold once the rounds ran out: no difference they could show
    ties = "ties" if told[chosen] is Verdict.SAME else "is not told from"
    return replace(
        Confirmation.of(decision.rounds, chosen, decision.baseline, decision.decided),
        faster=fastest,
        cheaper=f"#{chosen} {ties} #{fastest} by the test with {cost.saving(own)}: recommended "
        f"(#{fastest} read {_lead(decision, fastest, chosen):+.0%})",
    )


def _lead(decision: Confirmation, fastest: int, chosen: int) -> float:
    """How much faster the fastest read than the chosen one, median over the rounds."""
    ratios = paired_ratios(decision.rounds, fastest, chosen)
    return statistics.median(ratios) - 1 if ratios else 0.0
