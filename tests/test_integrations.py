"""The frameworks' own loops under sweeper: Lightning's Trainer and the Hugging Face Trainer,
each through its SweeperCallback in the example scripts, as real runs and real sweeps."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, load_study, run_multirun
from sweeper import resolvers

sys.path.insert(0, str(ROOT / "benchmarks"))
from framework_agreement import HF_COMMAND, LIGHTNING_COMMAND, Config, compare  # noqa: E402

pytest.importorskip("lightning", reason="the [lightning] extra is not installed")
pytest.importorskip("transformers", reason="the [transformers] extra is not installed")

COMMANDS = {"lightning": LIGHTNING_COMMAND, "transformers": HF_COMMAND}
# the HF example's model at its smallest, so that its steps are short on a CPU
SMALL_HF = " --num_samples 2048 --seq_len 32 --vocab_size 512 --width 64"


def script(framework: str, extra: str = "") -> str:
    command = COMMANDS[framework] + (SMALL_HF if framework == "transformers" else "") + extra
    # by its full path: a sweep's test runs in its own directory
    command = command.replace("python examples/", f"python {ROOT}/examples/")
    return f"task.command='{command}'"


def test_importing_sweeper_imports_no_framework():
    frameworks = "('lightning', 'transformers', 'pytorch_lightning')"
    code = f"import sys, sweeper; print([m for m in {frameworks} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_frameworks_spellings_of_the_knobs():
    resolvers.register()
    cfg = OmegaConf.create(
        {
            "backend": {"precision": "bf16"},
            "loader": {"num_workers": 0, "persistent_workers": True, "prefetch_factor": 4},
            "words": [
                "${sweeper.lightning_precision:${backend.precision}}",
                "${sweeper.equals:${backend.precision},bf16}",
                "${sweeper.equals:${backend.precision},fp16}",
                "${sweeper.if_workers:${loader.persistent_workers},${loader.num_workers}}",
                "${sweeper.if_workers:${loader.prefetch_factor},${loader.num_workers}}",
            ],
        }
    )
    assert OmegaConf.to_container(cfg.words, resolve=True) == ["bf16-mixed", True, False, False, None]
    cfg.loader.num_workers = 2
    assert OmegaConf.to_container(cfg.words, resolve=True)[3:] == [True, 4]
    with pytest.raises(ValueError, match="'fp8' is not a backend.precision"):
        resolvers.lightning_precision("fp8")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "transformers"])
def test_an_optimizer_step_of_accumulated_batches_counts_their_samples(sweeper_run, framework):
    batch = 64 if framework == "lightning" else 4
    run = sweeper_run(
        "task=script",
        script(framework),
        f"loader.batch_size={batch}",
        "train.grad_accum_steps=2",
        "loader.num_workers=1",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    timing = run.result.measurement.timing
    assert timing.samples_measured == 2 * batch * timing.steps_measured
    # the wait for the batches, as the hooks tell it
    assert timing.bottleneck in ("data-bound", "compute-bound")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "extra", "status", "reason"),
    [
        # a Trainer that stops before its figure is known
        (
            "lightning",
            " --trainer.max_steps 4",
            "error",
            "ended (exit code 0) after 4 steps, before its figure was known",
        ),
        # one that runs out of memory (its data set, here, would take 31 TB)
        ("lightning", " --data.num_samples 10000000000", "oom", "DefaultCPUAllocator: can't allocate memory"),
        # a Trainer that raises (its arguments refuse a prefetch factor without workers): its last line
        (
            "transformers",
            " --dataloader_prefetch_factor 2",
            "error",
            "ValueError: --dataloader_prefetch_factor can only be set when data is loaded in a different process",
        ),
    ],
)
def test_a_trainer_that_fails_is_one_line(sweeper_run, framework, extra, status, reason):
    result = sweeper_run("task=script", script(framework, extra)).result
    assert result.status == status and reason in result.reason and "\n" not in result.reason, result.reason


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "transformers"])
def test_a_sweep_of_each_example(tmp_path, framework):
    run_multirun(
        tmp_path,
        "task=script",
        script(framework),
        f"search={'lightning' if framework == 'lightning' else 'hf_trainer'}",
        "loader.batch_size=16" if framework == "transformers" else "loader.batch_size=64",
        "hydra.sweeper.n_trials=3",
    )
    trials = load_study(tmp_path).get_trials()
    statuses = [t.user_attrs.get("status") for t in trials]
    # every trial measured: completed, or stopped behind the best with its figure
    assert len(trials) == 3 and set(statuses) <= {"ok", "pruned"}, [t.user_attrs.get("reason") for t in trials]
    knobs = set().union(*(t.user_attrs["knobs"] for t in trials))
    assert {"loader.batch_size", "loader.num_workers", "backend.precision"} <= knobs


@pytest.mark.slow
@pytest.mark.parametrize(
    "config", [Config("lightning", 64, accumulate=2, steps=400), Config("transformers", 4, accumulate=2, steps=60)]
)
def test_sweeper_agrees_with_the_frameworks_own_figure(tmp_path, config):
    """One round (benchmarks/framework_agreement.py gives the figures): wide enough for this
    machine's noise, narrow enough to catch a step's samples counted wrong (2x). The framework's
    own run keeps sweeper's callback, which does nothing outside sweeper."""
    own, ours = compare(config, 1, tmp_path)
    assert 0.6 < sum(ours) / sum(own) < 1.67, (own, ours)
