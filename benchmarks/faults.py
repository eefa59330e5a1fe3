"""The fault campaign (docs/reliability.md): hostile input, kills, failures.

    python benchmarks/faults.py grammar          # every knob x every sweep-grammar form
    python benchmarks/faults.py kill [N]         # N sweeps SIGKILLed / SIGTERMed at random moments
    python benchmarks/faults.py classify         # kernel OOM kill, loader worker killed, segfault, hang

Each prints its figures; `grammar` and `classify` exit 1 on a failed expectation, `kill` too.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

# every form of Hydra's sweep grammar, with values that fit some knobs and not others
FORMS = [
    "choice(1,2)",
    "1,2",
    "range(1,3)",
    "range(1,9,2)",
    "interval(1,4)",
    "interval(0.5,2.5)",
    "int(interval(1,4))",
    "tag(log,interval(1,8))",
    "tag(log,int(interval(1,8)))",
    "shuffle(range(1,3))",
    "shuffle(choice(1,2,4))",
    "choice(null,1)",
    "choice(a,b)",
    "choice(true,false)",
    "range(-3,0)",
    "interval(-1.0,1.0)",
    "choice(0,100000)",
    "choice(fp32,bf16)",
    "choice(off,default)",
    "choice(cpu,auto)",
    "range(3,1)",
    "interval(2,2)",
    "tag(log,interval(0,4))",
    "choice()",
    "range(1,3",
    "choice(1,[2])",
]


def knobs_of(cfg) -> list[str]:
    from omegaconf import OmegaConf

    keys = []
    for group in ("task", "loader", "backend", "measure"):
        for leaf, value in OmegaConf.to_container(cfg[group], resolve=False).items():
            if not isinstance(value, (dict, list)) and leaf not in ("name", "factory"):
                keys.append(f"{group}.{leaf}")
    return keys


def grammar() -> int:
    """Each case goes the way a sweep goes before and at its first trials: the plan (every check
    before trial 1), then the baseline and three suggestions asked of a study, each composed
    into the config its job gets and checked as the job checks it. An input error must end in
    one ConfigError line in the plan; anything else raised is a traceback a user would see."""
    import optuna
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    import hydra_plugins.throughput_sweeper.config  # noqa: F401
    from sweeper import resolvers
    from sweeper.errors import ConfigError
    from sweeper.machine import Fingerprint, Machine
    from sweeper.measurement import Measurement, Memory, Throughput
    from sweeper.paths import config_dir
    from sweeper.preflight import check as check_overrides
    from sweeper.result import RunResult, Status
    from sweeper.runner.run import checked_spec
    from sweeper.search.plan import Learned, make_plan
    from sweeper.search.settings import SweepSettings
    from sweeper.search.trials import ask, tell_result
    from sweeper.store.study import StoredStudy

    resolvers.register()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    cpu = Machine(
        device="cpu",
        cuda=False,
        bf16=True,
        fingerprint=Fingerprint(hardware_class="fuzz", gpu_count=0, hostname="fuzz"),
    )
    counts = {"cases": 0, "rejected before trial 1": 0, "ran": 0, "tracebacks": 0, "trials invalid at run time": 0}
    problems: list[str] = []
    tmp = Path(tempfile.mkdtemp())
    parser = OverridesParser.create()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        composed: dict[tuple[str, ...], Any] = {}

        def compose_cached(overrides) -> Any:  # the plan's compose, 170 ms a call
            key = tuple(overrides)
            if key not in composed:
                composed[key] = compose("config", overrides=list(overrides))
            return copy.deepcopy(composed[key])

        tasks = ("mnist_mlp", "image_classification", "language_model")
        for task in tasks:
            base = compose("config", overrides=[f"task={task}", "search=none"])
            for key in knobs_of(base):
                if key.startswith("task.") and task != tasks[0] and key.split(".")[1] in ("mode", "lr"):
                    continue  # the same knob in each task: fuzzed once
                for form in FORMS:
                    counts["cases"] += 1
                    arguments = [f"task={task}", "search=none", f"{key}={form}"]
                    try:
                        check_overrides(["-m", *arguments])  # as `sweeper -m` does before Hydra starts
                        plan = make_plan(
                            SweepSettings(),
                            arguments,
                            compose=compose_cached,
                            app_name="fuzz",
                            sweep_dir=tmp,
                            probe_machine=lambda *probed: cpu,
                        )
                    except ConfigError as exc:
                        counts["rejected before trial 1"] += 1
                        if "\n" in str(exc):
                            problems.append(f"{key}={form}: a multi-line error: {exc!r}")
                        continue
                    except Exception:  # noqa: BLE001 - what a user would see as a traceback
                        counts["tracebacks"] += 1
                        problems.append(f"{key}={form}: plan: {traceback.format_exc().splitlines()[-1]}")
                        continue
                    counts["ran"] += 1
                    memory = optuna.storages.InMemoryStorage()
                    stored = StoredStudy(optuna.create_study(storage=memory, directions=list(plan.directions)), memory)
                    for i in range(4):
                        try:
                            trial, knobs = ask(stored, plan, plan.context(Learned()), baseline=i == 0)
                            # the job's command line reads back the values that were asked for
                            line = [o for o in plan.overrides_for(knobs) if o.startswith(f"{key}=")]
                            back = parser.parse_overrides(line)[0].value() if line else None
                            if line and back != knobs[key] and not (back == "null" and knobs[key] is None):
                                problems.append(f"{key}={form}: {knobs[key]!r} reads back as {back!r}")
                            config = copy.deepcopy(plan.base)
                            for name, value in knobs.items():
                                OmegaConf.update(config, name, value, force_add=False)
                            try:
                                checked_spec(config)
                            except ConfigError as exc:
                                counts["trials invalid at run time"] += 1
                                problems.append(
                                    f"{key}={form}: trial {i} {knobs.get(key)!r} would start and be invalid: {exc}"
                                )
                            tell_result(
                                stored,
                                trial,
                                RunResult(
                                    Status.OK,
                                    measurement=Measurement(
                                        Throughput(samples_per_sec=100.0 + i), memory=Memory(peak_memory_mb=10.0)
                                    ),
                                ),
                                plan,
                            )
                        except Exception:  # noqa: BLE001
                            counts["tracebacks"] += 1
                            problems.append(f"{key}={form}: trial {i}: {traceback.format_exc().splitlines()[-1]}")
                            break
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(counts, indent=2))
    for line in problems[:40]:
        print("  " + line)
    return 1 if problems else 0


SHORT = [
    "search=quick",
    "task.num_samples=2048",
    "hydra.sweeper.n_trials=4",
    "hydra.sweeper.confirm=1",
    "measure.warmup_s=0.2",
    "measure.warmup_steps=1",
    "measure.windows=2",
    "measure.window_s=0.3",
    "hydra.sweeper.study_name=faults",
]


def _sweep(tmp: Path, name: str, marker: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "SWEEPER_FAULT_MARKER": marker,
        "SWEEPER_LOCK_DIR": str(tmp),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
    }
    args = [*SHORT, f"hydra.sweep.dir={tmp / name}", f"hydra.sweeper.storage=sqlite:///{tmp / 'study.db'}"]
    return subprocess.Popen(
        [sys.executable, "-m", "sweeper", "-m", *args],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _left_behind(marker: str) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("SWEEPER_FAULT_MARKER") == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            pass
    return found


def _phase(sweep_dir: Path) -> str:
    log = sweep_dir / "sweep.log"
    lines = log.read_text().splitlines() if log.exists() else []
    last = lines[-1] if lines else ""
    if not lines or last.startswith("sweeper: study"):
        return "starting or the first trial"
    if last.startswith("trial"):
        return "during a trial"
    if "confirm" in last:
        return "during the confirmation"
    return "writing outputs or done"


def _trials(tmp: Path, name: str) -> list:
    """The study's trials; none when the sweep was killed before it created its study."""
    import optuna

    info = json.loads((tmp / name / "sweep.json").read_text())
    try:
        study = optuna.load_study(study_name=info["study"], storage=f"sqlite:///{tmp / 'study.db'}")
    except KeyError:
        return []
    return study.get_trials()


