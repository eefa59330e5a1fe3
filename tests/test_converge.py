"""The convergence stop: the rule on hand-made trials, and the ask/tell loop ending on it."""

from __future__ import annotations

import contextlib

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial
from test_sweep_logic import _cpu_plan, ok_result

from sweeper.result import Status
from sweeper.search import loop
from sweeper.search.converge import Converged
from sweeper.store.record import TrialRecord
from sweeper.store.study import StoredStudy
from sweeper.store.trials import config_of, count, ranked

BATCH, WORKERS = "loader.batch_size", "loader.num_workers"
SPACE = {BATCH: CategoricalDistribution([64, 256]), WORKERS: CategoricalDistribution([0, 2])}
MAIN = (BATCH, WORKERS)


def made(number, sps, *, batch=64, workers=0, status="ok", state=TrialState.COMPLETE, **attrs):
    knobs = {BATCH: batch, WORKERS: workers}
    t = create_trial(
        state=state,
        values=[sps] if state == TrialState.COMPLETE else None,
        params=knobs,
        distributions={k: CategoricalDistribution([v]) for k, v in knobs.items()},
        user_attrs={"knobs": knobs, "status": status, "metrics": {"samples_per_sec": sps}, **attrs},
    )
    t.number = number
    return t


def study_of(behind_figures, best=100.0):
    """A baseline at 80, a recipe (queued) as the best, then sampled trials at these figures."""
    trials = [made(0, 80.0, baseline=True), made(1, best, batch=256, workers=2, origin="recipe: the largest batch")]
    return trials + [made(2 + i, f, batch=64, workers=2) for i, f in enumerate(behind_figures)]


def second_run(number, sps, *, of):
    """The recipe's point (#`of`) measured once more: told as failed, so that the sampler leaves it out."""
    origin = "recipe: the largest batch; measured once more"
    return made(
        number, sps, batch=256, workers=2, status="second-run", state=TrialState.FAIL, origin=origin, recheck_of=of
    )


RULE = Converged()  # the default: the last 8 sampled, one near-tie allowed, a proposal's level


def test_eight_sampled_trials_behind_a_recipe_end_the_search_with_its_rule_said():
    assert RULE.reason(study_of([84.0] * 7), SPACE, MAIN) is None  # seven: one more to go
    assert RULE.reason(study_of([84.0] * 8), SPACE, MAIN) == (
        "converged: the best is #1, a recipe; the last 8 sampled trials found nothing beyond the noise "
        "(8 ran at least 10% behind the best before them) (hydra.sweeper.converge=false runs every trial)"
    )


def test_behind_is_beyond_the_noise_ten_percent_a_draw_twelve_percent_behind_is_no_near_tie():
    """The main job's sampler keeps drawing the best's neighbours 10-12% behind it: behind the
    noise, no plateau. Counted as near-ties (at 15%, as before), two of them ran it to n_trials."""
    draws = [88.0, 84.0, 89.0, 84.0, 84.0, 88.0, 84.0, 84.0]
    assert RULE.reason(study_of(draws), SPACE, MAIN) == (
        "converged: the best is #1, a recipe; the last 8 sampled trials found nothing beyond the noise "
        "(8 ran at least 10% behind the best before them) (hydra.sweeper.converge=false runs every trial)"
    )
    assert Converged(behind=0.15).reason(study_of(draws), SPACE, MAIN) is None


def test_one_near_tie_is_the_sampler_finding_the_best_again_two_are_a_plateau_to_search():
    one = study_of([84.0, 84.0, 97.0, 84.0, 84.0, 84.0, 84.0, 84.0])
    assert RULE.reason(one, SPACE, MAIN) == (
        "converged: the best is #1, a recipe; the last 8 sampled trials found nothing beyond the noise "
        "(7 ran at least 10% behind the best before them, 1 within 8% of it) "
        "(hydra.sweeper.converge=false runs every trial)"
    )
    two = study_of([84.0, 99.0, 84.0, 84.0, 103.0, 84.0, 84.0, 84.0])
    assert RULE.reason(two, SPACE, MAIN) is None
    assert Converged(ties=2).reason(two, SPACE, MAIN) is not None
    assert Converged(ties=0).reason(one, SPACE, MAIN) is None


def test_a_near_tie_that_ran_a_little_faster_keeps_the_recipes_level():
    """#4 ran 5% faster than the recipe, within the noise: it is the best, but the level was the recipe's."""
    line = RULE.reason(study_of([84.0, 84.0, 105.0] + [84.0] * 5), SPACE, MAIN)
    assert line is not None and line.startswith("converged: the best is #4, within the noise of #1, a recipe;")


