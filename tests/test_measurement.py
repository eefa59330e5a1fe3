"""What the timing loop measures, on fake clocks and devices: where it synchronizes, device
time from step events, epoch ends inside the windows, the restart cost, utilization."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import sys
import time
import types

import numpy as np
import pytest

from sweeper.config import LoaderConf, MeasureConf, TrialConf
from sweeper.measurement import Throughput, Utilization
from sweeper.measuring import restarts, timing, utilization, warmup


class FakeGpu:
    """A device that runs each step for `device_s` after the host queues it; the host only
    waits for it in synchronize(). Events are stamped when the device reaches them."""

    def __init__(self, clock, device_s: float) -> None:
        self.clock, self.device_s = clock, device_s
        self.free_at = 0.0
        self.syncs = 0
        self._marks: list[tuple[float, float]] = []
        self._begun = 0.0

    def launch(self) -> None:
        start = max(self.clock.now, self.free_at)
        self.free_at = start + self.device_s

    def synchronize(self) -> None:
        self.syncs += 1
        self.clock.now = max(self.clock.now, self.free_at)

    # the StepTimer protocol, as CUDA events would answer
    def begin(self) -> None:
        self._begun = max(self.clock.now, self.free_at)

    def end(self) -> None:
        self._marks.append((self._begun, self.free_at))

    def collect(self) -> list[float]:
        done = [b - a for a, b in self._marks]
        self._marks.clear()
        return done


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gpu_loop(sync_every_step: bool, loader_s: float = 0.05, launch_s: float = 0.01, device_s: float = 0.1):
    clock = Clock()
    gpu = FakeGpu(clock, device_s)

    def next_batch():
        clock.now += loader_s  # the host fetches the next batch while the device works
        return "batch"

    def step(batch):
        clock.now += launch_s
        gpu.launch()

    rule = timing.Rule(warmup_s=0.5, warmup_steps=2, max_windows=4, window_s=5.0)
    t = timing.measure(
        next_batch,
        step,
        lambda b: 10,
        gpu.synchronize,
        rule,
        sync_every_step=sync_every_step,
        step_timer=gpu,
        clock=clock,
    )
    return t, gpu


def test_the_device_is_synchronized_only_at_window_edges():
    t, gpu = gpu_loop(sync_every_step=False)
    # after the first step (compile time), at the end of warm-up, and at each window's end
    assert gpu.syncs == 2 + 4
    s = t.timing()
    # host and device overlap as in a real loop: the device's 0.1 s per step is the pace
    assert t.throughput().samples_per_sec == pytest.approx(100.0, rel=0.01)
    assert s.device_step_time_p50_ms == pytest.approx(100.0)
    assert s.device_busy_fraction == pytest.approx(1.0, abs=0.02)
    # the host spends most of its time waiting for batches, but the device never idles:
    # the verdict goes by the device, so a GPU-bound run reads as one
    assert s.data_wait_fraction == pytest.approx(0.05 / 0.06, rel=0.01)
    assert s.bottleneck == "compute-bound"


def test_a_sync_per_step_removes_the_overlap_and_under_reads():
    per_window, _ = gpu_loop(sync_every_step=False)
    per_step, gpu = gpu_loop(sync_every_step=True)
    assert gpu.syncs > 4 * 30  # once per step
    # per step: loader 0.05 + launch 0.01 + device 0.1 in series = 0.16 s per 10 samples
    assert per_step.throughput().samples_per_sec == pytest.approx(62.5, rel=0.01)
    assert per_step.timing().bottleneck == "data-bound"  # the device idles while the host waits
    ratio = per_window.throughput().samples_per_sec / per_step.throughput().samples_per_sec
    assert ratio == pytest.approx(1.6, rel=0.02)


def test_without_a_step_timer_there_is_no_device_time():
    clock = Clock()

    def step(batch):
        clock.now += 0.1

    rule = timing.Rule(warmup_s=0.1, warmup_steps=1, max_windows=2, window_s=0.5)
    s = timing.measure(lambda: None, step, lambda b: 1, lambda: None, rule, clock=clock).timing()
    assert s.device_busy_fraction is None and s.device_step_time_p50_ms is None


def _stream(dataset_len: int, batch: int, clock: Clock, step_s: float):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from sweeper.measuring import loader

    stored = TensorDataset(torch.arange(dataset_len))
    return (
        stored,
        loader,
        lambda epoch_samples: loader.BatchStream(
            DataLoader(loader.with_epoch_length(stored, epoch_samples), batch_size=batch, drop_last=True), clock=clock
        ),
    )


@pytest.mark.parametrize(("epoch_samples", "ends"), [(None, 8), (1_281_167, 0)])
def test_epoch_ends_inside_the_windows_are_counted(epoch_samples, ends):
    clock = Clock()
    _, _, make = _stream(8, 2, clock, 0.1)  # 4 steps an epoch when the stored set is the epoch
    stream = make(epoch_samples)

    def step(batch):
        clock.now += 0.1

    # warm-up: 3 steps; windows: 3 x 10 steps = batches 4..33; epochs start at batches 5, 9, ..., 33
    rule = timing.Rule(warmup_s=0.0, warmup_steps=3, max_windows=3, window_s=0.95)
    s = timing.measure(
        stream, step, lambda b: 2, lambda: None, rule, epochs_started=lambda: stream.epochs_started, clock=clock
    )
    assert s.timing().steps_measured == 30
    assert s.throughput().epoch_ends_measured == ends


def test_a_real_rate_epoch_repeats_the_stored_samples_through_their_own_getitem():
    clock = Clock()
    stored, loader, _ = _stream(8, 2, clock, 0.1)
    presented = loader.with_epoch_length(stored, 1_281_167)
    assert len(presented) == 1_281_167
    assert int(presented[8 * 1000 + 3][0]) == int(stored[3][0])
    assert loader.with_epoch_length(stored, None) is stored and loader.with_epoch_length(stored, 8) is stored


def test_the_restart_cost_is_timed_once_and_counted_once_per_epoch():
    clock = Clock()
    _, _, make = _stream(8, 2, clock, 0.1)
    stream = make(None)
    before = stream.epochs_started
    assert stream.restart_cost_s() == 0.0  # nothing on the fake clock moves while iterating
    assert stream.epochs_started == before + 1

    figures = Throughput(
        samples_per_sec=1000.0,
        samples_per_sec_steady=1000.0,
        epoch_ends_measured=1,
        windows_measured=5,
        samples_per_sec_ci_low=950.0,
        samples_per_sec_ci_high=1050.0,
    )
    out = restarts.with_epoch_restarts(figures, 60_000, 3.0)
    # 60 s of steady steps plus one 3 s restart per epoch, the interval scaled with the figure
    assert out.samples_per_sec == pytest.approx(60_000 / 63.0)
    assert out.interval == pytest.approx((950.0 * 60 / 63, 1050.0 * 60 / 63))
    assert out.samples_per_sec_steady == 1000.0 and out.epoch_restart_s == 3.0
    # when most windows already held an epoch end, the windows have the restarts in them
    busy = dataclasses.replace(figures, samples_per_sec_steady=None, epoch_ends_measured=4)
    assert restarts.with_epoch_restarts(busy, 60_000, 3.0).samples_per_sec == 1000.0


def test_the_restart_is_read_from_the_windows_it_fell_in_when_there_are_such():
    """As the loop lived it: a window with an epoch end took 0.5 s beyond its samples at the
    steady rate (1000/s); two ends in one window count twice. No end in a window: timed apart."""
    rates = [1000.0, 1000.0, 1000.0 / 1.5, 1000.0, 1000.0]
    t = timing.Timings(
        window_samples_per_sec=rates,
        window_totals=[(1000.0, 1.0), (1000.0, 1.0), (1000.0, 1.5), (1000.0, 1.0), (1000.0, 1.0)],
        window_epoch_ends=[0, 0, 1, 0, 0],
    )
    assert t.restart_in_windows_s(True) == pytest.approx(0.5)
    assert t.throughput(True).epoch_restart_in_windows_s == pytest.approx(0.5)
    assert t.restart_in_windows_s(False) is None  # persistent workers: nothing restarts
    twice = dataclasses.replace(
        t, window_totals=[*t.window_totals[:2], (1000.0, 2.0), *t.window_totals[3:]], window_epoch_ends=[0, 0, 2, 0, 0]
    )
    assert twice.restart_in_windows_s(True) == pytest.approx(0.5)
    none = dataclasses.replace(t, window_epoch_ends=[0, 0, 0, 0, 0])
    assert none.restart_in_windows_s(True) is None


def test_with_restarts_timed_apart_the_rules_read_the_windows_no_epoch_end_fell_in():
    """Non-persistent workers stall at each epoch end. That cost is timed apart and added per
    epoch, so the windows an end fell in are left out of the figure, its interval and the
    precision rule, which their stall would otherwise keep from ever stopping."""
    rule = timing.Rule.of(
        dataclasses.replace(_MEASURE, windows=10, min_windows=3, rel_precision=0.05, window_s=1.0),
        workers=2,
        persistent_workers=False,
    )
    assert rule.restarts_apart and not timing.Rule.of(_MEASURE, workers=2).restarts_apart
    t = timing.Timings()
    for rate, ends in [(1000.0, 0), (400.0, 1), (1010.0, 0), (990.0, 0)]:
        t.window_samples_per_sec.append(rate)
        t.window_totals.append((rate, 1.0))
        t.window_epoch_ends.append(ends)
    assert t.counted_totals(True) == ([1000.0, 1010.0, 990.0], [1.0, 1.0, 1.0])
    assert timing._verdict(t, rule) == "precise"  # all four windows: a 95% interval of +-45%
    assert timing._verdict(t, dataclasses.replace(rule, restarts_apart=False)) is None
    figures = t.throughput(restarts_apart=True)
    assert figures.samples_per_sec == figures.samples_per_sec_steady == pytest.approx(1000.0)
    assert figures.windows_measured == 4 and figures.epoch_ends_measured == 1  # all windows still reported
    assert t.throughput().samples_per_sec == pytest.approx(3400.0 / 4) and t.throughput().samples_per_sec_steady is None


def test_with_restarts_timed_apart_the_rules_race_the_figure_with_its_restarts_as_the_best_holds_it():
    """The figure of such a run adds the restart its windows read once per epoch, and so does the
    best's that the bars come from: the prune floor, the race and `behind` read the run on that
    scale, not its steady windows alone. A pruned run's figure is on the scale it was pruned on."""
    t = timing.Timings()
    for rate, ends in [(1000.0, 0), (400.0, 1), (1010.0, 0), (990.0, 0)]:
        t.window_samples_per_sec.append(rate)
        t.window_totals.append((rate, 1.0))
        t.window_epoch_ends.append(ends)
    # the restart cost the stalled window 0.6 s: an epoch of 3,000 samples runs at 3000 / 3.6
    over_epochs = 3000 / 3.6
    assert restarts.over_epochs(1000.0, 3000, 0.6) == pytest.approx(over_epochs)
    rule = timing.Rule.of(
        dataclasses.replace(_MEASURE, windows=10, min_windows=3, rel_precision=0.001, window_s=1.0),
        workers=2,
        persistent_workers=False,
        trial=TrialConf(prune_below=900.0),
        epoch_samples=3000,
    )
    assert timing._verdict(t, rule) == "pruned"  # 833 over epochs, under the floor
    assert timing._verdict(t, dataclasses.replace(rule, epoch_samples=None)) is None  # 1,000 steady: above
    behind = dataclasses.replace(rule, prune_below=None, behind=900.0)
    assert timing._verdict(t, behind) == "behind"
    assert timing._verdict(t, dataclasses.replace(behind, behind=None, race=(900.0, 1200.0))) == "raced"
    assert timing._verdict(t, dataclasses.replace(behind, behind=None)) is None  # the precision rule alone
    pruned = dataclasses.replace(t.throughput(restarts_apart=True), stopped=timing.Stopped.PRUNED)
    loader = LoaderConf(batch_size=64, num_workers=2, persistent_workers=False)

    def never() -> float:
        raise AssertionError("a pruned run times no restart apart")

    figures = restarts.with_restarts(pruned, loader, 3000, never)
    assert figures.samples_per_sec == pytest.approx(over_epochs)
    assert figures.samples_per_sec_steady == pytest.approx(1000.0)
    unread = dataclasses.replace(pruned, epoch_restart_in_windows_s=None, samples_per_sec_steady=None)
    assert restarts.with_restarts(unread, loader, 3000, never) == unread


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_utilization_of_the_process_and_of_its_workers():
    monitor = utilization.CpuMonitor()
    monitor.start()
    worker = multiprocessing.get_context("fork").Process(target=_burn, args=(0.4,))
    worker.start()
    _burn(0.3)
    worker.join()  # reaped: its time moves into our cutime, and still counts
    figures = monitor.stop()
    cores = len(os.sched_getaffinity(0))
    assert 0 < figures.cpu_util_main_pct <= 100 * cores + 5
    assert 0 < figures.cpu_util_workers_pct <= 100 * cores + 5
    # the split is the one the scripted counters give
    reads = iter([(1.0, 2.0), (2.5, 5.0)])
    ticks = iter([10.0, 12.0])
    scripted = utilization.CpuMonitor(read=lambda pid: next(reads), clock=lambda: next(ticks))
    scripted.start()
    assert scripted.stop() == Utilization(cpu_util_main_pct=75.0, cpu_util_workers_pct=150.0)


