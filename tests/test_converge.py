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
from sweeper.search.converge import Converged, Untold
from sweeper.search.opening import make_sampler
from sweeper.store.record import TrialRecord
from sweeper.store.study import StoredStudy
from sweeper.store.trials import count, ranked
from sweeper.verdict import Verdict

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


RULE = Converged()  # the default: the last 8 sampled, at 8% noise a run

LINE = (
    "converged: the best is #1; none of the last 8 sampled trials was faster than the best before it by the "
    "test (8.0% noise a run) (hydra.sweeper.converge=false runs every trial)"
)


def test_eight_sampled_trials_none_faster_by_the_test_end_the_search_with_its_rule_said():
    assert RULE.reason(study_of([84.0] * 7), SPACE, MAIN) is None  # seven: one more to go
    assert RULE.reason(study_of([84.0] * 8), SPACE, MAIN) == LINE


def test_a_sampled_trial_faster_than_the_best_before_it_by_the_test_keeps_the_search_going():
    """The stretch: a trial faster than the best before it by the test (25% above it at 8%
    noise: two single runs differ by sigma*sqrt(2) = 11%) is a gain, and the last 8 must follow it."""
    assert RULE.reason(study_of([84.0] * 3 + [125.0] + [84.0] * 4), SPACE, MAIN) is None
    assert RULE.reason(study_of([84.0] * 3 + [125.0] + [84.0] * 30), SPACE, MAIN) is None  # and the start points missed


def test_a_best_the_test_cannot_tell_from_the_start_points_asks_for_more_runs():
    """A sampled run 10% above the recipe is what chance gives one time in five at 8% noise: the
    test cannot tell yet, and the search's next trials are the runs it asks for; it stops once
    the best is a start point's, or the same as theirs by the test (here on a quiet machine)."""
    near = study_of([84.0] * 2 + [110.0] + [84.0] * 8)
    assert RULE.reason(near, SPACE, MAIN) is None
    same = study_of([84.0] * 2 + [100.5] + [84.0] * 8)
    line = Converged(sigma=0.001).reason(same, SPACE, MAIN)
    assert line is not None and line.startswith("converged: the best is #4;")
    below = study_of([84.0] * 2 + [99.0] + [84.0] * 8)
    assert RULE.reason(below, SPACE, MAIN) == LINE


def again_of(number, of, sps, *, batch, workers=2):
    """A run of trial `of`'s point measured once more: kept from the sampler (FAIL), status ok."""
    return made(
        number,
        sps,
        batch=batch,
        workers=workers,
        state=TrialState.FAIL,
        origin=f"#{of}; measured once more",
        again={"why": "recheck", "of": of},
    )


def test_cannot_tell_yet_asks_for_another_run_of_the_point_with_fewer_up_to_three_each():
    """The stretch is clean and the knobs were tried; only the test's "cannot tell yet" on the
    best (#4, 110) against the recipe (#1, 100) keeps the sweep going: it asks for a run of the
    one with fewer runs, the best first, until each has three."""
    trials = study_of([84.0] * 2 + [110.0] + [84.0] * 8)
    assert RULE.ask_again(trials, SPACE, MAIN).trial.number == 4
    trials.append(again_of(13, 4, 106.0, batch=64))
    assert RULE.reason(trials, SPACE, MAIN) is None
    assert RULE.ask_again(trials, SPACE, MAIN).trial.number == 1  # two runs against one
    trials.append(again_of(14, 1, 101.0, batch=256))
    assert RULE.ask_again(trials, SPACE, MAIN).trial.number == 4  # two each: the best's point
    trials += [again_of(15, 4, 109.0, batch=64), again_of(16, 1, 100.0, batch=256)]
    assert RULE.reason(trials, SPACE, MAIN) is None  # 8% apart at three runs each: still cannot tell
    assert RULE.ask_again(trials, SPACE, MAIN) == Untold(trials[4], trials[1])  # three runs each: it asks no more


