"""A single run and a sweep on the same device take the same lock (and pin the same GPU)."""

from __future__ import annotations

import contextlib

import pytest
from hydra import compose, initialize_config_dir

import sweeper.__main__ as cli
from sweeper import procs, resolvers
from sweeper.errors import RunFailed
from sweeper.machine import Fingerprint, Machine
from sweeper.paths import config_dir
from sweeper.result import RunResult, Status
from sweeper.runner import lock
from sweeper.search.plan import make_plan
from sweeper.search.settings import SweepSettings

CUDA_MACHINE = Machine(
    device="cuda", cuda=True, bf16=True, fingerprint=Fingerprint(hardware_class="h", gpu_count=2, hostname="lab1")
)


@pytest.fixture
def two_gpus_first_busy(tmp_path, monkeypatch):
    """A machine whose driver shows two GPUs, with gpu0 measuring for someone else."""
    gpus = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (gpus / bus).mkdir(parents=True)
    monkeypatch.setattr(procs, "NVIDIA_GPUS_DIR", str(gpus))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    busy = lock.MeasureLock("gpu0", {"what": "someone else"})
    assert busy.try_acquire()
    yield
    busy.release()


@pytest.mark.parametrize(
    ("visible", "gpus"),
    [(None, 2), ("1", 1), ("", 0), ("0,-1,1", 1), ("0,1,2,3", 2)],
)
def test_visible_gpus_follow_cuda_visible_devices(tmp_path, monkeypatch, visible, gpus):
    for i in range(2):
        (tmp_path / str(i)).mkdir()
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert lock.visible_gpus(str(tmp_path)) == gpus


def test_cpu_and_no_gpu_lock_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(procs, "NVIDIA_GPUS_DIR", str(tmp_path / "no-driver"))
    assert lock.claim_for("auto") == lock.DeviceClaim("cpu")
    assert lock.claim_for("cpu", gpus=4) == lock.DeviceClaim("cpu")


def test_a_single_run_and_a_sweep_take_the_same_lock(tmp_path, monkeypatch, two_gpus_first_busy):
    resolvers.register()
    import hydra_plugins.throughput_sweeper.config  # noqa: F401  (hydra/sweeper=throughput)

    seen: dict[str, object] = {}

    @contextlib.contextmanager
    def held(resource, what, on_wait, should_stop=lambda: False):
        seen["resource"] = resource
        yield True

    def measure_spec(spec, out_dir, *, env=None, on_event=None):
        seen["env"] = dict(env or {})
        return RunResult(Status.ERROR, "not measured in this test")

    monkeypatch.setattr(cli, "held", held)
    monkeypatch.setattr(cli, "measure_spec", measure_spec)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("config")
        with pytest.raises(RunFailed):
            cli.measure_once(cfg, tmp_path / "run")
        plan = make_plan(
            SweepSettings(),
            [],
            compose=lambda overrides: compose("config", overrides=list(overrides)),
            app_name="sweeper",
            sweep_dir=tmp_path / "sweep",
            probe_machine=lambda *probed: CUDA_MACHINE,
        )
    assert seen["resource"] == plan.claim.locks == ("gpu1",)
    assert seen["env"] == plan.claim.env == {"CUDA_VISIBLE_DEVICES": "1"}


def test_an_address_space_limit_is_refused_on_a_gpu_before_trial_1(tmp_path, two_gpus_first_busy):
    from sweeper.errors import ConfigError

    resolvers.register()
    import hydra_plugins.throughput_sweeper.config  # noqa: F401

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        with pytest.raises(ConfigError, match="measure.memory_limit_gb=4(.0)? limits the address space"):
            make_plan(
                SweepSettings(),
                ["measure.memory_limit_gb=4"],
                compose=lambda overrides: compose("config", overrides=list(overrides)),
                app_name="sweeper",
                sweep_dir=tmp_path,
                probe_machine=lambda *probed: CUDA_MACHINE,
            )