def kill(n: int) -> int:
    """n sweeps SIGKILLed at a random moment then run again; n // 2 sweeps SIGTERMed."""
    from sweeper.store.trials import was_measured

    rng = random.Random(0)
    tally: dict[str, int] = {
        "killed": 0,
        "completed trials lost": 0,
        "left RUNNING": 0,
        "duplicate numbers": 0,
        "wrong final count": 0,
        "no baseline measured": 0,
        "processes left behind": 0,
        "terminated": 0,
        "exit 143 with table and report": 0,
        "exit 143 before the sweep began (nothing to write)": 0,
        "finished before the signal": 0,
    }
    phases: dict[str, int] = {}
    started = time.monotonic()
    probe = Path(tempfile.mkdtemp())
    t0 = time.monotonic()
    _sweep(probe, "s", "probe").communicate()
    typical = time.monotonic() - t0
    shutil.rmtree(probe, ignore_errors=True)
    for i in range(n + n // 2):
        tmp = Path(tempfile.mkdtemp())
        marker = f"fault-{os.getpid()}-{i}"
        term = i >= n
        proc = _sweep(tmp, "a", marker)
        time.sleep(rng.uniform(0.5, typical))
        phase = _phase(tmp / "a")
        proc.send_signal(signal.SIGTERM if term else signal.SIGKILL)
        proc.communicate(timeout=300)
        if term:
            tally["terminated"] += 1
            if proc.returncode == 0:
                tally["finished before the signal"] += 1
            elif (
                proc.returncode == 143 and (tmp / "a" / "trials.csv").exists() and (tmp / "a" / "report.html").exists()
            ):
                tally["exit 143 with table and report"] += 1
            elif proc.returncode == 143 and not (tmp / "a" / "sweep.json").exists():
                tally["exit 143 before the sweep began (nothing to write)"] += 1
            else:
                print(f"  run {i}: SIGTERM {phase}: exit {proc.returncode}")
        else:
            tally["killed"] += 1
            phases[phase] = phases.get(phase, 0) + 1
        time.sleep(1.0)  # the kernel delivers the parent-death signal to the worker
        left = _left_behind(marker)
        tally["processes left behind"] += len(left)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if not term and (tmp / "a" / "sweep.json").exists():
            before = {t.number: t for t in _trials(tmp, "a") if t.state.name == "COMPLETE"}
            again = _sweep(tmp, "b", marker)
            again.communicate(timeout=600)
            after = _trials(tmp, "b")
            numbers = [t.number for t in after]
            tally["duplicate numbers"] += len(numbers) - len(set(numbers))
            running = [t for t in after if t.state.name == "RUNNING"]
            tally["left RUNNING"] += len(running)
            for t in running:
                print(f"  run {i}: killed {phase}; #{t.number} left RUNNING with {sorted(t.user_attrs)}")
            kept = {t.number: t for t in after}
            tally["completed trials lost"] += sum(
                1 for k, t in before.items() if k not in kept or kept[k].datetime_complete != t.datetime_complete
            )
            if sum(was_measured(t) for t in after) != 4 or again.returncode != 0:
                tally["wrong final count"] += 1
                print(f"  run {i}: re-run exit {again.returncode}, measured {sum(was_measured(t) for t in after)}")
            if not any(t.user_attrs.get("baseline") and t.state.name == "COMPLETE" for t in after):
                tally["no baseline measured"] += 1  # nothing to race against, nor to confirm against
                print(f"  run {i}: killed {phase}; the re-run measured no baseline")
            tally["processes left behind"] += len(_left_behind(marker))
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        json.dumps(
            {
                "sweeps": n + n // 2,
                "typical sweep s": round(typical, 1),
                "minutes": round((time.monotonic() - started) / 60, 1),
                **tally,
                "SIGKILL moments": phases,
            },
            indent=2,
        )
    )
    bad = (
        "completed trials lost",
        "left RUNNING",
        "duplicate numbers",
        "wrong final count",
        "no baseline measured",
        "processes left behind",
    )
    return 1 if any(tally[k] for k in bad) else 0