def test_a_second_run_that_tells_the_same_ends_the_search_and_one_that_tells_faster_goes_on():
    trials = study_of([84.0] * 2 + [110.0] + [84.0] * 8)
    same = [*trials, again_of(13, 4, 91.0, batch=64)]  # the best's two runs: 100 on average
    assert RULE.reason(same, SPACE, MAIN) == LINE.replace("#1;", "#4;")
    assert RULE.ask_again(same, SPACE, MAIN) is None
    faster = study_of([84.0] * 2 + [140.0] + [84.0] * 8)  # 40% above, twice: the recipes missed
    faster.append(again_of(13, 4, 136.0, batch=64))
    assert RULE.reason(faster, SPACE, MAIN) is None and RULE.ask_again(faster, SPACE, MAIN) is None


def test_a_best_whose_second_run_fell_behind_the_start_points_level_is_no_longer_the_best():
    """The best is the point at the highest level, the mean of its runs: #4's 110 then 80 is
    below the recipe's 100, so the recipe is the best again, and the sweep has converged."""
    trials = [*study_of([84.0] * 2 + [110.0] + [84.0] * 8), again_of(13, 4, 80.0, batch=64)]
    assert RULE.reason(trials, SPACE, MAIN) == LINE
    assert RULE.ask_again(trials, SPACE, MAIN) is None


def test_a_best_faster_than_the_start_points_on_one_run_is_measured_again_before_they_count_as_missed():
    """The fastest of many single runs is the one luck lifted most: 140 against the recipe's 100
    on one run each is faster by the test, but the sweep asks the best's point again before it
    reads the recipes as missed; a second run back at the recipe's level leaves the test unsure."""
    trials = study_of([84.0] * 2 + [140.0] + [84.0] * 8)
    asked = RULE.ask_again(trials, SPACE, MAIN)
    assert asked is not None and asked.trial.number == 4 and asked.told is Verdict.FASTER
    trials.append(again_of(13, 4, 100.0, batch=64))
    assert RULE.reason(trials, SPACE, MAIN) is None
    asked = RULE.ask_again(trials, SPACE, MAIN)
    assert asked is not None and asked.trial.number == 1 and asked.told is Verdict.UNSURE
    assert asked.best.number == 4  # the best at its runs' mean, 120 against the recipe's 100


def test_what_the_rule_waits_on_is_said_where_the_sweep_ends_before_it_converged():
    """A sweep that ends on n_trials or its budget says why it had not converged: a stretch too
    short, a recent gain, a knob tried at one value, or the best against the start points, at
    their runs; nothing once it has converged."""
    assert RULE.waiting_on(study_of([84.0] * 5), SPACE, MAIN) == (
        "5 sampled trial(s) so far of the 8 in a row without a gain it waits for"
    )
    gain = RULE.waiting_on(study_of([84.0] * 3 + [125.0] + [84.0] * 4), SPACE, MAIN)
    assert gain == (
        "#5 was faster than the best before it 4 sampled trial(s) ago, and the rule waits for 8 in a row without a gain"
    )
    one_value = [made(0, 80.0, baseline=True), *(made(1 + i, 84.0) for i in range(9))]
    assert RULE.waiting_on(one_value, SPACE, MAIN) == f"{BATCH}, {WORKERS} measured at one value only"
    untold = study_of([84.0] * 2 + [110.0] + [84.0] * 8)
    untold += [again_of(13, 4, 106.0, batch=64), again_of(14, 1, 101.0, batch=256)]
    assert RULE.waiting_on(untold, SPACE, MAIN) == (
        "the best, #4 (108 samples/s, 2 runs), and the start points' best, #1 (100, 2 runs), at 8.0% noise a run, "
        "not yet told apart by the test"
    )
    untold += [again_of(15, 4, 109.0, batch=64), again_of(16, 1, 100.0, batch=256)]
    assert RULE.waiting_on(untold, SPACE, MAIN) == (
        "the best, #4 (108 samples/s, 3 runs), and the start points' best, #1 (100, 3 runs), at 8.0% noise a run, "
        "still untold by the test after 3 runs each"
    )
    assert [t.number for t in RULE.ask_again(untold, SPACE, MAIN)] == [4, 1]  # Untold: it asks no more runs of them
    missed = [*study_of([84.0] * 2 + [140.0] + [84.0] * 8), again_of(13, 4, 136.0, batch=64)]
    said = RULE.waiting_on(missed, SPACE, MAIN)
    assert said is not None and said.endswith(
        "faster by the test: the sampler is still learning where the start points missed"
    )
    assert RULE.waiting_on(study_of([84.0] * 8), SPACE, MAIN) is None
    assert RULE.reason(study_of([84.0] * 8), SPACE, MAIN) == LINE


