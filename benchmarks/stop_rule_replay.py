"""The run's own stop rule applied to a plain loop's recorded steps: whether sweeper's warm-up and
windows, stopping when their interval is precise, read a process's steps higher than the same
steps averaged over a fixed span. Everything compared comes from one process's steps, so the
spread between processes drops out.

    python benchmarks/stop_rule_replay.py [RUNS] ["measure.KEY=VALUE ..." ...]
        [--config NAME | --script "SCRIPT ARGS..."] [--keep FILE | --steps FILE]

RUNS: default 8, of JPEGs read warm, 0 workers (fork_origin.py's configuration), or of the
configuration of benchmarks/loop_agreement.py whose name holds NAME, or of a training script (its
DataLoader's steps, each ending when the loop asks for the next batch, as sweeper.track counts
them; the script ends the run, e.g. with --max-steps). Each quoted argument is a rule of its own
(the shipped rule with those overrides), replayed on the same steps beside the shipped one; --keep
writes the recorded steps to FILE, and --steps FILE replays them again, to try rules on the same
steps (benchmarks/gpu/results/ keeps some recorded on GPU servers).

Each run is the plain loop for 40 s, every step's end time recorded; nothing of sweeper's runs
beside it. Then, from each step one
second in on (while 14 s of steps remain), sweeper's measuring loop (`timing.measure`, with the
rule of conf/measure/default.yaml) is replayed on the steps that follow, on a clock the recorded
steps advance, once as shipped and once with the precision stop off (its windows up to the cap);
each figure is set against the mean rate of the same steps over 10 s from that start. Printed
per run, the means over its starts (overlapping starts are not independent: the runs are), the
seconds each rule measured (warm-up and windows): what a rule costs a trial, and for each rule
with the drift check on (`measure.drift_tol`, 0.5 as shipped), where it left windows out, with
what all of them read.
"""

from __future__ import annotations

import argparse
import json
import runpy
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from fork_origin import ARGS, LOOP
from omegaconf import OmegaConf

from sweeper.measuring import timing
from sweeper.measuring.rule import Rule

ROOT = Path(__file__).resolve().parents[1]
SECONDS = 40
SPAN_S = 10.0


def record(loop: str, args: list[str]) -> None:
    """Run the plain loop in this process, each step's end printed at its end (one JSON line)."""
    sys.path.insert(0, str(Path(loop).parent))
    import stopwatch

    ends: list[float] = []
    counted = stopwatch.Stopwatch.step

    def step(self: stopwatch.Stopwatch, samples: int) -> bool:
        ends.append(time.perf_counter())
        return counted(self, samples)

    stopwatch.Stopwatch.step = step
    sys.argv = [loop, *[a for a in args if not a.startswith("--seconds")], f"--seconds={SECONDS}"]
    runpy.run_path(loop, run_name="__main__")
    print(json.dumps({"ends": ends}), flush=True)


def record_script(words: list[str]) -> None:
    """Run a training script in this process, each DataLoader step's end recorded when its loop
    asks for the next batch; printed when the script ends (one JSON line)."""
    from torch.utils.data import DataLoader

    ends: list[float] = []
    iterate = DataLoader.__iter__

    def timed(self: DataLoader) -> Iterator[object]:
        for batch in iterate(self):
            yield batch
            ends.append(time.perf_counter())

    DataLoader.__iter__ = timed  # type: ignore[assignment,method-assign]
    sys.argv = words
    try:
        runpy.run_path(words[0], run_name="__main__")
    finally:
        print(json.dumps({"ends": ends}), flush=True)


def rule_of(overrides: Sequence[str] = ()) -> Rule:
    """conf/measure/default.yaml's rule, with `measure.KEY=VALUE` overrides."""
    measure = OmegaConf.load(ROOT / "conf" / "measure" / "default.yaml")
    del measure["defaults"]
    for given in overrides:
        key, _, value = given.partition("=")
        if not key.startswith("measure.") or key[len("measure.") :] not in measure:
            sys.exit(f"{given!r}: expected measure.KEY=VALUE, KEY one of {', '.join(measure)}")
        measure[key[len("measure.") :]] = yaml.safe_load(value)
    return Rule.of(measure)  # type: ignore[arg-type]


def measured(durations: list[float], rule: Rule) -> timing.Timings | None:
    """sweeper's measuring loop run on these steps (32 samples each); None if they run out."""
    steps = iter(durations)
    now = [0.0]

    def step(batch: int) -> None:
        now[0] += next(steps)

    try:
        return timing.measure(lambda: 32, step, lambda batch: batch, lambda: None, rule, clock=lambda: now[0])
    except (StopIteration, RuntimeError):  # a generator's StopIteration surfaces as RuntimeError
        return None


@dataclass(frozen=True)
class Start:
    """The replay from one step on: the steps' own mean rate over SPAN_S, and each rule's run."""

    span: float
    runs: tuple[timing.Timings, ...]

    def row(self) -> list[float]:
        """Each rule's figure over the span, then each rule's seconds (warm-up and windows)."""
        figures = [t.throughput().samples_per_sec / self.span for t in self.runs]
        return figures + [t.warmup_s + sum(t.window_s) for t in self.runs]


