"""Exceptions shared by the parent and the worker (no torch)."""

from __future__ import annotations

from .validation import ConfigError


class InvalidConfig(ConfigError):
    """A configuration this machine cannot run (no GPU, no fp16, unknown model, ...)."""