def test_your_own_configuration_as_the_best_is_no_start_point():
    """Nothing the sweep tried beat your configuration: the recipes missed, and the sampler is
    still learning the space."""
    yours = [made(0, 100.0, baseline=True), made(1, 60.0, batch=256, workers=2, origin="recipe: the largest batch")]
    yours += [made(2 + i, 70.0, batch=64, workers=2) for i in range(8)]
    assert RULE.reason(yours, SPACE, MAIN) is None


def test_a_later_knobs_try_at_a_recipe_stands_for_the_recipe():
    """A later knob tried at the recipe's point (forkserver workers, say) that ran a little
    faster is the recipe's point with that knob changed: a start point as the recipe is."""
    trials = study_of([84.0] * 3)
    trials.append(
        made(5, 101.0, batch=256, workers=2, origin="later", probe_knob="loader.multiprocessing_context", probe_of=1)
    )
    trials += [made(6 + i, 84.0) for i in range(5)]
    line = RULE.reason(trials, SPACE, MAIN)
    assert line is not None and line.startswith("converged: the best is #5;")


def test_pruned_and_failed_trials_count_as_behind_skipped_ones_do_not_count():
    trials = study_of([84.0] * 5)
    trials.append(made(7, 95.0, status="pruned", state=TrialState.PRUNED))  # the race put it behind
    trials.append(made(8, 0.0, status="oom", state=TrialState.FAIL))
    trials.append(made(9, 0.0, status="skipped", state=TrialState.PRUNED))  # no answer about the space
    assert RULE.reason(trials, SPACE, MAIN) is None  # 7 sampled so far
    trials.append(made(10, 70.0))
    assert RULE.reason(trials, SPACE, MAIN) is not None


def test_a_point_measured_in_place_of_a_skipped_sampled_one_is_its_answer():
    """The preset skips an oversubscribing point the sampler chose and measures its nearest
    point within the cores: that run answers the sampled point and counts as it would have.
    In place of a skipped recipe, it is no sampled trial."""
    in_place = {"origin": "#7's point with num_workers=1", "again": {"why": "in-place", "of": 7}}
    trials = study_of([84.0] * 5)
    trials.append(made(7, 0.0, status="skipped", state=TrialState.PRUNED))
    trials.append(made(8, 84.0, **in_place))
    trials.append(made(9, 84.0))
    assert RULE.reason(trials, SPACE, MAIN) is None  # 7 answers so far
    trials.append(made(10, 84.0))
    assert RULE.reason(trials, SPACE, MAIN) is not None
    recipe_skipped = [made(0, 80.0, baseline=True), made(1, 100.0, batch=256, workers=2, origin="recipe: one")]
    recipe_skipped.append(made(2, 0.0, status="skipped", state=TrialState.PRUNED, origin="recipe: two"))
    recipe_skipped.append(made(3, 84.0, origin="#2's point", again={"why": "in-place", "of": 2}))
    recipe_skipped += [made(4 + i, 84.0, workers=2) for i in range(7)]
    assert RULE.reason(recipe_skipped, SPACE, MAIN) is None  # the in-place point stands for a recipe
    recipe_skipped.append(made(11, 84.0, workers=2))
    assert RULE.reason(recipe_skipped, SPACE, MAIN) is not None


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


def loop_study(tmp_path, settings):
    """The CPU preset's plan with these sweep settings, and an empty in-memory study for it with
    the plan's sampler (seeded: the same trials in every run)."""
    plan = _cpu_plan(tmp_path, settings, [])
    storage = optuna.storages.InMemoryStorage()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=storage, study_name="w@x", directions=list(plan.directions), sampler=make_sampler(plan)
    )
    stored = StoredStudy(study, storage)
    return plan, stored


