"""Report data, Pareto front, escaping and regressions as pure functions (no browser, no torch)."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import replace

import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeper.machine import Fingerprint
from sweeper.report import build_report_data, page
from sweeper.report.index import Figure, find_regressions
from sweeper.report.page import render
from sweeper.search.outputs import optimization_results
from sweeper.store.confirmation import Confirmation
from sweeper.store.record import Again, TrialAttrs, TrialRecord, Why
from sweeper.store.storage import has_password, redact
from sweeper.store.trials import pareto_trials

T0 = dt.datetime(2026, 11, 21, 22, 0)


def make(number, batch, sps=None, memory=500.0, status="ok", baseline=False, wait=0.5, reason=None, over_gb=None):
    state = {"ok": TrialState.COMPLETE, "pruned": TrialState.PRUNED}.get(status, TrialState.FAIL)
    system_attrs = {"constraints": [over_gb]} if over_gb is not None else {}
    metrics = (
        {
            "samples_per_sec": sps,
            "peak_memory_mb": memory,
            "step_time_p95_ms": 10.0,
            "step_time_p50_ms": 8.0,
            "data_wait_fraction": wait,
            "samples_per_sec_rel_iqr": 0.01,
        }
        if sps
        else {}
    )
    t = create_trial(
        state=state,
        values=[sps, memory] if state == TrialState.COMPLETE else None,
        params={"loader.batch_size": batch},
        distributions={"loader.batch_size": CategoricalDistribution([batch])},
        user_attrs={
            "knobs": {"loader.batch_size": batch},
            "status": status,
            "reason": reason,
            "baseline": baseline,
            "metrics": metrics,
            "samples_per_sec": sps,
            "fixed_overrides": [],
            "fingerprint": json.dumps({"hostname": "lab1", "cpu": "X", "cpus_available": 2}),
        },
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
    conf = Confirmation.from_json(
        {
            "winner": 1,
            "baseline": 0,
            "median": {"1": 2400.0, "0": 1000.0},
            "speedup": 2.4,
            "speedup_low": 2.3,
            "speedup_high": 2.5,
            "win_share": 1.0,
        }
    )
    d = build_report_data(
        TRIALS, study_name="s", workload="mnist_mlp train", fixed=["task.num_samples=10"], confirmation=conf
    )
    assert (d.winner.number, d.winner.baseline, d.verdict.speedup, d.verdict.confirmed) == (1, 0, 2.4, True)
    assert d.verdict.winner_samples_per_sec == 2400.0 and d.verdict.baseline_samples_per_sec == 1000.0
    assert {p.number for p in d.charts.points if p.pareto} == {0, 1}
    assert [(f.number, f.status) for f in d.charts.failures] == [(3, "oom")]
    assert d.charts.breakdowns[0].label == "baseline" and d.charts.breakdowns[0].verdict.startswith("data-bound: 60%")
    assert d.charts.breakdowns[1].verdict.startswith("compute-bound")
    assert [b.label for b in d.charts.breakdowns] == ["baseline", "1st (winner)", "2nd"]  # a "#" is a trial's number
    assert d.charts.breakdowns[0].step_ms == pytest.approx(64.0)  # 64 samples at 1000/s
    assert d.charts.effects["loader.batch_size"] == [("64", 1000.0), ("256", 2500.0), ("128", 1500.0)]
    assert [b for _, _, b in d.charts.history] == [1000.0, 2500.0, 2500.0]
    assert d.winner.command == "python -m sweeper loader.batch_size=256 task.num_samples=10"
    assert d.headline.counts.failed == 1 and d.headline.counts.measured == 4
    assert "lab1" in d.headline.machine


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
    charted = {p.number for p in d.charts.points if p.pareto}
    results = optimization_results("s", ["samples_per_sec", "peak_memory_mb"], pareto_trials(trials, directions), None)
    assert charted == {s["number"] for s in results["solutions"]} == {0, 1}
    assert d.charts.front_on == "memory"
    assert [p.number for p in d.charts.points if not p.feasible] == [2]  # drawn grey, past the limit


def test_the_report_draws_a_sweeps_limits_and_its_latency_chart_where_latency_is_limited():
    """The limits the sweep held the figures to come with its span: the memory chart draws its
    cap, and a limit on p99 step time adds the latency chart, on p99, with its line."""
    from sweeper.report.page import scatter_sections
    from sweeper.store.study import SweepSpan

    trials = [make(0, 64, 1000.0, 400.0, baseline=True, over_gb=-1.0), make(1, 256, 2500.0, 600.0, over_gb=3.0)]
    span = SweepSpan(1.0, 2.0, "n_trials", 0, 0.08, {"peak_memory_mb": 500.0, "step_time_p99_ms": 50.0})
    d = build_report_data(trials, study_name="s", workload="w train", fixed=[], confirmation=None, sweep_span=span)
    assert d.charts.limits == {"peak_memory_mb": 500.0, "step_time_p99_ms": 50.0}
    html = "".join(scatter_sections(d.charts, "w train"))
    assert "Speed against step latency" in html and "samples/sec against p99 step latency" in html
    plain = build_report_data(trials, study_name="s", workload="w train", fixed=[], confirmation=None)
    assert "Speed against step latency" not in "".join(scatter_sections(plain.charts, "w train"))


def test_a_samples_per_sec_search_still_draws_its_memory_front():
    """The default search optimises samples/sec alone: the report's front is the measured speed
    against peak memory (Optuna's call on those two figures), constraints honoured."""
    trials = [
        make(0, 64, 1000.0, 400.0, baseline=True),
        make(1, 256, 2500.0, 600.0),
        make(2, 128, 1500.0, 700.0),
        make(3, 512, 9000.0, 300.0, over_gb=2.0),
    ]
    for t in trials:
        t.values = t.values[:1]
    d = build_report_data(
        trials,
        study_name="s",
        workload="w",
        fixed=[],
        confirmation=None,
        objectives=["samples_per_sec"],
        directions=["maximize"],
    )
    assert {p.number for p in d.charts.points if p.pareto} == {0, 1} and d.charts.front_on == "memory"
    assert {t.number for t in pareto_trials(trials, ["maximize"])} == {1}  # the objective's own: speed alone


def test_a_confirmation_of_one_round_shows_no_spread_it_did_not_measure():
    one = Confirmation(
        winner=1,
        baseline=0,
        rounds={1: [2400.0], 0: [1000.0]},
        median={1: 2400.0, 0: 1000.0},
        speedup=2.4,
        speedup_low=2.4,
        speedup_high=2.4,
        win_share=1.0,
    )
    d = build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=one)
    assert d.verdict.rounds == 1 and one.over_rounds == "1 interleaved round"
    page = render(d)
    assert "confirmed side by side in one interleaved round" in page and "one round gives no interval" in page
    assert "IQR 2.40-2.40x" not in page
    # two rounds, the baseline's first run kept under load: one ratio, and the page says so
    two = replace(one, rounds={1: [2400.0, 2350.0], 0: [None, 1000.0]}, median={1: 2375.0, 0: 1000.0})
    two = replace(two, speedup=2.35, speedup_low=None, speedup_high=None)
    page = render(build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=two))
    assert "over 2 interleaved rounds, one of them with both figures" in page and "one ratio gives no interval" in page
    assert "in one interleaved round" not in page


