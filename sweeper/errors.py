"""Every way sweeper stops short, and the exit code each one means (no torch, no Optuna).

Code below the CLI (`__main__`) and the Hydra plugin raises these; only those two turn them
into exit codes, through `exit_code`.
"""

from __future__ import annotations

import signal

EXIT_OK = 0
# a single measured run failed (its reason is printed), or sweeper itself failed
EXIT_FAILED = 1
# a bad configuration, found before anything was measured
EXIT_BAD_CONFIG = 2
# lock=fail and the machine was busy (EX_TEMPFAIL: try later)
EXIT_LOCKED = 75


class SweeperError(Exception):
    """Base of sweeper's own stops; the message is one line for the user."""

    exit_code = EXIT_FAILED


class ConfigError(SweeperError, ValueError):
    """A configuration that cannot run; the message names the value and what is allowed."""

    exit_code = EXIT_BAD_CONFIG


class InvalidConfig(ConfigError):
    """A configuration this machine cannot run (no GPU, no fp16, unknown model, ...): found in
    the measuring child, reported as outcome `invalid`."""


class MachineBusy(SweeperError):
    """Another measurement holds this machine and the sweep was told not to wait."""

    exit_code = EXIT_LOCKED


class Interrupted(SweeperError):
    """Stopped by SIGTERM/SIGINT after writing what was measured: exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal_name(signum)}")

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 128 + self.signum


class RunFailed(SweeperError):
    """A single measured run ended other than ok; its reason has been printed."""


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a signal"


def exit_code(exc: BaseException) -> int:
    """The exit code for an exception that ends sweeper."""
    return exc.exit_code if isinstance(exc, SweeperError) else EXIT_FAILED
