"""The cheapest of equals: two configurations the confirmation cannot tell apart are not equal if
one needs fewer processes, fewer cores or much less memory. Among the candidates the one test
(sweeper.verdict) does not find slower than the fastest on their rounds, the one that costs least
is recommended, and the faster one named beside it; a runner-up that costs less is measured in
the rounds from the first. Pure: rounds, costs and the noise in, a decision out."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .. import verdict
from ..knobs import Knob
from ..noise import Noise
from ..store.confirmation import Confirmation, paired_ratios
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
        """What this one saves against `other`, in words: '1 process instead of 3 and 40% less memory'."""
        said = []
        if self.processes != other.processes:
            said.append(f"{_count(self.processes, 'process')} instead of {other.processes}")
        if self.cores != other.cores:
            said.append(f"{_count(self.cores, 'core')} instead of {other.cores}")
        if other.memory_mb > 0 and self.memory_mb <= (1 - MEMORY_SAVING) * other.memory_mb:
            said.append(f"{1 - self.memory_mb / other.memory_mb:.0%} less memory")
        return " and ".join(said) or "the same cost"


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


def cheapest_of_equals(decision: Confirmation, costs: Mapping[int, Cost | None], noise: Noise) -> Confirmation:
    """The decision with its winner replaced by the cheapest candidate the test does not find
    slower than it on their paired rounds (verdict.paired), if one is cheaper (Cost.cheaper_than);
    `faster` then names the fastest, and `cheaper` says what the recommended one saves. The
    baseline is no candidate here: your own configuration tying the fastest is the confirmation's
    own verdict. Unchanged where no tie is cheaper, or the costs are unknown."""
    fastest = decision.winner
    if fastest == decision.baseline or (own := costs.get(fastest)) is None:
        return decision
    equals = [
        (cost, n)
        for n in decision.rounds
        if n not in (fastest, decision.baseline)
        and (cost := costs.get(n)) is not None
        and cost.cheaper_than(own)
        and verdict.paired(paired_ratios(decision.rounds, n, fastest), noise.sigma).verdict is not Verdict.SLOWER
    ]
    if not equals:
        return decision
    cost, chosen = min(equals, key=lambda e: (e[0].processes, e[0].cores, e[0].memory_mb))
    return replace(
        Confirmation.of(decision.rounds, chosen, decision.baseline, decision.decided),
        faster=fastest,
        cheaper=f"#{chosen} ties #{fastest} by the test with {cost.saving(own)}: recommended "
        f"(#{fastest} read {_lead(decision, fastest, chosen):+.0%})",
    )


def _lead(decision: Confirmation, fastest: int, chosen: int) -> float:
    """How much faster the fastest read than the chosen one, median over the rounds."""
    ratios = paired_ratios(decision.rounds, fastest, chosen)
    return statistics.median(ratios) - 1 if ratios else 0.0