def _memory_cgroup(limit_bytes: int) -> Path | None:
    """A new memory cgroup with a hard limit (v2 or v1), or None where this machine allows none."""
    for root, limit_file in (
        (Path("/sys/fs/cgroup"), "memory.max"),
        (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
    ):
        if not (root / "cgroup.procs").exists() or (
            root.name == "cgroup"
            and not (root / "memory.max").exists()
            and not (root / "cgroup.subtree_control").exists()
        ):
            continue
        group = root / f"sweeper-faults-{os.getpid()}"
        try:
            group.mkdir()
            (group / limit_file).write_text(str(limit_bytes))
            return group
        except OSError:
            continue
    return None


def classify() -> int:
    """Failures made on purpose, each classified as the user should read it."""
    cases = [
        (
            "a loader worker killed (SIGKILL)",
            ["task=custom", "task.factory=misbehaving:kill_loader_worker", "loader.num_workers=1"],
            "crash",
        ),
        (
            "a segfault in a descendant (loader worker)",
            ["task=custom", "task.factory=misbehaving:segfault_loader_worker", "loader.num_workers=1"],
            "crash",
        ),
        (
            "a hang (loader worker sleeps)",
            ["task=custom", "task.factory=misbehaving:hang", "loader.num_workers=1", "measure.timeout_s=10"],
            "timeout",
        ),
    ]
    group = _memory_cgroup(1536 * 2**20)
    if group is not None:
        cases.insert(
            0,
            (
                "the kernel's OOM killer (cgroup limit 1.5 GB, 4 GB allocated)",
                ["task=custom", "task.factory=misbehaving:allocate", "+task.params.gb=4"],
                "oom",
            ),
        )
    else:
        print("no writable memory cgroup here: the kernel OOM-kill case is left out")
    failed = 0
    for what, overrides, expected in cases:
        tmp = Path(tempfile.mkdtemp())
        command = [
            sys.executable,
            "-m",
            "sweeper",
            *overrides,
            "measure.warmup_s=0.2",
            "measure.windows=2",
            "measure.window_s=0.3",
            f"hydra.run.dir={tmp}",
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
        if expected == "oom":
            shell = f'echo $$ > {group}/cgroup.procs && exec "$@"'
            command = ["sh", "-c", shell, "sh", *command]
        subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        result = json.loads((tmp / "result.json").read_text())
        ok = result["status"] == expected
        failed += not ok
        print(f"{'ok ' if ok else 'BAD'} {what}: {result['status']}: {result.get('reason')}")
        shutil.rmtree(tmp, ignore_errors=True)
    if group is not None:
        group.rmdir()
    return 1 if failed else 0


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else "grammar"
    if what == "grammar":
        return grammar()
    if what == "kill":
        return kill(int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    if what == "classify":
        return classify()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
