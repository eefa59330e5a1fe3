"""task=script: a user's training script measured as it runs (tests/fake_script.py stands in for
one, without torch), and the pure parts: the command's words, the knobs it names, the wire."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from conftest import ROOT, TINY, load_study, run_multirun
from sweeper import command, protocol

FAKE = "python tests/fake_script.py"


def script(mode: str, *extra: str, fake: str = FAKE) -> str:
    return f"task.command={fake} {mode} --batch ${{loader.batch_size}} {' '.join(extra)}".strip()


# --- pure ------------------------------------------------------------------------------------


def test_the_knobs_a_command_names_and_what_a_sweep_of_it_searches():
    template = "python train.py --batch-size ${loader.batch_size} --workers=${ loader.num_workers } --x ${task.name}"
    assert command.named_knobs(template, ["backend.precision"]) == {
        "loader.batch_size",
        "loader.num_workers",
        "task.name",
        "backend.precision",
    }
    space = [
        "loader.batch_size",
        "loader.pin_memory",
        "backend.threads",
        "dist.nproc_per_node",
        "backend.channels_last",
        "backend.flush_denormal",
    ]
    kept, note = command.searchable(space, template, [], asked=["loader.batch_size"])
    # threads and ranks act from outside, flush_denormal sweeper.track applies inside at the first
    # step; pin_memory and channels_last only the script could apply
    assert kept == ["loader.batch_size", "backend.threads", "dist.nproc_per_node", "backend.flush_denormal"]
    assert note.startswith("task=script: the preset's backend.channels_last, loader.pin_memory are not searched")
    with pytest.raises(Exception, match=r"^loader.pin_memory is swept, but the script cannot see it"):
        command.searchable(space, template, [], asked=["loader.pin_memory"])
    assert command.searchable(space, template, ["loader.pin_memory"], asked=["loader.pin_memory"])[1] is not None
    assert command.env_name("loader.batch_size") == "SWEEPER_LOADER_BATCH_SIZE"
    assert command.script_name(["python", "examples/train_script.py", "--x"]) == "train_script"
    assert command.script_name(["python", "-m", "lab.train"]) == "train"


def test_the_words_are_split_before_the_knobs_are_put_in():
    """A value is one argument, whatever it holds: never text a shell would read."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "task": {
                "command": "python t.py --name ${task.value} --n=${loader.batch_size}",
                "value": "a b; touch /tmp/x",
            },
            "loader": {"batch_size": 64},
        }
    )
    assert command.argv(cfg) == ["python", "t.py", "--name", "a b; touch /tmp/x", "--n=64"]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("sweeper: samples=64", (64, None)),
        ("sweeper: samples=64 wait=0.002", (64, 0.002)),
        ("epoch 1 step 400: 8,000 samples/s", None),
    ],
)
def test_the_printed_line_protocol(line, said):
    assert protocol.parse_stdout_line(line) == said


@pytest.mark.parametrize(
    "line", ["sweeper: samples=lots", "sweeper: samples=-1", "sweeper: samples=3 speed=2", "sweeper: wait=0.1"]
)
def test_a_garbled_line_is_named(line):
    with pytest.raises(ValueError, match="sweeper: samples=<integer>"):
        protocol.parse_stdout_line(line)


def test_step_records_round_trip_and_a_record_cut_by_a_read_waits_for_its_rest():
    data = protocol.step_record(1, 12.5, 0.25, 64) + protocol.step_record(0, 3.0, None, 8)
    steps, rest = protocol.parse_step_records(data[:-5])
    assert steps == [(1, 12.5, 0.25, 64)] and len(rest) == protocol.STEP_RECORD.size - 5
    steps, rest = protocol.parse_step_records(rest + data[-5:])
    assert steps == [(0, 3.0, None, 8)] and rest == b""
    # a script importing another version of sweeper, which sent text lines, is named, not misread
    with pytest.raises(ValueError, match="another version of sweeper"):
        protocol.parse_step_records(b"0 12.500000 0.250000 64\n" * 2)


