"""sweeper: find, by measurement, the fastest settings for a PyTorch loop on this machine.

A training script measured by sweeper (task=script) changes one line of its loop:
`for batch in sweeper.track(loader):`, or calls `sweeper.step(n)` after each step.
"""

from __future__ import annotations

from .track import step, track

# the distribution (torch-sweeper) has the same version: pyproject.toml
__version__ = "0.1.0"
__all__ = ["step", "track"]
