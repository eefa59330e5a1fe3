"""The cheapest of equals: a configuration the confirmation cannot tell from the fastest, and
cheaper in processes, cores or much less memory, is recommended, the faster named beside it."""

from __future__ import annotations

import pytest

from sweeper.noise import Noise
from sweeper.search.cheapest import Cost, cheapest_of_equals
from sweeper.search.confirm import decide
from sweeper.store.confirmation import Confirmation
from sweeper.store.record import TrialRecord

NOISE = Noise(0.08, 0.08)
# trial 0 the baseline; 4 the fastest, 7 within a few percent of it in every round
ROUNDS = {0: [1000.0, 980.0, 1010.0], 4: [2050.0, 1990.0, 2100.0], 7: [2000.0, 2010.0, 2040.0]}


@pytest.mark.parametrize(
    ("costs", "winner", "words"),
    [
        pytest.param(
            {4: Cost(3, 2, 900.0), 7: Cost(1, 2, 540.0)},
            7,
            "#7 ties #4 by the test with 1 process instead of 3 and 40% less memory: recommended",
            id="fewer-processes",
        ),
        pytest.param(
            {4: Cost(1, 2, 900.0), 7: Cost(1, 1, 900.0)}, 7, "with 1 core instead of 2: recommended", id="fewer-cores"
        ),
        pytest.param({4: Cost(1, 2, 900.0), 7: Cost(1, 2, 860.0)}, 4, None, id="a-few-percent-of-memory-is-no-cost"),
        pytest.param({4: Cost(1, 2, 900.0), 7: Cost(2, 2, 500.0)}, 4, None, id="dearer-in-processes"),
        pytest.param({4: Cost(3, 2, 900.0), 7: None}, 4, None, id="cost-unknown"),
        pytest.param({4: Cost(1, 1, 0.0), 7: Cost(1, 1, 0.0)}, 4, None, id="memory-not-recorded"),
    ],
)
def test_a_tie_that_costs_less_is_recommended_and_the_faster_named(costs, winner, words):
    decision = decide(ROUNDS, 0, NOISE)
    assert decision is not None and decision.winner == 4
    chosen = cheapest_of_equals(decision, costs, NOISE)
    assert chosen.winner == winner
    if words is None:
        assert chosen == decision
        return
    assert words in (chosen.cheaper or "") and chosen.faster == 4
    assert chosen.speedup == pytest.approx(2.0, rel=0.02)  # the recommended one's own, over the baseline
    # stored and read back as it was
    assert Confirmation.from_json(chosen.to_json()) == chosen


def test_a_cheaper_configuration_beyond_the_noise_behind_is_no_equal():
    rounds = {0: [1000.0, 1000.0, 1000.0], 4: [2400.0, 2350.0, 2420.0], 7: [1900.0, 1880.0, 1950.0]}
    decision = decide(rounds, 0, NOISE)
    assert decision is not None
    assert cheapest_of_equals(decision, {4: Cost(3, 2, 900.0), 7: Cost(1, 1, 300.0)}, NOISE).winner == 4


def test_a_runs_cost_is_its_ranks_with_their_workers_its_threads_and_its_memory():
    attrs = {
        "status": "ok",
        "metrics": {
            "samples_per_sec": 100.0,
            "nproc_per_node": 2,
            "dataloader_processes": 4,
            "peak_memory_mb": 750.0,
        },
        "fingerprint": '{"threads": 3}',
    }
    assert Cost.of(TrialRecord.from_attrs(attrs)) == Cost(processes=6, cores=6, memory_mb=750.0)
    # the workers asked for, where the trial says: the processes counted also hold their helpers
    attrs["knobs"] = {"loader.num_workers": 1}
    assert Cost.of(TrialRecord.from_attrs(attrs)) == Cost(processes=4, cores=6, memory_mb=750.0)
    assert Cost.of(TrialRecord.from_attrs({"status": "crash"})) is None
