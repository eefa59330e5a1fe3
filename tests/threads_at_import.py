"""A workload module that starts a thread when imported: forking a process that imported it is
unsafe, so its runs are spawned (and say so)."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()


def build(task: dict[str, Any]):
    return nn.Linear(4, 1), TensorDataset(torch.randn(256, 4), torch.randn(256, 1)), nn.functional.mse_loss
