"""Does a cold or warm figure read what a plain loop on the same files reads?

    python benchmarks/disk_truth.py [rounds] [images]

On a JPEG folder made by `python -m sweeper.data images` (`images` JPEGs, 10 classes, so that a
run stays inside one epoch), mobilenet_v3_small inference at 64 px, batch 64, 2 loader workers:
sweeper with measure.page_cache=cold and =warm, and a hand-written loop (torchvision's
ImageFolder and DataLoader, the model under inference_mode) in a fresh process, its files
evicted first with posix_fadvise: its first epoch is the cold figure, its second the warm one.
Interleaved, the order rotated each round; prints each round and the medians' ratios.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
SIZE, BATCH, WORKERS = 64, 64, 2

HAND = r"""
import os, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

root = sys.argv[1]
for folder, _, names in os.walk(root):  # evicted, as a set larger than memory is in every epoch
    for name in names:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
tf = transforms.Compose([transforms.Resize(73), transforms.CenterCrop(64), transforms.ToTensor(),
                         transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
data = datasets.ImageFolder(root, transform=tf)
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=2, drop_last=True)
model = models.mobilenet_v3_small(num_classes=10).eval()
rates = []
for epoch in range(2):
    n, start = 0, None
    with torch.inference_mode():
        for i, (x, _) in enumerate(loader):
            if i == 3:  # the workers started, the first batches out of the way
                n, start = 0, time.perf_counter()
            model(x)
            n += len(x)
    rates.append(n / (time.perf_counter() - start))
print(rates[0], rates[1])
"""


def sweeper_figure(folder: Path, state: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sweeper",
                "task=image_classification",
                "task.model=mobilenet_v3_small",
                f"task.image_size={SIZE}",
                "task.mode=inference",
                f"task.data_dir={folder}",
                "task.num_classes=10",
                "task.epoch_samples=null",
                f"loader.batch_size={BATCH}",
                f"loader.num_workers={WORKERS}",
                f"measure.page_cache={state}",
                f"hydra.run.dir={tmp}",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        result = RunResult.from_json(json.loads((Path(tmp) / "result.json").read_text()))
    assert result.measurement is not None and result.measurement.run.page_cache == state
    return result.measurement.throughput.samples_per_sec


def hand_figures(folder: Path) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", HAND, str(folder)], check=True, capture_output=True, text=True)
    cold, warm = (float(v) for v in out.stdout.split())
    return cold, warm


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    images = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    folder = Path(tempfile.gettempdir()) / f"sweeper-disk-truth-{images}"
    if not folder.exists():
        subprocess.run(
            [sys.executable, "-m", "sweeper.data", "images", str(folder), "--images", str(images)], check=True
        )
    figures: dict[str, list[float]] = {"sweeper cold": [], "sweeper warm": [], "hand cold": [], "hand warm": []}
    runs = ["cold", "warm", "hand"]
    for r in range(rounds):
        for what in runs[r % 3 :] + runs[: r % 3]:
            if what == "hand":
                cold, warm = hand_figures(folder)
                figures["hand cold"].append(cold)
                figures["hand warm"].append(warm)
            else:
                figures[f"sweeper {what}"].append(sweeper_figure(folder, what))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in figures.items()), flush=True)
    median = {k: statistics.median(v) for k, v in figures.items()}
    print(", ".join(f"{k} median {v:,.0f}" for k, v in median.items()))
    for state in ("cold", "warm"):
        print(f"{state}: sweeper / hand loop = {median[f'sweeper {state}'] / median[f'hand {state}']:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
