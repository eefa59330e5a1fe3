"""Data sets made on disk (python -m sweeper.data) and the page cache set before each run: real
files on this disk, evicted and read in, their residency read back from the kernel."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sweeper.data import IMAGENET_MEAN_FILE_KB, make_images, make_tokens, photograph
from sweeper.measuring import page_cache

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="posix_fadvise and mincore are Linux's")


def test_jpegs_are_like_photographs_and_the_same_for_a_seed(tmp_path):
    made = make_images(tmp_path / "set", images=24, classes=3, size=(469, 387))
    files = sorted((tmp_path / "set").rglob("*.jpg"))
    assert len(files) == made.count == 24 and {f.parent.name for f in files} == {"class_000", "class_001", "class_002"}
    # ImageNet's mean file, within a third: neither noise (no compression) nor a flat field
    assert 0.67 * IMAGENET_MEAN_FILE_KB < made.bytes / 24 / 1e3 < 1.33 * IMAGENET_MEAN_FILE_KB
    assert photograph(5, 0, (64, 48)) == photograph(5, 0, (64, 48)) != photograph(6, 0, (64, 48))


def test_a_token_shard_holds_ids_under_the_vocabulary_skewed_as_text_is(tmp_path):
    made = make_tokens(tmp_path / "t.bin", tokens=100_000, vocab=512)
    ids = np.memmap(made.path, dtype=np.uint16, mode="r")
    assert len(ids) == 100_000 == made.count and ids.max() < 512
    counts = np.bincount(ids, minlength=512)
    assert counts[0] > 10 * np.median(counts)  # a few ids most of the text, as words are


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["images", "d", "--size", "3x3"], "--size='3x3' is invalid: expected sides of 8 pixels or more"),
        (["tokens", "f", "--vocab", "70000"], "--vocab=70000 is invalid: uint16 ids hold at most 65536"),
        (["images", "d", "--images", "0"], "'0' is invalid: expected a count >= 1"),
    ],
)
def test_bad_sizes_are_one_line(tmp_path, args, message):
    run = subprocess.run([sys.executable, "-m", "sweeper.data", *args], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and message in run.stderr


def test_cold_evicts_the_files_and_warm_reads_them_in(tmp_path):
    made = make_images(tmp_path / "set", images=8, classes=2, size=(200, 150))
    files = [str(f) for f in sorted((tmp_path / "set").rglob("*.jpg"))]
    cold = page_cache.prepare("cold", files)
    assert cold is not None and cold.page_cache == "cold" and cold.cached_at_start == 0.0
    assert (cold.files, cold.bytes) == (8, made.bytes)
    warm = page_cache.prepare("warm", files)
    assert warm is not None and warm.cached_at_start == 1.0


def test_a_cold_stream_evicts_before_each_epoch_and_leaves_that_time_out_of_the_restart(tmp_path):
    """A small set read cold would be warm from its second epoch on: the stream evicts it at each
    epoch's start, as a set larger than memory is cold in every epoch; the eviction's own time is
    not the loop's."""
    from torch.utils.data import DataLoader

    from sweeper.measuring.loader import BatchStream

    make_images(tmp_path / "set", images=4, classes=2, size=(200, 150))
    files = [str(f) for f in sorted((tmp_path / "set").rglob("*.jpg"))]
    now = [0.0]

    def read(indices: list[int]) -> list[int]:
        now[0] += 1.0  # a batch takes a second
        return [len(open(files[i], "rb").read()) for i in indices]

    shares: list[tuple[float, float]] = []

    def evict() -> None:
        before = page_cache.cached_share(files)
        page_cache.evict(files)
        now[0] += 5.0  # the eviction takes five
        shares.append((before, page_cache.cached_share(files)))

    page_cache.evict(files)
    stream = BatchStream(DataLoader(list(range(4)), batch_size=2, collate_fn=read), clock=lambda: now[0])
    stream.before_epoch = evict
    for _ in range(6):  # three epochs of two batches
        stream()
    assert stream.epochs_started == 3
    # each epoch read every file in, and each new one began with none of them cached
    assert [round(b, 1) for b, _ in shares] == [1.0, 1.0] and [a for _, a in shares] == [0.0, 0.0]
    assert stream.restart_cost_s() == 1.0  # its first batch, not the eviction's five seconds


def test_auto_is_cold_only_where_the_set_is_larger_than_the_memory_available():
    assert page_cache.chosen("auto", data_bytes=10, available_bytes=100) == "warm"
    assert page_cache.chosen("auto", data_bytes=200, available_bytes=100) == "cold"
    assert page_cache.chosen("warm", data_bytes=200, available_bytes=100) == "warm"


def test_a_workload_without_files_takes_auto_alone():
    from sweeper.errors import InvalidConfig

    assert page_cache.prepare("auto", []) is None
    with pytest.raises(InvalidConfig, match="measure.page_cache=cold sets the state of the files"):
        page_cache.prepare("cold", [])