def test_the_answer_comes_first_and_the_search_notes_below_it():
    """The page opens on the speedup, the code to change and the command of only what changed;
    the search's notes and the full YAML wait in collapsed sections below."""
    one = Confirmation(
        winner=1,
        baseline=0,
        rounds={1: [2400.0, 2300.0, 2500.0], 0: [1000.0] * 3},
        median={1: 2400.0, 0: 1000.0},
        speedup=2.4,
        speedup_low=2.3,
        speedup_high=2.5,
        win_share=1.0,
    )
    d = build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=one)
    page = render(d)
    order = [
        page.index(mark)
        for mark in ('id="answer"', "2.40x", 'id="code-diff"', 'id="command"', "<h2>The search</h2>", "<details>")
    ]
    assert order == sorted(order)
    assert "IQR 2.30-2.50x over 3 interleaved rounds" in page
    assert d.winner.command == "python -m sweeper loader.batch_size=256"  # only what differs from the baseline
    assert "2,400" in page and "confirmed median" in page


def test_unconfirmed_winner_says_so():
    d = build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=None)
    assert d.winner.number == 1 and d.verdict.speedup == 2.5 and not d.verdict.confirmed
    assert any("not confirmed" in n for n in d.notes.advice)


def test_queued_points_the_later_knobs_tries_and_points_in_place_of_skipped_ones_are_noted_apart():
    warm, tried = make(4, 512, 2000.0), make(5, 256, 2300.0)
    warm.user_attrs.update(TrialAttrs.queued("warm start: the winner on gpu-a", []))
    tried.user_attrs.update(
        TrialAttrs.queued(
            "later: loader.multiprocessing_context=forkserver at the best so far (#1)",
            [],
            Again(Why.HELD_KNOB, 1, "loader.multiprocessing_context"),
        )
    )
    fitted = make(6, 1024, 2600.0)
    fitted.user_attrs.update(TrialAttrs.queued("#5's point with num_workers=1", [], Again(Why.IN_PLACE, 5)))
    orphaned = make(7, 256, 2200.0)
    orphaned.user_attrs.update(
        TrialAttrs.queued("measured again: its sweep stopped while it ran", [], Again(Why.ORPHANED, 3))
    )
    trials = [*TRIALS, warm, tried, fitted, orphaned]
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    assert "Measured again, their sweep having stopped while they ran and left no result: #3's point as #7." in (
        d.notes.search
    )
    assert (
        "Queued after the baseline, before the sampler's own picks: #4 (warm start: the winner on gpu-a)."
        in d.notes.search
    )
    assert (
        "Measured in place of points skipped as oversubscribed, their nearest point within the cores: #6 (#5's "
        "point with num_workers=1)."
    ) in d.notes.search
    assert (
        "Knobs searched only later, tried first at the best so far: #5 (later: "
        "loader.multiprocessing_context=forkserver at the best so far (#1))."
    ) in d.notes.search


