"""Report data, Pareto front, escaping and regressions as pure functions (no browser, no torch)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeper.report import build_report_data
from sweeper.report.index import Figure, find_regressions
from sweeper.report.page import render
from sweeper.search.outputs import optimization_results
from sweeper.store.storage import has_password, redact
from sweeper.store.trials import pareto_trials

T0 = dt.datetime(2026, 11, 21, 22, 0)


def make(number, batch, sps=None, memory=500.0, status="ok", baseline=False, wait=0.5, reason=None, over_gb=None):
    state = TrialState.COMPLETE if status == "ok" else TrialState.FAIL
    system_attrs = {"constraints": [over_gb]} if over_gb is not None else {}
    metrics = {"samples_per_sec": sps, "peak_memory_mb": memory, "step_time_p95_ms": 10.0,
               "step_time_p50_ms": 8.0, "data_wait_fraction": wait, "samples_per_sec_rel_iqr": 0.01} if sps else {}
    t = create_trial(
        state=state, values=[sps, memory] if state == TrialState.COMPLETE else None,
        params={"loader.batch_size": batch}, distributions={"loader.batch_size": CategoricalDistribution([batch])},
        user_attrs={"knobs": {"loader.batch_size": batch}, "status": status, "reason": reason,
                    "baseline": baseline, "metrics": metrics, "samples_per_sec": sps,
                    "fixed_overrides": [], "fingerprint": json.dumps({"hostname": "lab1", "cpu": "X", "cpus_available": 2})},
        system_attrs=system_attrs,
    )
    t.number = number
    t.datetime_start = T0 + dt.timedelta(minutes=number)
    t.datetime_complete = T0 + dt.timedelta(minutes=number, seconds=30)
    return t


TRIALS = [
    make(0, 64, 1000.0, 400.0, baseline=True, wait=0.6),
    make(1, 256, 2500.0, 600.0, wait=0.1),
    make(2, 128, 1500.0, 700.0),  # dominated by #1
    make(3, 1024, status="oom", reason="RuntimeError: DefaultCPUAllocator: can't allocate memory"),
]


def test_report_data_from_trials():
    conf = {"winner": 1, "baseline": 0, "median": {"1": 2400.0, "0": 1000.0}, "speedup": 2.4,
            "speedup_low": 2.3, "speedup_high": 2.5, "win_share": 1.0}
    d = build_report_data(TRIALS, study_name="s", workload="mnist_mlp train", fixed=["task.num_samples=10"],
                          confirmation=conf)
    assert (d.winner, d.baseline, d.speedup, d.confirmed) == (1, 0, 2.4, True)
    assert d.winner_samples_per_sec == 2400.0 and d.baseline_samples_per_sec == 1000.0
    assert {p.number for p in d.points if p.pareto} == {0, 1}
    assert [(f.number, f.status) for f in d.failures] == [(3, "oom")]
    assert d.breakdowns[0].label == "baseline" and d.breakdowns[0].verdict.startswith("data-bound: 60%")
    assert d.breakdowns[1].verdict.startswith("compute-bound")
    assert d.breakdowns[0].step_ms == pytest.approx(64.0)  # 64 samples at 1000/s
    assert d.effects["loader.batch_size"] == [("64", 1000.0), ("256", 2500.0), ("128", 1500.0)]
    assert [b for _, _, b in d.history] == [1000.0, 2500.0, 2500.0]
    assert d.command == "python -m sweeper loader.batch_size=256 task.num_samples=10"
    assert d.trials_failed == 1 and d.trials_measured == 4
    assert "lab1" in d.machine


@pytest.mark.parametrize(
    ("points", "directions", "front"),
    [
        pytest.param([(10, 100), (20, 200), (5, 300)], ["maximize", "minimize"], {0, 1}, id="trade-off"),
        pytest.param([(10, 100), (20, 50)], ["maximize", "minimize"], {1}, id="dominated"),
        pytest.param([(10, 100), (10, 100)], ["maximize", "minimize"], {0, 1}, id="ties-both-kept"),
        pytest.param([(10, 100), (20, 50)], ["maximize", "maximize"], {0, 1}, id="directions-honoured"),
        pytest.param([(10, 100), (20, 50)], ["maximize"], {1}, id="single-objective"),
        pytest.param([], ["maximize", "minimize"], set(), id="empty"),
    ],
)
def test_pareto_front_is_optunas(points, directions, front):
    trials = [make(i, 64, sps, memory) for i, (sps, memory) in enumerate(points)]
    for t in trials:
        t.values = t.values[: len(directions)]
    assert {t.number for t in pareto_trials(trials, directions)} == front


def test_report_and_optimization_results_agree_on_a_constrained_front():
    """One Optuna call decides both: an infeasible trial (over the memory ceiling) never makes
    the front, though it would dominate on speed and memory."""
    trials = [
        make(0, 64, 1000.0, 400.0, baseline=True, over_gb=-1.0),
        make(1, 256, 2500.0, 600.0, over_gb=-0.5),
        make(2, 512, 9000.0, 300.0, over_gb=2.0),  # fastest and smallest, but infeasible
        make(3, 128, 1500.0, 700.0, over_gb=-0.1),  # dominated by #1
    ]
    directions = ["maximize", "minimize"]
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None, directions=directions)
    charted = {p.number for p in d.points if p.pareto}
    results = optimization_results("s", ["samples_per_sec", "peak_memory_mb"], pareto_trials(trials, directions), None)
    assert charted == {s["number"] for s in results["solutions"]} == {0, 1}
    assert d.front_on == "memory"


def test_unconfirmed_winner_says_so():
    d = build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=None)
    assert d.winner == 1 and d.speedup == 2.5 and not d.confirmed
    assert any("not confirmed" in n for n in d.notes)


def test_every_string_is_escaped():
    evil = "<script>alert(1)</script>"
    trials = [*TRIALS[:2], make(3, 1024, status="error", reason=evil)]
    trials[1].user_attrs["knobs"]["backend.compile"] = evil
    d = build_report_data(trials, study_name=evil, workload=evil, fixed=[f"task.name='{evil}'"], confirmation=None)
    html = render(d)
    assert evil not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.count("<script>") == 1  # the page's own sorter


def test_regressions_beyond_the_spread():
    def fig(when, sps, spread=0.01, config="a"):
        return Figure("lab1 | mnist", config, when, when, sps, spread)

    found = find_regressions([fig("1", 1000), fig("2", 900), fig("3", 880)])
    assert [(r.before.when, r.after.when) for r in found] == [("1", "2")]  # 10% slower; then -2% is noise
    assert find_regressions([fig("1", 1000, 0.2), fig("2", 850)]) == []  # within a 20% spread
    assert find_regressions([fig("1", 1000), fig("2", 500, config="b")]) == []  # different configs


def test_passwords_are_redacted():
    url = "postgresql://lab:s3cret@db.example:5432/sweeps"
    assert "s3cret" not in redact(url) and has_password(url)
    assert redact("sqlite:///outputs/sweeper.db") == "sqlite:///outputs/sweeper.db"
    assert not has_password("sqlite:///x.db")


def test_other_hardware_classes_are_listed_side_by_side(tmp_path):
    import optuna

    from sweeper.report.load import siblings

    storage = f"sqlite:///{tmp_path / 's.db'}"
    for name, sps in (("night@aaa", 100.0), ("night@bbb", 300.0), ("other@ccc", 5.0)):
        study = optuna.create_study(study_name=name, storage=storage, directions=["maximize", "minimize"])
        study.add_trial(make(0, 64, sps))
    rows = siblings(storage, "night@aaa")
    assert [(n, v) for n, _, v, _ in rows] == [("night@bbb", 300.0)]
    assert "lab1" in rows[0][1] and "loader.batch_size=64" in rows[0][3]
