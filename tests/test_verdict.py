"""The one test of "is A faster than B": its four answers from single runs, several runs and
paired rounds, and the bars a run races against, derived from it."""

from __future__ import annotations

import math

import pytest

from sweeper import verdict
from sweeper.stats import T95
from sweeper.verdict import MATTERS, Verdict, Z

SIGMA = 0.08  # this VM's run-to-run noise: two single runs differ by 11% (one sigma)


def test_one_run_ten_percent_ahead_at_eight_percent_noise_cannot_be_told_yet():
    """+10% between two single runs is what chance gives about one time in five at 8% noise."""
    assert verdict.compare([110.0], [100.0], SIGMA) is Verdict.UNSURE
    assert not Verdict.UNSURE.decided
    # the 95% bar for two single runs: 1.96 * sqrt(2) * 8% = 22% in log
    assert verdict.compare([125.0], [100.0], SIGMA) is Verdict.FASTER
    assert verdict.compare([80.0], [100.0], SIGMA) is Verdict.SLOWER
    # on a quiet machine the same +10% is a gain
    assert verdict.compare([110.0], [100.0], 0.01) is Verdict.FASTER


def test_more_runs_narrow_the_interval_and_their_own_spread_decides_where_it_is_larger():
    assert verdict.compare([114.0, 113.0, 115.0], [100.0, 101.0, 99.0], SIGMA) is Verdict.FASTER
    assert verdict.compare([114.0], [100.0], SIGMA) is Verdict.UNSURE
    wild = verdict.runs([150.0, 80.0], [100.0, 101.0], SIGMA)  # spread far beyond 8%: Student's t on it
    assert wild.verdict is Verdict.UNSURE and wild.half > Z * SIGMA
    assert verdict.compare([], [100.0], SIGMA) is Verdict.UNSURE and verdict.compare([None, 0.0], [1.0], SIGMA) is (
        Verdict.UNSURE
    )


def test_runs_a_little_further_apart_than_the_noise_widen_its_interval_a_little():
    """Where runs spread more than the noise says, the two are pooled, the noise weighing
    NOISE_DOF degrees of freedom (a moderated t): a confirmation round at 1.76x and the search's
    2.12x decide the lead, where Student's t on their one degree of freedom alone (12.7) could not."""
    assert verdict.paired([13126 / 7458, 11894 / 5604], SIGMA).verdict is Verdict.FASTER
    at_noise = verdict.paired([1.2 / math.exp(SIGMA), 1.2 * math.exp(SIGMA)], SIGMA)  # stdev = sqrt(2) sigma
    beyond = verdict.paired([1.2 / math.exp(1.01 * SIGMA), 1.2 * math.exp(1.01 * SIGMA)], SIGMA)
    assert at_noise.half < beyond.half < 1.35 * at_noise.half
    pooled = math.sqrt((verdict.NOISE_DOF * 2 * SIGMA**2 + 2 * (1.01 * SIGMA) ** 2) / (verdict.NOISE_DOF + 1))
    assert beyond.half == pytest.approx(T95[verdict.NOISE_DOF] * pooled / math.sqrt(2))
    # many runs: their spread decides, the noise's weight fading
    many = [100.0 * math.exp(0.3 * ((-1) ** i)) for i in range(40)]
    assert verdict.runs(many, many, SIGMA).half == pytest.approx(1.96 * 0.3 * math.sqrt(40 / 39 * 2 / 40), rel=0.1)
    # no noise modelled: the runs' spread alone
    alone = verdict.paired([1.1, 1.3], 0.0)
    assert alone.half == pytest.approx(T95[0] * abs(math.log(1.3 / 1.1)) / math.sqrt(2) / math.sqrt(2))


def test_a_difference_too_small_to_matter_is_the_same_however_sure():
    # no noise modelled: the runs decide; 1% apart is no difference worth a knob
    assert verdict.compare([101.0], [100.0], 0.0) is Verdict.SAME
    assert verdict.compare([100.0 * (1 + 2 * MATTERS)], [100.0], 0.0) is Verdict.FASTER
    # one run each at 8% noise, 1% apart: no difference that counts was measured
    assert verdict.compare([18138.0], [18133.0], SIGMA) is Verdict.SAME
    assert verdict.paired([1.003] * 30, 0.002).verdict is Verdict.SAME


def test_paired_rounds_carry_two_runs_moods_each():
    assert verdict.paired([1.30, 1.28], SIGMA).verdict is Verdict.FASTER
    assert verdict.paired([1.11, 1.111], SIGMA).verdict is Verdict.UNSURE  # within the noise of two rounds
    assert verdict.paired([0.7, 0.72, 0.69], SIGMA).verdict is Verdict.SLOWER
    # spread beyond the noise, ahead on average far beyond it
    assert verdict.paired([1.3, 1.83, 1.90], 0.30).verdict is Verdict.FASTER
    # one ratio with no noise to bound it is a difference known exactly, as the runs' windows said
    assert verdict.paired([1.5], 0.0).verdict is Verdict.FASTER
    assert verdict.paired([], SIGMA).verdict is Verdict.UNSURE
    difference = verdict.paired([1.2, 1.2], SIGMA)
    low, high = difference.interval
    assert low < difference.ratio < high and difference.ratio == pytest.approx(1.2)


def test_figures_already_summarised_by_their_runs():
    assert verdict.figures(92.0, 3, 100.0, 3, SIGMA).verdict is Verdict.UNSURE
    assert verdict.figures(80.0, 3, 100.0, 3, SIGMA).verdict is Verdict.SLOWER
    assert verdict.figures(0.0, 3, 100.0, 3, SIGMA).verdict is Verdict.UNSURE


def test_the_race_and_the_floor_are_the_tests_bar_for_one_run():
    """A run decides by itself while it measures, so it is handed the figure below which the
    test calls one run slower than the best's one run."""
    floor = verdict.slower_below(100.0, SIGMA)
    assert floor == pytest.approx(80.1, abs=0.05)
    assert verdict.compare([floor * 0.999], [100.0], SIGMA) is Verdict.SLOWER
    assert verdict.compare([floor * 1.001], [100.0], SIGMA) is not Verdict.SLOWER
    factor = math.exp(Z * math.sqrt(2) * SIGMA)
    assert verdict.widened((99.0, 101.0), SIGMA) == pytest.approx((99.0 / factor, 101.0 * factor))
    # no noise: the least difference that counts
    assert verdict.slower_below(100.0, 0.0) == pytest.approx(100.0 / (1 + MATTERS))


def test_one_window_far_below_is_slower_than_the_floor_by_the_same_test():
    """A run's first window stops it where the test calls it slower than a run at the floor:
    0.8 of the floor at 8% noise, further down on a noisier machine, where one run says less."""
    floor = verdict.Floor.under(100.0, SIGMA)
    assert floor.prune_below == pytest.approx(verdict.slower_below(100.0, SIGMA))
    assert floor.far_below / floor.prune_below == pytest.approx(0.801, abs=0.001)
    assert verdict.compare([floor.far_below * 0.999], [floor.prune_below], SIGMA) is Verdict.SLOWER
    noisier = verdict.Floor.under(100.0, 0.15)
    assert noisier.far_below / noisier.prune_below < 0.7 < floor.far_below / floor.prune_below