def test_a_run_measured_on_past_its_start_up_is_named_in_the_notes_and_the_page():
    """A baseline that was still starting up took 29 s and reads its later windows only: the
    reader learns it from the report, not from result.json; a steady sweep has no such note."""
    steady = build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=None)
    assert not any("still changing" in n for n in steady.notes.search)
    slow_start, capped = make(0, 64, 1000.0, 400.0, baseline=True), make(2, 128, 1500.0, 700.0)
    slow_start.user_attrs["metrics"].update(drift=2.55, steady_from_step=26)
    capped.user_attrs["metrics"].update(drift=-0.12, stopped="drifting")
    trials = [slow_start, TRIALS[1], capped, TRIALS[3]]
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    note = (
        "2 trial(s) were still changing as they ran (measure.drift_tol): their earlier windows are left out of "
        "the figure, and they measured on for longer: #0 (drifting up 255% over the windows; measured until "
        "steady at step 26); #2 (drifting down 12% over the windows; still drifting at the cap (measure.max_s): "
        "the figure is of its last windows)."
    )
    assert note in d.notes.search
    assert "#0 (drifting up 255% over the windows; measured until steady at step 26)" in render(d)


@pytest.mark.parametrize(
    ("attrs", "again"),
    [
        pytest.param(
            {"probe_knob": "loader.in_order", "probe_of": 3}, Again(Why.HELD_KNOB, 3, "loader.in_order"), id="held-knob"
        ),
        pytest.param({"in_place_of": 5}, Again(Why.IN_PLACE, 5), id="in-place"),
        pytest.param({"recheck_of": 1}, Again(Why.RECHECK, 1), id="recheck"),
        pytest.param({}, None, id="none"),
    ],
)
def test_the_queues_entry_is_read_from_a_study_written_before_it_and_as_it_is_written_now(attrs, again):
    """Studies written before the one queue kept each reason under a key of its own: read as the
    same entry, and an entry written now reads back unchanged."""
    assert TrialRecord.from_attrs(attrs).again == again
    if again is not None:
        assert TrialRecord.from_attrs(TrialAttrs.queued("o", [], again)).again == again


@pytest.mark.parametrize("status", ["ok", "second-run"])  # as written now, and by an earlier version
def test_a_point_measured_once_more_is_noted_with_both_figures_and_is_no_failure(status):
    second = make(4, 256, 2450.0, status=status, reason="#1's point measured once more: kept from the sampler")
    second.state, second.values = TrialState.FAIL, None  # kept from the sampler
    second.user_attrs.update(
        TrialAttrs.queued("recipe: the largest batch; measured once more", [], Again(Why.RECHECK, 1))
    )
    d = build_report_data([*TRIALS, second], study_name="s", workload="w", fixed=[], confirmation=None)
    assert (
        "Measured once more, the best against the start points resting on too few runs to tell "
        "(one run can read low, or high): #1's point as #4 "
        "(2,450 samples/s against 2,500 samples/s)."
    ) in " ".join(d.notes.search)
    assert 4 not in [f.number for f in d.charts.failures] and not any("Queued after" in n for n in d.notes.search)
    assert "#1&#x27;s point as #4 (2,450 samples/s" in render(d)  # escaped


def test_every_string_is_escaped():
    evil = "<script>alert(1)</script>"
    trials = [TRIALS[0], make(1, 256, 2500.0, 600.0, wait=0.1), make(3, 1024, status="error", reason=evil)]
    trials[1].user_attrs["knobs"]["backend.compile"] = evil  # a fresh trial: TRIALS stays as it is
    d = build_report_data(trials, study_name=evil, workload=evil, fixed=[f"task.name='{evil}'"], confirmation=None)
    html = render(d)
    assert evil not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.count("<script>") == 1  # the page's own sorter


def test_regressions_are_slower_by_the_test_at_the_sweeps_noise():
    def fig(when, sps, sigma=0.01, config="a"):
        return Figure("lab1 | mnist", config, when, when, sps, sigma)

    found = find_regressions([fig("1", 1000), fig("2", 900), fig("3", 880)])
    assert [(r.before.when, r.after.when) for r in found] == [("1", "2")]  # 10% slower; then -2% cannot be told
    assert find_regressions([fig("1", 1000, 0.2), fig("2", 850)]) == []  # at 20% noise a run
    # a quiet night and a night on one core, at the 8% the watch read: -7% is no regression
    assert find_regressions([fig("1", 17247, 0.08), fig("2", 16006, 0.08)]) == []
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
    for name, sps in (("night@00000000aa", 100.0), ("night@00000000bb", 300.0), ("other@00000000cc", 5.0)):
        study = optuna.create_study(study_name=name, storage=storage, directions=["maximize", "minimize"])
        study.add_trial(make(0, 64, sps))
    rows = siblings(storage, "night@00000000aa")
    assert [(n, v) for n, _, v, _ in rows] == [("night@00000000bb", 300.0)]
    assert "lab1" in rows[0][1] and "loader.batch_size=64" in rows[0][3]


