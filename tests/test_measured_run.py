"""Real, tiny measured runs of every workload and mode, and of runs that fail on purpose."""

from __future__ import annotations

import uuid

import psutil
import pytest

pytestmark = pytest.mark.slow

IMAGE = [
    "task=image_classification",
    "task.image_size=32",
    "task.num_classes=10",
    "task.num_samples=64",
    "loader.batch_size=8",
]
LM = [
    "task=language_model",
    "task.seq_len=32",
    "task.depth=1",
    "task.width=32",
    "task.heads=2",
    "task.num_tokens=20000",
    "task.vocab_size=512",
    "loader.batch_size=8",
]
MNIST = ["task.num_samples=2048"]

METRICS = (
    "samples_per_sec",
    "samples_per_sec_iqr",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "step_time_p99_ms",
    "data_wait_fraction",
    "peak_rss_mb",
    "warmup_s",
    "compile_s",
    "startup_s",
)


@pytest.mark.parametrize("mode", ["train", "inference"])
@pytest.mark.parametrize(
    "workload",
    [
        pytest.param(MNIST, id="mnist_mlp"),
        pytest.param([*IMAGE, "task.model=resnet18"], id="resnet18"),
        pytest.param(LM, id="language_model"),
    ],
)
def test_every_workload_in_both_modes(sweeper_run, workload, mode):
    run = sweeper_run(*workload, f"task.mode={mode}")
    assert run.returncode == 0, run.stderr
    result = run.result
    assert result.status == "ok"
    figures = result.measurement.flat()
    assert set(METRICS) <= set(figures)
    # each figure in the range it can have in a real run: a step takes time, the slower steps are
    # no faster than the median, a process holding torch and a model holds tens of MB at least
    assert figures["samples_per_sec"] == result.samples_per_sec > 0
    assert 0 <= figures["samples_per_sec_iqr"] < figures["samples_per_sec"]
    assert 0 < figures["step_time_p50_ms"] <= figures["step_time_p95_ms"] <= figures["step_time_p99_ms"]
    assert 0 <= figures["data_wait_fraction"] <= 1
    assert figures["peak_rss_mb"] > 50
    # compile_s: the first step's time beyond a typical one (its kernels' first calls, with or
    # without torch.compile); the warm-up holds the first steps
    assert figures["warmup_s"] > 0 and figures["compile_s"] >= 0
    assert result.fingerprint.torch
    assert result.config["task"]["mode"] == mode
    assert "samples/sec" in run.stdout


@pytest.mark.parametrize("model", ["mobilenet_v3_small", "resnet50", "vit_b_16"])
def test_named_torchvision_models(sweeper_run, model):
    run = sweeper_run(*IMAGE, f"task.model={model}", "task.mode=inference", "loader.batch_size=2")
    assert run.returncode == 0, run.stderr
    assert run.result.status == "ok"


def test_workers_threads_compute_bound_and_bf16(sweeper_run):
    run = sweeper_run(
        *MNIST,
        "loader.num_workers=2",
        "loader.prefetch_factor=4",
        "loader.multiprocessing_context=forkserver",
        "loader.persistent_workers=true",
        "backend.threads=1",
        "backend.interop_threads=1",
        "backend.precision=bf16",
        "backend.flush_denormal=true",
        "measure.compute_bound=true",
    )
    assert run.returncode == 0, run.stderr
    result = run.result
    measured = result.measurement
    assert measured.memory.dataloader_processes >= 2
    assert result.fingerprint.threads == 1
    assert measured.throughput.compute_bound_samples_per_sec > 0
    assert "compute-only" in run.stdout
    # what top would show over the windows: percent of one core, within the machine's cores
    cores = result.fingerprint.cpus_available
    assert 0 < measured.utilization.cpu_util_main_pct <= 100 * cores + 5
    assert 0 < measured.utilization.cpu_util_workers_pct <= 100 * cores + 5
    # sweeper's own threads and the command's process beside the loop: recorded, a sliver of a core
    assert 0 <= measured.utilization.harness_cpu_pct < 100
    assert "in sweeper's own" in run.stdout
    assert measured.utilization.gpu_util_pct is None  # no GPU here: not recorded rather than zero
    assert measured.throughput.epoch_restart_s is None  # persistent workers do not restart
    assert measured.run.flush_denormal_in_effect is True and "subnormals flushed" in run.stdout


