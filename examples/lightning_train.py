"""A Lightning training script driven by LightningCLI: an MLP on MNIST-shaped generated images.
The one change sweeper needs is the SweeperCallback among the Trainer's callbacks; outside
sweeper it does nothing.

    python examples/lightning_train.py fit --data.batch_size 256 --data.num_workers 2 --trainer.max_epochs 1
    sweeper -m search=lightning task=script task.command='python examples/lightning_train.py fit
        --data.batch_size ${loader.batch_size} --data.num_workers ${loader.num_workers}
        --data.pin_memory ${loader.pin_memory}
        --data.persistent_workers ${sweeper.if_workers:${loader.persistent_workers},${loader.num_workers}}
        --data.prefetch_factor ${sweeper.if_workers:${loader.prefetch_factor},${loader.num_workers}}
        --trainer.precision ${sweeper.lightning_precision:${backend.precision}}
        --trainer.accumulate_grad_batches ${train.grad_accum_steps}'
"""

from __future__ import annotations

import lightning.pytorch as L
import torch
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, Dataset

from sweeper.integrations.lightning import SweeperCallback


class GeneratedImages(Dataset):
    """MNIST-shaped images and labels made once from a seed (nothing to download)."""

    def __init__(self, num_samples: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(num_samples, 1, 28, 28, generator=generator)
        self.labels = torch.randint(0, 10, (num_samples,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.images[index] - 0.1307) / 0.3081, self.labels[index]


class ImagesData(L.LightningDataModule):
    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        num_samples: int = 60_000,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        self.train_set = GeneratedImages(self.hparams.num_samples)

    def train_dataloader(self) -> DataLoader:
        h = self.hparams
        return DataLoader(
            self.train_set,
            batch_size=h.batch_size,
            shuffle=True,
            num_workers=h.num_workers,
            pin_memory=h.pin_memory,
            persistent_workers=h.persistent_workers,
            prefetch_factor=h.prefetch_factor,
            drop_last=True,
        )


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        return nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    LightningCLI(
        Classifier,
        ImagesData,
        trainer_defaults={
            "callbacks": [SweeperCallback()],  # <- the one line sweeper needs
            "max_epochs": 10,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
        save_config_callback=None,  # no config.yaml written where it runs
    )


if __name__ == "__main__":
    main()
