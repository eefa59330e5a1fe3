"""What measuring a script costs beside it: `harness_cpu_pct` (the whole measuring process, and
the process that started the run, in percent of one core over the windows) of `python -m sweeper
task=script` on a script whose steps take from a third of a millisecond to tens of them, against
the steps per second it ran. The per-step share is what a sweep of a fast loop pays; it is read
at each checkout given, the checkouts alternated round by round (PYTHONPATH at each).

    python benchmarks/script_harness.py [rounds] [checkout ...]    defaults: 3 and this checkout

The script is written here (a linear model over random tensors, one compute thread, no workers,
its batch setting the step's length, in one row a line printed each step) and reports each step
with sweeper.track, as a user's does.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """\
import argparse, torch, sweeper
from torch.utils.data import DataLoader, TensorDataset
parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int)
parser.add_argument("--width", type=int)
parser.add_argument("--log", type=int)
args = parser.parse_args()
data = TensorDataset(torch.randn(20_000, args.width), torch.randint(0, 10, (20_000,)))
loader = DataLoader(data, batch_size=args.batch, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(10_000):
    for x, y in sweeper.track(loader):
        if args.log:
            print("x" * args.log)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
"""
# (batch, width, bytes printed a step): steps of about 0.3 ms, 1 ms and 15 ms on a 2-core VM, and
# the first again with a line of output each (a loop that logs every step)
STEPS = {
    "tiny steps": (8, 32, 0),
    "1 ms steps": (64, 256, 0),
    "10 ms steps": (256, 1024, 0),
    "tiny steps, 300 bytes printed each": (8, 32, 300),
}


def measured(checkout: str, script: Path, batch: int, width: int, log: int, out: Path) -> tuple[float, float]:
    """(steps/s, harness_cpu_pct) of one run under sweeper from `checkout`."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "task=script",
            f"task.command=python {script} --batch {batch} --width {width} --log {log}",
            "backend.threads=1",
            f"hydra.run.dir={out}",
        ],
        cwd=out.parent,
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": checkout, "OMP_NUM_THREADS": "1"},
    )
    result = json.loads((out / "result.json").read_text())
    return result["throughput"]["samples_per_sec"] / batch, result["utilization"]["harness_cpu_pct"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    checkouts = sys.argv[2:] or [str(ROOT)]
    tmp = Path(tempfile.mkdtemp())
    script = tmp / "steps.py"
    script.write_text(SCRIPT)
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(rounds):
        order = checkouts[r % len(checkouts) :] + checkouts[: r % len(checkouts)]  # who goes first rotates
        for name, (batch, width, log) in STEPS.items():
            for checkout in order:
                out = tmp / f"{r}-{batch}-{log}-{abs(hash(checkout))}"
                runs.setdefault((name, checkout), []).append(measured(checkout, script, batch, width, log, out))
        print(f"round {r + 1} of {rounds} done", flush=True)
    print(f"median of {rounds} rounds: steps/s, harness_cpu_pct (each round's), µs of a core per step")
    print("| steps | checkout | steps/s | % of one core | µs a step |")
    print("|---|---|---:|---:|---:|")
    for name in STEPS:
        for checkout in checkouts:
            rates, pcts = zip(*runs[(name, checkout)])
            rate, pct = statistics.median(rates), statistics.median(pcts)
            each = ", ".join(f"{p:.1f}" for p in pcts)
            print(f"| {name} | {checkout} | {rate:,.0f} | {pct:.2f} ({each}) | {1e4 * pct / rate:.1f} |")


if __name__ == "__main__":
    main()