def test_worker_restarts_at_epoch_ends_and_the_start_up_over_a_whole_job_are_counted(sweeper_run):
    # 256 stored samples shown as 512-sample epochs: batch 64 ends an epoch every 8 steps; the
    # figure stands for a job of 20,000 samples, whose start-up (forkserver workers) counts once
    run = sweeper_run(
        "task.num_samples=256",
        "task.epoch_samples=512",
        "loader.num_workers=2",
        "loader.multiprocessing_context=forkserver",
        "loader.in_order=false",
        "backend.threads=1",
        "measure.job_samples=2e4",
    )
    assert run.returncode == 0, run.stderr
    measured = run.result.measurement
    f = measured.throughput
    assert (measured.run.epoch_samples, measured.run.stored_samples) == (512, 256)
    assert f.epoch_ends_measured > 0
    assert f.epoch_restart_s > 0
    # start-up is never negative: a warm-up that ran at the rate from its first step lost none
    assert f.samples_per_sec_steady >= f.running_samples_per_sec >= f.samples_per_sec > 0
    assert "each epoch end restarts the workers" in run.stdout
    # the job: its samples over start-up + its samples at the rate with the restarts counted
    startup = measured.timing.startup_s
    assert f.job_samples == 20_000 and startup >= 0
    assert f.job_time_s == pytest.approx(startup + 20_000 / f.running_samples_per_sec)
    assert f.samples_per_sec == pytest.approx(20_000 / f.job_time_s)
    assert "whole job         20,000 samples in" in run.stdout


def test_image_folder_of_jpegs_begins_cold_and_a_token_shard_warm(sweeper_run, tmp_path):
    from sweeper.data import make_images, make_tokens

    images = tmp_path / "my photos" / "über"  # spaces and non-ASCII in the path, as users have them
    made = make_images(images, images=16, classes=2, size=(64, 48))
    run = sweeper_run(
        *IMAGE,
        f"task.data_dir='{images}'",
        "loader.batch_size=4",
        "backend.channels_last=true",
        "measure.page_cache=cold",
        "measure.compute_bound=true",
    )
    assert run.returncode == 0, run.stderr
    f = run.result.measurement.throughput  # the data path's ceilings beside the compute-only bound
    assert f.disk_samples_per_sec > 0 and f.disk_mb_per_sec > 0 and f.decode_samples_per_sec > 0
    assert "data path" in run.stdout
    facts = run.result.measurement.run
    assert (facts.page_cache, facts.data_files, facts.data_bytes) == ("cold", 16, made.bytes)
    # evicted just before: what is cached as the run begins is what its first batch read, at most
    assert facts.data_cached_at_start <= 0.5 and facts.memory_available_bytes > made.bytes
    assert "16 files" in run.stdout and "evicted from the page cache before the run" in run.stdout
    # torchvision.io's decode and transforms.v2 on tensors: the same batches, another path
    run = sweeper_run(*IMAGE, f"task.data_dir='{images}'", "loader.batch_size=4", "task.decoder=torchvision")
    assert run.returncode == 0, run.stderr
    assert run.result.status == "ok" and run.result.measurement.run.page_cache == "warm"
    # the batch's bytes decoded at once where the run is (here the CPU), the workers only reading
    run = sweeper_run(
        *IMAGE, f"task.data_dir='{images}'", "loader.batch_size=4", "loader.num_workers=1", "task.decoder=device"
    )
    assert run.returncode == 0, run.stderr
    assert run.result.status == "ok" and run.result.measurement.throughput.samples_per_sec > 0

    shard = make_tokens(tmp_path / "train.bin", tokens=20000, vocab=512)
    run = sweeper_run(*LM, f"task.token_file={shard.path}")  # auto: a shard far smaller than memory is warm
    assert run.returncode == 0, run.stderr
    facts = run.result.measurement.run
    assert (facts.page_cache, facts.data_files, facts.data_cached_at_start) == ("warm", 1, 1.0)


