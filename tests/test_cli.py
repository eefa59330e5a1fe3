"""First contact with the command: every mistake before measuring is one line naming the value and
what is allowed, exit 2, and no output directory; --help, --version and shell completion answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

# (command line, what the one line must say): each a mistake a person made at first contact
BAD_INPUTS = [
    pytest.param(
        ["task=nonexistent"],
        "task=nonexistent is not a task option: choose one of custom, "
        "image_classification, language_model, mnist_mlp, script",
        id="unknown-task",
    ),
    pytest.param(["task=mnist"], "did you mean task=mnist_mlp?", id="near-task"),
    pytest.param(["task=mnist_mlp_schema"], "is not a task option", id="schema-is-no-option"),
    pytest.param(
        ["search=cpux"],
        "search=cpux is not a search option: choose one of auto, cpu, gpu, hf_trainer, lightning, none, quick",
        id="unknown-preset",
    ),
    pytest.param(["-m", "task=choice(mnist_mlp,foo)"], "task=foo is not a task option", id="unknown-task-swept"),
    pytest.param(
        ["-m", "hydra.sweeper.n_trial=5"],
        "hydra.sweeper.n_trial is not a key of the config (did you mean hydra.sweeper.n_trials?)",
        id="misspelt-sweeper-key",
    ),
    pytest.param(
        ["-m", "hydra.sweeper.confirm.rounds=2"],
        "hydra.sweeper.confirm.rounds was removed: it is hydra.sweeper.confirm=N now",
        id="removed-nested-sweeper-key",
    ),
    pytest.param(
        ["lodaer.batch_size=256"],
        "lodaer.batch_size is not a key of the config (did you mean loader.batch_size?)",
        id="misspelt-group",
    ),
    pytest.param(["loader.batchsize=256"], "did you mean loader.batch_size?", id="misspelt-key"),
    pytest.param(["loader.batch_size=0"], "loader.batch_size=0 is invalid: expected an integer >= 1", id="range"),
    pytest.param(["loader.batch_size=abc"], "loader.batch_size='abc' is invalid: expected an integer", id="type"),
    pytest.param(["backend.precision=fp8"], "expected one of fp32, bf16, fp16", id="choice"),
    pytest.param(
        ["-m", "hydra.sweeper.lock=maybe"],
        "hydra.sweeper.lock='maybe' is invalid: expected one of wait, fail, off.",
        id="sweeper-choice",
    ),
    pytest.param(["task=script"], "task=script needs the command that runs your script", id="script-no-command"),
    pytest.param(
        ["-m", "task=script"], "task=script needs the command that runs your script", id="script-no-command-sweep"
    ),
    pytest.param(["task=custom"], "task=custom needs the function that builds your workload", id="custom-no-factory"),
    pytest.param(["hydra.run.dir=/proc/x"], "hydra.run.dir=/proc/x cannot be written", id="impossible-run-dir"),
    pytest.param(
        ["-m", "hydra.sweep.dir=/proc/x"], "hydra.sweep.dir=/proc/x cannot be written", id="impossible-sweep-dir"
    ),
    pytest.param(["hydra.run.dir=README.md/run"], "is a file, not a directory", id="run-dir-under-a-file"),
    pytest.param(["-m", "loader.batch_size=range(1,3"], "cannot read 'loader.batch_size=range(1,3'", id="grammar"),
    pytest.param(["-m", "hydra/launcher=nonexistent"], "hydra/launcher=nonexistent is not installed", id="launcher"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS)
def test_a_mistake_is_one_line_before_hydra_starts(argv, message, tmp_path, monkeypatch):
    from sweeper import preflight
    from sweeper.errors import ConfigError

    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError) as caught:
        preflight.check(argv)
    line = str(caught.value)
    assert message in line and "\n" not in line, line


def test_a_command_written_over_lines_is_one_line_with_the_same_words():
    from sweeper.preflight import one_line_commands

    long = 'task.command="python fit.py\n  --batch ${loader.batch_size}\n  --workers 2"'
    assert one_line_commands(["-m", long, "b=1"]) == [
        "-m",
        'task.command="python fit.py --batch ${loader.batch_size} --workers 2"',
        "b=1",
    ]
    # a line break inside one of the command's own quoted arguments is part of that argument
    inner = "task.command=\"python -c 'import os\nprint(1)'\""
    assert one_line_commands([inner]) == [inner]
    # anything else keeps its line break, for the checks to refuse in one line
    assert one_line_commands(["hydra.sweeper.study_name='a\nb'"]) == ["hydra.sweeper.study_name='a\nb'"]


# the console script pip installs beside this Python (shell completion completes its name)
SCRIPT = Path(sys.executable).parent / "sweeper"


def _sweeper(
    cwd: Path, *argv: str, env: dict[str, str] | None = None, script: bool = False
) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "sweeper"]
    return subprocess.run(
        [*command, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["task=nonexistent"],
        ["-m", "hydra.sweeper.n_trial=5"],
        ["task=script"],
        ["hydra.run.dir=/proc/x"],
        ["loader.batch_size=0"],
        # found after Hydra starts: in the measuring child, and where the sweep opens its study
        ["task=custom", "task.factory=nomodule:build"],
        ["-m", "hydra.sweeper.storage=postgresql://u:pw@127.0.0.1:1/db"],
        ["-m", "hydra.sweeper.sampler._target_=optuna.samplers.Nope"],
        ["-m", "hydra.sweeper.sampler.seed=abc"],
        ["-m", "search=gpu", "backend.device=cpu"],
        ["-m", "backend.precision=fp16", "backend.device=cpu"],
        ["loader.batch_size=choice(64,256)"],
        ["hydra.sweeper.n_trials=40"],
        ["-m", "task=script", "task.command=python 'my train.py' --batch-size ${loader.batch_size}"],
        ["-m", "hydra.sweeper.n_trials=choice(4,8)"],
        ["-m", "hydra.sweeper.params.loader.batch_size=choice(64,256)"],
        ["-m", "hydra.sweeper.params={loader.batch_size:'choice(64,256)'}"],
        ["-m", "hydra.sweeper.prune_ratio=0.8"],
    ],
    ids=[
        "group",
        "sweeper-key",
        "script",
        "run-dir",
        "range",
        "in-the-child",
        "storage",
        "sampler",
        "sampler-argument",
        "gpu-preset-here",
        "fp16-here",
        "sweep-without-m",
        "sweep-setting-without-m",
        "quotes-inside",
        "sweep-a-setting",
        "params-key",
        "params-dict",
        "removed-setting",
    ],
)
def test_the_command_exits_2_with_one_line_and_leaves_no_directory(argv, tmp_path):
    proc = _sweeper(tmp_path, *argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert list(tmp_path.iterdir()) == [], "an output directory was left behind"


def test_a_removed_setting_names_what_does_its_work_now(tmp_path):
    proc = _sweeper(tmp_path, "-m", "hydra.sweeper.prune_ratio=0.8")
    assert proc.returncode == 2 and "hydra.sweeper.prune_ratio was removed: the prune floor follows" in proc.stderr
    assert "hydra.sweeper.run_noise" in proc.stderr


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("hydra.sweeper.recipes=false", "hydra.sweeper.recipes was removed: it is search.recipes now"),
        ("hydra.sweeper.quiet_wait_s=5", "hydra.sweeper.quiet_wait_s was removed: it is measure.quiet_wait_s now"),
        ("search.staged=1.5", "search.staged=1.5 is invalid: expected a share of n_trials in [0, 1)"),
        ("search.later_after=2", "search.later_after=2.0 is invalid: expected a share of n_trials in [0, 1]"),
        ("measure.quiet_wait_s=-1", "measure.quiet_wait_s=-1.0 is invalid: expected seconds >= 0"),
    ],
)
def test_a_moved_or_bad_search_setting_is_one_line(tmp_path, argument, message):
    proc = _sweeper(tmp_path, "-m", "task.num_samples=512", argument)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_help_says_what_sweeper_does_with_its_real_options(tmp_path):
    proc = _sweeper(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "find, by measurement" in text and "-m" in text and "is powered by Hydra" not in text
    assert "mnist_mlp*" in text and "_schema" not in text
    for key in ("batch_size", "num_workers", "precision", "n_trials", "confirm", "run_noise", "timeout_s"):
        assert key in text
    for internal in ("prune_below", "behind"):  # what the sweep tells a trial is no user's key
        assert internal not in text
    assert "outputs/sweeps/<date>/<time>/" in text
    job = _sweeper(tmp_path, "--cfg", "job")
    assert "prune_below" not in job.stdout and "batch_size: 64" in job.stdout


def test_version_is_sweepers_with_what_it_runs_on(tmp_path):
    from sweeper import __version__

    proc = _sweeper(tmp_path, "--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"sweeper {__version__} (torch ") and "optuna" in proc.stdout


@pytest.mark.skipif(not SCRIPT.exists(), reason="the sweeper console script is not installed beside this Python")
def test_shell_completion_installs_and_offers_the_real_options(tmp_path):
    for shell in ("bash", "zsh", "fish"):
        install = _sweeper(tmp_path, "-sc", f"install={shell}", script=True)
        assert install.returncode == 0 and "sweeper" in install.stdout, install.stderr
    line = "sweeper task="
    query = _sweeper(tmp_path, "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))}, script=True)
    assert set(query.stdout.split()) == {
        f"task={t}" for t in ("custom", "image_classification", "language_model", "mnist_mlp", "script")
    }
    line = "sweeper hydra.sweeper.n_tr"
    query = _sweeper(tmp_path, "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))}, script=True)
    assert query.stdout.split() == ["hydra.sweeper.n_trials="]


@pytest.mark.skipif(not SCRIPT.exists(), reason="the sweeper console script is not installed beside this Python")
def test_bash_loads_the_completion_script(tmp_path):
    """The script Hydra prints is valid bash and registers a completion for `sweeper`."""
    script = _sweeper(tmp_path, "-sc", "install=bash", script=True).stdout
    done = subprocess.run(["bash", "-c", f"{script}\ncomplete -p sweeper"], capture_output=True, text=True)
    assert done.returncode == 0 and "hydra_bash_completion" in done.stdout, done.stderr
