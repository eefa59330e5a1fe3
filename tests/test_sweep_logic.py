"""Pure decisions of the sweep: reuse, OOM dominance, gain beyond noise, confirmation, outputs."""

from __future__ import annotations

import math

import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeper import confirm, history, objectives, sweep_outputs
from sweeper.budget import parse_duration
from sweeper.validation import ConfigError


def trial(number, knobs, state=TrialState.COMPLETE, status="ok", sps=100.0, rel_iqr=0.01, fixed=()):
    dists = {k: CategoricalDistribution([v]) for k, v in knobs.items()}
    t = create_trial(
        state=state,
        values=[sps] if state == TrialState.COMPLETE else None,
        params=dict(knobs),
        distributions=dists,
        user_attrs={"knobs": dict(knobs), "status": status, "fixed_overrides": list(fixed),
                    "samples_per_sec": sps, "samples_per_sec_rel_iqr": rel_iqr, "metrics": {}},
    )
    t.number = number
    return t


def test_identical_config_is_found_for_reuse_only_in_the_same_setup():
    t = trial(0, {"loader.batch_size": 64})
    assert history.find_measured([t], {"loader.batch_size": 64}, []) is t
    assert history.find_measured([t], {"loader.batch_size": 128}, []) is None
    assert history.find_measured([t], {"loader.batch_size": 64}, ["task.mode=inference"]) is None


def test_larger_batch_with_same_memory_settings_is_dominated_by_an_oom():
    oom = trial(3, {"loader.batch_size": 512, "backend.precision": "fp32", "loader.num_workers": 0},
                state=TrialState.FAIL, status="oom")
    same = {"loader.batch_size": 1024, "backend.precision": "fp32", "loader.num_workers": 4}
    assert history.oom_dominating([oom], same, []) is oom
    assert history.oom_dominating([oom], {**same, "loader.batch_size": 256}, []) is None
    assert history.oom_dominating([oom], {**same, "backend.precision": "bf16"}, []) is None


def test_gain_must_beat_the_measured_noise():
    best = trial(0, {}, sps=100.0, rel_iqr=0.05)
    assert not history.is_gain(trial(1, {}, sps=104.0), best)
    assert history.is_gain(trial(1, {}, sps=106.0), best)
    assert history.is_gain(trial(1, {}, sps=1.0), None)


def test_ranked_skips_failed_infeasible_and_reused():
    done = [trial(0, {}, sps=50), trial(1, {}, sps=80), trial(2, {}, state=TrialState.FAIL, status="oom")]
    assert [t.number for t in history.ranked(done)] == [1, 0]


def test_interleaved_order():
    assert confirm.interleaved_order([4, 2], 0, 2) == [(0, 4), (0, 2), (0, 0), (1, 4), (1, 2), (1, 0)]


def test_confirmation_crowns_on_side_by_side_numbers():
    # trial 4 was lucky in the search; side by side, 2 is faster
    rounds = {4: [100.0, 98.0, 101.0], 2: [120.0, 118.0, 121.0], 0: [60.0, 59.0, 61.0]}
    d = confirm.decide(rounds, baseline=0)
    assert d.winner == 2
    assert d.speedup == pytest.approx(2.0, rel=0.01)
    assert d.speedup_low <= d.speedup <= d.speedup_high
    assert d.win_share == 1.0


def test_confirmation_without_baseline_is_none_and_failures_are_skipped():
    assert confirm.decide({1: [10.0]}, baseline=0) is None
    d = confirm.decide({1: [None, 30.0], 0: [10.0, 10.0]}, baseline=0)
    assert d.winner == 1 and d.speedup == 3.0


@pytest.mark.parametrize(("text", "seconds"), [("8h", 28800), ("30m", 1800), ("1h30m", 5400), ("90s", 90), ("45", 45), (None, None)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(ConfigError, match="8x"):
        parse_duration("8x")


def test_objective_directions():
    assert objectives.resolve_directions(["samples_per_sec", "peak_memory_mb"], None) == ["maximize", "minimize"]
    assert objectives.resolve_directions(["step_time_p95_ms"], None) == ["minimize"]
    with pytest.raises(ConfigError, match="'fps' is not a measured figure"):
        objectives.resolve_directions(["fps"], None)
    with pytest.raises(ConfigError, match="direction"):
        objectives.resolve_directions(["samples_per_sec"], ["maximize", "minimize"])


def test_winner_yaml_and_command():
    fixed = ["task=image_classification", "task.model=resnet50", "search=quick", "hydra.sweeper.n_trials=5"]
    knobs = {"loader.batch_size": 256, "backend.threads": None, "backend.compile": "max-autotune"}
    doc = yaml.safe_load(sweep_outputs.winner_yaml(fixed, knobs, "note"))
    assert doc["defaults"] == ["config", {"override task": "image_classification"}, "_self_"]
    assert doc["task"] == {"model": "resnet50"}
    assert doc["loader"] == {"batch_size": 256}
    assert doc["backend"] == {"threads": None, "compile": "max-autotune"}
    command = sweep_outputs.winner_command(fixed, knobs)
    assert command == ("python -m sweeper task=image_classification backend.compile=max-autotune "
                       "backend.threads=null loader.batch_size=256 task.model=resnet50")


def test_override_values_read_back():
    assert history.override_value(None) == "null"
    assert history.override_value(False) == "false"
    assert history.override_value("a b") == "'a b'"


def test_optimization_results_single_objective():
    t = trial(2, {"loader.batch_size": 64}, sps=123.0)
    r = sweep_outputs.optimization_results("s", ["samples_per_sec"], [t], t)
    assert r == {"name": "s", "best_params": {"loader.batch_size": 64}, "best_value": 123.0}
    t.values = [math.nan]
    assert sweep_outputs.optimization_results("s", ["samples_per_sec"], [t], t)["best_value"] is None
