"""Types and choices of the config are checked where Hydra composes it (the schemas of
sweeper/config.py), and a refused value or key is one line naming it and what is allowed."""

from __future__ import annotations

import enum
import functools
import subprocess
import sys
from dataclasses import fields

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import ROOT
from sweeper import config, config_errors
from sweeper.paths import config_dir

GROUPS = ("loader", "backend", "measure", "train", "dist")
TASKS = {
    "mnist_mlp": config.MnistTask,
    "image_classification": config.ImageTask,
    "language_model": config.LanguageTask,
    "custom": config.CustomTask,
    "script": config.ScriptTask,
}


@functools.lru_cache(maxsize=None)
def _compose(*overrides: str):
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _wrong_value(annotation) -> str | None:
    """A value of the wrong type or choice for a key of this type (None: any text is allowed)."""
    args = getattr(annotation, "__args__", ())
    inner = next(a for a in args if a is not type(None)) if type(None) in args else annotation
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return "bogus"
    if inner is bool:
        return "maybe"
    if inner in (int, float):
        return "lots"
    if getattr(inner, "__origin__", None) is list:
        return "word"
    return None


def _every_key():
    for group in GROUPS:
        schema = dict(config.SCHEMAS)[group]
        yield from (((), f"{group}.{f.name}", f.type) for f in fields(schema))
    for task, schema in TASKS.items():
        yield from (((f"task={task}",), f"task.{f.name}", f.type) for f in fields(schema))


def test_the_keys_that_take_any_text_are_checked_elsewhere():
    """Text keys: names, paths (checked to exist), the factory and compile's modes (validation.py)."""
    text = {key for _, key, annotation in _every_key() if _wrong_value(annotation) is None}
    assert text == {
        "backend.compile",
        "task.name",
        "task.factory",
        "task.root",
        "task.model",
        "task.data_dir",
        "task.token_file",
        "task.params",
        "task.command",
    }


@pytest.mark.parametrize(
    ("base", "key", "annotation"),
    [
        pytest.param(*k, id=f"{k[0][0][5:] + ':' if k[0] else ''}{k[1]}")
        for k in _every_key()
        if _wrong_value(k[2]) is not None
    ],
)
def test_every_key_refuses_a_wrong_type_in_one_line(base, key, annotation):
    wrong = _wrong_value(annotation)
    with pytest.raises(Exception) as err:
        _compose(*base, f"{key}={wrong}")
    line = config_errors.error_line(err.value, _compose(*base))
    assert line is not None and "\n" not in line, err.value
    assert line.startswith(f"{key}='{wrong}' is invalid: expected ") and line.endswith("."), line
    assert config_errors.allowed(annotation) in line


def test_the_lines_name_what_is_allowed():
    def line(*overrides: str) -> str:
        with pytest.raises(Exception) as err:
            _compose(*overrides)
        return config_errors.error_line(err.value, _compose())

    assert line("backend.precision=fp8") == "backend.precision='fp8' is invalid: expected one of fp32, bf16, fp16."
    assert line("loader.batch_size=big") == "loader.batch_size='big' is invalid: expected an integer."
    assert line("backend.threads=many") == "backend.threads='many' is invalid: expected an integer or null."
    assert line("loader.multiprocessing_context=threads") == (
        "loader.multiprocessing_context='threads' is invalid: expected one of fork, forkserver, spawn (or null)."
    )
    assert line("loader.batchsize=3").startswith(
        "loader.batchsize is not a key of the config (did you mean loader.batch_size?)"
    )


def test_every_shipped_config_sets_every_key_of_its_schema():
    """The schemas give types only: a key a YAML file forgot would be MISSING, not defaulted."""
    for task in TASKS:
        needs = {"custom": ["task.factory=x:y"], "script": ["task.command=python train.py"]}.get(task, [])
        cfg = _compose(f"task={task}", *needs)
        plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True)
        assert plain["backend"]["precision"] == "fp32" and isinstance(plain["backend"]["precision"], str)


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("backend.precision=fp8", "error: backend.precision='fp8' is invalid: expected one of fp32, bf16, fp16."),
        ("loader.num_workers=some", "error: loader.num_workers='some' is invalid: expected an integer."),
    ],
)
def test_the_cli_says_it_in_one_line_and_exits_2(override, line, tmp_path):
    for sweep in ([], ["-m"]):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "sweeper",
                *sweep,
                override,
                f"hydra.run.dir={tmp_path}",
                f"hydra.sweep.dir={tmp_path}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and proc.stderr.strip() == line, proc.stderr


def test_the_old_name_of_the_workloads_still_resolves_with_a_warning():
    """`tasks` moved to `sweeper.tasks`; a saved config that names tasks.mnist_mlp:build keeps
    working for one release, and says so."""
    code = (
        "import warnings; warnings.simplefilter('always'); from sweeper.measuring.workload import load_factory; "
        "import sweeper.tasks.mnist_mlp as new; print(load_factory('tasks.mnist_mlp:build') is new.build)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr
    assert "FutureWarning: the package `tasks` is now `sweeper.tasks`" in proc.stderr
