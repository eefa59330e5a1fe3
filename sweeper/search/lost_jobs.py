"""A job the launcher lost (a scheduler cancelled it, timed it out, its node went away): why,
in one sentence, with the launcher's whole account in the trial's folder, and what the job
measured all the same, from the result.json it left where it ran."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from ..result import RunResult, Status
from ..runner.run import RESULT_FILE

LAUNCHER_LOG = "launcher.log"  # in a trial's folder: submitit's account of a job lost without a result

_STATE = re.compile(r"\(state: ([^)\n]+)\)")  # submitit: "has not produced any output (state: CANCELLED by 0)"
_SCHEDULER_SAID = re.compile(
    r"\*\*\* (JOB \S+ ON \S+ [^*\n]+?) \*\*\*"
)  # slurmstepd: "*** JOB 7 ON n1 CANCELLED AT ... ***"


def lost_reason(exc: BaseException) -> str:
    """Why the launcher lost a job, in one short sentence: the scheduler's own words where it
    said any (the state submitit saw, slurmstepd's verdict), else the error's first line, cut at
    a word. The whole text goes to the trial's launcher.log."""
    text = str(exc)
    said = [f"state {m.group(1).strip()}" for m in _STATE.finditer(text)]
    said += list(dict.fromkeys(m.group(1).split(" AT ")[0] for m in _SCHEDULER_SAID.finditer(text)))
    if said:
        return f"the launcher lost the job: {'; '.join(said)}"
    first = " ".join(f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".split())
    if len(first) > 160:
        first = first[:160].rsplit(" ", 1)[0] + " ..."
    return f"the launcher lost the job: {first}"


def waited(result: RunResult, submitted: float) -> RunResult:
    """The result with the time from the job's submission to its run's start (a queue)."""
    if result.started_at is None:
        return result
    return result.replace(queue_wait_s=max(0.0, result.started_at - submitted))


def keep_log(folder: Path | None, text: str) -> None:
    """The launcher's account of a job lost without a result, in the trial's folder (its
    reason stays one sentence)."""
    if folder is None or not text:
        return
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / LAUNCHER_LOG).write_text(text)


def left_result(folder: Path | None, since: float | None = None) -> RunResult | None:
    """The result.json a job wrote in its folder (since `since`, epoch seconds), where it ran."""
    path = folder / RESULT_FILE if folder is not None else None
    if path is None or not path.is_file() or (since is not None and path.stat().st_mtime < since):
        return None
    try:
        return RunResult.from_json(json.loads(path.read_text())).replace(job_dir=str(folder))
    except (ValueError, OSError):
        return None


def recovered(folder: Path | None, exc: BaseException, submitted: float, stopping: bool) -> RunResult:
    """A job of a batch the launcher could not return, and sweeper cannot follow: what it
    measured, from the result.json it wrote where it ran, else the launcher's reason
    (interrupted where the sweep is stopping)."""
    left = left_result(folder, since=submitted)
    if left is not None:
        return waited(left, submitted)
    keep_log(folder, str(exc))
    return RunResult(Status.INTERRUPTED if stopping else Status.ERROR, lost_reason(exc))