def test_track_counts_the_leading_dimension_and_is_the_iterable_itself_outside_sweeper():
    import sweeper
    from sweeper.track import leading_dimension

    class T:
        def __init__(self, *shape):
            self.shape = shape

    assert leading_dimension((T(32, 784), T(32))) == 32
    assert leading_dimension({"input_ids": T(8, 128), "labels": T(8)}) == 8
    assert leading_dimension([{"x": T(4, 2)}]) == 4 and leading_dimension("text") is None
    loader = [1, 2, 3]
    assert sweeper.track(loader) is loader  # outside sweeper: nothing wraps, nothing to pay
    assert sweeper.step(64) is None


def test_track_reports_each_step_with_its_wait_and_samples(tmp_path):
    """Under sweeper (a FIFO in $SWEEPER_STEPS): enumerate(track(...)) and a generator work, a
    DataLoader-like batch_size is the fallback, samples= overrides."""
    fifo = tmp_path / "steps"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    code = (
        "import sweeper\n"
        "class L(list):\n    batch_size = 16\n"
        "for i, b in enumerate(sweeper.track(L(['a', 'b', 'c']))): pass\n"
        "for b in sweeper.track((x for x in range(2)), samples=lambda b: 5): pass\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, protocol.STEPS_ENV: str(fifo), "RANK": "1"},
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    steps, rest = protocol.parse_step_records(os.read(reader, 65536))
    os.close(reader)
    assert rest == b""
    assert [(rank, samples) for rank, _, _, samples in steps] == [(1, 16)] * 3 + [(1, 5)] * 2
    assert all(wait is not None and wait >= 0 for _, _, wait, _ in steps)
    assert [e for _, e, _, _ in steps] == sorted(e for _, e, _, _ in steps)


def test_steps_sent_faster_than_they_are_read_arrive_whole_in_order_with_their_own_times(capfd):
    """The measuring process reads a script's steps and output in batches (script.STEP_READ_S):
    every step comes through, in order, at the time the script stamped it, not the time it was
    read; 3 MB of output printed meanwhile reaches the run's log whole."""
    from sweeper.measuring.script import Script

    code = (
        "import sweeper, time\n"
        "for b in sweeper.track(range(3000), samples=lambda b: 2): print(f'{b:05d}' + 'x' * 1000)\n"
        "time.sleep(0.3)\n"
        "for b in sweeper.track(range(2), samples=1): pass\n"
        "print('the end')\n"
    )
    script = Script([sys.executable, "-c", code], {"PYTHONPATH": str(ROOT)}, str(ROOT))
    try:
        steps = [script.next_step(time.monotonic() + 60) for _ in range(3002)]
        script.proc.wait(timeout=60)  # its last line printed: the log is whole once the reader ends
    finally:
        script.stop()
    assert [s.samples for s in steps] == [2] * 3000 + [1] * 2
    ends = [s.ended for s in steps]
    assert ends == sorted(ends) and ends[-2] - ends[-3] >= 0.3  # the pause is where the script made it
    logged = capfd.readouterr().out.splitlines()
    assert [line[:5] for line in logged[:3000]] == [f"{b:05d}" for b in range(3000)] and logged[-1] == "the end"
    # its last words, for a failure's reason: the last lines, whole
    assert list(script.tail)[-3:] == [f"{b:05d}" + "x" * 1000 for b in (2998, 2999)] + ["the end"]


@pytest.mark.parametrize(
    "output",
    [
        b"",
        b"one line",
        b"a\n\n  \nb\nc",
        b"\n".join(f"{i} caf\u00e9".encode() for i in range(5000)),
        b"\n".join(b"y" * 3000 + str(i).encode() for i in range(200)),  # 40 lines past TAIL_BYTES
        b"\n".join([b"x" * 70_000, b"", b"last"]),  # one line longer than TAIL_BYTES
    ],
    ids=["empty", "one", "blanks", "many", "long-lines", "longer-than-the-span"],
)
def test_a_scripts_last_words_are_its_last_lines_not_blank_read_from_the_end(output):
    from sweeper.measuring.script import last_words

    every = [line.decode() for line in output.split(b"\n") if line.strip()]
    assert last_words(output, 40) == every[-40:]
    assert last_words(output, 0) == []


# --- measured runs ---------------------------------------------------------------------------


def _measured(sweeper_run, *overrides, **kw):
    run = sweeper_run("task=script", *overrides, **kw)
    return run, run.result


@pytest.mark.parametrize("mode", ["ok", "lines", "step"])
def test_a_script_is_measured_by_every_way_it_can_report(sweeper_run, mode):
    run, result = _measured(sweeper_run, script(mode), "loader.batch_size=32")
    assert run.returncode == 0 and result.status == "ok", run.stdout + run.stderr
    measured = result.measurement
    # every step counted as the 32 samples it was: figures of the script's own steps
    assert measured.timing.samples_measured == 32 * measured.timing.steps_measured > 0
    assert measured.run.command == ("python", "tests/fake_script.py", mode, "--batch", "32")
    waits = {"ok": True, "lines": True, "step": False}[mode]
    assert (measured.timing.bottleneck != "not reported") == waits
    assert "script" in run.stdout and "samples/sec" in run.stdout
    assert measured.memory.peak_rss_mb > 0 and measured.utilization.cpu_util_main_pct is not None
    # the measuring process is sweeper's own, beside the script that runs the loop: counted
    assert measured.utilization.harness_cpu_pct is not None and measured.utilization.harness_cpu_pct >= 0


@pytest.mark.slow
def test_track_applies_the_settings_a_process_can_change_at_its_first_step(sweeper_run, tmp_path):
    seen = tmp_path / "torch.json"
    settings = ["backend.flush_denormal=true", "backend.threads=1", "loader.batch_size=32"]
    run, result = _measured(sweeper_run, script("ok", "--torch-out", str(seen)), *settings)
    assert run.returncode == 0 and result.status == "ok", run.stdout + run.stderr
    assert json.loads(seen.read_text()) == {"threads": 1, "flushed": True, "cudnn_benchmark": False}
    assert result.measurement.run.applied_in_script is True
    log = (run.run_dir / "worker.log").read_text()
    assert "sweeper.track applied at the first step: torch.set_flush_denormal(True); torch.set_num_threads(1)" in log
    # a script that prints its steps has no sweeper code inside: nothing applied, and said so
    run, result = _measured(sweeper_run, script("lines", "--torch-out", str(seen)), *settings)
    assert json.loads(seen.read_text())["flushed"] is False
    assert result.measurement.run.applied_in_script is False


def _spec(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir

    from sweeper.paths import config_dir
    from sweeper.runner.run import checked_spec

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return checked_spec(compose("config", overrides=["task=script", *TINY, *overrides]))


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        pytest.param("crash", "crash", "the script was killed by SIGABRT after", id="crash"),
        pytest.param("oom", "oom", "the script ran out of memory after", id="oom"),
        pytest.param(
            "error", "error", "exited with code 1 after 49 steps: ValueError: the user's loop broke", id="error"
        ),
        pytest.param(
            "early", "error", "ended (exit code 0) after 49 steps, before its figure was known", id="exits-early"
        ),
        pytest.param(
            "untracked", "error", "ended (exit code 0) without reporting a step: call sweeper.track", id="untracked"
        ),
        pytest.param("garbage", "error", "printed 'sweeper: samples=lots', which is not", id="garbage"),
        pytest.param("old-sweeper", "error", "imports another version of sweeper", id="another-sweeper"),
        pytest.param(
            "silent", "error", "no steps reported in the 3 s that measure.timeout_s left the script", id="never-reports"
        ),
    ],
)
def test_a_script_that_misbehaves_is_one_line_and_leaves_nothing(monkeypatch, mode, status, reason):
    """The measuring side in this process (the run's isolation is sweeper's own, tested apart)."""
    from sweeper.measuring.events import Events
    from sweeper.measuring.scripted import measure_script

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(protocol.DEADLINE_ENV, raising=False)
    result = measure_script(
        _spec(script(mode), "measure.timeout_s=6", "measure.windows=20", "measure.min_windows=20"), Events(os.devnull)
    )
    assert result.status == status and reason in result.reason, result.reason
    assert "\n" not in result.reason
    leftovers = subprocess.run(["pgrep", "-f", f"fake_script.py {mode}"], capture_output=True, text=True).stdout
    assert leftovers.split() == []


