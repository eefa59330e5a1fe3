"""The nightly watch (hydra.sweeper.watch): a night holds, drifted or changed; its record is kept
in the study's storage and drawn night after night; a drifted study re-tunes from a fresh start.
The end-to-end test forces each outcome through the real nightly command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from conftest import TINY, child_pythonpath
from sweeper.machine import Fingerprint, changes
from sweeper.noise import Noise
from sweeper.report.nights import nights_chart, nights_section
from sweeper.search.watch import Reference, night_reading, rounds_enough
from sweeper.store import queue
from sweeper.store.nights import Night, Outcome, history, nights_of, save_night
from sweeper.store.study import StoredStudy, sibling_names, split_class, start_afresh
from sweeper.store.summary import SweepSummary

HERE = Fingerprint(
    hostname="lab1", cpu="EPYC", cpus_available=16, torch="2.14.1", kernel="6.1", hardware_class="abcdef0123"
)


def reference(**kw) -> Reference:
    values = dict(
        study="w@abcdef0123",
        winner_knobs={"loader.batch_size": 128},
        baseline_knobs={"loader.batch_size": 64},
        winner=1000.0,
        baseline=500.0,
        winner_runs=2,
        baseline_runs=2,
        fingerprint=HERE,
        noise=Noise(0.05, 0.05),
    )
    return Reference(**{**values, **kw})


def test_a_fingerprint_change_says_what_decides_speed_first_and_skips_facts_not_read():
    after = replace(HERE, torch="2.15.0", kernel="6.8", governor="performance")
    found = changes(HERE, after)
    assert [str(c) for c in found] == ["torch 2.14.1 -> 2.15.0", "kernel 6.1 -> 6.8"]
    assert [c.decides for c in found] == [True, False]  # the governor was not readable before


def test_a_quiet_night_holds():
    reading = night_reading(reference(), [990.0, 1010.0], [505.0, 498.0], HERE)
    assert reading.outcome == Outcome.holds
    assert "cannot tell by the test" in reading.words and "slower" not in reading.words


@pytest.mark.parametrize(("winner", "baseline"), [([700.0, 690.0], [500.0, 502.0]), ([1000.0, 990.0], [380.0, 390.0])])
def test_either_side_slower_by_the_test_is_drift(winner, baseline):
    reading = night_reading(reference(), winner, baseline, HERE)
    assert reading.outcome == Outcome.drifted
    assert "slower by the test" in reading.words


def test_the_studys_own_repeats_set_the_band_with_tonights():
    """On a machine whose runs of one configuration spread 20%, a 21% move cannot be told; a
    night's few runs alone (spreading 2%) would call it drift."""
    quiet = reference(noise=Noise(0.05, 0.05))
    noisy = reference(noise=Noise(0.05, 0.05), repeats=((1000.0, 1250.0, 800.0), (500.0, 620.0, 410.0)) * 3)
    assert night_reading(quiet, [790.0, 800.0, 805.0], [395.0, 400.0, 402.0], HERE).outcome == Outcome.drifted
    assert night_reading(noisy, [790.0, 800.0, 805.0], [395.0, 400.0, 402.0], HERE).outcome == Outcome.holds


def test_a_winner_that_fails_every_run_tonight_drifted():
    reading = night_reading(reference(), [None, None], [500.0, 500.0], HERE)
    assert reading.outcome == Outcome.drifted and "failed every run" in reading.words


def test_a_deciding_change_is_changed_even_where_the_figures_hold():
    reading = night_reading(reference(), [1000.0, 1000.0], [500.0, 500.0], replace(HERE, driver="560.1"))
    assert reading.outcome == Outcome.holds  # the driver was not known before: no change
    reading = night_reading(
        reference(fingerprint=replace(HERE, driver="550.2")), [1000.0], [500.0], replace(HERE, driver="560.1")
    )
    assert reading.outcome == Outcome.changed and reading.words.startswith("changed: driver 550.2 -> 560.1")


def test_a_kernel_change_alone_is_said_but_decides_nothing():
    reading = night_reading(reference(), [1000.0, 1001.0], [500.0, 499.0], replace(HERE, kernel="6.8"))
    assert reading.outcome == Outcome.holds and "also kernel 6.1 -> 6.8" in reading.words


