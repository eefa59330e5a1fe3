"""The public name of the Workload type a task factory returns (see sweeper.measuring.workload)."""

from __future__ import annotations

from .measuring.workload import Workload

__all__ = ["Workload"]