def test_code_diff_names_only_what_changed():
    from sweeper.report.code import FROZEN_COLLECTOR, code_diff

    baseline = {"loader.batch_size": 64, "loader.num_workers": 2, "backend.threads": None, "backend.precision": "fp32"}
    winner = {"loader.batch_size": 1024, "loader.num_workers": 2, "backend.threads": 1, "backend.precision": "fp16"}
    diff = code_diff(baseline, winner, "cuda")
    assert diff == (
        "-# torch.set_num_threads: PyTorch's default",
        "-loader = DataLoader(dataset, batch_size=64)",
        "-# fp32: no autocast",
        "+torch.set_num_threads(1)  # or export OMP_NUM_THREADS=1 before start-up",
        "+loader = DataLoader(dataset, batch_size=1024)",
        "+with torch.autocast(device_type='cuda', dtype=torch.float16):  # forward and loss",
        "+scaler = torch.amp.GradScaler('cuda')  # scaler.scale(loss).backward(); scaler.step(optimizer); "
        "scaler.update()",
        f"+{FROZEN_COLLECTOR}",  # the winner's loader forks workers: its figure holds with the line
    )
    assert code_diff(baseline, dict(baseline), "cpu") == ()
    # no forked workers, no collector's line: none at all, or started by a fresh interpreter
    assert not any("gc.freeze" in line for line in code_diff(baseline, {**winner, "loader.num_workers": 0}, "cpu"))
    spawned = {**winner, "loader.multiprocessing_context": "spawn"}
    assert not any("gc.freeze" in line for line in code_diff(baseline, spawned, "cpu"))
    flushed = code_diff(
        {**baseline, "backend.flush_denormal": False}, {**baseline, "backend.flush_denormal": True}, "cpu"
    )
    assert flushed == (
        "-torch.set_flush_denormal(False)",
        "+torch.set_flush_denormal(True)  # values below about 1e-38 become 0: no slow subnormal math",
        f"+{FROZEN_COLLECTOR}",  # the same 2 workers on both sides: the baseline's script may lack it
    )


def test_a_scripts_code_diff_says_what_sweeper_set_outside_and_inside_it():
    from sweeper.report.script_code import script_diff

    before, after = ["python", "train.py", "--batch-size", "64"], ["python", "train.py", "--batch-size", "256"]
    baseline = {"loader.batch_size": 64, "backend.threads": None, "backend.flush_denormal": False}
    winner = {"loader.batch_size": 256, "backend.threads": 1, "backend.flush_denormal": True}
    assert script_diff(before, after, baseline, winner) == (  # as a shell script has it: the environment first
        "-# OMP_NUM_THREADS unset: PyTorch's default",
        "+export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1",
        "-python train.py --batch-size 64",
        "+python train.py --batch-size 256",
        "+torch.set_flush_denormal(True)  # values below about 1e-38 become 0: no slow subnormal math",
    )


def test_winner_code_in_the_report_and_the_batch_sentence():
    trials = [make(0, 64, 1000.0, 400.0, baseline=True), make(1, 256, 2500.0, 600.0)]
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    assert d.winner.code_diff == (
        "-loader = DataLoader(dataset, batch_size=64)",
        "+loader = DataLoader(dataset, batch_size=256)",
    )
    assert any("batch 256 instead of batch 64" in n and "learning rate" in n for n in d.notes.advice)
    html = render(d)
    assert 'id="code-diff"' in html and "Apply it to your code" in html
    same = build_report_data(trials[:1], study_name="s", workload="w", fixed=[], confirmation=None)
    assert same.winner.code_diff == () and not any("instead of" in n for n in same.notes.advice)


@pytest.mark.parametrize(
    ("wait", "kw", "says"),
    [
        pytest.param(0.6, {"workers": 2, "cores": 2}, "already match the 2 cores", id="workers-at-cores"),
        pytest.param(0.6, {"workers": 0, "cores": 2, "data_path_cost": 0.8}, "runs 5.0x faster", id="bound-far-above"),
        pytest.param(0.6, {"workers": 1, "cores": 4}, "more loader workers (1 now, 4 cores)", id="more-workers"),
        pytest.param(
            0.6,
            {"workers": 1, "cores": 2, "ranks": 2},
            "the 2 loader workers (1 for each of 2 ranks) already match the 2 cores",
            id="ranks-fill",
        ),
        pytest.param(
            0.6,
            {"workers": 1, "cores": 4, "ranks": 2},
            "more loader workers (2 now, 1 for each of 2 ranks, 4 cores)",
            id="ranks-room",
        ),
        pytest.param(0.21, {}, "borderline", id="borderline-data"),
        pytest.param(0.19, {}, "compute-bound (borderline", id="borderline-compute"),
        pytest.param(0.01, {}, "the step itself decides", id="near-zero"),
    ],
)
def test_why_follows_the_evidence(wait, kw, says):
    from sweeper.report.why import verdict

    assert says in verdict(wait, **kw)


def test_null_knob_values_say_what_they_mean():
    from sweeper.report.chart_data import knob_label
    from sweeper.report.charts import axis_order

    assert knob_label("backend.threads", None, Fingerprint(threads=2)) == "default (2)"
    assert knob_label("loader.prefetch_factor", None, None) == "default (2)"
    assert knob_label("backend.compile", None, None) == "default"
    assert knob_label("backend.channels_last", True, None) == "true"
    assert sorted(["4", "1", "default (2)", "2", "bf16"], key=axis_order) == ["1", "default (2)", "2", "4", "bf16"]