def test_another_studys_reference_is_a_changed_fingerprint():
    reading = night_reading(reference(study="w@0123456789"), [1000.0, 1000.0], [500.0, 500.0], HERE, other_study=True)
    assert reading.outcome == Outcome.changed and "hardware class 0123456789 -> abcdef0123" in reading.words


def test_the_rounds_go_on_while_the_test_cannot_tell():
    ref = reference(noise=Noise(0.05, 0.05), winner_runs=3, baseline_runs=3)
    assert not rounds_enough(ref, [1000.0], [500.0])  # one round is one mood
    assert rounds_enough(ref, [500.0, 510.0], [500.0, 501.0])  # the winner slower by the test: the night drifted
    assert rounds_enough(ref, [1000.0, 1002.0], [500.0, 501.0])  # within 2% both: the same
    assert not rounds_enough(ref, [920.0, 925.0], [500.0, 501.0])  # 8% below: the test cannot tell yet, another round
    quiet = reference(noise=Noise(0.005, 0.005), winner_runs=3, baseline_runs=3)
    assert rounds_enough(quiet, [920.0, 925.0], [500.0, 501.0])  # on a quiet machine 8% is slower


def night(at: float, outcome: Outcome, **kw) -> Night:
    return Night(at, outcome, HERE, **kw)


def test_a_studys_siblings_differ_in_the_hardware_class_alone():
    storage = optuna.storages.InMemoryStorage()
    for name in ("w@0123456789", "w@abcdef0123", "w-cpu-abcdef0123", "w-cpu-0123456789", "wx@0123456789", "w"):
        optuna.create_study(storage=storage, study_name=name)
    assert split_class("mnist_mlp-train-cpu-4f28130ed9") == ("mnist_mlp-train-cpu-", "4f28130ed9")
    assert sibling_names(storage, "w@abcdef0123") == ["w@0123456789"]
    assert sibling_names(storage, "w-cpu-abcdef0123") == ["w-cpu-0123456789"]
    assert sibling_names(storage, "w") == []


def test_nights_are_kept_per_setup_in_order_and_read_across_hardware_classes():
    storage = optuna.storages.InMemoryStorage()
    old = optuna.create_study(storage=storage, study_name="w@0123456789")
    new = optuna.create_study(storage=storage, study_name="w@abcdef0123")
    other = optuna.create_study(storage=storage, study_name="v@abcdef0123")
    save_night(old, ["a=1"], night(1.0, Outcome.first))
    save_night(new, ["a=1"], night(3.0, Outcome.changed, changes=["cores 8 -> 16"]))
    save_night(old, ["a=1"], night(2.0, Outcome.holds, winner_runs=[10.0, 12.0]))
    save_night(old, ["a=2"], night(2.5, Outcome.holds))
    save_night(other, ["a=1"], night(2.7, Outcome.holds))
    assert [n.started_at for n in nights_of(old.user_attrs, ["a=1"])] == [1.0, 2.0]
    assert nights_of(old.user_attrs, ["a=1"])[1].winner_now == 11.0
    assert [(s, n.outcome) for s, n in history(storage, "w@abcdef0123", ["a=1"])] == [
        ("w@0123456789", Outcome.first),
        ("w@0123456789", Outcome.holds),
        ("w@abcdef0123", Outcome.changed),
    ]


def test_a_night_survives_summary_json(tmp_path):
    kept = night(5.0, Outcome.drifted, winner_runs=[1.0, None], changes=["kernel 6.1 -> 6.8"], still_winner=False)
    summary = SweepSummary.from_json({"study": "w", "stopped": "x", "fixed_overrides": [], "night": kept.to_json()})
    assert summary.night == kept


def test_starting_afresh_hides_the_older_figures_and_their_confirmation(tmp_path):
    stored = StoredStudy.open(f"sqlite:///{tmp_path / 's.db'}", "w@abcdef0123")
    fixed = ["task=x"]
    for value in (1, 2):
        stored.study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=float(value),
                params={"b": value},
                distributions={"b": optuna.distributions.IntDistribution(1, 4)},
                user_attrs={"fixed_overrides": fixed},
            )
        )
    assert [t.number for t in stored.trials(fixed)] == [0, 1] and queue.holds(stored, {"b": 1}, fixed)
    assert start_afresh(stored, fixed) == 2
    assert stored.trials(fixed) == [] and not queue.holds(stored, {"b": 1}, fixed)
    assert len(stored.trials()) == 2 and stored.confirmation(fixed) is None  # the sampler still sees them


