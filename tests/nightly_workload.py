"""A workload a test slows down between two nights, through task=custom
task.factory=nightly_workload:make: each forward pass sleeps SWEEPER_TEST_STEP_SLEEP_S seconds
(read when the run builds its model, so a night's runs all see the night's value)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset


class Sleepy(nn.Module):
    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.sleep_s = sleep_s
        self.lin = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.lin(x)


def make(task: dict[str, Any]):
    sleep_s = float(os.environ.get("SWEEPER_TEST_STEP_SLEEP_S") or 0)
    return Sleepy(sleep_s), TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1)), nn.functional.mse_loss