def test_mnist_root_without_mnist_is_one_line(sweeper_run, tmp_path):
    (tmp_path / "mnist").mkdir()
    run = sweeper_run(f"task.root={tmp_path / 'mnist'}")  # exists, but holds no MNIST
    assert run.returncode == 2
    assert "holds no MNIST" in run.stderr


def test_user_workload_outside_tasks(sweeper_run):
    run = sweeper_run("task=custom", "task.factory=examples.user_workload:build", "+task.params.hidden=32")
    assert run.returncode == 0, run.stderr
    assert run.result.status == "ok"


def _processes_with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("SWEEPER_TEST_MARKER") == marker and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_hang_is_killed_with_its_dataloader_workers(sweeper_run):
    marker = uuid.uuid4().hex
    run = sweeper_run(
        "task=custom",
        "task.factory=misbehaving:hang",
        "loader.num_workers=2",
        "measure.timeout_s=8",
        env={"SWEEPER_TEST_MARKER": marker},
    )
    assert run.returncode == 1
    result = run.result
    assert result.status == "timeout"
    assert result.wall_s < 30
    assert _processes_with_marker(marker) == []


def test_a_run_whose_windows_outlast_its_time_limit_ends_with_those_it_measured(sweeper_run):
    """100 windows of half a second cannot fit in 20 s: the run stops before the kill with the
    windows it has, a figure and status ok, where it used to end a timeout with none. Status ok is
    the proof that the kill never came; its wall time is not asserted, as a slow day moves it."""
    run = sweeper_run(
        "measure.timeout_s=20",
        "measure.windows=100",
        "measure.min_windows=100",
        "measure.window_s=0.5",
        "measure.rel_precision=null",
        "measure.drift_tol=null",
        "backend.threads=1",
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = run.result
    assert result.status == "ok"
    figures = result.measurement.throughput
    assert figures.stopped == "time limit" and 3 <= figures.windows_measured < 100
    assert figures.samples_per_sec > 0
    assert "at the run's time limit (measure.timeout_s)" in run.stdout


def test_abort_is_a_crash(sweeper_run):
    run = sweeper_run("task=custom", "task.factory=misbehaving:abort")
    assert run.returncode == 1
    assert run.result.status == "crash"
    assert "SIGABRT" in run.result.reason


def test_allocation_beyond_memory_limit_is_oom(sweeper_run):
    run = sweeper_run(
        "task=custom", "task.factory=misbehaving:allocate", "+task.params.gb=8", "measure.memory_limit_gb=6"
    )
    assert run.returncode == 1
    assert run.result.status in ("oom", "crash")
    assert "memory" in run.result.reason.lower()


def test_exception_in_user_code_is_an_error_with_its_message(sweeper_run):
    run = sweeper_run("task=custom", "task.factory=misbehaving:raise_error")
    assert run.returncode == 1
    assert run.result.status == "error"
    assert "the user's factory failed" in run.result.reason


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(["loader.batch_size=0"], "loader.batch_size=0 is invalid", id="batch0"),
        pytest.param(["loader.num_workers=-1"], "loader.num_workers=-1 is invalid", id="workers"),
        pytest.param(["backend.precision=fp8"], "backend.precision='fp8' is invalid", id="fp8"),
        pytest.param([*IMAGE, "task.model=resnet19"], "task.model='resnet19' is not a torchvision", id="model"),
        pytest.param(
            ["task=image_classification", "task.data_dir=/no/such"],
            "task.data_dir='/no/such' does not exist",
            id="path",
        ),
        pytest.param(
            [*IMAGE, "task.image_size=0"], "task.image_size=0 is invalid: expected an integer >= 1", id="size0"
        ),
        pytest.param(["backend.device=cuda"], "backend.device='cuda' but no CUDA device", id="cuda"),
        pytest.param(["backend.precision=fp16"], "backend.precision='fp16' needs a CUDA device", id="fp16"),
        pytest.param(
            ["loader.prefetch_factor=2"], "loader.prefetch_factor=2 needs loader.num_workers > 0", id="prefetch"
        ),
        pytest.param(
            ["task=custom", "task.factory=nosuchmodule:build"], "cannot import module 'nosuchmodule'", id="factory"
        ),
        pytest.param(["measure.job_samples=0"], "measure.job_samples=0.0 is invalid", id="job"),
        pytest.param(["measure.page_cache=cold"], "measure.page_cache=cold sets the state of the files", id="cache"),
    ],
)
def test_bad_input_is_one_line_and_measures_nothing(sweeper_run, overrides, message):
    import torch

    if "backend.device=cuda" in overrides and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    run = sweeper_run(*overrides)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert errors == [errors[0]] and errors[0].startswith("error: ") and message in errors[0]
    assert "samples/sec" not in run.stdout


