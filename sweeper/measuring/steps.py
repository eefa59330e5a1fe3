"""The step being measured: forward, backward and optimizer step, or inference only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from ..errors import InvalidConfig
from . import backend
from .workload import Workload


def _infer_step(
    workload: Workload, model: Callable[..., Any], device: torch.device, precision: str
) -> Callable[[Any], None]:
    """step(batch) for inference: the forward pass under inference_mode and the precision's autocast."""
    forward = workload.forward_fn or _default_forward

    def infer(batch: Any) -> None:
        with torch.inference_mode(), backend.autocast(device, precision):
            forward(model, batch)

    return infer


def _optimizer(workload: Workload, lr: float) -> Any:
    """The workload's optimizer over its trainable parameters (SGD with momentum unless it names one)."""
    params = [p for p in workload.model.parameters() if p.requires_grad]
    if not params:
        raise InvalidConfig("task.mode='train' but the model has no trainable parameters: use task.mode=inference.")
    make_opt = workload.optimizer_fn or (lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9))
    return make_opt(params)


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
        return _infer_step(workload, model, device, precision)
    compute_loss = _loss_of(workload)
    optimizer = _optimizer(workload, lr)
    scaler = backend.grad_scaler(device, precision, training)

    def backward(batch: Any, scale: float) -> None:
        with backend.autocast(device, precision):
            loss = compute_loss(model, batch)
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


def _default_forward(model: Callable[..., Any], batch: Any) -> Any:
    """A dict batch goes in as keyword arguments; an (inputs, targets) pair as its inputs."""
    return model(**batch) if isinstance(batch, dict) else model(batch[0])


def _loss(output: Any) -> Any:
    """The loss a step returned: a tensor, or a model output that carries `.loss`."""
    return output.loss if hasattr(output, "loss") and not isinstance(output, torch.Tensor) else output


def _loss_of(workload: Workload) -> Callable[[Any, Any], Any]:
    """How a training step gets its loss: step_fn(model, batch); loss_fn(model(inputs), targets)
    for (inputs, targets) batches; or, for a dict batch, the `.loss` of model(**batch)."""
    if workload.step_fn is not None:
        step_fn = workload.step_fn
        return lambda model, batch: _loss(step_fn(model, batch))
    if workload.loss_fn is not None:
        loss_fn = workload.loss_fn
        return lambda model, batch: loss_fn(model(batch[0]), batch[1])

    def loss_of_output(model: Callable[..., Any], batch: Any) -> Any:
        if not isinstance(batch, dict):
            raise InvalidConfig(
                "task.mode='train' needs a loss: the task factory's Workload gives step_fn(model, "
                "batch) or loss_fn(output, targets), or its batches are dicts the model takes as "
                "keyword arguments and returns an output with .loss."
            )
        loss = _loss(model(**batch))
        if not isinstance(loss, torch.Tensor):
            raise InvalidConfig(
                f"model(**batch) returned {type(loss).__name__} without .loss: give the Workload a "
                "step_fn(model, batch) that returns the loss."
            )
        return loss

    return loss_of_output
