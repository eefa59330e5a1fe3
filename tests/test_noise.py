"""The one model of run-to-run noise: its estimate, and every decision that reads it through the one test."""

from __future__ import annotations

import math

import optuna
import pytest
from test_converge import SPACE
from test_sweep_logic import _cpu_plan, trial

from sweeper.noise import Noise, noise_words
from sweeper.search import confirm, history, loop
from sweeper.search.stops import LoopState
from sweeper.store.confirmation import Confirmation
from sweeper.store.summary import SweepSummary
from sweeper.store.trials import Counts, repeated_figures

MAIN = tuple(SPACE)


def test_the_prior_alone_until_a_point_is_measured_twice():
    assert Noise.estimate(0.08, []) == Noise(0.08, 0.08, 0, 0)
    assert Noise.estimate(0.08, [[100.0]]) == Noise(0.08, 0.08, 0, 0)  # one run says nothing of the spread


def test_repeated_points_pull_the_estimate_from_the_prior_by_their_degrees_of_freedom():
    # two runs 1.5x apart: their log spread is large; the prior (4 degrees of freedom) holds it back
    wild = Noise.estimate(0.08, [[100.0, 150.0]])
    assert wild.points == 1 and wild.dof == 1
    expected = math.sqrt((4 * 0.08**2 + 2 * (math.log(1.5) / 2) ** 2) / 5)
    assert wild.sigma == pytest.approx(expected)
    assert 0.08 < wild.sigma < math.log(1.5)
    # many quiet repeats bring it below the prior
    quiet = Noise.estimate(0.08, [[100.0, 101.0, 99.5]] * 10)
    assert quiet.sigma < 0.04 and quiet.points == 10 and quiet.dof == 20
    # run_noise=0: the windows' noise alone, whatever the repeats say
    assert Noise.estimate(0.0, [[100.0, 150.0]]) == Noise(0.0, 0.0)


def test_too_noisy_and_the_words_the_user_reads():
    assert not Noise(0.08, 0.08).too_noisy and Noise(0.3, 0.08, 3, 2).too_noisy
    assert Noise(0.08, 0.08).describe() == "8.0% between runs (the prior, hydra.sweeper.run_noise=0.08)"
    assert Noise(0.11, 0.08, 2, 1).describe() == (
        "11.0% between runs (1 configuration measured more than once, with the prior hydra.sweeper.run_noise=0.08)"
    )
    assert "not modelled" in Noise(0.0, 0.0).describe()
    assert "too noisy to rank" in noise_words(0.3) and "too noisy" not in noise_words(0.08)


def test_the_estimate_reads_every_repeated_point_of_the_study_and_the_confirmation():
    a, b = {"loader.batch_size": 64}, {"loader.batch_size": 256}
    trials = [trial(0, a, sps=100.0), trial(1, b, sps=200.0), trial(2, a, sps=110.0)]
    reused = trial(3, b, sps=9999.0)
    reused.user_attrs["reused_from"] = 1  # a reused result is no run
    trials.append(reused)
    assert sorted(map(sorted, repeated_figures(trials))) == [[100.0, 110.0]]
    rounds = Confirmation(1, 0, {1: [190.0, 205.0], 0: [98.0, None]}, {1: 197.5, 0: 98.0}, 2.0, None, None, 1.0)
    assert sorted(map(sorted, repeated_figures(trials, rounds))) == [[98.0, 100.0, 110.0], [190.0, 200.0, 205.0]]


