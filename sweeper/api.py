"""sweeper from Python (a notebook, another program), on the command line's own code paths, with
typed results and the command line's one-line errors as exceptions.

`measure` and `sweep` run `sweeper` and `sweeper -m` in a process of their own and read back
what they wrote: a run's parent becomes a child subreaper, keeps a fork server and installs
signal handlers, and a Hydra multirun owns its process, none of which belongs in a notebook's
kernel or another program.
`load` reads a finished sweep's directory, or a study in its storage. Nothing here imports torch,
Hydra or pandas until it is called.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import (
    EXIT_BAD_CONFIG,
    EXIT_CHANGED,
    EXIT_DRIFTED,
    EXIT_FAILED,
    EXIT_LOCKED,
    ConfigError,
    Interrupted,
    MachineBusy,
    SweeperError,
)

if TYPE_CHECKING:
    import pandas as pd

    from .result import RunResult
    from .store.summary import SweepSummary

SUMMARY_FILE, TRIALS_FILE = "summary.json", "trials.csv"


@dataclass(frozen=True)
class SweepResult:
    """A sweep's outcome: its summary (the winner, the confirmation, why it stopped), every trial
    as a table, and where its files are."""

    study: str
    storage: str
    trials: pd.DataFrame  # one row per trial: every knob, every figure, status and reason
    winner: int | None  # the winner's trial number
    speedup: float | None  # the confirmed speedup over the baseline (None: not confirmed)
    summary: SweepSummary | None = None  # summary.json (None: loaded from a study, not a sweep's directory)
    sweep_dir: Path | None = None
    report: Path | None = None

    @property
    def winner_knobs(self) -> dict[str, Any]:
        """The winner's knobs, as its row of the table has them."""
        if self.winner is None:
            return {}
        row = self.trials.loc[self.trials["number"] == self.winner].iloc[0]
        return {k: _plain(v) for k, v in row.items() if str(k).split(".")[0] in _KNOB_GROUPS}


_KNOB_GROUPS = ("loader", "backend", "dist", "train", "task")


def measure(overrides: Sequence[str] = (), *, out_dir: str | Path | None = None, echo: bool = False) -> RunResult:
    """Measure one configuration (`sweeper` with these overrides, in a process of its own) and
    return its result, whatever the run ended as (ok, oom, crash, ...); its files stay in
    `out_dir`, else where the command line's go (outputs/runs/<date>/<time>). A configuration
    that cannot run raises ConfigError with the line `sweeper` prints, before anything is
    measured. The calling process is left as it was: no fork server, no child subreaper, no
    signal handlers of sweeper's in a notebook's kernel."""
    from .result import RunResult
    from .runner.run import RESULT_FILE

    where = _directory("hydra.run.dir", out_dir, overrides)
    existed = where.exists()
    code, stderr = _cli([*overrides, f"hydra.run.dir={where}"], multirun=False, echo=echo)
    result = where / RESULT_FILE
    if code not in (0, EXIT_FAILED) or not result.is_file():  # a run that failed has its result.json
        _drop_if_empty(where, existed)
        raise _error(code, stderr)
    return RunResult.from_json(json.loads(result.read_text()))


def sweep(
    overrides: Sequence[str] = (),
    *,
    n_trials: int | None = None,
    timeout: str | None = None,
    sweep_dir: str | Path | None = None,
    echo: bool = False,
) -> SweepResult:
    """Sweep (`sweeper -m` with these overrides) and return what it found; its files go to
    `sweep_dir`, else where the command line's go (outputs/sweeps/<date>/<time>). `echo` prints the
    sweep's progress lines as they come; they are in its sweep.log either way. Raises ConfigError
    for bad input (the line `sweeper -m` prints), MachineBusy, Interrupted, or SweeperError."""
    where = _directory("hydra.sweep.dir", sweep_dir, overrides)
    existed = where.exists()
    argv = [*overrides, f"hydra.sweep.dir={where}"]
    argv += [f"hydra.sweeper.n_trials={n_trials}"] if n_trials is not None else []
    argv += [f"hydra.sweeper.timeout={timeout}"] if timeout is not None else []
    code, stderr = _cli(argv, multirun=True, echo=echo)
    # none completed: winner None; a watched night that re-tuned: summary.night says why
    if code not in (0, EXIT_FAILED, EXIT_DRIFTED, EXIT_CHANGED) or not (where / SUMMARY_FILE).is_file():
        _drop_if_empty(where, existed)
        raise _error(code, stderr)
    return load(where)


