"""Which images, and which crops of them, each side of the agreement bench measures: sweeper's run
and the plain loop both seed torch with 0 before they build the model, so without loader workers
both draw the same shuffle and the same random crops, batch after batch, in every run; the
windows of one and the counted span of the other then cover different stretches of that one
sequence. Whether those stretches hold the same work is what this prints, and how the two
processes differ as their loops run: the thread variables, torch's threads and CPU capability,
the cores, niceness and scheduler, Python's switch interval, collector and threads, the cgroup
and the limits.

    python benchmarks/batch_sequence.py [NAME]     default: "JPEGs warm, mobilenet_v3_small train, 0 workers"

One run of each side (`benchmarks/loop_agreement.py`'s configuration NAME, its data made there),
each with a sitecustomize on PYTHONPATH that notes every RandomResizedCrop draw (the image's size,
the crop's, the time) in a file per process, and the process's setup at the first draw; nothing
else of either changes. Sweeper's windows
are the images after its warm-up's steps (result.json), the plain loop's counted span the images
drawn from its --skip seconds on. A deterministic check: the VM's speed moves where the spans
fall, by a step or two, not what the images are.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loop_agreement import CONFIGS, DATA, ROOT, SKIP_S, make_data

NOTE_DRAWS = """
import gc, json, os, sys, threading, time
import torch
from torchvision import transforms

_drawn = transforms.RandomResizedCrop.get_params

def _setup():
    variables = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "LD_PRELOAD", "MALLOC_ARENA_MAX")
    return {
        "thread variables": {v: os.environ.get(v) for v in variables},
        "torch threads, interop threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
        "torch's CPU capability": torch.backends.cpu.get_cpu_capability(),
        "cores allowed": sorted(os.sched_getaffinity(0)),
        "niceness, scheduler": [os.nice(0), os.sched_getscheduler(0)],
        "Python's switch interval": sys.getswitchinterval(),
        "collector: on, thresholds, frozen objects": [gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()],
        "Python threads": threading.active_count(),
        "cgroup": open("/proc/self/cgroup").read().strip(),
        "limits": open("/proc/self/limits").read(),
    }

def _noted(img, scale, ratio):
    i, j, h, w = _drawn(img, scale, ratio)
    width, height = img.size
    setup = os.path.join(os.environ["DRAWS_DIR"], "setup.json")
    if not os.path.exists(setup):  # at the first draw: the loop is built and running
        with open(setup, "w") as f:
            json.dump(_setup(), f)
    with open(os.path.join(os.environ["DRAWS_DIR"], f"{os.getpid()}.txt"), "a") as f:
        f.write(f"{time.perf_counter()} {width * height} {w * h}\\n")
    return i, j, h, w

transforms.RandomResizedCrop.get_params = staticmethod(_noted)
"""


def draws(directory: Path) -> list[tuple[float, int, int]]:
    """The one process's draws in `directory`: (time, image pixels, crop pixels), in order."""
    (path,) = directory.glob("*.txt")
    return [(float(t), int(a), int(b)) for t, a, b in (line.split() for line in path.read_text().splitlines())]


def per_image(span: list[tuple[float, int, int]]) -> str:
    return (
        f"{len(span)} images, {statistics.fmean(d[1] for d in span):,.0f} px decoded and "
        f"{statistics.fmean(d[2] for d in span):,.0f} px cropped per image"
    )


def crop_share(batches: int = 4) -> float:
    """The random crop and its resize, as a share of a whole step of the JPEG loop (32 images
    loaded, mobilenet_v3_small at 112 px trained on them) in this process: what a stretch with
    fewer cropped pixels can save at most."""
    import torch
    from torchvision import datasets, models, transforms

    torch.set_num_threads(1)
    data = datasets.ImageFolder(str(DATA / "jpegs"))
    crop = transforms.RandomResizedCrop(112)
    rest = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.ToTensor()])
    model = models.get_model("mobilenet_v3_small", weights=None, num_classes=len(data.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cropping = whole = 0.0
    for b in range(batches + 1):  # the first batch warms up, uncounted
        start = time.perf_counter()
        images = [data.loader(data.samples[b * 32 + i][0]) for i in range(32)]
        cropped = time.perf_counter()
        images = [crop(image) for image in images]
        crop_s = time.perf_counter() - cropped
        x = torch.stack([rest(image) for image in images])
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), torch.zeros(32, dtype=torch.long))
        loss.backward()
        optimizer.step()
        if b:
            cropping, whole = cropping + crop_s, whole + time.perf_counter() - start
    return cropping / whole


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "JPEGs warm, mobilenet_v3_small train, 0 workers"
    config = next(c for c in CONFIGS if c.name == name)
    if config.loop != "imagefolder" or config.workers:
        sys.exit(f"{name!r}: the draws are one sequence only for the JPEG loops without loader workers")
    make_data()
    with tempfile.TemporaryDirectory(prefix="batch-sequence-") as tmp:
        work = Path(tmp)
        (work / "sitecustomize.py").write_text(NOTE_DRAWS)
        for side in ("plain", "sweeper"):
            (work / side).mkdir()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work), str(ROOT)])}
        loop = ROOT / "benchmarks" / "plain" / "imagefolder.py"
        run = [sys.executable, str(loop), *config.plain_args()]
        subprocess.run(run, check=True, capture_output=True, env={**env, "DRAWS_DIR": str(work / "plain")})
        run = [sys.executable, "-m", "sweeper", *config.overrides(), f"hydra.run.dir={work / 'run'}"]
        subprocess.run(run, check=True, capture_output=True, cwd=ROOT, env={**env, "DRAWS_DIR": str(work / "sweeper")})
        result = json.loads((work / "run" / "result.json").read_text())
        plain, ours = draws(work / "plain"), draws(work / "sweeper")
        setups = {side: json.loads((work / side / "setup.json").read_text()) for side in ("plain", "sweeper")}
    common = min(len(plain), len(ours))
    same = [p[1:] for p in plain[:common]] == [o[1:] for o in ours[:common]]
    print(f"{name}: the same images and crops in the same order over the first {common}: {'yes' if same else 'no'}")
    first = result["timing"]["warmup_steps"] * config.batch
    windows = ours[first : first + result["timing"]["steps_measured"] * config.batch]
    counted = [d for d in plain if d[0] >= plain[0][0] + SKIP_S]
    print(f"sweeper's windows (from image {first}): {per_image(windows)}")
    print(f"the plain loop's counted span (from image {len(plain) - len(counted)}): {per_image(counted)}")
    for fact, value in setups["plain"].items():
        if setups["sweeper"][fact] != value:
            print(
                f"the processes differ in {fact}: the plain loop's {value}, sweeper's run's {setups['sweeper'][fact]}"
            )
    for label, column in (("decoded", 1), ("cropped", 2)):
        ratio = statistics.fmean(d[column] for d in windows) / statistics.fmean(d[column] for d in counted)
        print(f"pixels {label}, sweeper's windows / the plain span: {ratio:.3f}")
    print(f"the crop and its resize, as a share of a whole step: {crop_share():.3f}")


if __name__ == "__main__":
    main()
