"""A workload: model + dataset + loss, built by a factory named in the task config."""

from __future__ import annotations

import pkgutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConfig


@dataclass
class Workload:
    """What a task factory returns. Batches from `dataset` are (inputs, targets) pairs, unless
    `step_fn` / `forward_fn` say how a batch of another shape (a dict, a list, an object with
    `.to()`) goes through the model; sweeper moves any of them to the device, and keeps the
    optimizer step, zero_grad, autocast and the GradScaler."""

    model: Any  # torch.nn.Module
    dataset: Any  # torch.utils.data.Dataset
    # loss_fn(model_output, targets) -> scalar tensor, for (inputs, targets) batches in train mode
    loss_fn: Callable[[Any, Any], Any] | None = None
    # step_fn(model, batch) -> the loss (a tensor, or an output with `.loss`), train mode
    step_fn: Callable[[Any, Any], Any] | None = None
    # forward_fn(model, batch) -> anything, inference mode
    forward_fn: Callable[[Any, Any], Any] | None = None
    # optimizer_fn(parameters) -> torch.optim.Optimizer; default SGD(lr=task.lr or 0.01)
    optimizer_fn: Callable[[Any], Any] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None
    # channels_last only means something for convolutional models
    convolutional: bool = False
    # the files the dataset reads, whose state in the page cache measure.page_cache sets before
    # each run (none: data made in memory)
    files: tuple[str, ...] = ()


def load_factory(spec: str) -> Callable[[dict[str, Any]], Any]:
    """The factory named "module:function" (or "module:object.attribute"), as pkgutil resolves
    it; what goes wrong, one line naming the spec and the fix."""
    module_name = spec.partition(":")[0]
    try:
        return pkgutil.resolve_name(spec)
    except ImportError as exc:
        raise InvalidConfig(
            f"task.factory={spec!r}: cannot import module {module_name!r} ({exc}); "
            "run from the directory that holds it or install it."
        ) from exc
    except AttributeError as exc:
        if module_name in sys.modules:  # imported: the name is what is missing
            raise InvalidConfig(
                f"task.factory={spec!r}: module {module_name!r} has no attribute {spec.partition(':')[2]!r}."
            ) from exc
        raise InvalidConfig(
            f"task.factory={spec!r}: importing module {module_name!r} failed (AttributeError: {exc}); fix the module."
        ) from exc
    except Exception as exc:  # the user's module raised while it was imported
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise InvalidConfig(
            f"task.factory={spec!r}: importing module {module_name!r} failed ({first}); fix the module."
        ) from exc


def build_workload(task: Mapping[str, Any]) -> Workload:
    """Call the task's factory and accept a Workload or a (model, dataset, loss_fn) tuple."""
    built = load_factory(task["factory"])(dict(task))
    if isinstance(built, Workload):
        return built
    if isinstance(built, tuple) and len(built) == 3:
        return Workload(model=built[0], dataset=built[1], loss_fn=built[2])
    raise InvalidConfig(
        f"task.factory={task['factory']!r} returned {type(built).__name__}: expected a "
        "sweeper.workload.Workload or a (model, dataset, loss_fn) tuple."
    )