def drift_split(replays: Sequence[Start], index: int = 0) -> str:
    """Where the drift rule left a start's earlier windows out in the runs of the `index`-th rule,
    against where it did not: how many starts, the figure over the span, and for the first, all
    their windows' rate over the span (what the figure would have read with none left out) and
    the change it recorded."""
    left_out, whole = [], []
    for start in replays:
        t = start.runs[index]
        figure = t.throughput().samples_per_sec / start.span
        if t.dropped:
            every = sum(s for s, _ in t.window_totals) / sum(e for _, e in t.window_totals)
            left_out.append((figure, every / start.span, t.drift))
        else:
            whole.append(figure)
    if not left_out:
        return f"the drift rule left no windows out in {len(whole)} starts"
    figure, every, drift = (statistics.mean(column) for column in zip(*left_out))
    rest = f", the other starts {statistics.mean(whole):.3f}" if whole else ""
    return (
        f"the drift rule left windows out in {len(left_out)} of {len(left_out) + len(whole)} starts "
        f"(their change {drift:+.1%}): their figure {figure:.3f} of the span, all their windows {every:.3f}{rest}"
    )


def span_rate(durations: list[float]) -> float:
    elapsed, steps = 0.0, 0
    for d in durations:
        elapsed, steps = elapsed + d, steps + 1
        if elapsed >= SPAN_S:
            break
    return 32 * steps / elapsed


def recorded_steps(runs: int, what: list[str]) -> Iterator[list[float]]:
    """Each run's step durations, the loop (`what`: record's or record_script's words) run in a
    process of its own."""
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, *what], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout
        ends = json.loads(out.strip().splitlines()[-1])["ends"]
        yield [b - a for a, b in zip(ends, ends[1:])]


def starts(durations: list[float]) -> Iterator[list[float]]:
    """The steps from each step a second in on, while 14 s of steps remain."""
    elapsed = 0.0
    total = sum(durations)
    for k, d in enumerate(durations):
        elapsed += d
        if elapsed >= 1.0 and total - elapsed >= 14.0:
            yield durations[k + 1 :]


def replayed(durations: list[float], rules: Sequence[Rule]) -> list[Start]:
    """From each start, each rule's run; the starts where every rule had steps enough."""
    replays = []
    for rest in starts(durations):
        runs = [measured(rest, rule) for rule in rules]
        if all(t is not None for t in runs):
            replays.append(Start(span_rate(rest), tuple(t for t in runs if t is not None)))
    return replays


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=8)
    parser.add_argument(
        "variants", nargs="*", help='rules replayed beside the shipped one: "measure.KEY=VALUE ..." each'
    )
    parser.add_argument("--config", help="record the loop_agreement.py configuration whose name holds this")
    parser.add_argument("--script", help="record this training script's DataLoader steps: 'SCRIPT ARGS...'")
    parser.add_argument("--keep", type=Path, help="write the recorded steps to this file")
    parser.add_argument("--steps", type=Path, help="replay the steps a --keep wrote, instead of recording")
    return parser.parse_args()


def what(config: str | None, script: str | None) -> list[str]:
    """The recording's words: a script's, a loop_agreement.py configuration's, or the default."""
    if script:
        return ["--record-script", *shlex.split(script)]
    if not config:
        return ["--record", str(LOOP), *ARGS]
    from loop_agreement import CONFIGS, make_data

    found = [c for c in CONFIGS if config in c.name]
    if not found:
        sys.exit(f"--config {config!r}: no configuration of loop_agreement.py holds it")
    make_data()
    return ["--record", str(ROOT / "benchmarks" / "plain" / f"{found[0].loop}.py"), *found[0].plain_args()]


def main() -> None:
    args = arguments()
    shipped = rule_of()
    names = ["as shipped", "precision stop off", *args.variants]
    rules = [shipped, replace(shipped, rel_precision=None), *(rule_of(v.split()) for v in args.variants)]
    if args.steps:
        runs: Iterable[list[float]] = json.loads(args.steps.read_text())[: args.runs]
    else:
        runs = recorded_steps(args.runs, what(args.config, args.script))
    kept, per_run = [], []
    for i, durations in enumerate(runs):
        kept.append(durations)
        replays = replayed(durations, rules)
        rows = [start.row() for start in replays]
        means = [statistics.mean(r[j] for r in rows) for j in range(2 * len(rules))]
        means.append(statistics.mean(r[0] / r[1] for r in rows))
        per_run.append(means)
        figures = ", ".join(f"{name} {m:.3f}" for name, m in zip(names, means))
        print(
            f"run {i + 1}: {len(rows)} starts; over the span: {figures}; shipped / stop off {means[-1]:.3f}", flush=True
        )
        for j, (name, rule) in enumerate(zip(names, rules)):
            if rule.drift_tol is not None:
                print(f"  {name}, {drift_split(replays, j)}", flush=True)
    if args.keep:
        args.keep.write_text(json.dumps(kept))
    print(f"{len(per_run)} runs, median (range) over the runs of each run's mean over its starts:")
    n = len(rules)
    for j, name in enumerate(names):
        figures, seconds = [m[j] for m in per_run], [m[n + j] for m in per_run]
        print(
            f"  {name} / the span: {statistics.median(figures):.3f} ({min(figures):.3f}-{max(figures):.3f}), "
            f"above 1 in {sum(f > 1 for f in figures)}; measuring {statistics.median(seconds):.1f} s"
        )
    ratios = [m[-1] for m in per_run]
    print(f"  as shipped / stop off: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        record(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["--record-script"]:
        record_script(sys.argv[2:])
    else:
        main()
