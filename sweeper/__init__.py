"""sweeper: find, by measurement, the fastest settings for a PyTorch loop on this machine."""

from __future__ import annotations

__version__ = "0.1.0"