def _burn_and_wait(burned, stop):
    _burn(0.3)
    with burned.get_lock():
        burned.value += 1
    stop.wait(60)


def _rank(burned, stop):
    worker = multiprocessing.get_context("fork").Process(target=_burn_and_wait, args=(burned, stop))
    worker.start()
    _burn_and_wait(burned, stop)
    worker.join()


def _launcher(burned, stop):
    ranks = [multiprocessing.get_context("fork").Process(target=_rank, args=(burned, stop)) for _ in range(2)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()


def test_under_a_launcher_of_ranks_the_ranks_are_the_training_processes_and_their_workers_the_workers():
    """A data-parallel script runs under torch.distributed.run: its ranks are the launcher's
    children and each rank's loader workers theirs. The ranks' CPU is the training processes',
    not the loader workers' (it read 0% and 197% in a script's report)."""
    fork = multiprocessing.get_context("fork")
    burned, stop = fork.Value("i", 0), fork.Event()
    launcher = fork.Process(target=_launcher, args=(burned, stop))
    launcher.start()
    try:
        deadline = time.monotonic() + 60
        while burned.value < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        main, workers = utilization.ranks_cpu_seconds(launcher.pid)
        assert main >= 0.5 and workers >= 0.25  # two ranks' 0.3 s each; two workers' 0.3 s each
        assert utilization.cpu_seconds(launcher.pid)[0] < 0.2  # the launcher itself idles
    finally:
        stop.set()
        launcher.join()


def test_sweepers_own_threads_and_the_process_that_started_the_run_are_counted_apart_from_the_loop():
    from sweeper.measuring import harness

    # a thread of sweeper's own that works, beside a loop (this thread) that works too
    sampler = harness.own_thread(lambda: _burn(0.2))
    monitor = harness.HarnessMonitor(parent=os.getppid())
    monitor.start()
    sampler.start()
    _burn(0.2)
    sampler.join()
    figures = monitor.stop()
    # the sampler's 0.2 s (and the parent's little) over about 0.2-0.4 s (longer on a loaded
    # machine): not this thread's own 0.2 s too, which would read about 200%
    assert 15 < figures.harness_cpu_pct < 160
    # the figure is the counters' difference over the clock's, whatever the counters are
    reads, ticks = iter([3.0, 3.05]), iter([10.0, 15.0])
    scripted = harness.HarnessMonitor(parent=None, read=lambda parent: next(reads), clock=lambda: next(ticks))
    scripted.start()
    assert scripted.stop().harness_cpu_pct == pytest.approx(1.0)
    assert harness.process_cpu_s(2**22 + 12345) == 0.0  # a process that is gone reads nothing, not an error
    # where the loop runs in a process of its own (a script), all of this process is sweeper's
    whole = harness.HarnessMonitor(parent=None, whole_process=True)
    whole.start()
    _burn(0.2)
    assert whole.stop().harness_cpu_pct > 50


def test_monitors_nest_around_the_windows_sweepers_own_cpu_innermost():
    """The monitors start in order and stop in reverse: sweeper's own CPU, started last and
    stopped first, spans the windows alone, not the other monitors' reads at their edges (the
    foreign-load watch walks every process in /proc)."""
    kinds = [type(m).__name__ for m in utilization.monitors_for(50.0, utilization.CpuMonitor(), None)]
    assert kinds == ["ForeignMonitor", "CpuMonitor", "HarnessMonitor"]
    said = []

    class Said:
        def __init__(self, name):
            self.name = name

        def start(self):
            said.append(f"{self.name} starts")

        def stop(self):
            said.append(f"{self.name} stops")
            return Utilization()

    clock = Clock()

    def step(batch):
        clock.now += 0.1

    rule = timing.Rule(warmup_s=0.2, warmup_steps=1, max_windows=2, window_s=0.5)
    timing.measure(lambda: None, step, lambda b: 1, lambda: None, rule, clock=clock, monitors=[Said("a"), Said("b")])
    assert said == ["a starts", "b starts", "b stops", "a stops"]


def fake_nvml(**overrides):
    rates = types.SimpleNamespace(gpu=80, memory=30)
    calls = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetHandleByUUID": lambda uuid: uuid,
        "nvmlDeviceGetUtilizationRates": lambda handle: rates,
        "nvmlDeviceGetPowerUsage": lambda handle: 350_000,  # milliwatts
        "nvmlDeviceGetEnforcedPowerLimit": lambda handle: 700_000,
    }
    calls.update(overrides)
    return types.SimpleNamespace(**calls)


