"""Bad values are refused with one line naming the value and what is allowed."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hydra import compose, initialize_config_dir

from sweeper.description import from_description
from sweeper.errors import ConfigError
from sweeper.host import planned_for
from sweeper.paths import config_dir
from sweeper.spec import RunSpec
from sweeper.validation import check_command_here, check_config


def _composed() -> RunSpec:
    """The shipped config, complete, as a run's spec holds it."""
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return RunSpec.of(compose("config"))


GOOD = _composed()


def with_(path: str, value, spec: RunSpec = GOOD) -> RunSpec:
    """`spec` with one value (group.key), or a group's values (group), changed."""
    group, _, key = path.partition(".")
    if group == "task":
        return spec.replace(task={**spec.task, key: value})
    changed = {key: value} if key else value
    return spec.replace(**{group: dataclasses.replace(getattr(spec, group), **changed)})


def test_good_config_passes():
    check_config(GOOD)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):  # YAML's false and true
        assert RunSpec.of(compose("config", overrides=["backend.compile=false"])).backend.compile == "off"
        assert RunSpec.of(compose("config", overrides=["backend.compile=true"])).backend.compile == "default"


def test_accumulation_agrees_with_the_effective_batch_and_needs_training():
    check_config(with_("train", {"grad_accum_steps": 1, "effective_batch": 256}))
    assert with_("train", {"grad_accum_steps": 1, "effective_batch": 256}).grad_accum_steps == 4
    assert with_("train", {"grad_accum_steps": 3, "effective_batch": None}).grad_accum_steps == 3
    with pytest.raises(
        ConfigError,
        match=r"train.grad_accum_steps=2 disagrees with train.effective_batch=256 / "
        r"loader.batch_size=64 = 4: set only one of them.",
    ):
        check_config(with_("train", {"grad_accum_steps": 2, "effective_batch": 256}))
    inference = with_("train", {"grad_accum_steps": 4, "effective_batch": None}, with_("task.mode", "inference"))
    with pytest.raises(ConfigError, match="need task.mode=train"):
        check_config(inference)


def test_a_missing_allocator_is_one_line_naming_the_package(monkeypatch):
    from sweeper import topology

    monkeypatch.setattr(topology, "allocator_library", lambda name: None)
    with pytest.raises(ConfigError) as err:
        check_config(with_("backend.allocator", "tcmalloc"))
    assert str(err.value) == (
        "backend.allocator='tcmalloc' is not installed on this machine: install "
        "libtcmalloc-minimal4 (Debian/Ubuntu) or use backend.allocator=default."
    )


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param("loader.batch_size", 0, "loader.batch_size=0 is invalid: expected an integer >= 1", id="batch0"),
        pytest.param(
            "loader.num_workers", -1, "loader.num_workers=-1 is invalid: expected an integer >= 0", id="workers-1"
        ),
        pytest.param("backend.compile", "fast", "expected one of off, default, max-autotune", id="compile"),
        pytest.param(
            "loader.prefetch_factor",
            2,
            "loader.prefetch_factor=2 needs loader.num_workers > 0",
            id="prefetch-no-workers",
        ),
        pytest.param(
            "loader.persistent_workers",
            True,
            "persistent_workers=true needs loader.num_workers > 0",
            id="persistent-no-workers",
        ),
        pytest.param("task.root", "/no/such/dir", "task.root='/no/such/dir' does not exist", id="missing-root"),
        pytest.param("task.factory", "nocolon", "expected 'module:function'", id="factory"),
        pytest.param("measure.windows", 0, "measure.windows=0 is invalid", id="windows0"),
        pytest.param(
            "measure.rel_precision", 2.0, "measure.rel_precision=2.0 is invalid: expected a share in (0, 1)", id="prec2"
        ),
        pytest.param(
            "backend.threads", 0, "backend.threads=0 is invalid: expected an integer >= 1 or null", id="threads0"
        ),
        pytest.param(
            "loader.in_order", False, "loader.in_order=false needs loader.num_workers > 0", id="in-order-no-workers"
        ),
        pytest.param(
            "loader.multiprocessing_context",
            "spawn",
            "loader.multiprocessing_context='spawn' needs loader.num_workers > 0",
            id="mp-context-no-workers",
        ),
        pytest.param(
            "train.effective_batch",
            100,
            "train.effective_batch=100 is not a multiple of loader.batch_size=64",
            id="effective-batch",
        ),
        pytest.param(
            "train.grad_accum_steps", 0, "train.grad_accum_steps=0 is invalid: expected an integer >= 1", id="accum0"
        ),
        pytest.param(
            "trial",
            {"prune_below": 100.0, "far_below": 120.0},
            "trial.far_below=120.0 is invalid: expected samples/sec at or below trial.prune_below (100.0)",
            id="far-below-above-the-floor",
        ),
        pytest.param(
            "task.epoch_samples",
            0,
            "task.epoch_samples=0 is invalid: expected an integer >= 1 or null",
            id="epoch-samples",
        ),
    ],
)
def test_bad_values(path, value, message):
    with pytest.raises(ConfigError) as err:
        check_config(with_(path, value))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def _task(name: str, *overrides: str) -> RunSpec:
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return RunSpec.of(compose("config", overrides=[f"task={name}", *overrides]))


