"""A Hugging Face Trainer script: a small GPT-2 built from its config (no download) learning
generated tokens, its arguments parsed by HfArgumentParser. The one change sweeper needs is the
SweeperCallback among the Trainer's callbacks; outside sweeper it does nothing.

    python examples/hf_trainer_train.py --per_device_train_batch_size 16 --dataloader_num_workers 2 --max_steps 100
    sweeper -m search=hf_trainer task=script task.command='python examples/hf_trainer_train.py
        --per_device_train_batch_size ${loader.batch_size}
        --dataloader_num_workers ${loader.num_workers}
        --dataloader_pin_memory ${loader.pin_memory}
        --dataloader_persistent_workers ${sweeper.if_workers:${loader.persistent_workers},${loader.num_workers}}
        --bf16 ${sweeper.equals:${backend.precision},bf16} --fp16 ${sweeper.equals:${backend.precision},fp16}
        --gradient_accumulation_steps ${train.grad_accum_steps}'
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments

from sweeper.integrations.transformers import SweeperCallback


@dataclass
class DataArguments:
    num_samples: int = 8192
    seq_len: int = 64
    vocab_size: int = 2048
    layers: int = 2
    width: int = 128
    heads: int = 4


class GeneratedTokens(Dataset):
    """Token sequences made once from a seed; the labels are the inputs (the model shifts them)."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, vocab_size, (num_samples, seq_len), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


def main() -> None:
    parser = HfArgumentParser((TrainingArguments, DataArguments))
    # what a throughput run wants unless told otherwise: no checkpoints, no reporting services;
    # on a machine without a GPU, use_cpu (without it the Trainer refuses --bf16 there)
    parser.set_defaults(
        use_cpu=not torch.cuda.is_available(),
        output_dir=str(Path(tempfile.gettempdir()) / "hf_trainer_output"),
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        num_train_epochs=10,
    )
    training, data = parser.parse_args_into_dataclasses()
    config = GPT2Config(
        vocab_size=data.vocab_size,
        n_positions=data.seq_len,
        n_layer=data.layers,
        n_embd=data.width,
        n_head=data.heads,
        bos_token_id=0,
        eos_token_id=0,
    )
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=training,
        train_dataset=GeneratedTokens(data.num_samples, data.seq_len, data.vocab_size),
        callbacks=[SweeperCallback()],  # <- the one line sweeper needs
    )
    trainer.train()


if __name__ == "__main__":
    main()