@pytest.mark.parametrize("converge", [True, False])
def test_the_loop_stops_once_converged_and_runs_every_trial_when_told_not_to(tmp_path, converge):
    plan, stored = loop_study(tmp_path, {"n_trials": 30, "converge": converge, "sampler": {"seed": 3}})
    why = loop.optimize(stored, plan, Figures(), stopped=lambda: None, remaining=lambda: None)
    trials = stored.trials(plan.fixed)
    if converge:
        assert why.startswith("converged: the best is #1; none of the last 8 sampled trials was faster")
        assert count(trials).measured < 30
        assert not [t for t in trials if t.state == TrialState.WAITING]  # nothing left queued to run unasked
    else:
        assert why == "n_trials=30 reached" and count(trials).measured == 30


def test_a_sweep_that_ends_on_n_trials_before_it_converged_says_what_the_rule_waited_on(tmp_path):
    plan, stored = loop_study(tmp_path, {"n_trials": 4, "sampler": {"seed": 3}})
    why = loop.optimize(stored, plan, Figures(), stopped=lambda: None, remaining=lambda: None)
    assert why.startswith("n_trials=4 reached; not converged: ")
    assert why.endswith(" measured at one value only") or why.endswith(" of the 8 in a row without a gain it waits for")


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


def test_the_loop_measures_a_point_again_when_the_test_cannot_tell_and_keeps_the_run_from_the_sampler(tmp_path):
    """The recipe (#1) reads 300, the sampler's first point 330 at its first run: one run each,
    the test cannot tell them apart, and the loop measures the sampled point once more (reading
    270), told as FAIL so that TPE does not weigh the point twice, not counted as a trial; its
    two runs are the recipe's level, and the search converges."""
    plan, stored = loop_study(tmp_path, {"n_trials": 40, "sampler": {"seed": 3}})
    sampled: list[int] = []

    def figure(number):
        record = TrialRecord.of(stored.trial(number))
        if record.recheck_of is not None:
            return 270.0
        if number in (0, 1):
            return {0: 100.0, 1: 300.0}[number]
        if record.origin is None and not sampled:
            sampled.append(number)
            return 330.0
        return 60.0

    class Unsure(Figures):
        def batch(self, jobs):
            return [ok_result(figure(job.trial_number)) for job in jobs]

    why = loop.optimize(stored, plan, Unsure(), stopped=lambda: None, remaining=lambda: None)
    trials = stored.trials(plan.fixed)
    second = [t for t in trials if TrialRecord.of(t).recheck_of is not None]
    assert [(TrialRecord.of(t).recheck_of, t.state, TrialRecord.of(t).status) for t in second] == [
        (sampled[0], TrialState.FAIL, Status.OK)
    ]
    assert why.startswith(f"converged: the best is #{sampled[0]};")
    assert count(trials).measured < 40 and second[0].number not in [t.number for t in ranked(trials)]


def test_a_best_still_untold_after_three_runs_each_is_said_once_and_named_where_the_sweep_ends(tmp_path, capsys):
    """The sampler's first point reads 320 at every run, the recipe 300: the test cannot tell
    them apart after three runs each, the loop asks no more runs, says so once, and the sweep
    runs on to n_trials, whose stop line names the two."""
    plan, stored = loop_study(tmp_path, {"n_trials": 40, "sampler": {"seed": 3}})
    sampled: list[int] = []

    def figure(number):
        record = TrialRecord.of(stored.trial(number))
        point = record.recheck_of if record.recheck_of is not None else number
        if point in (0, 1):
            return {0: 100.0, 1: 300.0}[point]
        if record.origin is None and not sampled:
            sampled.append(number)
        return 320.0 if sampled and point == sampled[0] else 60.0

    class Untold(Figures):
        def batch(self, jobs):
            return [ok_result(figure(job.trial_number)) for job in jobs]

    why = loop.optimize(stored, plan, Untold(), stopped=lambda: None, remaining=lambda: None)
    trials = stored.trials(plan.fixed)
    again = [TrialRecord.of(t).recheck_of for t in trials if TrialRecord.of(t).recheck_of is not None]
    assert sorted(again) == [1, 1, sampled[0], sampled[0]]  # two more runs each, three in all
    said = [line for line in capsys.readouterr().out.splitlines() if "asks no more runs of them" in line]
    assert len(said) == 1 and f"the best, #{sampled[0]} (320 samples/s, 3 runs)" in said[0]
    assert why.startswith("n_trials=40 reached; not converged: ")
    assert why.endswith("still untold by the test after 3 runs each")
