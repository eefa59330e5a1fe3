"""Data sets on disk, made here, for measuring the data path as it is with real files:

    python -m sweeper.data images DIR [--images N] [--classes C] [--size 469x387] [--seed S]
    python -m sweeper.data tokens FILE [--tokens N] [--vocab V] [--seed S]

`images` writes an ImageFolder of JPEGs (DIR/class_000/000000.jpg, ...) whose sizes and decoding
cost are like photographs': ImageNet's train set holds 1.28 M JPEGs of about 110 KB each, at a
mean of 469 x 387 pixels. Each image is a smooth colour field with mid-scale texture and grain,
saved at quality 90, so it compresses as a photograph does (noise alone would not compress, a
flat field would be nearly free to decode). `tokens` writes a token shard as task.token_file
reads it: uint16 ids, drawn as text's are (a Zipf law over the vocabulary). The sizes are
arguments, so that a set can be made larger than this machine's memory; every file depends on
the seed and its index alone, the same on any machine.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np

# ImageNet's train set: its mean image and its mean file (the same quality as its photographs)
IMAGENET_MEAN_SIZE = (469, 387)
IMAGENET_MEAN_FILE_KB = 110
JPEG_QUALITY = 90


@dataclass(frozen=True)
class Made:
    """What a command wrote: `count` of `what` (JPEGs, tokens) in `bytes`."""

    path: Path
    count: int
    what: str
    bytes: int

    def describe(self) -> str:
        each = f" ({self.bytes / self.count / 1e3:,.0f} KB each)" if self.what == "JPEGs" else ""
        return f"{self.count:,} {self.what}, {self.bytes / 1e6:,.1f} MB{each} in {self.path}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, as every other input error of sweeper's
        self.exit(2, f"error: {message}\n")


def photograph(index: int, seed: int, mean_size: tuple[int, int]) -> bytes:
    """One JPEG like a photograph, its size within +-20% of `mean_size`, from (seed, index) alone."""
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    w, h = (int(side * rng.uniform(0.8, 1.2)) for side in mean_size)
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((w, h), Image.Resampling.BICUBIC)
    texture = rng.integers(0, 256, (max(1, h // 8), max(1, w // 8), 3), dtype=np.uint8)
    mid = Image.fromarray(texture).resize((w, h), Image.Resampling.BILINEAR)
    pixels = 0.6 * np.asarray(coarse, np.float32) + 0.4 * np.asarray(mid, np.float32)
    pixels += rng.normal(0.0, 24.0, pixels.shape)
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def _write_image(job: tuple[Path, int, int, tuple[int, int]]) -> int:
    path, index, seed, size = job
    data = photograph(index, seed, size)
    path.write_bytes(data)
    return len(data)


def make_images(root: Path, images: int, classes: int, size: tuple[int, int], seed: int = 0) -> Made:
    """An ImageFolder of `images` JPEGs over `classes` class folders, written in parallel."""
    jobs = []
    for c in range(classes):
        (root / f"class_{c:03d}").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        jobs.append((root / f"class_{i % classes:03d}" / f"{i:06d}.jpg", i, seed, size))
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        written = sum(pool.map(_write_image, jobs, chunksize=64))
    return Made(root, images, "JPEGs", written)


def make_tokens(path: Path, tokens: int, vocab: int, seed: int = 0) -> Made:
    """A shard of `tokens` uint16 ids under `vocab`, Zipf-distributed as words in text are."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    shard = np.memmap(path, dtype=np.uint16, mode="w+", shape=(tokens,))
    block = 1 << 22
    for start in range(0, tokens, block):
        n = min(block, tokens - start)
        shard[start : start + n] = (rng.zipf(1.2, n) - 1) % vocab
    shard.flush()
    del shard
    return Made(path, tokens, "tokens", path.stat().st_size)


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size={text!r} is invalid: expected WIDTHxHEIGHT, e.g. 469x387") from None
    if w < 8 or h < 8:
        raise argparse.ArgumentTypeError(f"--size={text!r} is invalid: expected sides of 8 pixels or more")
    return w, h


def _positive(text: str) -> int:
    value = int(float(text))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected a count >= 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="python -m sweeper.data", description=__doc__.split("\n\n")[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    images = kinds.add_parser("images", help="an ImageFolder of photograph-like JPEGs (task.data_dir)")
    images.add_argument("dir", type=Path)
    images.add_argument("--images", type=_positive, default=2000, help="JPEGs in all (default 2000)")
    images.add_argument("--classes", type=_positive, default=10, help="class folders (default 10)")
    images.add_argument("--size", type=_size, default=IMAGENET_MEAN_SIZE, help="mean WIDTHxHEIGHT (469x387)")
    images.add_argument("--seed", type=int, default=0)
    tokens = kinds.add_parser("tokens", help="a token shard of uint16 ids (task.token_file)")
    tokens.add_argument("file", type=Path)
    tokens.add_argument("--tokens", type=_positive, default=10_000_000, help="ids in all (default 1e7)")
    tokens.add_argument("--vocab", type=_positive, default=8192, help="vocabulary size, at most 65536 (8192)")
    tokens.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.kind == "images":
        made = make_images(args.dir, args.images, args.classes, args.size, args.seed)
        use = (
            f"task=image_classification task.data_dir={made.path} task.num_classes={args.classes} "
            "task.epoch_samples=null"
        )
    else:
        if args.vocab > 1 << 16:
            parser.error(f"--vocab={args.vocab} is invalid: uint16 ids hold at most 65536")
        made = make_tokens(args.file, args.tokens, args.vocab, args.seed)
        use = f"task=language_model task.token_file={made.path} task.vocab_size={args.vocab}"
    print(f"wrote {made.describe()}")
    print(f"measure it: python -m sweeper {use}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