def test_nvml_figures_for_the_runs_gpu():
    seen = []
    nvml = fake_nvml(nvmlDeviceGetHandleByUUID=lambda uuid: seen.append(uuid) or uuid)
    monitor = utilization.nvml_monitor("5e2d6b1a-0000-1111-2222-333344445555", nvml=nvml)
    assert seen == ["GPU-5e2d6b1a-0000-1111-2222-333344445555"]  # NVML's spelling of torch's UUID
    monitor.sample()
    monitor.sample()
    assert monitor.stop() == Utilization(
        gpu_util_pct=80.0, gpu_mem_util_pct=30.0, gpu_power_w=350.0, gpu_power_cap_w=700.0
    )


def test_a_run_shorter_than_nvmls_interval_still_gets_its_figures():
    """NVML is read twice a second; a run whose windows end before the first read takes one at
    its stop (NVML's figures are recent averages), and a read that fails there ends nothing."""
    monitor = utilization.NvmlMonitor(fake_nvml(), "h", interval_s=60.0)
    monitor.start()
    assert monitor.stop() == Utilization(
        gpu_util_pct=80.0, gpu_mem_util_pct=30.0, gpu_power_w=350.0, gpu_power_cap_w=700.0
    )
    memory = utilization.NvmlProcessMemory(
        types.SimpleNamespace(
            nvmlDeviceGetCount=lambda: 1,
            nvmlDeviceGetHandleByIndex=lambda index: index,
            nvmlDeviceGetComputeRunningProcesses=lambda handle: [types.SimpleNamespace(pid=7, usedGpuMemory=3 << 30)],
        ),
        lambda: [7],
        interval_s=60.0,
    )
    memory.start()
    memory.stop()
    assert memory.peak_mb == 3072.0

    def gone(handle):
        raise RuntimeError("NVML: GPU is lost")

    failing = utilization.NvmlMonitor(fake_nvml(nvmlDeviceGetUtilizationRates=gone), "h", interval_s=60.0)
    failing.start()
    assert failing.stop() == Utilization()


