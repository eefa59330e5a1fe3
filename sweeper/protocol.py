"""The wire between the sweep's side and the measuring child (no torch).

The parent starts `python -m sweeper.measure.worker` with the run's spec as JSON on stdin and
an inherited pipe whose number is in $SWEEPER_EVENT_FD; the child writes JSON lines on it
(phases, windows) and last {"event": "result", ...}.
"""

from __future__ import annotations

import os

EVENT_FD_ENV = "SWEEPER_EVENT_FD"
# the parent's pid: the child dies with it, and at once if it is already gone
PARENT_PID_ENV = "SWEEPER_PARENT_PID"
# a mark every process of one run inherits: escapees from its process group are found by it
RUN_MARK_ENV = "SWEEPER_RUN_MARK"
WORKER_MODULE = "sweeper.measure.worker"
PROBE_MODULE = "sweeper.measure.probe"
# the fork server of forked trials (measure.isolation=fork) and its socket's fd number
ZYGOTE_MODULE = "sweeper.measure.zygote"
ZYGOTE_FD_ENV = "SWEEPER_ZYGOTE_FD"
# fixed before torch is imported in the child: OpenMP/MKL read them once
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def process_name(mark: str) -> str:
    """The process name a run's processes take (PR_SET_NAME, 15 characters) from its mark."""
    return f"sw-{mark[:12]}"


def pythonpath_with_cwd() -> str:
    """PYTHONPATH for a child that must import the user's modules from where sweeper runs."""
    return os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment that fixes intra-op threads before torch is imported in the child."""
    if threads is None:
        return {}
    return {name: str(threads) for name in THREAD_ENV_VARS}
