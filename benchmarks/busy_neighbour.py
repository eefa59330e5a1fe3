"""A 5-trial default sweep with someone else's training busy beside it, against the same sweep on
a quiet machine: the pick, its confirmed speedup, the sweep's lines about the load, and the
busy sweep's pick and baseline re-measured side by side once the machine is quiet.

    python benchmarks/busy_neighbour.py [NEIGHBOUR_S]

The neighbour is a torch training loop on 2 threads (matmuls and Adam, as another user's job),
started with the busy sweep and stopped after NEIGHBOUR_S seconds (default 45): a lab server's
neighbour comes and goes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_gain import measure  # noqa: E402

from sweeper.store.summary import SweepSummary  # noqa: E402

NEIGHBOUR = """
import torch
torch.set_num_threads(2)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(256, 1024), torch.randint(0, 10, (256,))
while True:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
SWEEP = ["hydra.sweeper.n_trials=5"]


def sweep(tmp: Path, name: str, neighbour_s: float | None) -> dict:
    """The sweep's summary, wall time and its lines about other processes' load."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            *SWEEP,
            f"hydra.sweep.dir={tmp / name}",
            f"hydra.sweeper.storage=sqlite:///{tmp / 'bench.db'}",
            f"hydra.sweeper.study_name={name}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    busy = None
    if neighbour_s is not None:
        busy = subprocess.Popen([sys.executable, "-c", NEIGHBOUR])
    try:
        if busy is not None:
            try:
                proc.wait(timeout=neighbour_s)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    out, _ = proc.communicate()
    if proc.returncode:
        sys.exit(out[-3000:])
    summary = SweepSummary.read(tmp / name / "summary.json")
    load_lines = [
        line.strip()
        for line in out.splitlines()
        if "under load" in line or "waiting:" in line or "machine is busy" in line or "still busy" in line
    ]
    return {"summary": summary, "wall_s": time.monotonic() - started, "load_lines": load_lines}


def knobs_of(tmp: Path, name: str, trial: int) -> dict:
    import optuna

    study = json.loads((tmp / name / "sweep.json").read_text())["study"]
    t = optuna.load_study(study_name=study, storage=f"sqlite:///{tmp / 'bench.db'}").trials[trial]
    return dict(t.user_attrs["knobs"])


def main() -> None:
    neighbour_s = float(sys.argv[1]) if len(sys.argv) > 1 else 45.0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        quiet = sweep(tmp, "quiet", None)
        busy = sweep(tmp, "busy", neighbour_s)
        for name, run in (("quiet", quiet), ("busy", busy)):
            s = run["summary"]
            speedup = s.confirmation.speedup if s.confirmation is not None else None
            print(
                f"{name}: {run['wall_s']:.0f} s, winner #{s.winner}, "
                f"{s.winner_samples_per_sec or 0:,.0f} samples/s ({s.winner_figure}), "
                f"confirmed speedup {'none' if speedup is None else f'{speedup:.2f}x'}; "
                f"{s.counts.measured} measured, {s.counts.failed} failed"
            )
            for line in run["load_lines"]:
                print(f"    {line}")
        s = busy["summary"]
        if s.winner is not None and s.baseline is not None:
            pick, base = knobs_of(tmp, "busy", s.winner), knobs_of(tmp, "busy", s.baseline)
            rates = {"pick": [], "baseline": []}
            for r in range(3):  # interleaved, on the quiet machine
                for label, knobs in (("pick", pick), ("baseline", base)):
                    rates[label].append(measure(knobs, tmp / f"after-{label}-{r}"))
            med = {k: sorted(v)[1] for k, v in rates.items()}
            print(
                f"busy sweep's pick on the quiet machine: {med['pick']:,.0f} against its baseline's "
                f"{med['baseline']:,.0f} samples/s: {med['pick'] / med['baseline']:.2f}x"
            )


if __name__ == "__main__":
    main()