def test_other_processes_on_the_runs_gpu_are_counted_from_nvmls_per_process_samples():
    import os

    def processes(*samples):
        return lambda handle, since: [
            types.SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0) for pid, ts, sm in samples if ts > since
        ]

    # the run's own process at 90%, two others at 30% and 15% in the same sample: 45% is someone else's
    busy = processes((os.getpid(), 1, 90), (999_999_001, 1, 30), (999_999_002, 1, 15), (999_999_001, 2, 10))
    monitor = utilization.NvmlMonitor(fake_nvml(nvmlDeviceGetProcessUtilization=busy), "h", root=os.getpid())
    monitor.sample()
    monitor.sample()  # only samples newer than the last read count again
    used = monitor.stop()
    assert (used.foreign_gpu_util_pct, used.under_load) == (45.0, True)
    assert used.merged(Utilization()).under_load is True
    # a neighbour's idle context (a few percent) leaves the CPU's verdict standing
    idle = processes((os.getpid(), 1, 90), (999_999_001, 1, 2))
    calm = utilization.NvmlMonitor(fake_nvml(nvmlDeviceGetProcessUtilization=idle), "h", root=os.getpid())
    calm.sample()
    assert Utilization(under_load=False).merged(calm.stop()).under_load is False
    assert "kept its GPU up to 45% busy" in Utilization(foreign_cpu_pct=3.0, foreign_gpu_util_pct=45.0).load_note