def test_a_script_that_hangs_is_killed_with_its_group_at_the_timeout(sweeper_run):
    run, result = _measured(sweeper_run, script("hang"), "measure.timeout_s=6")
    assert run.returncode == 1 and result.status == "timeout", result.reason
    assert result.reason.startswith(
        "no result within measure.timeout_s=6 s (last phase: warm-up (the script's steps have begun))"
    )
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", "fake_script.py hang"], capture_output=True, text=True).stdout.split() == []


def test_the_script_gets_the_knobs_as_words_and_as_variables_never_through_a_shell(sweeper_run, tmp_path):
    out, witness = tmp_path / "seen.json", tmp_path / "pwned"
    value = f"x; touch {witness}"
    run, result = _measured(
        sweeper_run,
        script("ok", "--out", str(out), "--value", "${oc.env:PAYLOAD}"),
        "backend.threads=1",
        "loader.batch_size=16",
        env={"PAYLOAD": value},
    )
    assert result.status == "ok", result.reason
    seen = json.loads(out.read_text())
    assert seen["argv"][-2:] == ["--value", value] and not witness.exists()
    assert seen["env"]["SWEEPER_LOADER_BATCH_SIZE"] == "16" and seen["env"]["SWEEPER_BACKEND_THREADS"] == "1"
    assert seen["env"]["SWEEPER_BACKEND_PRECISION"] == "fp32" and seen["env"]["OMP_NUM_THREADS"] == "1"


