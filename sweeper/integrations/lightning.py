"""`SweeperCallback` for Lightning (`pip install torch-sweeper[lightning]`):

    trainer = L.Trainer(callbacks=[SweeperCallback()], ...)

Each optimizer step is reported when it is done (a step of `accumulate_grad_batches` batches
counts their samples together), with the wait before its first batch as Lightning's hooks tell
it: from the last step's end to `on_train_batch_start`, which comes after the loader gave the
batch and it was moved to the device. Under DDP each rank reports its own batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch import Callback

from ..track import StepClock, count_samples

__all__ = ["SweeperCallback"]


class SweeperCallback(Callback):
    """Reports Lightning's training steps to sweeper; a no-op outside a sweeper run.
    `samples`: an int, or a function of the batch, where a batch's size is not the leading
    dimension of its first tensor."""

    def __init__(self, samples: int | Callable[[Any], int] | None = None) -> None:
        self._clock = StepClock()
        self._count = count_samples(samples)
        self._samples = 0
        self._global_step = -1

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._global_step = trainer.global_step
        self._clock.start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._samples == 0:  # the first batch of an optimizer step
            self._clock.began()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._samples += self._count(batch)
        if trainer.global_step != self._global_step:  # the optimizer stepped
            self._global_step = trainer.global_step
            self._clock.ended(self._samples)
            self._samples = 0
