"""Your own workload, measured by sweeper with no change to sweeper itself.

    python -m sweeper task=custom task.factory=examples.user_workload:build
    python -m sweeper task=custom task.factory=examples.user_workload:build task.params.hidden=512

The factory gets the task node as a dict and returns (model, dataset, loss_fn); batches from
the dataset must be (inputs, targets). Return a sweeper.workload.Workload instead to also
choose the optimizer, a collate_fn, or to mark the model convolutional (for channels_last).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset


def build(task: dict[str, Any]) -> tuple[nn.Module, TensorDataset, Any]:
    params = task.get("params") or {}
    features, hidden = int(params.get("features", 64)), int(params.get("hidden", 256))
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(8192, features, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True)  # a regression the model can learn
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    return model, TensorDataset(inputs, targets), nn.functional.mse_loss