def test_a_swept_knob_the_script_cannot_see_is_refused_before_trial_1(tmp_path):
    proc = run_multirun(
        tmp_path,
        "task=script",
        script("ok", fake=f"python {ROOT / 'tests' / 'fake_script.py'}"),
        "search=none",
        "loader.pin_memory=choice(false,true)",
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.strip().startswith(
        "error: loader.pin_memory is swept, but the script cannot see it"
    ), proc.stderr
    assert not (tmp_path / "study.db").exists() or not load_study(tmp_path).trials


@pytest.mark.slow
def test_a_script_sweep_searches_what_its_command_names_and_its_winner_reproduces(tmp_path):
    # a sweep runs from its own directory (tmp_path): the script by its full path
    proc = run_multirun(
        tmp_path,
        "task=script",
        script("ok", fake=f"python {ROOT / 'tests' / 'fake_script.py'}"),
        "search=cpu",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.confirm=1",
        "hydra.sweeper.race=false",
    )
    log = (tmp_path / "s" / "sweep.log").read_text()
    assert "task=script: the preset's backend.channels_last" in log and "loader.prefetch_factor" in log
    trials = load_study(tmp_path).trials
    searched = {k for t in trials for k in t.params}
    assert "loader.batch_size" in searched and "backend.threads" in searched
    assert not searched & {"loader.prefetch_factor", "backend.channels_last", "loader.pin_memory"}
    # the script uses sweeper.track: what it applies at the first step is searched, and said
    assert "backend.flush_denormal is applied inside the script by sweeper.track" in log
    assert "backend.flush_denormal: searched, applied by the script's sweeper.track" in log
    assert "backend.flush_denormal" in searched
    assert "winner: trial #" in proc.stdout
    html = (tmp_path / "s" / "report.html").read_text()
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    if summary["winner"] == summary["baseline"]:  # nothing beat your configuration: nothing to apply
        assert "is the fastest configuration found" in html and "Apply it to your code" not in html
    else:
        assert "Apply it to your code" in html
    words = shlex.split((tmp_path / "s" / "winner_command.txt").read_text())
    assert words[:3] == ["python", "-m", "sweeper"]
    again = subprocess.run(
        [sys.executable, *words[1:]] + TINY + [f"hydra.run.dir={tmp_path / 'again'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert again.returncode == 0 and "samples/sec" in again.stdout, again.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_script_under_two_ranks_counts_both(sweeper_run):
    run, result = _measured(
        sweeper_run, script("ok"), "dist.nproc_per_node=2", "loader.batch_size=8", "measure.timeout_s=120"
    )
    assert result.status == "ok", result.reason
    measured = result.measurement
    # each of rank 0's steps carries rank 1's samples since its last: about twice its own
    per_step = measured.timing.samples_measured / measured.timing.steps_measured
    assert 14 <= per_step <= 18 and measured.run.nproc_per_node == 2


@pytest.mark.slow
def test_a_workload_that_fails_whatever_the_knobs_stops_the_sweep_and_is_measured_again_once_mended(tmp_path):
    """A script that never reports a step fails every trial alike: the sweep stops after three,
    not after n_trials, says why and exits 1; mended, the same command measures your configuration
    again first (the failed baseline was no figure of it) and confirms against it."""
    fake = f"python {ROOT / 'tests' / 'fake_script.py'}"
    sweep = ["task=script", "search=quick", "hydra.sweeper.n_trials=8", "hydra.sweeper.confirm=1"]
    broken = run_multirun(tmp_path, *sweep, script("untracked", fake=fake), name="broken", check=False)
    # no answer: exit 1, as a failed run (cron and systemd see it), its table and report written
    assert broken.returncode == 1 and broken.stderr.strip().startswith("error: no configuration completed")
    assert (tmp_path / "broken" / "report.html").is_file()
    log = (tmp_path / "broken" / "sweep.log").read_text()
    assert "stopped: the first 3 trials all failed alike (error: the script ended (exit code 0) without" in log
    assert len(load_study(tmp_path, "broken").trials) == 3
    run_multirun(tmp_path, *sweep, script("ok", fake=fake), name="mended")
    trials = load_study(tmp_path, "mended").trials
    baselines = [t for t in trials if t.user_attrs.get("baseline")]
    assert [t.state.name for t in baselines] == ["FAIL", "COMPLETE"], [t.user_attrs.get("status") for t in trials]
    mended = (tmp_path / "mended" / "sweep.log").read_text()
    first = next(line for line in mended.splitlines() if line.startswith("trial "))
    assert f"#{baselines[1].number} baseline" in first, mended
    summary = json.loads((tmp_path / "mended" / "summary.json").read_text())
    assert summary["baseline"] == baselines[1].number, summary
    if summary["winner"] != summary["baseline"]:
        assert "confirmed over 1 interleaved round" in mended, mended
    else:  # the mended baseline is the fastest, in the search or side by side
        assert "Your configuration (the baseline, trial #" in mended, mended


# --- which script: an edited script is a new setup; a baseline left at sweeper's defaults is said


def test_a_scripts_version_is_its_file_and_its_git_work_tree(tmp_path):
    from sweeper.script_version import changed_note, other_versions, script_file, split_setup, version_of

    train = tmp_path / "train.py"
    train.write_text("print('step')\n")
    words = ["python", "train.py", "--batch-size", "64"]
    first = version_of(words, tmp_path)
    assert first.path == "train.py" and first.commit is None and len(first.digest) == 12
    assert version_of(words, tmp_path) == first  # the same file, the same version
    train.write_text("print('step')\nprint('one line more')\n")
    edited = version_of(words, tmp_path)
    assert edited.digest != first.digest
    # in a git work tree: the commit, and an uncommitted change to a module it imports, count too
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    (tmp_path / "model.py").write_text("WIDTH = 128\n")
    for step in (["init", "-q"], ["add", "."], ["commit", "-qm", "first"]):
        subprocess.run([*git, *step], cwd=tmp_path, check=True)
    committed = version_of(words, tmp_path)
    assert committed.commit is not None and not committed.dirty and committed.digest != edited.digest
    (tmp_path / "model.py").write_text("WIDTH = 256\n")
    dirty = version_of(words, tmp_path)
    assert dirty.dirty and dirty.digest != committed.digest and "with uncommitted changes" in dirty.describe()
    # `python -m package.module` is the module's file, found without importing it
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "run.py").write_text("raise SystemExit('never imported')\n")
    assert script_file(["python", "-m", "pkg.run"], tmp_path) == tmp_path / "pkg" / "run.py"
    assert script_file(["python", "missing.py"], tmp_path) is None
    # a stored setup: the command line's overrides, and the version apart
    setup = ("loader.batch_size=64", dirty.setup_entry())
    assert split_setup(setup) == (["loader.batch_size=64"], dirty.setup_entry())
    others = other_versions(
        [setup, ("loader.batch_size=64",), ("loader.batch_size=32", first.setup_entry())],
        ("loader.batch_size=64", edited.setup_entry()),
    )
    assert others == [dirty.setup_entry(), None]
    note = changed_note(edited, others)
    assert note.startswith("the script is not the one this study's earlier sweeps of this command measured")
    assert changed_note(edited, []) is None


def test_a_script_sweep_whose_baseline_is_sweepers_defaults_says_so_before_trial_1(tmp_path):
    from test_sweep_logic import _cpu_plan

    command = script("ok", "--workers ${loader.num_workers}")
    plan = _cpu_plan(tmp_path, {"n_trials": 2}, ["task=script", command, "search=none"])
    said = [n for n in plan.notes if "your configuration is sweeper's defaults" in n]
    assert said and "(loader.batch_size=64 loader.num_workers=0)" in said[0], plan.notes
    given = _cpu_plan(
        tmp_path,
        {"n_trials": 2},
        ["task=script", command, "search=none", "loader.batch_size=256", "loader.num_workers=8"],
    )
    assert not [n for n in given.notes if "sweeper's defaults" in n], given.notes
    # the setup is the command line's overrides and the script's version; the trials' commands are the overrides
    assert given.setup[:-1] == given.fixed and given.setup[-1].startswith("#script tests/fake_script.py@")
    assert not any(o.startswith("#") for o in given.overrides_for({}))


@pytest.mark.slow
def test_an_edited_script_is_measured_anew_and_the_log_says_what_it_differs_from(tmp_path):
    train = tmp_path / "train.py"
    train.write_text((ROOT / "tests" / "fake_script.py").read_text())
    sweep = [
        "task=script",
        script("ok", fake=f"python {train}"),
        "search=none",
        "loader.batch_size=32",
        "loader.num_workers=0",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.confirm=0",
    ]
    run_multirun(tmp_path, *sweep, name="first")
    again = run_multirun(tmp_path, *sweep, name="again")
    assert "nothing new measured" in again.stdout + (tmp_path / "again" / "sweep.log").read_text()
    train.write_text(train.read_text() + "# one line added: a new augmentation, say\n")
    run_multirun(tmp_path, *sweep, name="edited")
    log = (tmp_path / "edited" / "sweep.log").read_text()
    assert "the script is not the one this study's earlier sweeps of this command measured" in log, log
    assert "nothing new measured" not in log
    summary = json.loads((tmp_path / "edited" / "summary.json").read_text())
    assert summary["measured_since_start"] >= 1, summary