def test_table_rows_have_anchors_short_states_and_reasons_on_hover():
    long = "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes"
    trials = [*TRIALS[:2], make(3, 1024, status="oom", reason=long)]
    html = render(build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None))
    assert 'id="trial-3"' in html and 'href="#trial-3"' in html
    assert f'title="{long.replace(chr(39), "&#x27;")}"' in html and "&hellip;" in html
    assert ">done<" in html and ">failed<" in html and "COMPLETE" not in html


def test_why_shows_utilization_and_goes_by_the_device_on_a_gpu():
    from sweeper.report.why import breakdown

    trial = make(5, 256, 2000.0, wait=0.6)
    trial.user_attrs["metrics"].update(
        {
            "cpu_util_main_pct": 98.0,
            "cpu_util_workers_pct": 310.0,
            "device_busy_fraction": 0.97,
            "gpu_util_pct": 96.0,
            "gpu_mem_util_pct": 41.0,
            "gpu_power_w": 512.0,
            "gpu_power_cap_w": 700.0,
        }
    )
    b = breakdown("winner", *_numbered(trial))
    # the host waited 60% of its time, but the GPU was busy 97%: the step is the limit
    assert b.verdict.startswith("compute-bound") and b.wait_fraction == pytest.approx(0.03)
    assert b.utilization == (
        "CPU 98% in the training process, 310% in loader workers (100% = one core); "
        "device busy 97% of the time; GPU-Util 96%, memory controller 41%, 512 W of a 700 W cap"
    )
    html = render(build_report_data([*TRIALS, trial], study_name="s", workload="w", fixed=[], confirmation=None))
    assert "GPU-Util 96%" in html
    # a CPU trial without NVML says only what it has
    assert "GPU" not in breakdown("cpu", *_numbered(make(6, 64, 900.0))).utilization


def _numbered(trial):
    """A trial as the report's per-trial helpers take it: its number and its record."""
    return trial.number, TrialRecord.of(trial)


def test_noisy_top_two_say_how_many_rounds_would_separate_them():
    from sweeper.report.notes import separation_note
    from sweeper.stats import rounds_to_separate

    # a steady 10% gap is told apart in a few rounds; no gap on average never is
    assert rounds_to_separate([1.1, 1.1, 1.1]) == 3
    assert rounds_to_separate([1.2, 0.8333333333333334]) == float("inf")
    assert rounds_to_separate([1.1]) is None

    def confirmation(rounds):
        return Confirmation(
            winner=1,
            baseline=0,
            rounds=rounds,
            median={1: 1200.0, 2: 1000.0, 0: 510.0},
            speedup=2.3,
            speedup_low=2.2,
            speedup_high=2.4,
            win_share=1.0,
        )

    noisy = {1: [1200.0, 900.0, 1300.0], 2: [1000.0, 1000.0, 1100.0], 0: [500.0, 520.0, 510.0]}
    note = separation_note(confirmation(noisy))
    ratios = [1.2, 0.9, 1300 / 1100]
    more = math.ceil(rounds_to_separate(ratios)) - 3
    assert note.startswith("The top two of the confirmation (#1 and #2) differ by 20.0%")
    assert f"about {more} more interleaved round(s)" in note and f"hydra.sweeper.confirm={3 + more}" in note
    # equal on average: no number of rounds helps
    even = {**noisy, 1: [1100.0, 900.0, 1000.0], 2: [900.0, 1100.0, 1000.0]}
    assert "treat them as equal" in separation_note(confirmation(even))
    # quiet rounds need no note
    quiet = {**noisy, 1: [1200.0, 1210.0, 1190.0]}
    assert separation_note(confirmation(quiet)) is None


def test_a_held_effective_batch_says_the_optimizer_sees_the_same():
    from sweeper.report.notes import batch_note

    baseline, winner = make(0, 64, 1000.0, baseline=True), make(1, 256, 2000.0)
    assert "scale the learning rate" in batch_note(TrialRecord.of(baseline), TrialRecord.of(winner))
    for trial, accum in ((baseline, 4), (winner, 1)):
        trial.user_attrs["metrics"].update({"effective_batch": 256, "grad_accum_steps": accum})
    assert batch_note(TrialRecord.of(baseline), TrialRecord.of(winner)) == (
        "The winner runs batch 256 instead of batch 64 with 1 gradient accumulation "
        "step(s): the effective batch stays 256, so the optimizer sees what it "
        "saw before."
    )


def test_why_counts_the_workers_asked_for_not_the_helper_processes():
    from sweeper.report.why import breakdown

    trial = make(7, 64, 900.0, wait=0.6)
    trial.params["loader.num_workers"] = 1
    trial.user_attrs["knobs"]["loader.num_workers"] = 1
    # forkserver: the server, the resource tracker and the worker are 3 processes under the run
    trial.user_attrs["metrics"]["dataloader_processes"] = 3
    assert "more loader workers (1 now, 2 cores)" in breakdown("t", *_numbered(trial)).verdict
    # two data-parallel ranks, one worker each: the two loader processes already fill the 2 cores
    trial.user_attrs["knobs"]["dist.nproc_per_node"] = 2
    said = breakdown("t", *_numbered(trial)).verdict
    assert "the 2 loader workers (1 for each of 2 ranks) already match the 2 cores" in said