@pytest.mark.parametrize("prior", [0.03, 0.15])
def test_hydra_sweeper_run_noise_reaches_every_decision(tmp_path, prior):
    """One setting, one model, one test: the race and its floor, a gain, the convergence rule
    and the confirmation each decide otherwise at 3% than at 15% run-to-run noise."""
    plan = _cpu_plan(tmp_path, {"run_noise": prior}, ["search=quick"])
    noise = plan.noise([])
    assert noise == Noise(prior, prior)
    quiet = prior < 0.08

    # racing: the bar a trial races against, and the floor of its first two windows
    best = trial(1, {"loader.batch_size": 256}, sps=300.0)
    best.user_attrs["metrics"].update(samples_per_sec_ci_low=290.0, samples_per_sec_ci_high=310.0)
    asked = optuna.create_study().ask()
    job = loop._job(plan, asked, dict(plan.baseline_knobs), [], best, has_baseline=True, remaining_s=None, noise=noise)
    race = next(o for o in job.overrides if o.startswith("trial.race="))
    low = float(race.split("[")[1].split(",")[0])
    floor = float(next(o for o in job.overrides if o.startswith("trial.prune_below=")).split("=")[1])
    assert (low > 260.0) == quiet and (floor > 270.0) == quiet

    # a gain (the later knob's try at the best): 10% faster
    assert history.is_gain(trial(2, {}, sps=110.0), trial(0, {}, sps=100.0), noise) == quiet

    # convergence: the rule tests at the sweep's noise
    state = LoopState(noise=noise)
    rule = loop._rule(plan, state)
    assert rule is not None and rule.sigma == prior

    # the confirmation: two rounds 1.30x and 1.28x ahead are decided at 3%, not at 15%
    rounds = {1: [130.0, 128.0, None], 0: [100.0, 100.0, None]}
    assert confirm.decided(rounds, 2, baseline=0, noise=noise) == quiet
    # ... and a lead of 1.06x over three rounds is decided only where the noise is smaller than it
    small = {1: [106.0, 105.5, 106.5], 0: [100.0, 100.0, 100.0]}
    decision = confirm.decide(small, 0, noise, settled=confirm.decided(small, 3, 0, noise))
    assert decision.winner == 1 and decision.decided == quiet


def test_an_undecided_lead_on_a_machine_too_noisy_to_rank_keeps_your_configuration_and_says_why():
    from sweeper.store.trials import baseline_kept

    rounds = {1: [105.0, 101.0, 107.0], 0: [100.0, 101.0, 99.0]}
    # at 8% noise the leader is named, its lead marked undecided; at 30% your configuration is kept
    named = confirm.decide(rounds, 0, Noise(0.08, 0.08), settled=False)
    assert named.winner == 1 and not named.decided
    decision = confirm.decide(rounds, 0, Noise(0.30, 0.08, 4, 2), settled=False)
    assert decision.winner == 0 and not decision.decided
    base = trial(0, {"loader.batch_size": 64}, sps=100.0)
    base.user_attrs["baseline"] = True
    kept = baseline_kept([base, trial(1, {"loader.batch_size": 128}, sps=106.0)], decision)
    assert kept.startswith("Your configuration (the baseline, trial #0) is kept: the best candidate, trial #1,")
    assert "too noisy to rank: no winner can be defended" in kept
    # spread beyond the noise, but ahead on average far beyond it: a winner, even there
    clear = confirm.decide({1: [130.0, 183.0, 190.0], 0: [100.0, 100.0, 100.0]}, 0, Noise(0.30, 0.08), settled=False)
    assert clear.winner == 1 and clear.decided


def test_summary_json_carries_the_noise_and_reads_back(tmp_path):
    summary = SweepSummary(
        study="s",
        storage="sqlite:///x.db",
        stopped="n_trials=4 reached",
        counts=Counts(*([0] * 10)),
        winner=1,
        baseline=0,
        confirmation=None,
        fixed_overrides=(),
        workload="w",
        hardware_class="h",
        machine="m",
        noise=Noise(0.095, 0.08, 3, 2),
    )
    summary.write(tmp_path)
    back = SweepSummary.read(tmp_path / "summary.json")
    assert back.noise == Noise(0.095, 0.08, 3, 2) and back == summary
    assert SweepSummary.from_json({**summary.to_json(), "noise": None}).noise is None  # an earlier version's