def test_a_recipe_run_that_read_low_sets_the_level_only_within_the_level_band():
    """The race's recipe read 15,054 samples/s in one sweep and 17,813 in another; a sampled
    point's 17,297 then set the best's level (the recipe 13% below it, beyond the 8% noise) and
    the sweep ran n_trials. `level` widens the band a proposal's run may read below the best."""
    low = study_of([84.0, 84.0, 115.0] + [84.0] * 6, best=100.0)  # #4 15% above the recipe, then 6 behind
    low[4] = made(4, 113.0, batch=64, workers=2)
    low += [made(11, 84.0, batch=64, workers=2) for _ in range(2)]
    for i, t in enumerate(low):
        t.number = i
    assert RULE.reason(low, SPACE, MAIN) is None  # the sampler's level: n_trials
    line = Converged(level=0.16).reason(low, SPACE, MAIN)
    assert line is not None and line.startswith("converged: the best is #4, within the noise of #1, a recipe;")


def test_a_recipe_a_sampled_point_beat_beyond_the_noise_is_measured_once_more_at_its_own_place():
    """The recipe (#1) read 100, a sampled point (#4) 115: beyond the noise, so the sampler's
    level, and the sweep would run n_trials. Once 6 sampled trials since #4 found nothing faster,
    the recipe is measured once more (#11), and that run (112, within the noise of #4) stands at
    the recipe's place: #4 found nothing beyond the best before it, and the sweep stops on the
    recipe's level."""
    first = study_of([84.0, 84.0, 115.0] + [84.0] * 6)
    assert RULE.recheck_due(first[:4]) is None  # the recipe is still the best
    assert RULE.recheck_due(first[:-1]) is None  # 5 sampled trials since #4: the sampler may still move it
    assert RULE.recheck_due(first).number == 1 and Converged(recheck_after=0).recheck_due(first[:5]).number == 1
    again = second_run(11, 112.0, of=1)
    assert RULE.reason(first + [made(12, 84.0)], SPACE, MAIN) is None  # without the second run: n_trials
    line = RULE.reason(first + [again, made(12, 84.0)], SPACE, MAIN)
    assert line is not None and line.startswith(
        "converged: the best is #4, within the noise of #11, a recipe measured once more (#1's point); "
        "the last 8 sampled trials found nothing beyond the noise (7 ran at least 10% behind the best before them, "
        "1 within 8% of it)"
    )
    assert RULE.recheck_due(first + [again]) is None  # once a setup
    # read low again: the sampler's level stays, and the recipe is not measured a third time
    low = second_run(11, 101.0, of=1)
    assert RULE.reason(first + [low, made(12, 84.0)], SPACE, MAIN) is None
    assert RULE.recheck_due(first + [low]).number == 4  # the best's own point next
    assert Converged(recheck_best=False).recheck_due(first + [low]) is None


def test_a_sampled_best_still_beyond_the_proposals_is_measured_once_more_and_stands_at_its_mean():
    """The recipe (#1) read 100 and 101, a sampled point (#4) 115: the recipe read low twice, or
    #4 read high once. #4's point is measured once more (#12): at 100, its level is the mean of
    its runs (107.5), within the noise of the recipe's, and the sweep stops on the recipe's level;
    at 114, #4 stands apart and the sweep goes on (no third run of either)."""
    first = study_of([84.0, 84.0, 115.0] + [84.0] * 6) + [second_run(11, 101.0, of=1)]
    sampled_again = made(12, 100.0, batch=64, workers=2, status="second-run", state=TrialState.FAIL, recheck_of=4)
    waiting = made(12, 0.0, batch=64, workers=2, state=TrialState.WAITING, recheck_of=1)
    assert RULE.recheck_due(first[:-1] + [waiting]) is None  # the recipe's second run is not in yet
    line = RULE.reason(first + [sampled_again, made(13, 84.0)], SPACE, MAIN)
    assert line is not None and line.startswith(
        "converged: the best is #4 (measured twice: 115 and 100 samples/s), within the noise of #1, a recipe;"
    )
    assert RULE.recheck_due(first + [sampled_again]) is None
    high = made(12, 114.0, batch=64, workers=2, status="second-run", state=TrialState.FAIL, recheck_of=4)
    assert RULE.reason(first + [high, made(13, 84.0)], SPACE, MAIN) is None
    assert RULE.recheck_due(first + [high]) is None