def test_samples_per_sec_against_ranks_is_shown_when_the_sweep_varied_them():
    from sweeper.report.chart_data import ranks_of
    from sweeper.report.notes import batch_note

    one, two = make(0, 64, 1000.0, baseline=True), make(1, 64, 1800.0)
    two.user_attrs["metrics"].update({"nproc_per_node": 2, "rank_samples_per_sec": [905.0, 895.0]})
    records = {t.number: TrialRecord.of(t) for t in (one, two)}
    assert ranks_of([one], records) == [] and ranks_of([one, two], records) == [
        (0, 1, 1000.0, 1000.0),
        (1, 2, 1800.0, 900.0),
    ]
    d = build_report_data([one, two], study_name="s", workload="w", fixed=[], confirmation=None)
    assert d.charts.ranks and "<h2>Processes per node</h2>" in render(d)
    assert "samples/sec against dist.nproc_per_node" in render(d)
    # two ranks of batch 64 are a batch of 128 to the optimizer
    assert "batch 64 on each of 2 ranks instead of batch 64" in batch_note(
        TrialRecord.of(one), TrialRecord.of(two)
    ) and "x2" in batch_note(TrialRecord.of(one), TrialRecord.of(two))


def test_the_winners_ranks_and_openmp_binding_as_lines_of_a_script():
    from sweeper.report.code import code_diff

    diff = code_diff(
        {"dist.nproc_per_node": 1, "backend.omp_bind": "default"},
        {"dist.nproc_per_node": 2, "backend.omp_bind": "close"},
        "cpu",
    )
    # one start command, the environment and the launcher together (two lines once said to start
    # with python and with torchrun)
    assert diff[:2] == (
        "-# start with python train.py",
        "+# start with OMP_PROC_BIND=close OMP_PLACES=cores torchrun --standalone --nproc_per_node=2 train.py",
    )
    assert sum("start with" in line for line in diff) == 2 and any("init_process_group" in line for line in diff)


def test_a_point_the_preset_skips_is_listed_but_neither_measured_nor_failed():
    skipped = make(4, 64, status="skipped", reason="2 ranks x (2 threads, 0 loader workers) oversubscribe")
    d = build_report_data([*TRIALS, skipped], study_name="s", workload="w", fixed=[], confirmation=None)
    assert (
        4 not in {f.number for f in d.charts.failures}
        and d.headline.counts.failed == 1
        and d.headline.counts.measured == 4
    )
    assert any(row[0] == 4 and row[2] == "skipped" for row in d.table.rows)


def test_a_run_stopped_behind_the_best_is_drawn_at_its_figure_not_on_the_failures_zero_line():
    from sweeper.report.scatter import scatter_chart

    stopped = make(
        4, 32, 700.0, status="pruned", reason="pruned: 700 samples/s after 1 window is below 0.8 of the floor"
    )
    d = build_report_data([*TRIALS, stopped], study_name="s", workload="w", fixed=[], confirmation=None)
    assert [(p.number, p.samples_per_sec, p.stopped, p.pareto) for p in d.charts.points if p.stopped] == [
        (4, 700.0, True, False)
    ]
    assert [f.number for f in d.charts.failures] == [3] and (
        d.headline.counts.failed,
        d.headline.counts.stopped_early,
    ) == (1, 1)  # pruned apart
    fig = scatter_chart.__wrapped__(d.charts.points, d.charts.failures, x="memory", xlabel="MB", pareto=True)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "stopped early, behind the best (1)" in legend and any(label.startswith("oom (1)") for label in legend)
    drawn = [tuple(xy) for c in fig.axes[0].collections for xy in c.get_offsets().tolist()]
    assert (500.0, 700.0) in drawn  # at its figure
    assert [xy for xy in drawn if xy[1] == 0] == [(400.0, 0.0)]  # the OOM alone on the zero line


def test_the_summary_and_the_report_count_trials_alike():
    """Surplus, interrupted and predicted-OOM trials are not 'answered from earlier results':
    only a reused trial is (the sweep's summary once counted them all as reused)."""
    from sweeper.store.trials import count

    reused = make(5, 256, 2500.0, 600.0)
    reused.user_attrs["reused_from"] = 1
    trials = [
        *TRIALS,
        reused,
        make(6, 64, status="surplus", reason="n_trials was reached by another process"),
        make(7, 64, status="interrupted", reason="the sweep was stopped by SIGTERM"),
        make(8, 2048, status="oom-predicted", reason="batch 2048 >= 1024 which ran out of memory in trial 3"),
        make(9, 64, status="skipped", reason="2 ranks x (2 threads, 0 loader workers) oversubscribe"),
    ]
    counts = count(trials)
    assert (counts.measured, counts.failed, counts.reused) == (4, 1, 1)
    assert (counts.surplus, counts.interrupted, counts.predicted_oom, counts.skipped) == (1, 1, 1, 1)
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    assert d.headline.counts == counts


