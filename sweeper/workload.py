"""The public name of the Workload type a task factory returns (see sweeper.measure.workload)."""

from __future__ import annotations

from .measure.workload import Workload

__all__ = ["Workload"]
