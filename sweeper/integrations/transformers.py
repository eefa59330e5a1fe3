"""`SweeperCallback` for the Hugging Face Trainer (`pip install torch-sweeper[transformers]`):

    trainer = Trainer(model, args, train_dataset=..., callbacks=[SweeperCallback()])

Each optimizer step is reported at `on_step_end` with the samples the Trainer's own arguments
give it on this process: `per_device_train_batch_size x gradient_accumulation_steps` (each
process reports its own, so a sweep of several processes counts them all). The wait before it
is from the last step's end to `on_step_begin`, which the Trainer calls once it has fetched the
step's batches (its logging between steps is counted there too).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from ..track import StepClock

__all__ = ["SweeperCallback"]


class SweeperCallback(TrainerCallback):
    """Reports the Trainer's optimizer steps to sweeper; a no-op outside a sweeper run."""

    def __init__(self) -> None:
        self._clock = StepClock()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._clock.start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._clock.began()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._clock.ended(args.per_device_train_batch_size * args.gradient_accumulation_steps)