def test_no_nvml_means_no_gpu_figures_and_no_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert utilization.nvml_monitor("5e2d6b1a") is None

    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    assert utilization.nvml_monitor("5e2d6b1a", nvml=fake_nvml(nvmlInit=no_driver)) is None
    assert utilization.nvml_monitor(None, nvml=fake_nvml()) is None
    # a monitor whose samples all failed reports nothing rather than zeros
    silent = utilization.NvmlMonitor(fake_nvml(), "h", interval_s=0.01)
    assert silent.stop() == Utilization()


def scripted(step_times):
    """A loop whose n-th step takes step_times(n) seconds on a fake clock (one sample per step)."""
    clock = Clock()
    calls = {"n": 0}

    def step(batch):
        clock.now += step_times(calls["n"])
        calls["n"] += 1

    return clock, step, calls


_MEASURE = MeasureConf(
    warmup_s=0.5,
    warmup_steps=3,
    windows=10,
    window_s=0.5,
    warmup_max_s=5.0,
    steady_tol=0.05,
    min_windows=3,
    rel_precision=0.05,
    drift_tol=0.05,
    max_s=30.0,
)
ADAPTIVE = dict(
    warmup_s=0.2,
    warmup_steps=1,
    max_windows=20,
    window_s=0.5,
    warmup_max_s=10.0,
    steady_tol=0.05,
    min_windows=3,
    rel_precision=0.03,
)


def test_warm_up_ends_when_the_step_rate_is_steady():
    # steps slow at first (caches, allocator, autotuning), settling towards 10 ms
    settling = lambda n: 0.01 + 0.04 * math.exp(-n / 30)  # noqa: E731
    clock, step, _ = scripted(settling)
    t = timing.measure(lambda: None, step, lambda b: 1, lambda: None, timing.Rule(**ADAPTIVE), clock=clock)
    assert t.warmup_steady and t.warmup_s < ADAPTIVE["warmup_max_s"]
    assert settling(t.warmup_steps) < 0.0105  # within 5% of the settled step when measuring starts
    # a rate that keeps falling never settles: warm-up stops at the maximum
    drifting, drifting_step, _ = scripted(lambda n: 0.01 * math.exp(n / 200))
    capped = timing.measure(
        lambda: None,
        drifting_step,
        lambda b: 1,
        lambda: None,
        timing.Rule(**{**ADAPTIVE, "warmup_max_s": 2.0}),
        clock=drifting,
    )
    assert not capped.warmup_steady and 2.0 <= capped.warmup_s < 2.1