def test_only_a_proposal_within_the_recheck_band_of_the_sampled_best_is_measured_once_more():
    rule = Converged(recheck_after=0)
    far = study_of([84.0, 84.0, 155.0])  # #4 55% above the recipe: within 60%
    assert rule.recheck_due(far).number == 1
    farther = study_of([84.0, 84.0, 170.0])  # 70% above: the recipe is slower
    assert rule.recheck_due(farther) is None
    assert Converged(recheck=0.8, recheck_after=0).recheck_due(farther).number == 1
    assert Converged(recheck=0.5, recheck_after=0).recheck_due(far) is None
    assert Converged(recheck=None, recheck_after=0).recheck_due(far) is None
    sampled_only = [made(0, 80.0, baseline=True), made(1, 100.0, batch=256, workers=2)]  # no proposal
    assert rule.recheck_due(sampled_only) is None


def test_a_later_knobs_try_at_a_recipe_is_trusted_as_the_recipe():
    """A later knob tried at the recipe's point (forkserver workers, say) reached the best's level
    first: it is the recipe's point with that knob changed, trusted as the recipe is."""
    trials = study_of([84.0] * 3)
    trials.append(
        made(5, 103.0, batch=256, workers=2, origin="later", probe_knob="loader.multiprocessing_context", probe_of=1)
    )
    trials.append(made(6, 110.0, batch=256, workers=2))  # the best: 6.8% above #5, 10% above the recipe
    trials += [made(7 + i, 84.0) for i in range(6)]
    line = RULE.reason(trials, SPACE, MAIN)
    assert line is not None and line.startswith(
        "converged: the best is #6, within the noise of #5, a later knob's try at #1;"
    )
    sampled = [t for t in trials if t.number != 5]  # without the try, #6 is the sampler's own gain
    assert RULE.reason(sampled, SPACE, MAIN) is None


def test_a_best_the_sampler_found_itself_runs_n_trials_or_as_long_again_when_told():
    """A gain beyond the noise by a sampled trial: the proposals missed, the sampler is still learning."""
    late = [84.0] * 3 + [150.0] + [84.0] * 8  # #5 the best: 6 measured up to it, 8 since
    assert RULE.reason(study_of(late), SPACE, MAIN) is None
    assert RULE.reason(study_of(late + [84.0] * 20), SPACE, MAIN) is None
    as_long = Converged(sampled_best=1.0)
    assert as_long.reason(study_of(late[:-3]), SPACE, MAIN) is None  # 5 since: the last 8 sampled hold the best
    line = as_long.reason(study_of(late), SPACE, MAIN)
    assert line is not None and line.startswith("converged: the best is #5, the sampler's;")


def test_a_gain_beyond_the_noise_among_the_last_eight_keeps_the_search_going():
    assert RULE.reason(study_of([84.0] * 3 + [120.0] + [84.0] * 4), SPACE, MAIN) is None


def test_your_own_configuration_as_the_best_is_no_proposal_unless_trusted():
    trials = [made(0, 100.0, baseline=True), made(1, 60.0, batch=256, workers=2, origin="recipe: the largest batch")]
    trials += [made(2 + i, 70.0, batch=64, workers=2) for i in range(8)]
    assert RULE.reason(trials, SPACE, MAIN) is None
    line = Converged(baseline_trusted=True).reason(trials, SPACE, MAIN)
    assert line is not None and line.startswith("converged: the best is #0, your configuration;")


def test_the_earlier_thresholds_are_the_rule_with_no_tie_no_noise_and_a_late_best_as_long_again():
    """The thresholds shipped before, still replayed: the last 8 sampled all 15% behind the best
    itself, as many measured since the best as before it, whoever found it."""
    earlier = Converged(after=8, behind=0.15, ties=0, noise=0.0, sampled_best=1.0, baseline_trusted=True)
    late = [84.0] * 8 + [150.0] + [84.0] * 8  # #10 the best, 8 behind it: 11 measured up to it, 8 since
    assert earlier.reason(study_of(late), SPACE, MAIN) is None
    assert earlier.reason(study_of(late + [84.0] * 3), SPACE, MAIN) is not None


def test_pruned_and_failed_trials_count_as_behind_skipped_ones_do_not_count():
    trials = study_of([84.0] * 5)
    trials.append(made(7, 95.0, status="pruned", state=TrialState.PRUNED))  # the race put it behind
    trials.append(made(8, 0.0, status="oom", state=TrialState.FAIL))
    trials.append(made(9, 0.0, status="skipped", state=TrialState.PRUNED))  # no answer about the space
    assert RULE.reason(trials, SPACE, MAIN) is None  # 7 sampled so far
    trials.append(made(10, 70.0))
    assert RULE.reason(trials, SPACE, MAIN) is not None


