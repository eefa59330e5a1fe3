"""Does a cold or warm figure read what a plain loop on the same files reads?

    python benchmarks/disk_truth.py [rounds] [images]
    python benchmarks/disk_truth.py tokens [rounds] [tokens]

On a JPEG folder made by `python -m sweeper.data images` (`images` JPEGs, 10 classes, so that a
run stays inside one epoch), mobilenet_v3_small inference at 64 px, batch 64, 2 loader workers:
sweeper with measure.page_cache=cold and =warm, and a hand-written loop (torchvision's
ImageFolder and DataLoader, the model under inference_mode) in a fresh process, its files
evicted first with posix_fadvise: its first epoch is the cold figure, its second the warm one.
`tokens`: the same on a token shard made by `python -m sweeper.data tokens` (`tokens` ids), the
language model's inference (one block 64 wide, windows of 64) at batch 64, 2 workers, the hand
loop reading the memory-mapped shard in shuffled windows. Interleaved, the order rotated each
round; prints each round and the medians' ratios.
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

# the plain loop's two epochs, after the data set's own lines (loader, model): the first cold, the second warm
EPOCHS = r"""
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
"""


HAND_TOKENS = r"""
import os, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader
from sweeper.tasks.language_model import GPT, TokenWindows

path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)  # evicted, as a shard larger than memory is in every epoch
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
data = TokenWindows(np.memmap(path, dtype=np.uint16, mode="r"), 64)
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=2, drop_last=True)
model = GPT(8192, 64, 1, 64, 1).eval()
"""

IMAGES = [
    "task=image_classification",
    "task.model=mobilenet_v3_small",
    f"task.image_size={SIZE}",
    "task.mode=inference",
    "task.num_classes=10",
    "task.epoch_samples=null",
]
# a small model (one block 64 wide over windows of 64), so that reading the shard is a share of the
# step worth measuring and an epoch lasts seconds, not minutes, on 2 cores
TOKENS = [
    "task=language_model",
    "task.mode=inference",
    "task.epoch_samples=null",
    "task.seq_len=64",
    "task.depth=1",
    "task.width=64",
    "task.heads=1",
]


def sweeper_figure(data: Path, state: str) -> float:
    workload = [*TOKENS, f"task.token_file={data}"] if data.is_file() else [*IMAGES, f"task.data_dir={data}"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sweeper",
                *workload,
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


def hand_figures(data: Path) -> tuple[float, float]:
    hand = (HAND_TOKENS if data.is_file() else HAND) + EPOCHS
    out = subprocess.run([sys.executable, "-c", hand, str(data)], check=True, capture_output=True, text=True)
    cold, warm = (float(v) for v in out.stdout.split())
    return cold, warm


def made(args: list[str]) -> tuple[int, Path]:
    """The rounds, and the data set the arguments ask for, made once."""
    kind = args.pop(0) if args and args[0] == "tokens" else "images"
    rounds = int(args[0]) if args else 3
    count = int(float(args[1])) if len(args) > 1 else {"images": 4000, "tokens": 1_000_000}[kind]
    data = Path(tempfile.gettempdir()) / f"sweeper-disk-truth-{kind}-{count}"
    if not data.exists():
        subprocess.run([sys.executable, "-m", "sweeper.data", kind, str(data), f"--{kind}", str(count)], check=True)
    return rounds, data


def main() -> None:
    rounds, folder = made(sys.argv[1:])
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
