"""The CUDA path on a real GPU. Skipped where no NVIDIA GPU is visible (CI has none); on a
GPU server: `PYTHONPATH=/tmp/site:$PWD python3 -m pytest -m gpu` (benchmarks/gpu/README.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, TINY, child_pythonpath, load_study, run_multirun
from sweeper.measurement import Measurement
from sweeper.runner.lock import visible_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(visible_gpus() == 0, reason="needs a CUDA GPU")]

CUDA = ["backend.device=cuda"]
SMALL = {
    "mnist_mlp": ["task=mnist_mlp", "task.num_samples=4096"],
    "image_classification": [
        "task=image_classification",
        "task.image_size=64",
        "task.num_classes=10",
        "task.num_samples=512",
        "loader.batch_size=32",
    ],
    "language_model": ["task=language_model", "task.num_tokens=200000", "task.seq_len=128"],
}


def ok(run) -> Measurement:
    """The run's measurement, once it is known to have run on the GPU."""
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = run.result
    assert result.status == "ok" and result.measurement.run.device.startswith("cuda")
    assert result.measurement.memory.cuda_max_allocated_mb > 0 and result.fingerprint.gpu
    return result.measurement


@pytest.mark.parametrize("mode", ["train", "inference"])
@pytest.mark.parametrize("workload", list(SMALL))
def test_every_workload_on_cuda(sweeper_run, workload, mode):
    ok(sweeper_run(*CUDA, *SMALL[workload], f"task.mode={mode}"))


def test_device_time_and_nvml_figures_on_cuda(sweeper_run):
    measured = ok(sweeper_run(*CUDA, *SMALL["image_classification"], "loader.num_workers=2"))
    # CUDA events around each step, read after each window's synchronize
    timing, used = measured.timing, measured.utilization
    assert 0 < timing.device_busy_fraction <= 1 and timing.device_step_time_p50_ms > 0
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert used.gpu_util_pct is None
        return
    assert 0 <= used.gpu_util_pct <= 100 and 0 <= used.gpu_mem_util_pct <= 100
    assert 0 < used.gpu_power_w <= used.gpu_power_cap_w * 1.2


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_on_cuda(sweeper_run, precision):
    # fp16 training runs through a GradScaler (backend.grad_scaler); bf16 needs none
    ok(sweeper_run(*CUDA, *SMALL["image_classification"], f"backend.precision={precision}"))


def test_pinned_memory_workers_channels_last_cudnn_tf32(sweeper_run):
    measured = ok(
        sweeper_run(
            *CUDA,
            *SMALL["image_classification"],
            "loader.pin_memory=true",
            "loader.num_workers=2",
            "backend.channels_last=true",
            "backend.cudnn_benchmark=true",
            "backend.tf32=true",
        )
    )
    assert measured.run.cudnn_benchmark_in_effect and measured.run.tf32_in_effect
    assert measured.memory.dataloader_processes >= 2
    off = ok(sweeper_run(*CUDA, *SMALL["image_classification"]))
    assert not off.run.cudnn_benchmark_in_effect and not off.run.tf32_in_effect


def test_compile_on_cuda(sweeper_run):
    measured = ok(sweeper_run(*CUDA, *SMALL["mnist_mlp"], "backend.compile=default", "measure.timeout_s=600"))
    assert measured.timing.compile_s > 0


def test_jpegs_decoded_on_the_gpu_in_batches(sweeper_run, tmp_path):
    """task.decoder=device: nvJPEG decodes each batch the workers read; the tensor is the one
    the CPU's decode gives, within the two decoders' rounding."""

    from sweeper.data import make_images
    from sweeper.tasks.image_classification import collate_encoded, read_bytes

    made = make_images(tmp_path / "jpegs", images=32, classes=2, size=(200, 150))
    files = sorted(str(f) for f in made.path.rglob("*.jpg"))[:4]
    batch, _ = collate_encoded([(read_bytes(f), 0) for f in files], image_size=64, train=False)
    on_gpu, on_cpu = batch.to("cuda"), batch.to("cpu")
    assert on_gpu.is_cuda and (on_gpu.cpu() - on_cpu).abs().mean() < 0.05
    run = sweeper_run(
        *CUDA,
        *SMALL["image_classification"],
        f"task.data_dir={made.path}",
        "task.num_classes=2",
        "task.epoch_samples=null",
        "loader.num_workers=2",
        "task.decoder=device",
        "loader.batch_size=8",
    )
    assert ok(run).throughput.samples_per_sec > 0


def test_a_cuda_oom_is_oom_and_the_sweep_goes_on(tmp_path):
    # 20 GB per sample: batch 1 fits an 80 GB GPU, batch 8 cannot
    run_multirun(
        tmp_path,
        *CUDA,
        "search=none",
        "task=custom",
        "task.factory=misbehaving:cuda_memory_per_sample",
        "+task.params.gb_per_sample=20",
        "loader.batch_size=1",
        "loader.batch_size=choice(1,8)",
        "hydra.sweeper.sampler._target_=optuna.samplers.GridSampler",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.confirm=0",
    )
    statuses = {
        t.user_attrs["knobs"]["loader.batch_size"]: t.user_attrs["status"] for t in load_study(tmp_path).get_trials()
    }
    assert statuses == {1: "ok", 8: "oom"}


def test_the_lock_is_per_gpu(tmp_path):
    """A run on the GPU waits for the GPU's lock; a CPU run beside it does not."""
    env = {
        **os.environ,
        "SWEEPER_LOCK_DIR": str(tmp_path),
        "PYTHONPATH": child_pythonpath(),
    }
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from sweeper.runner.lock import MeasureLock; "
            "l = MeasureLock('gpu0', {'what': 'test'}); assert l.try_acquire(); print('held', flush=True); "
            "time.sleep(600)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        cpu = subprocess.run(
            [sys.executable, "-m", "sweeper", *TINY, "backend.device=cpu", f"hydra.run.dir={tmp_path / 'c'}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert cpu.returncode == 0 and "waiting" not in cpu.stderr
        gpu = subprocess.Popen(
            [sys.executable, "-m", "sweeper", *TINY, *CUDA, f"hydra.run.dir={tmp_path / 'g'}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = gpu.stderr.readline()
            assert "waiting: this machine is measuring for" in line and "test" in line
        finally:
            gpu.kill()
    finally:
        holder.kill()


def test_more_ranks_than_gpus_is_refused_before_any_rank_starts(sweeper_run):
    run = sweeper_run(*CUDA, *SMALL["mnist_mlp"], f"dist.nproc_per_node={visible_gpus() + 1}")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and "runs one rank per GPU" in lines[-1], run.stderr[-2000:]


@pytest.mark.skipif(visible_gpus() < 2, reason="needs two GPUs")
def test_one_rank_per_gpu_over_nccl(sweeper_run):
    measured = ok(sweeper_run(*CUDA, *SMALL["image_classification"], "dist.nproc_per_node=2"))
    assert measured.run.nproc_per_node == 2 and len(measured.throughput.rank_samples_per_sec) == 2