def test_the_reports_first_screen_says_what_state_every_figure_stands_on():
    import json

    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from sweeper.report import build_report_data
    from sweeper.report.page import answer

    metrics = {
        "samples_per_sec": 100.0,
        "peak_memory_mb": 500.0,
        "page_cache": "cold",
        "data_files": 400,
        "data_bytes": 44_200_000,
        "memory_available_bytes": 24_300_000_000,
        "data_cached_at_start": 0.0,
    }
    trial = create_trial(
        state=TrialState.COMPLETE,
        values=[100.0],
        params={"loader.batch_size": 64},
        distributions={"loader.batch_size": CategoricalDistribution([64])},
        user_attrs={
            "knobs": {"loader.batch_size": 64},
            "status": "ok",
            "baseline": True,
            "metrics": metrics,
            "fixed_overrides": [],
            "fingerprint": json.dumps({"hostname": "lab1", "cpus_available": 2}),
        },
    )
    data = build_report_data([trial], study_name="s", workload="w", fixed=[], confirmation=None)
    assert data.headline.data is not None
    assert (
        "400 files, 44.2 MB against 24.3 GB of memory available: cold, evicted from the page cache before "
        "the run and each epoch (0% cached as it began); every run began so." in answer(data)
    )


def test_both_decoders_make_the_same_tensor_from_a_jpeg(tmp_path):
    """PIL's path and torchvision.io's with transforms.v2: the same shape, dtype and
    normalization; the pixels differ only by the two resizers' rounding."""
    from PIL import Image

    from sweeper.tasks.image_classification import decode_jpeg_file, image_transform, tensor_transform

    path = tmp_path / "a.jpg"
    path.write_bytes(photograph(0, 0, (300, 200)))
    by_pil = image_transform(64, train=False)(Image.open(path).convert("RGB"))
    by_torchvision = tensor_transform(64, train=False)(decode_jpeg_file(str(path)))
    assert by_pil.shape == by_torchvision.shape == (3, 64, 64) and by_pil.dtype == by_torchvision.dtype
    assert (by_pil - by_torchvision).abs().mean() < 0.05


def test_a_batch_decoded_on_the_device_is_the_tensor_the_workers_would_have_made(tmp_path):
    """task.decoder=device: the workers hand over the files' bytes; the batch's `.to()` decodes
    them all at once and gives what torchvision.io's path gives sample by sample, laid out as
    a tensor batch is (channels_last), with the classes beside it."""
    import torch

    from sweeper.measuring.loader import to_device
    from sweeper.tasks.image_classification import (
        collate_encoded,
        decode_jpeg_file,
        read_bytes,
        tensor_transform,
    )

    paths = []
    for i, size in enumerate([(300, 200), (160, 240), (469, 387)]):
        paths.append(tmp_path / f"{i}.jpg")
        paths[-1].write_bytes(photograph(i, 0, size))
    batch = collate_encoded([(read_bytes(str(p)), i) for i, p in enumerate(paths)], image_size=64, train=False)
    inputs, targets = to_device(batch, torch.device("cpu"), non_blocking=False, channels_last=True)
    one_by_one = torch.stack([tensor_transform(64, train=False)(decode_jpeg_file(str(p))) for p in paths])
    assert inputs.shape == (3, 3, 64, 64) and inputs.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(inputs, one_by_one) and targets.tolist() == [0, 1, 2]
    trained = batch[0].__class__(batch[0].data, 32, train=True).to("cpu")  # random crops, the same shape
    assert trained.shape == (3, 3, 32, 32) and trained.dtype == torch.float32


def test_the_winners_decoder_is_written_as_the_datasets_lines():
    from sweeper.report.code import code_diff

    lines = code_diff({"task.decoder": "pil"}, {"task.decoder": "torchvision"}, "cpu")
    assert lines[0] == "-dataset = ImageFolder(root, transform=transform)  # PIL decodes and transforms"
    assert "decode_image(read_file(path), mode=ImageReadMode.RGB)" in lines[-1] and "v2.ToDtype" in lines[2]
    # the crop is the user's own: the lines hold for training and inference alike
    assert not any("RandomResizedCrop(size" in line for line in lines)


def test_the_disk_alone_is_read_cold_and_the_loader_alone_runs_without_a_step(tmp_path):
    from sweeper.measuring import ceiling

    made = make_images(tmp_path / "set", images=16, classes=2, size=(200, 150))
    files = [str(f) for f in sorted((tmp_path / "set").rglob("*.jpg"))]
    taken = []
    found = ceiling.measure(
        files, 16, readers=2, seconds=0.2, next_batch=lambda: taken.append(1) or [0] * 4, samples_of=len
    )
    assert found.disk_mb_per_sec > 0 and found.decode_samples_per_sec > 0 and len(taken) > 1
    # one file a sample: the disk's samples/s is its files/s, its MB/s the bytes
    assert found.disk_samples_per_sec == pytest.approx(found.disk_mb_per_sec * 1e6 / (made.bytes / 16))


@pytest.mark.parametrize(
    ("disk", "decode", "says"),
    [
        (100.0, 400.0, "the disk gives at most 100 samples/s cold (11 MB/s), and the run reaches 90"),
        (4000.0, 400.0, "decoding, not the disk, is what limits: the loader alone gives 400 samples/s"),
    ],
)
def test_the_ceilings_say_which_limits(disk, decode, says):
    from sweeper.datapath import ceiling_words
    from sweeper.measurement import Throughput

    figures = Throughput(
        samples_per_sec=90.0, disk_samples_per_sec=disk, disk_mb_per_sec=disk * 0.11, decode_samples_per_sec=decode
    )
    said = ceiling_words(figures)
    assert said is not None and said.startswith(says)
    assert ceiling_words(Throughput(samples_per_sec=90.0)) is None
