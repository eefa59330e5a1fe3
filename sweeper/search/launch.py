"""One measured job of a sweep, through Hydra's launcher: wait for the machine's lock, beat the
trial's heartbeat meanwhile, launch, and turn what the job returned into a RunResult."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.utils import JobStatus
from hydra.plugins.launcher import Launcher

from ..errors import ConfigError
from ..result import RunResult, Status
from ..runner.lock import held
from ..runner.signals import StopRequest
from ..store.heartbeat import heartbeat
from ..store.study import StoredStudy
from . import progress
from .plan import SweepPlan


def as_result(value: Any, objectives: Sequence[str]) -> RunResult:
    """A job's return value as a result: sweeper's own RunResult, or what another Hydra app
    returns (a number for the first objective, or a mapping of objective names to numbers)."""
    if isinstance(value, RunResult):
        return value
    if isinstance(value, Mapping):
        return RunResult(Status.OK, reported=dict(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return RunResult(Status.OK, reported={objectives[0]: float(value)})
    return RunResult(Status.ERROR, f"the job returned {type(value).__name__}: expected a number or a dict "
                     f"with {', '.join(objectives)}")


def measure_overrides(plan: SweepPlan, prune_below: float | None, remaining_s: float | None,
                      race: tuple[float, float] | None = None) -> list[str]:
    """What the sweep adds to a job's overrides: the prune threshold, the incumbent's interval to
    race against, a timeout within the budget."""
    extra: list[str] = []
    if not plan.own_app:  # another app's jobs measure themselves
        return extra
    if prune_below is not None:
        extra.append(f"measure.prune_below={prune_below:.6g}")
    if race is not None:
        extra.append(f"measure.race=[{race[0]:.6g},{race[1]:.6g}]")
    if remaining_s is not None:
        cap = max(10.0, remaining_s)
        if cap < float(plan.base_value("measure.timeout_s")):
            extra.append(f"measure.timeout_s={cap:.0f}")
    return extra


@dataclass
class JobRunner:
    """Runs the sweep's jobs one at a time, each holding the machine."""

    launcher: Launcher
    plan: SweepPlan
    stored: StoredStudy
    stop: StopRequest

    def __call__(self, overrides: list[str], job_idx: int, trial_number: int | None = None) -> RunResult:
        if self.stop.requested:
            return RunResult(Status.INTERRUPTED, self.stop.reason)
        with heartbeat(self.stored, trial_number):
            if self.plan.settings.lock == "off":
                return self._launch(overrides, job_idx)
            with held(self.plan.claim.resource, f"study {self.plan.study_name}", on_wait=progress.say,
                      should_stop=lambda: self.stop.requested) as got:
                if not got:
                    return RunResult(Status.INTERRUPTED, self.stop.reason)
                return self._launch(overrides, job_idx)

    def _launch(self, overrides: list[str], job_idx: int) -> RunResult:
        job = self.launcher.launch([overrides], initial_job_idx=job_idx)[0]
        if job.status == JobStatus.COMPLETED:
            return as_result(job.return_value, self.plan.objectives)
        try:
            job.return_value  # re-raises the job's exception
        except Exception as exc:  # noqa: BLE001 - a failed job is data
            status = Status.INVALID if isinstance(exc, ConfigError) else Status.ERROR
            return RunResult(status, f"{type(exc).__name__}: {exc}".splitlines()[0])
        return RunResult(Status.ERROR, f"the job ended as {job.status.name} without an exception")


Run = Callable[..., RunResult]
