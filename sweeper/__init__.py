"""sweeper: find, by measurement, the fastest settings for a PyTorch loop on this machine.

A training script measured by sweeper (task=script) changes one line of its loop:
`for batch in sweeper.track(loader):`, or calls `sweeper.step(n)` after each step. A notebook or
another program measures and sweeps with `sweeper.measure`, `sweeper.sweep` and `sweeper.load`.
"""

from __future__ import annotations

from .api import SweepResult, load, measure, sweep
from .errors import ConfigError, SweeperError
from .track import step, track

# the distribution (torch-sweeper) has the same version: pyproject.toml
__version__ = "0.1.0"
__all__ = ["ConfigError", "SweepResult", "SweeperError", "load", "measure", "step", "sweep", "track"]
