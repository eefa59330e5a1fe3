"""A small GPT-style decoder (nanoGPT's shape) on memory-mapped or generated tokens."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from sweeper.config import LanguageTask, typed_task
from sweeper.errors import InvalidConfig
from sweeper.workload import Workload


class TokenWindows(Dataset):
    """Non-overlapping (input, next-token target) windows of `seq_len` over a token array."""

    def __init__(self, tokens: np.ndarray, seq_len: int) -> None:
        self.tokens, self.seq_len = tokens, seq_len

    def __len__(self) -> int:
        return max(0, (len(self.tokens) - 1) // self.seq_len)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.seq_len
        chunk = torch.from_numpy(self.tokens[start : start + self.seq_len + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, seq_len: int, depth: int, width: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, width)
        self.pos = nn.Embedding(seq_len, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(depth)))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def tokens(task: LanguageTask) -> np.ndarray:
    vocab = task.vocab_size
    if task.token_file:
        data = np.memmap(task.token_file, dtype=np.uint16, mode="r")
        head = data[:1_000_000]  # a look at the start, not a scan of a file of billions
        if len(head) and int(head.max()) >= vocab:
            raise InvalidConfig(
                f"task.token_file={task.token_file!r} holds token id {int(head.max())} "
                f">= task.vocab_size={vocab}: raise task.vocab_size."
            )
        return data
    rng = np.random.default_rng(0)
    return rng.integers(0, vocab, size=task.num_tokens, dtype=np.uint16)


def build(task: dict[str, Any]) -> Workload:
    typed = typed_task(LanguageTask, task)
    model = GPT(typed.vocab_size, typed.seq_len, typed.depth, typed.width, typed.heads)
    lr = typed.lr
    return Workload(
        model=model,
        dataset=TokenWindows(tokens(typed), typed.seq_len),
        loss_fn=next_token_loss,
        optimizer_fn=lambda ps: torch.optim.AdamW(ps, lr=lr),
        files=(typed.token_file,) if typed.token_file else (),
    )
