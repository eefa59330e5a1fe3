"""The child process of one measured run: `python -m sweeper.measuring.worker`, spec as JSON on stdin.

The parent (sweeper.runner.isolation) has already set the thread environment; this module
measures the spec (sweeper.measuring.stages, or the ranks of sweeper.measuring.ranks) and sends
JSON-line events on $SWEEPER_EVENT_FD, the last one the result. Exceptions become results
(`oom`, `invalid`, `error`); signals are seen by the parent.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Mapping
from typing import Any

from ..protocol import PARENT_PID_ENV, scratch_dir
from ..result import RunResult, Status
from ..spec import RunSpec
from .events import Events
from .failure import failure_of
from .lifeline import die_with_parent


def run(data: Mapping[str, Any], events: Events) -> RunResult:
    """The measured run of a spec sent as JSON: this process, or the ranks of a data-parallel
    run it launches; never raises."""
    try:
        spec = RunSpec.from_json(data)
        if spec.is_script:  # a user's training script, started and timed as it runs
            from .scripted import measure_script

            return measure_script(spec, events)
        if spec.nproc > 1:
            from .ranks import launch

            return launch(spec, events)
        from .stages import measure_one

        return measure_one(spec, events)
    except BaseException as exc:  # noqa: BLE001 - every failure is data for the parent
        return failure_of(exc)


def send_result(result: RunResult, events: Events) -> None:
    """The last event; then exit without interpreter teardown (DataLoader workers and CUDA
    contexts can hang it; the parent kills the process group after the result anyway)."""
    events.send(event="result", **result.to_json())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve(data: Mapping[str, Any], events: Events) -> None:
    """Measure the spec (its JSON) and send the result (or the failure) as the last event; never returns."""
    multiprocessing_temporaries_in_scratch()
    send_result(run(data, events), events)


def multiprocessing_temporaries_in_scratch() -> None:
    """multiprocessing's temporary directory, for this process and the processes it forks
    (DataLoader workers, the ranks), in the run's scratch directory: there a worker's socket for
    passing tensors (a `pymp-*` directory, otherwise made in /tmp and removed only at a normal
    exit) goes when the run is killed, and the parent removes it with the run. multiprocessing
    keeps that directory in the process's `_config`, which a forked process copies; without that
    attribute nothing changes."""
    scratch = scratch_dir()
    config = getattr(multiprocessing.current_process(), "_config", None)
    if scratch and isinstance(config, dict):
        config["tempdir"] = scratch


def main() -> None:
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or 0))
    events = Events()
    try:
        spec = json.load(sys.stdin)
    except ValueError as exc:
        send_result(RunResult(Status.ERROR, f"unreadable spec: {exc}"), events)
    serve(spec, events)


if __name__ == "__main__":
    main()
