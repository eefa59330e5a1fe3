"""The benchmark that holds sweeper's figure against loops written apart from it: those loops
import nothing of sweeper's, they run, and the command lines it gives sweeper are accepted as
written (a renamed key would otherwise surface only when someone runs it for an hour)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_architecture import imported

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import loop_agreement  # noqa: E402

PLAIN = ROOT / "benchmarks" / "plain"


def test_the_plain_loops_are_written_apart_from_sweeper():
    """Nothing of sweeper's, nor the configs it composes, reaches the loops its figure is checked
    against: a helper shared with sweeper would carry a mistake into both sides."""
    assert sorted(p.name for p in PLAIN.glob("*.py")) == [
        "imagefolder.py",
        "mnist_mlp.py",
        "stopwatch.py",
        "token_lm.py",
    ]
    crossing = {
        f"{path.name} imports {name}"
        for path in PLAIN.glob("*.py")
        for name in imported(path)
        if name.split(".")[0] in {"sweeper", "hydra", "omegaconf", "tasks", "benchmarks", "conftest"}
    }
    assert crossing == set()
    assert {c.loop for c in loop_agreement.CONFIGS} == {"mnist_mlp", "imagefolder", "token_lm"}


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The bench's data, small: what its configurations are checked against (they name it)."""
    from sweeper.data import make_images, make_tokens

    root = tmp_path_factory.mktemp("agreement")
    (root / "mnist").mkdir()
    make_images(root / "jpegs", 4, 2, (32, 32))
    make_tokens(root / "tokens.bin", 1000, 100)
    return root


@pytest.mark.parametrize("config", loop_agreement.CONFIGS, ids=lambda c: c.name)
def test_each_configuration_is_a_command_line_sweeper_accepts(config, small_data, monkeypatch):
    from sweeper import preflight, resolvers

    monkeypatch.setattr(loop_agreement, "DATA", small_data)
    resolvers.register()
    preflight.check(preflight.one_line_commands(config.overrides()))


@pytest.mark.slow
def test_the_plain_mnist_loop_runs_and_prints_its_figure(tmp_path, monkeypatch):
    monkeypatch.setattr(loop_agreement, "DATA", tmp_path)
    loop_agreement.write_mnist(tmp_path / "mnist")
    config = loop_agreement.Config("one worker", "mnist_mlp", 256, 1)
    args = [a for a in config.plain_args() if not a.startswith(("--seconds", "--skip"))]
    out = subprocess.run(
        [sys.executable, str(PLAIN / "mnist_mlp.py"), *args, "--seconds=2", "--skip=0.5"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert json.loads(out[-1])["samples_per_sec"] > 0
    assert all(len(line.split()) == 2 for line in out[:-1])  # each second's rate before it


def test_a_replayed_rule_reads_even_steps_as_their_own_rate():
    """The replay's figure and the steps' own mean agree where every step takes as long: whatever
    a rule reads apart from them on recorded steps is the rule's, not the replay's."""
    import stop_rule_replay

    assert stop_rule_replay.rule_of().drift_tol == 0.5  # as shipped
    rules = [stop_rule_replay.rule_of(["measure.drift_tol=null"]), stop_rule_replay.rule_of(["measure.drift_tol=0.05"])]
    replays = stop_rule_replay.replayed([0.05] * 400, rules)  # 20 s of 50 ms steps
    rows = [start.row() for start in replays]
    assert rows
    assert all(abs(ratio - 1) < 1e-9 for row in rows for ratio in row[:2])
    assert stop_rule_replay.drift_split(replays, 1).startswith("the drift rule left no windows out")
    # a loop that halves its speed for good 3 s in: with the check on, the starts whose windows
    # cross the change leave the fast ones out, as a change downward; with the check off, none
    slowed = stop_rule_replay.replayed([0.05] * 60 + [0.1] * 400, rules)
    assert "left windows out" in stop_rule_replay.drift_split(slowed, 1)
    assert "change -" in stop_rule_replay.drift_split(slowed, 1)
    assert stop_rule_replay.drift_split(slowed, 0).startswith("the drift rule left no windows out")
    with pytest.raises(SystemExit, match="measure.KEY=VALUE"):
        stop_rule_replay.rule_of(["warmup_s=1"])


def test_a_script_s_dataloader_steps_are_recorded_where_its_loop_asks_for_the_next(tmp_path):
    """--script records each step's end when the loop asks for the next batch (as sweeper.track
    counts it), the script's own code unchanged; --config names a configuration of loop_agreement."""
    import stop_rule_replay

    script = tmp_path / "train.py"
    script.write_text(
        "import sys, time\n"
        "from torch.utils.data import DataLoader\n"
        "for batch in DataLoader(list(range(int(sys.argv[1]))), batch_size=2):\n"
        "    time.sleep(0.02)\n"
    )
    words = stop_rule_replay.what(None, f"{script} 10")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "stop_rule_replay.py"), *words],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ends = json.loads(out.splitlines()[-1])["ends"]
    assert len(ends) == 5  # 10 items in batches of 2
    assert all(b - a >= 0.015 for a, b in zip(ends, ends[1:]))  # each step's sleep lies between two ends
    with pytest.raises(SystemExit, match="no configuration"):
        stop_rule_replay.what("no such loop", None)


def test_script_agreement_runs_each_side_the_environment_asks_for(tmp_path):
    """Each SWEEPER_AGREEMENT_* variable adds one of sweeper's sides to the rounds: NVML hidden,
    another checkout's code, and overrides added to the run (a variant against the default)."""
    import script_agreement

    assert list(script_agreement.ways_of({}, tmp_path)) == ["sweeper"]
    ways = script_agreement.ways_of(
        {
            "SWEEPER_AGREEMENT_NO_NVML": "1",
            "SWEEPER_AGREEMENT_CHECKOUT": str(tmp_path),
            "SWEEPER_AGREEMENT_OVERRIDES": "measure.drift_tol=0.05 measure.windows=20",
        },
        tmp_path,
    )
    hidden, other, variant = (ways[k] for k in list(ways)[1:])
    assert str(tmp_path / "no_nvml") in hidden.env["PYTHONPATH"]
    assert other.checkout == tmp_path.resolve() and other.env == {"PYTHONPATH": str(tmp_path.resolve())}
    assert variant.overrides == ("measure.drift_tol=0.05", "measure.windows=20") and variant.checkout == ROOT
    assert list(ways)[3] == "sweeper, measure.drift_tol=0.05 measure.windows=20"