def test_the_report_draws_the_nights_and_names_each_change():
    nights = [
        ("w@0123456789", night(1.0, Outcome.first, winner_after=900.0)),
        ("w@0123456789", night(90000.0, Outcome.holds, winner_runs=[1000.0], baseline_runs=[500.0], words="holds: ok")),
        (
            "w@abcdef0123",
            night(
                180000.0,
                Outcome.changed,
                winner_runs=[700.0],
                baseline_runs=[400.0],
                winner_before=1000.0,
                changes=["torch 2.13.0 -> 2.14.1"],
                words="changed: torch 2.13.0 -> 2.14.1",
                still_winner=False,
            ),
        ),
    ]
    html = "".join(nights_section(nights))
    assert "Night after night" in html and "changed: torch 2.13.0 -&gt; 2.14.1" in html
    assert "700 (-30%)" in html and "no: a new winner" in html
    assert "torch 2.13.0 -&gt; 2.14.1" in nights_chart([n for _, n in nights])
    assert nights_section([]) == []


# ---- end to end: four nights through the real command ----

NIGHTLY = [
    *TINY,
    "task=custom",
    "task.factory=nightly_workload:make",
    "search=none",
    "loader.batch_size=choice(16,128)",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.watch=true",
    # the prior for this VM's tiny runs: a night holds within it, a 10x slowdown is far beyond it
    "hydra.sweeper.run_noise=0.2",
]


def tonight(tmp_path: Path, name: str, step_sleep_s: float, taskset: list[str] | None = None):
    args = [
        *NIGHTLY,
        f"hydra.sweep.dir={tmp_path / name}",
        f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
        "hydra.sweeper.study_name=nightly",
    ]
    env = {**os.environ, "PYTHONPATH": child_pythonpath(), "SWEEPER_TEST_STEP_SLEEP_S": str(step_sleep_s)}
    proc = subprocess.run(
        [*(taskset or []), sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    summary = tmp_path / name / "summary.json"
    return proc, SweepSummary.from_json(json.loads(summary.read_text())) if summary.is_file() else None


@pytest.mark.slow
@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores: one core under taskset is the new fingerprint"
)
def test_four_nights_tune_hold_drift_and_change(tmp_path):
    first, s1 = tonight(tmp_path, "n1", 0.005)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert s1 is not None and s1.night is not None and s1.night.outcome == Outcome.first
    measured = s1.counts.measured

    quiet, s2 = tonight(tmp_path, "n2", 0.005)
    assert quiet.returncode == 0, quiet.stdout[-3000:]
    assert s2 is not None and s2.night is not None and s2.night.outcome == Outcome.holds, quiet.stdout[-3000:]
    assert s2.counts.measured == measured and "the night holds: no search" in quiet.stdout

    slower, s3 = tonight(tmp_path, "n3", 0.05)  # every step 10x slower: the machine drifted
    assert slower.returncode == 3, slower.stdout[-3000:] + slower.stderr[-3000:]
    assert s3 is not None and s3.night is not None and s3.night.outcome == Outcome.drifted
    assert "slower by the test" in s3.night.words and "re-tuning from trial" in slower.stdout
    assert s3.night.still_winner is not None and s3.winner is not None and s3.winner >= measured
    assert "error:" not in slower.stderr

    moved, s4 = tonight(tmp_path, "n4", 0.05, taskset=["taskset", "-c", "0"])  # one core: a new fingerprint
    assert moved.returncode == 4, moved.stdout[-3000:] + moved.stderr[-3000:]
    assert s4 is not None and s4.night is not None and s4.night.outcome == Outcome.changed
    assert "cores 2 -> 1" in s4.night.changes and s4.night.reference == s1.study != s4.study
    assert "warm start: the winner on" in moved.stdout

    nights = history(optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}"), s4.study, s4.fixed_overrides)
    assert [n.outcome for _, n in nights] == [Outcome.first, Outcome.holds, Outcome.drifted, Outcome.changed]
    report = Path(s4.report or "").read_text()
    assert "Night after night" in report and "cores 2 -&gt; 1" in report
