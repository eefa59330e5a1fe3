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
# a watched night (hydra.sweeper.watch) found the winner or your configuration moved beyond the
# noise on the same fingerprint, and re-tuned
EXIT_DRIFTED = 3
# a watched night found the fingerprint changed (torch, CUDA, driver, CPU, GPU, cores), and re-tuned
EXIT_CHANGED = 4
# the study's storage stayed unreachable past its retries (EX_UNAVAILABLE): run the command again
# once it is back; a run's result waits on disk meanwhile
EXIT_STORAGE_DOWN = 69
# the disk under the sweep's outputs or its study's file is full (EX_IOERR): nothing more runs,
# the study keeps what was measured
EXIT_DISK_FULL = 74
# lock=fail and the machine was busy (EX_TEMPFAIL: try later)
EXIT_LOCKED = 75


class SweeperError(Exception):
    """Base of sweeper's own stops; the message is one line for the user."""

    exit_code = EXIT_FAILED
    said = False  # the sweep has said it already: not printed again as an error


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

    said = True

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal_name(signum)}")

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 128 + self.signum


class Retuned(SweeperError):
    """A watched night re-tuned because the machine drifted or its fingerprint changed: results
    and report are written, and the exit code says which, for cron mail or a systemd unit."""

    said = True

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        super().__init__(f"the night {outcome}: re-tuned")

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return EXIT_DRIFTED if self.outcome == "drifted" else EXIT_CHANGED


class StorageUnreachable(SweeperError):
    """The study's storage could not be reached for longer than the sweep retries it."""

    exit_code = EXIT_STORAGE_DOWN


class DiskFull(SweeperError):
    """No space left where the sweep writes (its outputs, an SQLite or journal study). `result`
    is the run in flight's result when a job measured and could not write it."""

    exit_code = EXIT_DISK_FULL

    def __init__(self, message: str, result: object | None = None) -> None:
        super().__init__(message)
        self.result = result


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether an error, or one it was raised from, says the disk is full (ENOSPC, EDQUOT, SQLite's
    'database or disk is full')."""
    import errno

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFull):
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "database or disk is full" in str(exc) or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class RunFailed(SweeperError):
    """A single measured run ended other than ok; its reason has been printed."""


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a signal"


def exit_code(exc: BaseException) -> int:
    """The exit code for an exception that ends sweeper."""
    return exc.exit_code if isinstance(exc, SweeperError) else EXIT_FAILED