@pytest.mark.parametrize(
    ("task", "override", "message"),
    [
        ("mnist_mlp", "task.num_samples=0", "task.num_samples=0 is invalid: expected an integer >= 1."),
        ("mnist_mlp", "task.lr=-0.1", "task.lr=-0.1 is invalid: expected a number >= 0."),
        ("image_classification", "task.image_size=0", "task.image_size=0 is invalid: expected an integer >= 1."),
        ("image_classification", "task.num_classes=0", "task.num_classes=0 is invalid: expected an integer >= 1."),
        (
            "image_classification",
            "task.model=vit_b_16 task.image_size=60",
            "task.image_size=60 is not a multiple of vit_b_16's patch size 16: use 48 or 64.",
        ),
        (
            "image_classification",
            "task.model=vit_b_32 task.image_size=8",
            "task.image_size=8 is not a multiple of vit_b_32's patch size 32: use 32.",
        ),
        ("language_model", "task.vocab_size=0", "task.vocab_size=0 is invalid: expected an integer >= 1."),
        ("language_model", "task.seq_len=0", "task.seq_len=0 is invalid: expected an integer >= 1."),
        ("language_model", "task.heads=3", "task.width=256 must be a multiple of task.heads=3."),
        (
            "language_model",
            "task.num_tokens=10",
            "task.num_tokens=10 holds no window of task.seq_len=256 tokens and its next-token target: "
            "expected at least 257.",
        ),
    ],
)
def test_a_built_in_workloads_sizes_are_checked_before_any_run(task, override, message):
    """A size of 0 used to reach the measuring process and come back as a ZeroDivisionError."""
    with pytest.raises(ConfigError) as err:
        check_config(_task(task, *override.split()))
    assert str(err.value) == message
    check_config(_task(task))
    check_config(_task("image_classification", "task.model=vit_h_14"))  # 224 = 16 patches of 14


def test_a_token_file_is_whole_uint16_ids_and_more_than_a_window(tmp_path):
    odd, short, good = tmp_path / "odd.bin", tmp_path / "short.bin", tmp_path / "train.bin"
    odd.write_bytes(b"\0" * 1001)
    short.write_bytes(b"\0" * 512)
    good.write_bytes(b"\0" * 514)
    for path, message in (
        (tmp_path, "is not a file: expected a file of uint16 token ids"),
        (odd, "holds 1,001 bytes, an odd number: expected a file of uint16 token ids"),
        (short, "holds 256 tokens, no window of task.seq_len=256 and its next-token target: expected at least 257."),
    ):
        with pytest.raises(ConfigError, match=re.escape(f"task.token_file='{path}' {message}")):
            check_config(_task("language_model", f"task.token_file={path}"))
    check_config(_task("language_model", f"task.token_file={good}"))