def test_typo_key_gets_one_line_with_the_key_it_meant(sweeper_run):
    run = sweeper_run("loader.batchsize=3")
    assert run.returncode == 2
    assert run.stderr.strip() == "error: loader.batchsize is not a key of the config (did you mean loader.batch_size?)."


def test_generated_mnist_is_torchvisions_own_class_and_adam_the_default():
    import torch
    from omegaconf import OmegaConf
    from torchvision.datasets import MNIST

    from sweeper.preflight import compose
    from sweeper.tasks.mnist_mlp import build

    def task(*overrides):  # as the run hands it to the factory: the composed task=mnist_mlp
        return OmegaConf.to_container(compose(("task.num_samples=100", *overrides))["task"], resolve=True)

    workload = build(task())
    assert type(workload.dataset) is MNIST and type(workload.dataset).__getitem__ is MNIST.__getitem__
    assert workload.dataset.data.dtype == torch.uint8 and workload.dataset.targets.dtype == torch.int64
    image, label = workload.dataset[3]
    assert image.shape == (1, 28, 28) and isinstance(label, int)
    params = list(workload.model.parameters())
    assert isinstance(workload.optimizer_fn(params), torch.optim.Adam)
    sgd = build(task("task.optimizer=sgd", "task.lr=0.01"))
    assert isinstance(sgd.optimizer_fn(params), torch.optim.SGD)


def test_affinity_pins_the_run_and_its_workers_and_the_allocator_is_mapped(sweeper_run):
    from sweeper.topology import allocator_library

    cores = sorted(__import__("os").sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("pinning needs two cores")
    allocator = "jemalloc" if allocator_library("jemalloc") else "default"
    run = sweeper_run(
        *MNIST,
        "backend.affinity=compact",
        "backend.threads=1",
        "loader.num_workers=1",
        "loader.persistent_workers=true",
        f"backend.allocator={allocator}",
    )
    assert run.returncode == 0, run.stderr
    result = run.result
    # as the kernel shows it in /proc/<pid>/status: compute on the first core, the worker on the next
    assert result.measurement.run.cpus_allowed_main == str(cores[0])
    assert result.measurement.run.cpus_allowed_workers == (str(cores[1]),)
    assert result.fingerprint.cpus_available == len(cores)  # still the machine's hardware class
    if allocator == "jemalloc":  # in /proc/<pid>/maps: preloaded, in effect
        assert result.measurement.run.allocator == "jemalloc" and result.isolation == "fork"  # from its own zygote
        assert "LD_PRELOAD" in result.isolation_note
