"""The cheapest of equals: a configuration the confirmation cannot tell from the fastest, and
cheaper in processes, cores or much less memory, is recommended, the faster named beside it."""

from __future__ import annotations

import pytest

from sweeper.noise import Noise
from sweeper.search.cheapest import Cost, cheapest_of_equals
from sweeper.search.confirm import Rounds, decide
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
        pytest.param(
            {4: Cost(3, 1, 900.0), 7: Cost(2, 2, 900.0)},
            7,
            "#7 ties #4 by the test with 2 processes instead of 3, though 2 cores instead of 1: recommended",
            id="fewer-processes-more-cores",
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


def _confirmed(costs, searched, figures, noise):
    """The confirmation's rounds as run_confirmation drives them (the runner-up that costs less
    from the first round), then the cheaper of equals: the rounds run and the decision."""
    planner = Rounds(chosen=[6, 2], baseline=0, rounds=3, waiting=[], searched=searched, noise=noise, costs=costs)
    while (step := planner.next_run()) is not None:
        planner.record(step, figures[step[1]][step[0]])
    decision = planner.decision()
    assert decision is not None
    return planner.rounds_run, cheapest_of_equals(decision, costs, noise, searched)


COSTS = {6: Cost(2, 2, 3922.0), 2: Cost(1, 2, 1723.0), 0: Cost(1, 2, 900.0)}


def test_a_cheaper_candidate_behind_in_the_round_and_the_search_is_no_equal():
    """A sweep of resnet18: #2 (1 process) read 301 samples/s beside #6's 345 (2 ranks) in the
    first round, 290 against 344 in the search. One round alone cannot tell them apart at 6.1%
    noise; with the search's ratio, as the lead over the baseline is judged, #2 is slower: #6 is
    the winner, after the one round."""
    noise = Noise(0.061, 0.08)
    searched = {6: 344.0, 2: 290.0, 0: 150.0}
    figures = {6: [345.0, 340, 342], 2: [301.0, 290, 295], 0: [154.0, 150, 152]}
    rounds_run, decision = _confirmed(COSTS, searched, figures, noise)
    assert rounds_run == 1 and decision.winner == 6 and decision.cheaper is None


def test_a_cheaper_candidate_the_test_cannot_tell_yet_asks_for_another_round():
    """7% behind in the first round and in the search: "cannot tell yet" asks for a round more,
    and once the rounds run out still untold, the cheaper one is recommended, in those words."""
    searched = {6: 300.0, 2: 279.0, 0: 150.0}
    figures = {6: [300.0, 300, 300], 2: [280.0, 282, 281], 0: [150.0, 151, 150]}
    rounds_run, decision = _confirmed(COSTS, searched, figures, NOISE)
    assert rounds_run == 3 and decision.winner == 2 and decision.faster == 6
    assert decision.cheaper is not None and decision.cheaper.startswith("#2 is not told from #6 by the test")


def test_a_cheaper_candidate_that_leads_needs_no_round_more():
    """Where the cheaper one reads fastest, it is the winner: no question of equals to ask."""
    searched = {6: 300.0, 2: 290.0, 0: 150.0}
    figures = {6: [290.0, 290, 290], 2: [300.0, 300, 300], 0: [150.0, 150, 150]}
    rounds_run, decision = _confirmed(COSTS, searched, figures, NOISE)
    assert rounds_run == 1 and decision.winner == 2 and decision.cheaper is None