def test_a_scripts_program_and_python_file_are_found_before_any_run(tmp_path, monkeypatch):
    """A command is run as its words, no shell: its program on PATH or at its path, and the file
    python runs, where sweeper runs (the run used to end as FileNotFoundError, or the script's
    exit code 2)."""
    monkeypatch.chdir(tmp_path)
    for command, message in (
        ("nosuchprog --x", "task.command runs 'nosuchprog', which is not a program on PATH"),
        ("./run.sh", "task.command runs './run.sh', which is not an executable file"),
        ("python train.py --batch-size 64", f"task.command runs 'train.py', which does not exist in {tmp_path}"),
    ):
        check_config(_task("script", f"task.command={command}"))  # a cluster's node may have it
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_command_here(_task("script", f"task.command={command}"))
    (tmp_path / "train.py").write_text("")
    check_command_here(_task("script", "task.command=python train.py --batch-size 64"))
    check_command_here(_task("script", "task.command=python -m my_package.train"))
    check_command_here(_task("script", "task.command=echo hi"))


def test_a_misspelt_knob_in_a_command_is_one_line_with_the_knob_it_meant():
    from sweeper import preflight

    with pytest.raises(ConfigError) as err:
        preflight.check(["task=script", "task.command=python train.py --batch-size ${loader.batchsize}"])
    assert str(err.value) == (
        "task.command: ${loader.batchsize} is not a key of the config (did you mean ${loader.batch_size}?)."
    )


def test_an_image_folder_without_class_folders_is_refused_before_any_run(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"task.data_dir='.*' holds no class folders: expected one folder of images"):
        check_config(_task("image_classification", f"task.data_dir={tmp_path}"))
    (tmp_path / "cat").mkdir()
    check_config(_task("image_classification", f"task.data_dir={tmp_path}"))


def test_ranks_numa_and_openmp_knobs_are_checked_before_any_run(monkeypatch):
    with pytest.raises(ConfigError, match=r"dist.nproc_per_node=0 is invalid: expected an integer >= 1."):
        check_config(with_("dist", {"nproc_per_node": 0}))
    ranks = with_("train", {"grad_accum_steps": 1, "effective_batch": 256}, with_("dist", {"nproc_per_node": 2}))
    check_config(ranks)
    assert ranks.grad_accum_steps == 2  # 64 x 2 x 2 ranks = 256
    ranks = with_("loader.batch_size", 256, ranks)
    with pytest.raises(
        ConfigError,
        match=r"train.effective_batch=256 is not a multiple of loader.batch_size=256 x "
        r"dist.nproc_per_node=2",
    ):
        check_config(ranks)
    with pytest.raises(ConfigError, match=r"backend.kmp_blocktime=-1 is invalid"):
        check_config(with_("backend.kmp_blocktime", -1))
    numa = with_("dist", {"nproc_per_node": 3}, with_("backend.numa", "node"))
    one_node = from_description({"cores_per_socket": 2})
    two_nodes = from_description({"sockets": 2, "cores_per_socket": 1})
    monkeypatch.setattr("sweeper.host._THIS", [one_node])  # this machine, as sweeper.host reads it
    with pytest.raises(ConfigError, match=r"backend.numa='node' binds ranks to NUMA nodes, and this machine has 1"):
        check_config(numa)
    monkeypatch.setattr("sweeper.host._THIS", [two_nodes])
    with pytest.raises(ConfigError, match=r"dist.nproc_per_node=3 is not a multiple of 2"):
        check_config(numa)
    numa = with_("dist", {"nproc_per_node": 2}, numa)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match=r"runs each rank under numactl, which is not installed: install numactl"):
        check_config(numa)
    with planned_for(from_description({"sockets": 2, "cores_per_socket": 32})):  # a plan for a node elsewhere
        check_config(numa)  # its numactl is that node's


def test_the_spec_reaches_the_child_as_it_left_the_parent():
    """The spec as JSON and back (what the measuring child reads) is the same typed spec: enums
    as enums, backend.compile normalised, the task's mapping whole."""
    import json

    from sweeper.config import Precision
    from sweeper.spec import CompileMode

    spec = with_("backend.compile", CompileMode.max_autotune, with_("task.lr", 0.01))
    back = RunSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back == spec
    assert back.backend.precision is Precision.fp32 and back.backend.compile is CompileMode.max_autotune
