"""The step being measured: forward, backward and optimizer step, or inference only."""

from __future__ import annotations

import contextlib
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
    accum: int = 1,
    no_sync: Callable[[], Any] | None = None,
) -> Callable[[Any], None]:
    """Return step(batch) for a batch already on the device; with `accum` > 1, step(batches)
    for a list of that many micro-batches: their gradients summed (each loss scaled by 1/accum),
    then one optimizer step, as gradient accumulation is written. `no_sync` (DDP's) keeps the
    gradients of all micro-batches but the last from being all-reduced, as DDP users write it."""
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

    def backward(batch: Any, scale: float) -> None:
        inputs, targets = batch[0], batch[1]
        with backend.autocast(device, precision):
            loss = loss_fn(model(inputs), targets)
        if scale != 1.0:
            loss = loss * scale
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def optimizer_step() -> None:
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()

    def train(batch: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        backward(batch, 1.0)
        optimizer_step()

    def train_accumulated(batches: list[Any]) -> None:
        optimizer.zero_grad(set_to_none=True)
        for micro in batches[:-1]:
            with no_sync() if no_sync is not None else contextlib.nullcontext():
                backward(micro, 1.0 / accum)
        backward(batches[-1], 1.0 / accum)
        optimizer_step()

    return train if accum == 1 else train_accumulated
