"""Pure parts: statistics, outcome classification, the timing loop on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sweeper import outcome
from sweeper.measuring import timing
from sweeper.search.scaling import omp_binds, powers_of_two_upto
from sweeper.stats import Spread, quantile


def test_quantile_and_spread():
    assert quantile([1, 2, 3, 4, 5], 0.5) == 3
    assert quantile([1, 2, 3, 4], 0.95) == pytest.approx(3.85)
    s = Spread.of([10, 11, 9, 10, 30])
    assert s.median == 10 and s.iqr == 1 and s.n == 5
    assert not s.noisy
    assert Spread.of([10, 20, 30]).noisy


@pytest.mark.parametrize(
    ("returncode", "tail", "status"),
    [
        pytest.param(-9, "", "crash", id="sigkill"),
        pytest.param(-11, "", "crash", id="segfault"),
        pytest.param(-9, "CUDA out of memory. Tried to allocate", "oom", id="killed-after-oom"),
        pytest.param(1, "MemoryError", "oom", id="memoryerror"),
        pytest.param(1, "Traceback\nValueError: x", "error", id="error"),
    ],
)
def test_classify_exit(returncode, tail, status):
    assert outcome.classify_exit(returncode, tail).status == status


def test_sigkill_reason_mentions_oom_killer():
    assert "OOM killer" in outcome.classify_exit(-9, "").reason and outcome.classify_exit(-9, "").signal == "SIGKILL"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_measure_splits_wait_and_compute_on_a_fake_clock():
    clock = FakeClock()

    def next_batch():
        clock.now += 0.03  # waiting for data
        return "batch"

    def step(batch):
        clock.now += 0.07  # compute

    t = timing.measure(
        next_batch,
        step,
        lambda b: 10,
        lambda: None,
        rule=timing.Rule(warmup_s=0.5, warmup_steps=2, max_windows=3, window_s=1.0),
        clock=clock,
    )
    figures, timed = t.throughput(), t.timing()
    assert t.warmup_steps == 6  # the first step, then warmup_s (0.5 s) of 0.1 s steps
    assert figures.samples_per_sec == pytest.approx(100.0)
    assert timed.data_wait_fraction == pytest.approx(0.3)
    assert timed.bottleneck == "data-bound"
    assert timed.step_time_p50_ms == pytest.approx(100.0)
    assert figures.windows_measured == 3


def _one_sample_steps(step_s, rule, killed_at=None):
    """timing.measure on a fake clock: steps of one sample, each taking step_s(now) seconds; the
    run killed at `killed_at` on that clock (None: no time limit)."""
    clock = FakeClock()

    def step(batch):
        clock.now += step_s(clock.now)

    def time_left():
        return None if killed_at is None else killed_at - clock.now

    return timing.measure(lambda: None, step, lambda b: 1, lambda: None, clock=clock, rule=rule, time_left=time_left)


def test_a_run_its_time_limit_would_cut_ends_with_the_windows_it_measured():
    """No window is begun that would end within AFTER_WINDOWS_S of the kill: the run stops with
    the windows it has (time limit), its figure theirs. A warm-up whose minimum would pass the
    kill ends with room for two windows; windows a loader cycle long are foreseen as long."""
    from sweeper.measurement import Stopped
    from sweeper.measuring.warmup import AFTER_WINDOWS_S

    rule = timing.Rule(warmup_s=0.5, warmup_steps=1, max_windows=10, window_s=1.0)
    free = _one_sample_steps(lambda now: 0.01, rule)
    assert free.stopped == Stopped.MAX_WINDOWS and len(free.window_s) == 10
    cut = _one_sample_steps(lambda now: 0.01, rule, killed_at=10.0)
    assert cut.stopped == Stopped.TIME_LIMIT and 3 <= len(cut.window_s) < 10
    assert cut.warmup_s + sum(cut.window_s) <= 10.0 - AFTER_WINDOWS_S
    assert cut.throughput().samples_per_sec == pytest.approx(100.0, rel=0.02)
    assert cut.throughput().stopped == Stopped.TIME_LIMIT

    long_warm_up = _one_sample_steps(lambda now: 0.01, replace(rule, warmup_s=30.0), killed_at=12.0)
    assert long_warm_up.stopped == Stopped.TIME_LIMIT and not long_warm_up.warmup_steady
    assert long_warm_up.warmup_s <= 12.0 - AFTER_WINDOWS_S - 2 * 1.0 + 0.02
    assert len(long_warm_up.window_s) >= 1

    # 16 workers: a window is a whole cycle of 16 half-second steps (8 s), not window_s
    cycles = _one_sample_steps(lambda now: 0.5, replace(rule, cycle=16), killed_at=40.0)
    assert cycles.stopped == Stopped.TIME_LIMIT and len(cycles.window_s) >= 2
    assert cycles.warmup_s + sum(cycles.window_s) <= 40.0 - AFTER_WINDOWS_S
    # a run already pruned stays pruned, whatever its time
    slow = _one_sample_steps(lambda now: 0.1, replace(rule, prune_below=50.0), killed_at=10.0)
    assert slow.pruned and slow.stopped == Stopped.PRUNED


def test_measure_prunes_a_slow_run_after_two_windows_and_a_far_slower_one_after_one():
    from sweeper.measuring.stages import pruned_reason

    def run(step_s, **rule):
        return _one_sample_steps(
            lambda now: step_s,
            timing.Rule(
                **{"warmup_s": 0.1, "warmup_steps": 1, "max_windows": 10, "window_s": 1.0, "prune_below": 50.0}
                | {"far_below": 40.0, **rule}
            ),
        )

    near = run(1 / 45)  # 45 samples/s: 0.9 of the floor
    assert near.pruned and len(near.window_samples_per_sec) == 2
    far = run(0.1)  # 10 samples/s: 0.2 of the floor
    assert far.pruned and len(far.window_samples_per_sec) == 1
    rule = timing.Rule(warmup_s=0.1, warmup_steps=1, max_windows=10, window_s=1.0, prune_below=50.0, far_below=40.0)
    assert pruned_reason(far.throughput(), rule) == (
        "pruned: 10.0 samples/s after 1 window is below 40.0, slower by the test than the floor 50.0"
    )
    assert len(run(0.1, far_below=None).window_samples_per_sec) == 2  # the floor that waits for two windows
    assert not run(1 / 60).pruned  # above the floor


def test_a_warm_up_far_below_the_best_ends_on_two_blocks_steady_or_not():
    """A loop whose blocks swing 40% (bursts) needs four blocks for a steady rate; in a sweep
    whose floor it runs far under, two blocks under 0.7 of the floor end the warm-up, and a
    quarter window confirms it pruned. Near the floor, or outside a sweep, warm-up waits."""

    def run(slow_s, fast_s, **rule):
        return _one_sample_steps(
            lambda now: slow_s if int(now / 0.5) % 2 == 0 else fast_s,
            timing.Rule(warmup_s=0.5, warmup_steps=1, max_windows=10, window_s=1.0, warmup_max_s=5.0, **rule),
        )

    far = run(0.1, 0.07, prune_below=50.0, far_below=40.0)  # 10-14 samples/s, the bar 35
    assert far.warmup_far_below and not far.warmup_steady and far.pruned
    assert far.warmup_s < 1.3 and far.window_s[0] < 0.5  # two blocks, then a quarter window
    assert far.timing().warmup_far_below
    alone = run(0.1, 0.07)  # no sweep, no best: a steady rate, four blocks
    assert alone.warmup_steady and not alone.warmup_far_below and alone.warmup_s > 2.0
    near = run(1 / 45, 1 / 65, prune_below=50.0)  # 45-65 samples/s: above the bar
    assert not near.warmup_far_below and near.warmup_steady
    bare = timing.Rule(warmup_s=0, warmup_steps=1, max_windows=1, window_s=1, prune_below=50.0)
    assert bare.warmup_bar == 35.0 and replace(bare, warmup_floor=None).warmup_bar is None


def test_the_first_batch_wait_is_not_compile_time():
    clock = FakeClock()
    calls = {"batches": 0, "steps": 0}

    def next_batch():
        calls["batches"] += 1
        clock.now += 3.0 if calls["batches"] == 1 else 0.01  # workers starting, then a queue
        return "batch"

    def step(batch):
        calls["steps"] += 1
        clock.now += 2.0 if calls["steps"] == 1 else 0.1  # compiling, then a typical step

    s = timing.measure(
        next_batch,
        step,
        lambda b: 1,
        lambda: None,
        rule=timing.Rule(warmup_s=0.0, warmup_steps=2, max_windows=1, window_s=0.5),
        clock=clock,
    ).timing()
    assert s.first_batch_wait_s == pytest.approx(3.0)
    assert s.compile_s == pytest.approx(1.9)


def test_compile_time_is_first_step_minus_typical():
    clock = FakeClock()
    calls = {"n": 0}

    def step(batch):
        calls["n"] += 1
        clock.now += 5.0 if calls["n"] == 1 else 0.1

    t = timing.measure(
        lambda: None,
        step,
        lambda b: 1,
        lambda: None,
        rule=timing.Rule(warmup_s=0.0, warmup_steps=2, max_windows=1, window_s=0.5),
        clock=clock,
    )
    assert t.timing().compile_s == pytest.approx(4.9)


def test_thread_choices():
    assert powers_of_two_upto(1) == [1]
    assert powers_of_two_upto(2) == [1, 2]
    assert powers_of_two_upto(12) == [1, 2, 4, 8, 12]


def test_the_openmp_bindings_searched_are_those_that_place_threads_apart():
    from sweeper.host import Core, Host

    def host(*cores: tuple[int, ...]) -> Host:
        return Host("h", tuple(Core(0, c) for c in cores))

    assert omp_binds(host((0,))) == ["default"]  # one CPU: nothing to place
    assert omp_binds(host((0,), (1,))) == ["default", "close"]  # spread places as close does
    assert omp_binds(host((0, 1))) == ["default", "close"]  # two SMT siblings alike
    assert omp_binds(host((0,), (1,), (2,))) == ["default", "close", "spread"]  # two threads on 3 CPUs differ


def test_run_result_round_trips_through_result_json():
    from sweeper.machine import Fingerprint
    from sweeper.measurement import Measurement, Throughput
    from sweeper.result import RunResult, Status

    measured = Measurement(throughput=Throughput(samples_per_sec=10.0, window_samples_per_sec=(9.0, 11.0)))
    run = RunResult(
        Status.OK,
        measurement=measured,
        fingerprint=Fingerprint(cpu="X"),
        wall_s=3.0,
        log="w.log",
        started_at=1.0,
        ended_at=4.0,
        isolation="fork",
    )
    written = run.to_json()
    assert written["format"] == 2 and written["throughput"]["samples_per_sec"] == 10.0
    assert written["machine"]["cpu"] == "X" and written["throughput"]["window_samples_per_sec"] == [9.0, 11.0]
    assert RunResult.from_json(written) == run
    assert run.figures()["samples_per_sec"] == 10.0 and run.figures()["wall_s"] == 3.0
    assert f"{Status.OOM}" == "oom" and Status("pruned") == "pruned"


def test_a_result_json_of_another_format_is_refused_in_one_line():
    """result.json is versioned: one of another format is refused (ValueError, which the
    readers of results left on disk catch), never half read."""
    from sweeper.result import RunResult

    with pytest.raises(ValueError, match="a result of format None: this sweeper reads format 2"):
        RunResult.from_json({"status": "ok", "samples_per_sec": 10.0})


def test_figure_names_are_unique_and_flat_figures_round_trip():
    from sweeper.measurement import FIGURE_NAMES, Measurement, RunFacts, Throughput

    assert len(FIGURE_NAMES) == len(set(FIGURE_NAMES))
    measured = Measurement(
        throughput=Throughput(samples_per_sec=3.0, rank_samples_per_sec=(1.0, 2.0)),
        run=RunFacts(cpus_allowed_workers=("1",), nproc_per_node=2),
    )
    assert Measurement.from_flat(measured.flat()) == measured
    assert Measurement.from_json(measured.to_json()) == measured
    assert measured.value("samples_per_sec") == 3.0 and measured.value("no_such_figure") is None


def test_a_log_line_fits_a_terminal():
    from sweeper.search.progress import LINE_WIDTH, fit

    knobs = " ".join(f"backend.knob{i}=value{i}" for i in range(20))
    line = f"trial 1/20 #0 baseline {knobs} -> 2,651 samples/s, 463 MB | best 2,651 (#0)"
    shown = fit(line).split("\n")
    assert len(line) > LINE_WIDTH and len(shown) == 3 and all(len(part) <= LINE_WIDTH for part in shown)
    assert shown[1].startswith("    ") and " ".join(p.strip() for p in shown) == line  # nothing lost
    assert fit("short") == "short"