def test_never_before_each_main_knob_was_measured_at_two_values():
    trials = [made(0, 80.0, baseline=True)] + [made(i, 50.0) for i in range(1, 10)]
    trials[1] = made(1, 100.0, workers=2, origin="recipe: the largest batch")  # workers at two values, batch at one
    assert RULE.reason(trials, SPACE, MAIN) is None
    trials.append(made(10, 50.0, batch=256))
    assert RULE.reason(trials, SPACE, MAIN) is not None
    # a knob with a single value in the space asks for nothing
    one = {**SPACE, "backend.threads": CategoricalDistribution([1])}
    assert RULE.reason(trials, one, (*MAIN, "backend.threads")) is not None


def test_a_trial_on_the_pareto_front_of_several_objectives_is_no_trial_behind():
    trials = study_of([84.0] * 8)
    assert RULE.reason(trials, SPACE, MAIN) is not None
    assert RULE.reason(trials, SPACE, MAIN, front={1, 4}) is None


class Figures:
    """Answers every job: the baseline (#0) 100 samples/s, the first recipe (#1) 300, any other 60."""

    def batch(self, jobs):
        return [ok_result({0: 100.0, 1: 300.0}.get(job.trial_number, 60.0)) for job in jobs]

    def on_node(self, host):
        return contextlib.nullcontext()


@pytest.mark.parametrize("converge", [True, False])
def test_the_loop_stops_once_converged_and_runs_every_trial_when_told_not_to(tmp_path, converge):
    plan = _cpu_plan(tmp_path, {"n_trials": 30, "converge": converge, "sampler": {"seed": 3}}, [])
    storage = optuna.storages.InMemoryStorage()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stored = StoredStudy(
        optuna.create_study(storage=storage, study_name="w@x", directions=list(plan.directions)), storage
    )
    why = loop.optimize(stored, plan, Figures(), stopped=lambda: None, remaining=lambda: None)
    trials = stored.trials(plan.fixed)
    if converge:
        assert why.startswith("converged: the best is #1, a recipe; the last 8 sampled trials found nothing")
        assert count(trials).measured < 30
        assert not [t for t in trials if t.state == TrialState.WAITING]  # nothing left queued to run unasked
    else:
        assert why == "n_trials=30 reached" and count(trials).measured == 30


class RecipeReadLow:
    """The baseline 100; the first recipe 150 in its first run and `recipe_again` in its second;
    the first sampled point 180, and `sampled_again` in a second run; anything else 60."""

    def __init__(self, stored, recipe_again=175.0, sampled_again=180.0):
        self.stored, self.runs, self.sampled = stored, [], None
        self.recipe_again, self.sampled_again = recipe_again, sampled_again

    def batch(self, jobs):
        self.runs.extend(job.trial_number for job in jobs)
        return [ok_result(self.figure(job.trial_number)) for job in jobs]

    def figure(self, number):
        record = TrialRecord.of(self.stored.trial(number))
        if record.baseline:
            return 100.0
        if record.recheck_of is not None:
            return self.recipe_again if record.recheck_of == 1 else self.sampled_again
        if number == 1:
            return 150.0
        if record.origin is None and self.sampled in (None, number):
            self.sampled = number
            return 180.0
        return 60.0

    def on_node(self, host):
        return contextlib.nullcontext()


def test_the_loop_measures_a_recipe_that_read_low_once_more_and_stops_on_its_level(tmp_path, capsys):
    plan = _cpu_plan(tmp_path, {"n_trials": 30, "sampler": {"seed": 3}}, [])
    storage = optuna.storages.InMemoryStorage()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stored = StoredStudy(
        optuna.create_study(storage=storage, study_name="w@x", directions=list(plan.directions)), storage
    )
    runner = RecipeReadLow(stored)
    why = loop.optimize(stored, plan, runner, stopped=lambda: None, remaining=lambda: None)
    trials = stored.trials(plan.fixed)
    again = [t for t in trials if TrialRecord.of(t).recheck_of is not None]
    assert len(again) == 1 and again[0].number in runner.runs  # measured, not answered from #1's run
    second = TrialRecord.of(again[0])
    assert second.recheck_of == 1 and config_of(again[0]) == config_of(trials[1]) and second.origin.startswith("recipe")
    # kept from the sampler (told as failed), not ranked, not counted toward n_trials
    assert again[0].state == TrialState.FAIL and second.status == Status.SECOND_RUN and second.samples_per_sec == 175.0
    assert again[0] not in ranked(trials) and count(trials).measured == len(runner.runs) - 1
    out = capsys.readouterr().out
    assert "measuring #1 once more (150 samples/s, recipe" in out
    assert f"#{again[0].number}, #1's point measured once more -> 175 samples/s (its first run: 150)" in out
    assert why.startswith(f"converged: the best is #{runner.sampled}, within the noise of #{again[0].number}, ")
    assert count(trials).measured < 30


