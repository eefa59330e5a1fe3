"""The whole job's time: start-up from a run's warm-up, the figure over a job, which configuration
finishes first at which length, and what the sweep and the report make of it."""

from __future__ import annotations

import json

import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeper.jobtime import JobLine, crossover, distinct, job_time_s, leads, over_job, startup_s
from sweeper.knobs import Knob
from sweeper.measurement import Throughput
from sweeper.report import build_report_data
from sweeper.report.page import render
from sweeper.search.preset import with_job_knobs
from sweeper.search.settings import SearchConf


def test_start_up_is_what_the_run_lost_against_its_rate_from_the_start():
    # 2 s before warm-up, a 5 s warm-up that did 2,000 samples at a rate of 1,000/s: it lost 5 s
    assert startup_s(2.0, 5.0, 2000, 1000.0) == pytest.approx(5.0)
    # a warm-up that ran at the rate from its first step lost nothing; jitter is no gain
    assert startup_s(0.0, 1.0, 1100, 1000.0) == 0.0


def test_a_figure_over_a_job_is_its_samples_over_its_time_to_finish():
    figures = Throughput(samples_per_sec=1000.0, samples_per_sec_ci_low=900.0, samples_per_sec_ci_high=1100.0)
    job = over_job(figures, startup=10.0, job_samples=10_000)
    assert job.job_time_s == pytest.approx(20.0)
    assert job.samples_per_sec == pytest.approx(500.0)
    assert job.running_rate == 1000.0
    assert job.samples_per_sec_ci_low < job.samples_per_sec < job.samples_per_sec_ci_high
    # the longer the job, the nearer its figure comes to the rate
    assert over_job(figures, 10.0, 10_000_000).samples_per_sec == pytest.approx(999.0, rel=1e-3)


def _brute_force_first(lines, samples):
    return min(lines, key=lambda line: (line.time_s(samples), -line.rate)).number


@pytest.mark.parametrize(
    "lines",
    [
        [JobLine(1, 0.2, 1000), JobLine(2, 25, 1500), JobLine(3, 3, 1100)],
        [JobLine(1, 5, 1000), JobLine(2, 1, 900), JobLine(3, 9, 2000), JobLine(4, 2, 800)],
        [JobLine(1, 1, 1000)],
        [JobLine(1, 3, 1000), JobLine(2, 1, 1000)],  # the same rate: the quicker start always
    ],
)
def test_the_leads_are_the_lower_envelope_of_time_against_length(lines):
    found = leads(lines)
    assert found[0].from_samples == 0 and found[-1].to_samples is None
    for a, b in zip(found, found[1:]):
        assert a.to_samples == b.from_samples and b.line.rate > a.line.rate
    for lead in found:  # inside each span, no line finishes sooner
        ends = lead.to_samples or lead.from_samples * 10 + 1e6
        for samples in (lead.from_samples + 1, (lead.from_samples + ends) / 2, ends - 1):
            assert _brute_force_first(lines, samples) == lead.line.number


def test_the_crossover_is_where_the_extra_start_up_is_paid_back():
    quick, compiled = JobLine(1, 1.0, 1000.0), JobLine(2, 21.0, 2000.0)
    at = crossover(quick, compiled)
    assert at == pytest.approx(40_000)
    assert quick.time_s(at) == pytest.approx(compiled.time_s(at)) == pytest.approx(job_time_s(1.0, at, 1000.0))
    assert crossover(compiled, quick) is None


def test_a_start_up_within_the_jitter_makes_no_lead():
    lines = [JobLine(1, 0.1, 1000.0), JobLine(2, 0.4, 1010.0)]
    assert [line.number for line in distinct(lines)] == [2]
    assert len(leads(distinct(lines))) == 1


def test_a_job_length_searches_compile_as_a_later_knob_tried_once_at_the_best():
    search = SearchConf(preset="cpu", params={"loader.batch_size": "choice(64,256)"}, later=["x"])
    assert with_job_knobs(search, None, cuda=False) is search
    cpu = with_job_knobs(search, 2e6, cuda=False)
    assert cpu.params[Knob.BACKEND_COMPILE] == "choice(off,default)" and cpu.later == ["x", Knob.BACKEND_COMPILE]
    assert "max-autotune" in with_job_knobs(search, 2e6, cuda=True).params[Knob.BACKEND_COMPILE]
    # a preset's own compile modes stay as the preset has them
    gpu = SearchConf(preset="gpu", params={Knob.BACKEND_COMPILE: "choice(off,default)"})
    assert with_job_knobs(gpu, 2e6, cuda=True).params[Knob.BACKEND_COMPILE] == "choice(off,default)"


def _trial(number, compile_, rate, startup, job_samples=None, baseline=False):
    running = rate
    if job_samples:
        rate = job_samples / job_time_s(startup, job_samples, running)
    metrics = {"samples_per_sec": rate, "peak_memory_mb": 500.0, "startup_s": startup}
    if job_samples:
        metrics |= {"job_samples": job_samples, "running_samples_per_sec": running}
    t = create_trial(
        state=TrialState.COMPLETE,
        values=[rate],
        params={"backend.compile": compile_},
        distributions={"backend.compile": CategoricalDistribution(["off", "default"])},
        user_attrs={
            "knobs": {"backend.compile": compile_},
            "status": "ok",
            "baseline": baseline,
            "metrics": metrics,
            "samples_per_sec": rate,
            "fixed_overrides": [],
            "fingerprint": json.dumps({"hostname": "lab1", "cpu": "X", "cpus_available": 2}),
        },
    )
    t.number = number
    return t


def _report(trials):
    return build_report_data(trials, study_name="s", workload="w", fixed=[], confirmation=None)


def test_the_report_says_from_which_job_length_compile_pays_for_itself():
    data = _report([_trial(0, "off", 1000.0, 0.5, baseline=True), _trial(1, "default", 2000.0, 20.5)])
    job = data.charts.job
    assert job is not None and [lead.line.number for lead in job.leads] == [0, 1]
    page = render(data)
    assert "backend.compile=default pays for itself after 40 k samples (a job of 40 s)" in page
    assert 'id="job-length"' in page and "ranked by a job" not in page


def test_the_report_is_silent_on_job_length_where_start_up_decides_nothing():
    data = _report([_trial(0, "off", 1000.0, 0.5, baseline=True), _trial(1, "default", 2000.0, 0.7)])
    assert data.charts.job is None and 'id="job-length"' not in render(data)


def test_a_sweep_ranked_by_a_job_says_so_and_ranks_by_the_job():
    # a short job: the quick start wins it, though the compiled loop runs twice as fast
    short = [_trial(0, "off", 1000.0, 0.5, 10_000, baseline=True), _trial(1, "default", 2000.0, 20.5, 10_000)]
    data = _report(short)
    assert data.winner.number == 0 or data.winner.baseline_kept
    page = render(data)
    assert "This sweep ranked by a job of 10 k samples" in page
    assert "backend.compile=default pays for itself after 40 k samples" in page
