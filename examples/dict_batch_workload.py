"""A workload whose step is not `loss_fn(model(inputs), targets)`: a small transformer classifier
that takes a dict batch as keyword arguments and returns an output object carrying `.loss`, as
Hugging Face models do. `step_fn` says how a batch becomes a loss; sweeper moves the dict to the
device and keeps the optimizer step, zero_grad, autocast and the GradScaler.

    python -m sweeper task=custom task.factory=examples.dict_batch_workload:build
    python -m sweeper -m task=custom task.factory=examples.dict_batch_workload:build search=quick
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from sweeper.workload import Workload


@dataclass
class ClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyTransformerClassifier(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int, heads: int, classes: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(seq_len, width))
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth)
        self.head = nn.Linear(width, classes)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None
    ) -> ClassifierOutput:
        hidden = self.encoder(self.embed(input_ids) + self.position, src_key_padding_mask=attention_mask == 0)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        logits = self.head((hidden * mask).sum(1) / mask.sum(1).clamp(min=1))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits)


class TokenDataset(Dataset):
    """Generated token sequences of varying length, padded, each with a label: dict samples."""

    def __init__(self, count: int, seq_len: int, vocab: int, classes: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, vocab, (count, seq_len), generator=generator)
        self.lengths = torch.randint(seq_len // 4, seq_len + 1, (count,), generator=generator)
        self.labels = torch.randint(0, classes, (count,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        mask = (torch.arange(self.ids.shape[1]) < self.lengths[index]).long()
        return {"input_ids": self.ids[index] * mask, "attention_mask": mask, "labels": self.labels[index]}


def build(task: dict[str, Any]) -> Workload:
    params = task.get("params") or {}
    seq_len, vocab, classes = int(params.get("seq_len", 64)), int(params.get("vocab", 1000)), 4
    model = TinyTransformerClassifier(
        vocab, int(params.get("width", 64)), int(params.get("depth", 2)), 4, classes, seq_len
    )
    return Workload(
        model=model,
        dataset=TokenDataset(int(params.get("samples", 4096)), seq_len, vocab, classes),
        # the batch is a dict of tensors: the model takes it as keyword arguments
        step_fn=lambda model, batch: model(**batch).loss,
        forward_fn=lambda model, batch: model(batch["input_ids"], batch["attention_mask"]).logits,
    )