def test_a_bursty_loop_is_steady_over_longer_spans_than_one_block():
    # workers delivering in bursts: each 0.25 s block runs 20% faster or slower than the next
    # (periods of 25 and 20 steps), at a rate that does not move: no two neighbouring blocks
    # agree within 5%, two blocks against two do
    bursty = lambda n: 0.008 if (n // 25) % 2 else 0.0125  # noqa: E731
    clock, step, _ = scripted(bursty)
    t = timing.measure(lambda: None, step, lambda b: 1, lambda: None, timing.Rule(**ADAPTIVE), clock=clock)
    assert t.warmup_steady and t.warmup_s < 1.5
    blocks = [(25, 0.2), (20, 0.25)] * 3
    assert not any(warmup.steady(blocks[i : i + 2], 0.05) for i in range(5))
    assert warmup.steady(blocks[:4], 0.05)


def test_warm_up_leaves_out_a_block_that_held_a_worker_restart():
    # 10 ms steps, and every 40th step an epoch end whose restart stalls 0.15 s: the block
    # holding it reads slow. Restarting workers (restarts_apart): that block is not compared,
    # and warm-up ends on the blocks around it; compared, it delays the steady verdict
    def warm_up(restarts_apart: bool) -> timing.Timings:
        clock, calls = Clock(), {"n": 0}

        def step(batch):
            calls["n"] += 1
            clock.now += 0.01 + (0.15 if calls["n"] % 40 == 0 else 0.0)

        rule = timing.Rule(**{**ADAPTIVE, "warmup_s": 0.35, "restarts_apart": restarts_apart})
        return timing.measure(
            lambda: None, step, lambda b: 1, lambda: None, rule, clock=clock, epochs_started=lambda: calls["n"] // 40
        )

    left_out, compared = warm_up(True), warm_up(False)
    assert left_out.warmup_steady and left_out.warmup_s < 1.0 < compared.warmup_s


def test_windows_stop_at_the_precision_asked():
    quiet_clock, quiet_step, _ = scripted(lambda n: 0.01)
    quiet = timing.measure(
        lambda: None, quiet_step, lambda b: 1, lambda: None, timing.Rule(**ADAPTIVE), clock=quiet_clock
    )
    assert quiet.stopped == "precise" and len(quiet.window_samples_per_sec) == 3  # the minimum
    # every other window 20% slower: the interval narrows only with more windows
    noisy_clock, noisy_step, _ = scripted(lambda n: 0.012 if (n // 50) % 2 else 0.01)
    noisy = timing.measure(
        lambda: None, noisy_step, lambda b: 1, lambda: None, timing.Rule(**ADAPTIVE), clock=noisy_clock
    )
    low, high = noisy.throughput().interval
    assert noisy.stopped in ("precise", "max windows") and len(noisy.window_samples_per_sec) > 3
    if noisy.stopped == "precise":
        assert (high - low) / 2 <= 0.03 * (high + low) / 2


def test_the_trend_rule_reads_halves_apart_beyond_the_tolerance():
    from sweeper.stats import trend

    assert trend([100, 100, 100, 90, 90, 90], 0.05) == pytest.approx(-0.1)
    assert trend([100, 101, 99, 100, 98, 102], 0.05) is None  # steady and noisy
    assert trend([100, 90, 100, 90, 100, 90], 0.05) is None  # halves not apart
    assert trend([100, 100, 100, 97, 97, 97], 0.05) is None  # apart, within the tolerance
    assert trend([100, 100, 90, 90], 0.05) is None  # too few windows to read a trend
    # 24 noisy windows, the later 12 slower by 9%: their ranges overlap, their means do not
    noisy_slowing = [106.0, 94.0] * 6 + [97.0, 85.0] * 6
    assert trend(noisy_slowing, 0.05) == pytest.approx(-0.09)


# a trend is read over 6 windows or more: a run that stops sooner (precise after 3) is not checked
DRIFTING = dict(ADAPTIVE, rel_precision=0.05, min_windows=6, max_windows=6, drift_tol=0.05, max_s=30.0)


def test_a_run_still_slowing_measures_on_until_steady_and_its_figure_is_the_steady_rate():
    # 10 ms steps that slow to 11 ms over steps 150-250 (a long run's subnormal floats), then stay
    def slowing(n: int) -> float:
        return 0.01 + 0.001 * min(1.0, max(0.0, (n - 150) / 100))

    clock, step, _ = scripted(slowing)
    t = timing.measure(lambda: None, step, lambda b: 1, lambda: None, timing.Rule(**DRIFTING), clock=clock)
    figures = t.throughput()
    assert figures.drift is not None and figures.drift < -0.05
    assert figures.samples_per_sec == pytest.approx(1 / 0.011, rel=0.015)  # the steady rate, not the early one
    assert t.stopped == "precise" and figures.steady_from_step > 150
    assert figures.drift_note.startswith("drifting down") and "measured until steady at step" in figures.drift_note
    # without the rule, the run stops on its early, faster windows
    clock, step, _ = scripted(slowing)
    plain = timing.measure(
        lambda: None, step, lambda b: 1, lambda: None, timing.Rule(**{**DRIFTING, "drift_tol": None}), clock=clock
    )
    assert plain.throughput().samples_per_sec > 1.02 / 0.011 and plain.throughput().drift is None


def test_a_run_that_never_settles_stops_at_the_cap_and_says_so():
    clock, step, _ = scripted(lambda n: 0.01 * math.exp(n / 300))  # slower and slower
    t = timing.measure(
        lambda: None, step, lambda b: 1, lambda: None, timing.Rule(**{**DRIFTING, "max_s": 8.0}), clock=clock
    )
    assert t.stopped == "drifting" and 8.0 <= sum(t.window_s) < 8.0 + 4 * 0.6
    assert "still drifting at the cap" in t.throughput().drift_note
    # a steady run pays nothing: it stops where it did
    clock, step, _ = scripted(lambda n: 0.01)
    steady = timing.measure(lambda: None, step, lambda b: 1, lambda: None, timing.Rule(**DRIFTING), clock=clock)
    assert steady.stopped == "precise" and len(steady.window_samples_per_sec) == 6 and steady.dropped == 0


def test_racing_prunes_a_clearly_worse_trial_and_a_close_one_stops_when_precise():
    best = (99.0, 101.0)  # the incumbent's interval: 100 samples/s
    worse_clock, worse_step, _ = scripted(lambda n: 0.0125)  # 80 samples/s
    worse = timing.measure(
        lambda: None,
        worse_step,
        lambda b: 1,
        lambda: None,
        timing.Rule(**{**ADAPTIVE, "race": best}),
        clock=worse_clock,
    )
    assert worse.pruned and worse.stopped == "raced" and len(worse.window_samples_per_sec) == 3

    # 99.5 samples/s, windows alternating +-2%: it overlaps the best's interval, and stops when
    # precise as a run alone does (more windows cannot resolve what run-to-run noise hides)
    def close_run(rule):
        clock, step, _ = scripted(lambda n: 1 / 99.5 * (1.02 if (n // 50) % 2 else 0.98))
        return timing.measure(lambda: None, step, lambda b: 1, lambda: None, rule, clock=clock)

    close, alone = close_run(timing.Rule(**{**ADAPTIVE, "race": best})), close_run(timing.Rule(**ADAPTIVE))
    assert not close.pruned and close.stopped == alone.stopped == "precise"
    assert len(close.window_samples_per_sec) == len(alone.window_samples_per_sec) < 20


def test_racing_allows_for_the_run_to_run_noise():
    from sweeper import verdict

    # the incumbent measured 100 +-1 on a lucky run; a trial at 85 +-1 is within 8% run noise of it
    widened = verdict.widened((99.0, 101.0), 0.08)
    assert widened[0] == pytest.approx(99.0 / math.exp(verdict.Z * math.sqrt(2) * 0.08))
    assert 86.0 > widened[0] > 78.0 and widened[1] > 101.0
    assert timing._verdict(_three_windows(85.0), timing.Rule(**{**ADAPTIVE, "race": widened})) == "precise"
    assert timing._verdict(_three_windows(70.0), timing.Rule(**{**ADAPTIVE, "race": widened})) == "raced"
    assert timing._verdict(_three_windows(85.0), timing.Rule(**{**ADAPTIVE, "race": (99.0, 101.0)})) == "raced"


def _three_windows(rate):
    rates = [rate * 0.99, rate, rate * 1.01]
    return timing.Timings(window_samples_per_sec=rates, window_totals=[(r, 1.0) for r in rates])


def test_the_figure_is_the_statistic_its_interval_and_rules_are_of():
    # a loader that delivers in bursts: every 8th step waits 30 ms for the workers, the others
    # take 2 ms, so a window's rate depends on where the bursts fall (skewed windows)
    clock, step, _ = scripted(lambda n: 0.032 if n % 8 == 7 else 0.002)
    t = timing.measure(
        lambda: None,
        step,
        lambda b: 1,
        lambda: None,
        timing.Rule(**{**ADAPTIVE, "window_s": 0.05, "rel_precision": None, "max_windows": 9}),
        clock=clock,
    )
    figures = t.throughput()
    low, high = figures.interval
    assert low <= figures.samples_per_sec <= high
    # the figure is the windows' samples over their time, whatever their lengths
    assert figures.samples_per_sec == pytest.approx(t.samples / sum(t.window_s))


def test_a_window_holds_whole_loader_cycles():
    # 10 ms steps, 0.5 s windows: 50 steps, rounded up to whole cycles of 4 workers' batches
    clock, step, _ = scripted(lambda n: 0.01)
    rule = timing.Rule(**{**ADAPTIVE, "rel_precision": None, "max_windows": 3, "cycle": 4})
    t = timing.measure(lambda: None, step, lambda b: 1, lambda: None, rule, clock=clock)
    assert len(t.step_s) == 3 * 52
    assert timing.Rule.of(_MEASURE, workers=4).cycle == 4


def test_too_few_windows_have_no_interval_and_say_so():
    from sweeper.runner.text import _throughput_row

    # 1,000 samples in 1 s, then 3,000 in 1 s: 2,000 samples/s, and an interval reaching below zero
    two = timing.Timings(window_samples_per_sec=[1000.0, 3000.0], window_totals=[(1000, 1.0), (3000, 1.0)])
    assert two.throughput().interval is None and two.throughput().samples_per_sec == pytest.approx(2000.0)
    assert "too few windows for an interval" in _throughput_row(two.throughput())
    assert timing._verdict(two, timing.Rule(**{**ADAPTIVE, "min_windows": 2, "race": (9e3, 1e4)})) is None
    one = timing.Timings(window_samples_per_sec=[1000.0])
    assert one.throughput().interval is None


def test_gradient_accumulation_makes_the_step_of_the_whole_batch():
    import torch
    from torch import nn

    from sweeper.measuring.steps import make_step
    from sweeper.measuring.workload import Workload

    def trained(accum: int) -> torch.Tensor:
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        workload = Workload(
            model=model,
            dataset=None,
            loss_fn=nn.functional.mse_loss,
            optimizer_fn=lambda ps: torch.optim.SGD(ps, lr=0.1),
        )
        step = make_step(workload, model, torch.device("cpu"), "fp32", True, 0.1, accum)
        g = torch.Generator().manual_seed(1)
        inputs, targets = torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g)
        if accum == 1:
            step((inputs, targets))
        else:
            step([(x, y) for x, y in zip(inputs.chunk(accum), targets.chunk(accum))])
        return model.weight.detach().clone()

    # 4 micro-batches of 16, gradients summed at 1/4 each: the update of one batch of 64
    assert torch.allclose(trained(4), trained(1), atol=1e-6)


def test_a_worker_closes_the_event_pipe_only_when_it_inherited_it(monkeypatch):
    from sweeper.measuring import loader
    from sweeper.protocol import EVENT_FD_ENV

    read_fd, write_fd = os.pipe()
    other_r, other_w = os.pipe()
    try:
        monkeypatch.setenv(EVENT_FD_ENV, str(write_fd))
        pipe = loader.event_pipe()
        # a spawned worker holds something else at that number (a shared tensor's file): kept
        loader.start_worker(0, parent=os.getppid(), pipe=(0, 0))
        os.fstat(write_fd)
        monkeypatch.setenv(EVENT_FD_ENV, str(other_w))
        loader.start_worker(0, parent=os.getppid(), pipe=pipe)
        os.fstat(other_w)  # not the run's pipe: still open
        monkeypatch.setenv(EVENT_FD_ENV, str(write_fd))
        loader.start_worker(0, parent=os.getppid(), pipe=pipe)  # a forked worker: the inherited pipe goes
        with pytest.raises(OSError):
            os.fstat(write_fd)
    finally:
        for fd in (read_fd, other_r, other_w):
            os.close(fd)


def test_a_run_known_to_be_behind_the_best_stops_with_its_figure():
    from sweeper import verdict

    best = (99.0, 101.0)  # the incumbent's own interval: 100 samples/s
    widened = verdict.widened(best, 0.08)  # racing prunes only below ~78: the run-to-run noise

    # 85 samples/s, windows swinging +-30%: never pruned, and slow to be precise
    def noisy_run(rule):
        clock, step, _ = scripted(lambda n: 1 / 85 * (1.3 if (n // 40) % 2 else 0.7))
        return timing.measure(lambda: None, step, lambda b: 1, lambda: None, rule, clock=clock)

    behind = noisy_run(timing.Rule(**{**ADAPTIVE, "race": widened, "behind": best[0]}))
    raced_only = noisy_run(timing.Rule(**{**ADAPTIVE, "race": widened}))
    assert behind.stopped == "behind" and not behind.pruned  # complete: its figure is kept
    assert raced_only.stopped in ("precise", "max windows") and not raced_only.pruned
    assert 3 <= len(behind.window_samples_per_sec) < len(raced_only.window_samples_per_sec)
    low, high = behind.throughput().interval
    assert high < best[0] and low < 85 < high
    # a run whose interval reaches the best's goes on, as without the rule
    assert (
        timing._verdict(_three_windows(99.5), timing.Rule(**{**ADAPTIVE, "race": widened, "behind": 99.0})) == "precise"
    )
    assert timing.Rule.of(_MEASURE, trial=TrialConf(behind=99.0)).behind == 99.0


def test_a_warm_up_far_below_the_floor_is_confirmed_by_a_quarter_window_then_pruned():
    """The warm-up's steady span reads the loop's rate (samples over time, batches of 8); when
    it is under the floor's one-window bar (far_below), the first window is a quarter
    window, and the run stops pruned on that window's own figure. A run above the bar measures
    full windows, and a loop that speeds up after warm-up is not pruned on the warm-up's word."""

    def run(step_s, floor, faster_after=None):
        clock, step, calls = scripted(lambda n: step_s if faster_after is None or n < faster_after else step_s / 4)
        bar = None if floor is None else 0.8 * floor  # the sweep's bar at 8% noise (verdict.Floor)
        rule = timing.Rule(**{**ADAPTIVE, "prune_below": floor, "far_below": bar})
        return timing.measure(lambda: None, step, lambda b: 8, lambda: None, rule, clock=clock)

    far = run(0.01, floor=2000.0)  # 800 samples/s against a bar of 1,600
    assert far.warmup_samples_per_sec == pytest.approx(800, rel=0.01)
    assert far.stopped == "pruned" and len(far.window_s) == 1 and far.window_s[0] == pytest.approx(0.125, abs=0.011)
    near = run(0.01, floor=900.0)  # 800 against a bar of 720: two full windows decide
    assert near.stopped == "pruned" and len(near.window_s) == 2 and min(near.window_s) >= 0.5
    assert run(0.01, floor=None).warmup_samples_per_sec == pytest.approx(800, rel=0.01)
    # steady at 800 in the warm-up, 3,200 from then on: the quarter window reads it, and it goes on
    recovered = run(0.01, floor=2000.0, faster_after=far.warmup_steps)
    assert not recovered.pruned and recovered.window_s[0] < 0.5 and len(recovered.window_s) >= 3


def _rate_clock(samples_per_sec, batch: int):
    """A loop whose steps of `batch` samples run at samples_per_sec(t) at the fake clock's time t."""
    clock = Clock()

    def step(b):
        clock.now += batch / samples_per_sec(clock.now)

    return clock, step


def _shipped_rule() -> timing.Rule:
    from sweeper.preflight import compose

    return timing.Rule.of(compose(()).measure)


def _measured(rule: timing.Rule, samples_per_sec, batch: int) -> timing.Timings:
    clock, step = _rate_clock(samples_per_sec, batch)
    return timing.measure(lambda: None, step, lambda b: batch, lambda: None, rule, clock=clock)


def test_the_shipped_rule_measures_a_start_up_transient_on_and_leaves_a_wandering_loop_alone():
    # a small GPT's training (batch 8) on a CPU that handles subnormal floats slowly, as one read
    # on an Intel Xeon: 15 samples/s falling to 2.5 in 8 s as its first steps fill its state with
    # them, climbing back to 19 by 45 s as they leave it; a short run's windows land on the climb
    def transient(t: float) -> float:
        return float(np.interp(t, [0.0, 8.0, 11.0, 45.0], [15.0, 2.5, 2.5, 19.0]))

    shipped = _shipped_rule()
    assert shipped.drift_tol is not None
    t = _measured(shipped, transient, 8)
    early = _measured(dataclasses.replace(shipped, drift_tol=None), transient, 8)
    figure = t.throughput()
    assert figure.drift is not None and figure.drift > 0.5 and early.throughput().drift is None
    assert figure.samples_per_sec > 2.5 * early.throughput().samples_per_sec
    # called changing at drift_tol, steady again only within steady_tol: as far as 5% took it
    tight = _measured(dataclasses.replace(shipped, drift_tol=0.05), transient, 8)
    assert figure.samples_per_sec == pytest.approx(tight.throughput().samples_per_sec, rel=0.01)
    assert figure.drift_note.startswith("drifting up")

    # a loop that wanders in phases of 3 s between 100 and 140 samples/s, over all ten windows:
    # no phase is a trend at the shipped bar, where 5% would have called the later one
    def wandering(t: float) -> float:
        return 140.0 if int(t / 3.0) % 2 else 100.0

    for tol, left_out in ((shipped.drift_tol, False), (0.05, True)):
        run = _measured(dataclasses.replace(shipped, drift_tol=tol, rel_precision=None), wandering, 1)
        assert (run.dropped > 0) == left_out, (tol, run.window_samples_per_sec)
