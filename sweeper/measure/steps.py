"""The step being measured: forward, backward and optimizer step, or inference only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import backend
from ..errors import InvalidConfig
from .workload import Workload


def make_step(
    workload: Workload,
    model: Callable[..., Any],
    device: torch.device,
    precision: str,
    training: bool,
    lr: float,
) -> Callable[[Any], None]:
    """Return step(batch) for a batch already on the device."""
    if not training:
        def infer(batch: Any) -> None:
            inputs = batch[0]
            with torch.inference_mode(), backend.autocast(device, precision):
                model(inputs)

        return infer

    if workload.loss_fn is None:
        raise InvalidConfig("task.mode='train' needs a loss_fn from the task factory.")
    params = [p for p in workload.model.parameters() if p.requires_grad]
    if not params:
        raise InvalidConfig("task.mode='train' but the model has no trainable parameters: use task.mode=inference.")
    make_opt = workload.optimizer_fn or (lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9))
    optimizer = make_opt(params)
    scaler = backend.grad_scaler(device, precision, training)
    loss_fn = workload.loss_fn

    def train(batch: Any) -> None:
        inputs, targets = batch[0], batch[1]
        with backend.autocast(device, precision):
            loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    return train