def test_figures_kept_and_not_ranked_are_listed_with_their_reasons_in_old_studies_too():
    """A figure taken on another hardware class or under load each time is kept, not ranked, and
    the report's notes say why; a study written when each reason had a status of its own reads
    the same."""
    from sweeper.result import Status
    from sweeper.store.record import TrialRecord

    elsewhere = make(
        5, 128, 9000.0, status="other-hardware", reason="measured on lab2, hardware class bb, not the study's aa"
    )
    loaded = make(6, 256, 900.0, status="not-ranked", reason="taken under load 2 times (190% CPU)")
    older = make(7, 512, 800.0, status="under-load", reason="taken under load 2 times (120% CPU): kept, not ranked")
    trials = [*TRIALS, elsewhere, loaded, older]
    assert {TrialRecord.of(t).status for t in trials[-3:]} == {Status.NOT_RANKED}
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    (note,) = [n for n in d.notes.search if "kept and not ranked" in n]
    assert note.startswith("3 trial(s) kept and not ranked")
    assert "#5 measured on lab2, hardware class bb" in note and "#6 taken under load 2 times (190% CPU)" in note
    assert d.headline.counts.failed == 4  # the one of TRIALS and these three: none ranked
    assert d.winner.number == 1  # not #5, three times as fast on another class of machine


def test_a_trial_another_sweep_is_running_is_counted_as_running_not_failed():
    """Two sweeps share a study: when one ends, the other's trial is still RUNNING, with no
    status yet. It is neither complete nor failed, in the log's last lines and in the report."""
    from sweeper.store.trials import count

    elsewhere = make(5, 128, 2000.0)
    elsewhere.state, elsewhere.values, elsewhere.datetime_complete = TrialState.RUNNING, None, None
    for key in ("status", "metrics", "samples_per_sec"):
        elsewhere.user_attrs.pop(key)
    counts = count([*TRIALS, elsewhere])
    assert (counts.measured, counts.failed, counts.running) == (5, 1, 1)
    assert counts.measured_words() == ["3 complete", "1 failed", "1 still running in another sweep"]


def test_when_nothing_beat_the_baseline_the_report_says_yours_is_the_fastest():
    trials = [make(0, 64, 3000.0, 400.0, baseline=True), make(1, 256, 2400.0, 600.0), make(2, 128, 1500.0, 700.0)]
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    assert d.winner.baseline_kept is not None and d.winner.baseline_kept.startswith(
        "Your configuration (the baseline, trial #0)"
    )
    assert d.notes.advice[0] == d.winner.baseline_kept and not any("not confirmed" in n for n in d.notes.advice)
    html = render(d)
    assert "is the fastest configuration found" in html and "speedup over baseline" not in html


def test_step_latency_is_charted_only_where_it_compares():
    """A training step at batch 1024 is slower than at 64 and yet the faster loop: latency across
    batch sizes is charted for inference runs, or where latency is an objective."""
    train = build_report_data(TRIALS, study_name="s", workload="w train", fixed=[], confirmation=None)
    assert "Speed against step latency" not in render(train)
    served = build_report_data(TRIALS, study_name="s", workload="w inference", fixed=[], confirmation=None)
    assert "Speed against step latency" in render(served)


def test_importance_needs_enough_complete_trials_per_knob():
    few = build_report_data(
        TRIALS,
        study_name="s",
        workload="w",
        fixed=[],
        confirmation=None,
        importances={"loader.batch_size": 0.7, "loader.num_workers": 0.3},
    )
    page = render(few)
    assert "3 complete trials for 2 knobs are too few to rank the knobs" in page
    assert 'alt="parameter importance"' not in page
    enough = build_report_data(
        TRIALS, study_name="s", workload="w", fixed=[], confirmation=None, importances={"loader.batch_size": 1.0}
    )
    assert "Optuna's parameter importance over the 3 complete trials (1 knob)" in render(enough)


def test_importances_agree_with_optuna_dashboard():
    """The report's importances are the ones optuna-dashboard shows for the same study (its own
    code computes them here): PED-ANOVA for the objective's direction (they once ranked the knobs
    for a low samples/sec)."""
    import random

    import optuna
    from optuna.distributions import IntDistribution

    pytest.importorskip("optuna_dashboard")
    from optuna_dashboard._importance import get_param_importance_from_trials_cache
    from optuna_dashboard._inmemory_cache import InMemoryCache

    from sweeper.report.load import importances

    rng = random.Random(0)
    study = optuna.create_study(direction="maximize")
    for _ in range(30):
        batch, workers = rng.choice([64, 256, 1024]), rng.randint(0, 4)
        study.add_trial(
            create_trial(
                value=batch * 10.0 + rng.random(),
                params={"loader.batch_size": batch, "loader.num_workers": workers},
                distributions={
                    "loader.batch_size": CategoricalDistribution([64, 256, 1024]),
                    "loader.num_workers": IntDistribution(0, 4),
                },
            )
        )
    ours = importances(study, study.get_trials())
    theirs = get_param_importance_from_trials_cache(
        InMemoryCache(), study._storage, study._study_id, 0, study.get_trials()
    )
    assert ours and {row["name"]: pytest.approx(row["importance"]) for row in theirs} == ours