def _directory(key: str, given: str | Path | None, overrides: Sequence[str]) -> Path:
    """Where a call's files go: the directory given, or set in the overrides, else where the
    command line puts them (conf/config.yaml: outputs/runs or outputs/sweeps, then the date and
    the time), under the working directory; a call in the same second as the last gets `-2`."""
    if given is not None:
        return Path(given)
    for override in reversed(overrides):
        if override.startswith(f"{key}="):
            return Path(override.partition("=")[2])
    kind = "sweeps" if key == "hydra.sweep.dir" else "runs"
    stamp = Path("outputs", kind, *datetime.now().strftime("%Y-%m-%d %H-%M-%S").split())
    where, n = stamp, 1
    while where.exists():
        n += 1
        where = stamp.with_name(f"{stamp.name}-{n}")
    return where


def _drop_if_empty(where: Path, existed: bool) -> None:
    """Bad input leaves no directory behind, as on the command line: one the call made goes when
    nothing was written to it."""
    if not existed and where.is_dir() and not any(where.iterdir()):
        where.rmdir()


def _cli(argv: Sequence[str], *, multirun: bool, echo: bool) -> tuple[int, str]:
    """`sweeper [-m] argv` in a process of its own: its exit code and what it wrote to stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeper", *(["-m"] if multirun else []), *argv],
        stdout=None if echo else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = proc.communicate()
    return proc.returncode, stderr


def load(where: str | Path, *, storage: str | None = None) -> SweepResult:
    """A finished sweep: its directory (summary.json, trials.csv), or a study's name in `storage`
    (default: outputs/sweeper.db under the working directory, as a sweep's default)."""
    import pandas as pd

    from .paths import not_a_sweep_dir
    from .store.summary import SweepSummary

    path = Path(where)
    if (path / SUMMARY_FILE).is_file():
        summary = SweepSummary.from_json(json.loads((path / SUMMARY_FILE).read_text()))
        return SweepResult(
            study=summary.study,
            storage=summary.storage,
            trials=pd.read_csv(path / TRIALS_FILE),
            winner=summary.winner,
            speedup=summary.confirmation.speedup if summary.confirmation is not None else None,
            summary=summary,
            sweep_dir=path,
            report=Path(summary.report) if summary.report else None,
        )
    if path.exists():
        raise ConfigError(f"{not_a_sweep_dir(path, SUMMARY_FILE)}: expected a finished sweep's directory")
    return _load_study(str(where), storage)


def _load_study(name: str, storage: str | None) -> SweepResult:
    from .store.storage import default_storage
    from .store.study import StoredStudy
    from .store.table import trials_frame

    url = storage or default_storage()
    try:
        stored = StoredStudy.open(url, name, create=False)
    except KeyError as exc:
        raise ConfigError(f"no study {name!r} in {url}: expected a sweep's directory or a study's name") from exc
    outcome = stored.outcome()
    return SweepResult(
        study=name, storage=url, trials=trials_frame(stored.trials()), winner=outcome[0], speedup=outcome[1]
    )


def _error(code: int, stderr: str) -> SweeperError:
    """The exception for `sweeper -m`'s exit code, with the line it printed last."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    line = next((ln.removeprefix("error: ") for ln in reversed(lines) if ln.startswith("error: ")), None)
    line = line or (lines[-1] if lines else f"sweeper -m ended with exit code {code}")
    if code == EXIT_BAD_CONFIG:
        return ConfigError(line)
    if code == EXIT_LOCKED:
        return MachineBusy(line)
    if code > 128:
        return Interrupted(code - 128)
    return SweeperError(line)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