def test_the_loop_measures_a_sampled_best_once_more_when_the_recipe_read_low_twice(tmp_path, capsys):
    """The recipe read 150 and 152, the sampled best 180 once: its point is measured once more,
    reads 140, and the best's level (160, the mean) is within the noise of the recipe's."""
    plan = _cpu_plan(tmp_path, {"n_trials": 30, "sampler": {"seed": 3}}, [])
    storage = optuna.storages.InMemoryStorage()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stored = StoredStudy(
        optuna.create_study(storage=storage, study_name="w@x", directions=list(plan.directions)), storage
    )
    runner = RecipeReadLow(stored, recipe_again=152.0, sampled_again=140.0)
    why = loop.optimize(stored, plan, runner, stopped=lambda: None, remaining=lambda: None)
    trials = stored.trials(plan.fixed)
    again = {TrialRecord.of(t).recheck_of: t for t in trials if TrialRecord.of(t).recheck_of is not None}
    assert sorted(again) == [1, runner.sampled] and all(t.number in runner.runs for t in again.values())
    assert all(TrialRecord.of(t).status == Status.SECOND_RUN for t in again.values())
    out = capsys.readouterr().out
    assert (
        f"measuring #{runner.sampled} once more (180 samples/s, the sampler's): the proposal's second run read 152, "
        "and one run can read high"
    ) in out
    assert why.startswith(
        f"converged: the best is #{runner.sampled} (measured twice: 180 and 140 samples/s), within the noise of #1, "
        "a recipe;"
    )
    assert count(trials).measured < 30


def test_a_configuration_asked_again_is_no_new_evidence():
    """Answered from the study, a point asked again says nothing new about the space: the last 8
    are the last 8 new configurations."""
    trials = study_of([84.0] * 7)
    trials.append(made(9, 100.0, batch=256, workers=2, reused_from=1))  # the best's own point, again
    assert RULE.reason(trials, SPACE, MAIN) is None
    trials.append(made(10, 84.0))
    assert RULE.reason(trials, SPACE, MAIN) is not None


@pytest.mark.parametrize("reuse_studies", [True, False])
def test_another_studys_result_for_the_same_workload_and_hardware_is_taken_when_asked(tmp_path, reuse_studies):
    """hydra.sweeper.reuse=studies: a configuration another study of the same workload and
    hardware class measured (here the baseline, at 100) answers the trial without a run, ranks as
    this study's own and counts as reused; a study of another workload lends nothing."""
    plan = _cpu_plan(
        tmp_path, {"n_trials": 2, "reuse": "studies" if reuse_studies else "study"}, ["search.recipes=false"]
    )
    storage = optuna.storages.InMemoryStorage()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def study(name, workload):
        stored = StoredStudy(optuna.create_study(storage=storage, study_name=name), storage)
        stored.describe(plan.objectives, plan.hardware_class, workload=workload)
        return stored

    night1, other = study("night1@x", plan.workload), study("lm@x", "language_model train")
    for lender, figure in ((night1, 100.0), (other, 5.0)):
        t = create_trial(
            state=TrialState.COMPLETE,
            values=[figure],
            params={},
            distributions={},
            user_attrs={"knobs": dict(plan.baseline_knobs), "status": "ok", "fixed_overrides": list(plan.fixed)}
            | {"metrics": {"samples_per_sec": figure}},
        )
        lender.study.add_trial(t)
    night2 = study("night2@x", plan.workload)
    runs = []

    class Counting(Figures):
        def batch(self, jobs):
            runs.extend(jobs)
            return super().batch(jobs)

    loop.optimize(night2, plan, Counting(), stopped=lambda: None, remaining=lambda: None)
    trials = night2.trials(plan.fixed)
    baseline = trials[0]
    if reuse_studies:
        assert baseline.user_attrs["borrowed_from"] == "night1@x#0" and baseline.values == [100.0]
        assert count(trials).reused == 1 and count(trials).measured == 2 and len(runs) == 2
        assert baseline.number in [t.number for t in ranked(trials)]  # ranked as this study's own
    else:
        assert "borrowed_from" not in baseline.user_attrs and count(trials).reused == 0 and len(runs) == 2