def test_the_share_of_rounds_won_says_against_whom():
    """win_share counts rounds in which the winner beat every configuration in them: beside the
    baseline alone that is the baseline; with runners-up in the rounds it is all of them, and the
    words say so (a winner confirmed at 1.11x that was the fastest of 3 in one round of 3)."""
    alone = Confirmation(1, 0, {1: [2.0, 2.1], 0: [1.0, 1.0]}, {1: 2.05, 0: 1.0}, 2.05, 2.0, 2.1, 1.0)
    assert alone.wins == "faster than your configuration in 100% of them"
    three = Confirmation(
        5,
        0,
        {5: [11.0, 10.4, 10.6], 0: [9.5] * 3, 3: [10.9, 10.6, 10.5]},
        {5: 10.6, 0: 9.5, 3: 10.6},
        1.11,
        1.1,
        1.12,
        1 / 3,
    )
    assert three.wins == "the fastest of the 3 measured in 33% of them"
    page = render(build_report_data(TRIALS, study_name="s", workload="w", fixed=[], confirmation=alone))
    assert "the winner faster than your configuration in 100% of them" in page


def test_the_top_configurations_are_placed_by_their_points_level_as_the_sweep_placed_them():
    """#2 read 2,800 on its first run and 1,800 measured once more: its level, 2,300, is below
    #1's 2,500, the sweep's best and winner. The report places #1 first and says #2's level."""
    again = make(3, 128, 1800.0)
    again = create_trial(
        state=TrialState.FAIL,  # kept from the sampler, as the sweep tells such a run
        params=again.params,
        distributions=again.distributions,
        user_attrs={**again.user_attrs, "again": {"why": "recheck", "of": 2}},
    )
    again.number = 3
    trials = [make(0, 64, 1000.0, baseline=True), make(1, 256, 2500.0), make(2, 128, 2800.0), again]
    d = build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)
    placed = [(b.label, b.number, b.level) for b in d.charts.breakdowns]
    assert placed == [("baseline", 0, None), ("1st (winner)", 1, None), ("2nd", 2, (2300.0, 2))]
    assert "2,800 samples/sec in its search run, 2,300 over its 2 runs" in page.why(d.charts.breakdowns)


def test_a_scripts_winner_runs_from_one_launch_line():
    """Ranks and an affinity both: the script starts under torchrun, each rank pinning itself
    inside it (one taskset cannot give two ranks their own cores); one rank with an affinity
    starts under taskset on the cores it ran on. What to run tomorrow holds that one line, the
    command nowhere else, and the lines for inside the script as comments of the shell script;
    the report's diff has that line as the winner's."""
    from sweeper.report.script_code import run_tomorrow, script_diff

    before, after = ["python", "train.py", "--batch-size", "64"], ["python", "train.py", "--batch-size", "256"]
    baseline = {"backend.affinity": "none", "dist.nproc_per_node": 1, "backend.flush_denormal": False}
    ranks = {"backend.affinity": "spread", "dist.nproc_per_node": 2, "backend.flush_denormal": True}
    tomorrow = run_tomorrow(before, after, baseline, ranks)
    launches = [line for line in tomorrow if "train.py" in line]
    assert launches == [
        "torchrun --standalone --nproc_per_node=2 --no-python python train.py --batch-size 256  # spread: each rank "
        "pins its compute threads to its share of the cores, in the script (below)"
    ]
    inside = [line for line in tomorrow if line.startswith("# in the script, before its loop: ")]
    assert [line.split(": ", 1)[1].split("(")[0] for line in inside] == [
        "os.sched_setaffinity",
        "torch.set_flush_denormal",
    ]
    assert not any("taskset" in line for line in script_diff(before, after, baseline, ranks, (None, "0")))
    one = {**ranks, "dist.nproc_per_node": 1}
    assert [line for line in run_tomorrow(before, after, baseline, one) if "train.py" in line] == [
        "taskset -c <cores> python train.py --batch-size 256  # spread: the compute threads' cores; "
        "sweeper.track puts the DataLoader workers on the rest"
    ]
    diff = script_diff(before, after, baseline, one, (None, "0,1"))
    assert any(line.startswith("+taskset -c 0,1 python train.py --batch-size 256  # spread") for line in diff)
    # the winner's command line once, as launched: no bare command beside its launcher's line
    launched = [line for line in script_diff(before, after, baseline, ranks) if "train.py" in line]
    assert launched == [
        "-python train.py --batch-size 64",
        "+torchrun --standalone --nproc_per_node=2 --no-python python train.py --batch-size 256  # spread: each "
        "rank pins its compute threads to its share of the cores, in the script (below)",
    ]


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, ""),
        (3, "#0; #1; #2"),
        (10, "; ".join(f"#{n}" for n in range(10))),
        (12, "; ".join(f"#{n}" for n in range(10)) + "..."),
    ],
)
def test_a_note_names_ten_trials_at_most_and_says_there_are_more(count: int, expected: str) -> None:
    from sweeper.report.notes import _listed

    assert _listed([f"#{n}" for n in range(count)], "; ") == expected
