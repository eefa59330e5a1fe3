"""A small GPT (nanoGPT's shape: token and position embeddings, pre-norm blocks of causal
attention and an MLP, tied head) trained (or run for inference) on a memory-mapped token shard
of uint16 ids, read through a Dataset of windows and a DataLoader, AdamW, timed with
perf_counter around the loop. It imports nothing of sweeper's: it is what sweeper's figure for
task=language_model with task.token_file is checked against (the same shape: vocab 8192,
windows of 256, 4 blocks 256 wide, 4 heads).

    python benchmarks/plain/token_lm.py --data FILE --batch-size 16 --workers 1 --seconds 30

It prints the rate of each second, then the figure: the samples (windows) over the time after
--skip seconds (the warm-up), epoch ends and worker restarts included.
"""

import argparse

import numpy as np
import torch
from stopwatch import run
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

VOCAB, SEQ, DEPTH, WIDTH, HEADS = 8192, 256, 4, 256, 4


class Windows(Dataset):
    def __init__(self, path: str) -> None:
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // SEQ

    def __getitem__(self, i: int):
        chunk = torch.from_numpy(self.tokens[i * SEQ : i * SEQ + SEQ + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.Sequential(*(Block() for _ in range(DEPTH)))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--inference", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) first")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--skip", type=float, default=5.0)
    return parser.parse_args(argv)


def build(args: argparse.Namespace):
    """The loader, and the step: a batch in, its samples (windows) out."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.flush_denormal:
        torch.set_flush_denormal(True)
    loader = DataLoader(
        Windows(args.data),
        batch_size=args.batch_size,
        shuffle=not args.inference,
        num_workers=args.workers,
        persistent_workers=args.persistent_workers and args.workers > 0,
        drop_last=True,
    )
    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train(not args.inference)

    def step(batch) -> int:
        x, y = batch
        if args.inference:
            with torch.inference_mode():
                model(x)
        else:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            optimizer.step()
        return len(x)

    return loader, step


def main() -> None:
    args = arguments()
    loader, step = build(args)
    run(loader, step, args.seconds, args.skip)


if __name__ == "__main__":
    main()
