"""The sweep's measured jobs, through Hydra's launcher, one or a batch at once: beat the
trial's heartbeat meanwhile, launch, and turn what the job returned into a RunResult."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobStatus
from hydra.plugins.launcher import Launcher

from ..errors import ConfigError, is_disk_full
from ..knobs import Knob
from ..noise import Noise
from ..result import RunResult, Status
from ..runner.lock import held
from ..runner.signals import StopRequest, StopWaiting
from ..store.heartbeat import heartbeat
from ..store.record import TrialAttrs
from ..store.study import StoredStudy
from ..verdict import Floor
from . import lost_jobs, progress, scheduled, under_load
from .disk import DiskWatch
from .plan import SweepPlan
from .settings import LockMode


def as_result(value: Any, objectives: Sequence[str]) -> RunResult:
    """A job's return value as a result: sweeper's own RunResult, or what another Hydra app
    returns (a number for the first objective, or a mapping of objective names to numbers)."""
    if isinstance(value, RunResult):
        return value
    if isinstance(value, Mapping):
        return RunResult(Status.OK, reported=dict(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return RunResult(Status.OK, reported={objectives[0]: float(value)})
    return RunResult(
        Status.ERROR,
        f"the job returned {type(value).__name__}: expected a number or a dict with {', '.join(objectives)}",
    )


def sweep_precision(plan: SweepPlan) -> list[str]:
    """A sweep run's precision override: what the prior run-to-run noise asks for (see
    Noise.window_precision), where it is looser than the config's measure.rel_precision (null
    there: fixed windows, kept). The prior, not the estimate: the estimate is made of these
    runs' figures, and would loosen itself."""
    prior = plan.settings.run_spread
    looser, own = Noise(prior, prior).window_precision, plan.base_value(Knob.MEASURE_REL_PRECISION)
    return [f"measure.rel_precision={looser:.3g}"] if looser is not None and own is not None and looser > own else []


def measure_overrides(
    plan: SweepPlan,
    floor: Floor | None,
    remaining_s: float | None,
    race: tuple[float, float] | None = None,
    behind: float | None = None,
) -> list[str]:
    """What the sweep adds to a job's overrides: the sweep's precision, the prune floor and its
    one-window bar, the incumbent's interval to race against (widened, and its own low end), a
    timeout within the budget."""
    extra: list[str] = []
    if not plan.own_app:  # another app's jobs measure themselves
        return extra
    extra += sweep_precision(plan)
    if plan.settings.lock == LockMode.off:
        extra.append("measure.lock=false")
    bar = []
    if floor is not None:
        bar += [f"trial.prune_below={floor.prune_below:.6g}", f"trial.far_below={floor.far_below:.6g}"]
    if race is not None:
        bar.append(f"trial.race=[{race[0]:.6g},{race[1]:.6g}]")
    if behind is not None:
        bar.append(f"trial.behind={behind:.6g}")
    extra += ["+trial=raced", *bar] if bar else []
    if remaining_s is not None:
        cap = max(10.0, remaining_s)
        if cap < float(plan.base_value(Knob.MEASURE_TIMEOUT_S)):
            extra.append(f"measure.timeout_s={cap:.0f}")
    return extra


@dataclass(frozen=True)
class Job:
    """One job to launch: its overrides, its Hydra job number, the trial it measures (None: a
    confirmation run), and its directory under the sweep's (hydra.sweep.subdir)."""

    overrides: list[str]
    job_idx: int
    trial_number: int | None = None
    subdir: str | None = None

    @property
    def name(self) -> str:
        """How a line names it: its trial, or its directory (a confirmation run)."""
        return f"#{self.trial_number}" if self.trial_number is not None else f"run {self.subdir or self.job_idx}"

    def launched(self) -> list[str]:
        return [*self.overrides, f"hydra.sweep.subdir={self.subdir}"] if self.subdir else list(self.overrides)


def _first_line(exc: BaseException) -> str:
    """An exception as one line (a scheduler's state is often on its second: CANCELLED, TIMEOUT)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


def failed_job(exc: BaseException) -> RunResult:
    """The result of a job that raised: invalid for a configuration this machine can't run."""
    status = Status.INVALID if isinstance(exc, ConfigError) else Status.ERROR
    return RunResult(status, _first_line(exc))


def _checked(result: RunResult, handle: Any) -> RunResult:
    """What the scheduler did to a job that returned: cancelled it, though its measurement
    ended inside the grace before the kill (the figure is kept, and says so); requeued it
    after it returned (its node failed as it exited): the rerun is cancelled, as it would
    only measure the same configuration again."""
    name = scheduled.name_of(handle)
    state = scheduled.job_state(name)
    if state in scheduled.WAITING:
        with contextlib.suppress(Exception):
            handle.cancel(check=False)
        progress.say(f"{name} was requeued after it returned its result: its rerun is cancelled")
    if state == "CANCELLED" and result.ok:
        return result.replace(reason="cancelled by the scheduler after measuring: its figure is kept")
    return result


@dataclass
class JobRunner:
    """Runs the sweep's jobs through Hydra's launcher: one, or a batch at once (n_jobs), each
    trial's heartbeat beaten meanwhile. sweeper's own jobs take the lock of the machine they
    run on themselves; another app's jobs run under this machine's lock."""

    launcher: Launcher
    plan: SweepPlan
    stored: StoredStudy
    stop: StopRequest
    # the sweep's budget left (None: no budget): a lost batch's other jobs are waited for within it
    remaining: Callable[[], float | None] = lambda: None
    # the disk under the sweep's outputs: once a job finds it full, no job is launched after it
    disk: DiskWatch = field(init=False)

    def __post_init__(self) -> None:
        self.disk = DiskWatch(self.plan.sweep_dir, self.plan.storage_url)

    def __call__(
        self, overrides: list[str], job_idx: int, trial_number: int | None = None, subdir: str | None = None
    ) -> RunResult:
        return self.batch([Job(overrides, job_idx, trial_number, subdir)])[0]

    def batch(self, jobs: Sequence[Job]) -> list[RunResult]:
        """Each job's result; a run taken under other processes' load is measured again once the
        machine is quiet (search/under_load.py), and kept and not ranked if it is loaded again."""
        return [self._unloaded(job, result) for job, result in zip(jobs, self._measured(jobs))]

    def _unloaded(self, job: Job, result: RunResult) -> RunResult:
        limit = self.plan.base_value(Knob.MEASURE_FOREIGN_CPU_MAX_PCT)
        for _ in range(under_load.LOAD_RERUNS):
            if not result.under_load or self.stop.requested or limit is None:
                return result
            loaded = result.measurement
            assert loaded is not None  # under load: it was measured
            # the loaded figure is kept with what loaded it: nothing measured is lost
            note = f"{loaded.throughput.samples_per_sec:,.0f} samples/s while {loaded.utilization.load_note}"
            if job.trial_number is not None:
                self.stored.set_attrs(job.trial_number, TrialAttrs.loaded_run(note))
            progress.say(f"{job.name}: its figure was taken under load ({note}): measured again once quiet")
            if self.plan.runs_here:  # a scheduler's node is not this machine: its job measures again at once
                left = self.remaining()
                bound = float(self.plan.base_value(Knob.MEASURE_QUIET_WAIT_S))
                under_load.wait_here(float(limit), bound if left is None else min(bound, max(0.0, left)), self.stop)
            result = self._measured([job])[0]
        return under_load.kept_under_load(result, under_load.LOAD_RERUNS + 1) if result.under_load else result

    def _measured(self, jobs: Sequence[Job]) -> list[RunResult]:
        self.disk.check()
        if self.stop.requested:
            return [RunResult(Status.INTERRUPTED, self.stop.reason) for _ in jobs]
        with contextlib.ExitStack() as beating:
            for job in jobs:
                beating.enter_context(heartbeat(self.stored, job.trial_number))
            if self.plan.own_app or self.plan.settings.lock == LockMode.off:
                return self._launch(jobs)
            with held(
                self.plan.claim.locks,
                f"study {self.plan.study_name}",
                on_wait=progress.say,
                should_stop=lambda: self.stop.requested,
            ) as got:
                if not got:
                    return [RunResult(Status.INTERRUPTED, self.stop.reason) for _ in jobs]
                return self._launch(jobs)

    def _launch(self, jobs: Sequence[Job]) -> list[RunResult]:
        submitted = time.time()
        with scheduled.submitted(on_submit=lambda handles: self._on_submit(jobs, handles)) as handles:
            try:
                returns = self._launched(jobs)
            # a scheduler that lost a job (cancelled, timed out, node gone), or a stop signal
            # while the launcher waited on the queue: each job is then followed for itself
            except (Exception, StopWaiting) as exc:  # noqa: BLE001
                lost: BaseException = exc
                if is_disk_full(exc):
                    self.disk.met(exc)
            else:
                results = [lost_jobs.waited(self._returned(r), submitted) for r in returns]
                if len(handles) == len(results):
                    results = [_checked(result, handle) for result, handle in zip(results, handles)]
                return results
        if len(handles) != len(jobs):  # jobs sweeper cannot follow: what they left where they ran
            return [lost_jobs.recovered(self._folder(job), lost, submitted, self.stop.requested) for job in jobs]
        # one job lost: each of the batch followed to its own end, told from what it returned
        return [self._followed(job, handle, submitted) for job, handle in zip(jobs, handles)]

    def _launched(self, jobs: Sequence[Job]) -> list[Any]:
        try:
            return list(self.launcher.launch([job.launched() for job in jobs], initial_job_idx=jobs[0].job_idx))
        finally:
            self.stop.breaks_waits = False

    def _on_submit(self, jobs: Sequence[Job], handles: Sequence[Any]) -> None:
        """Each trial names its scheduler job as soon as it is submitted: the next sweep asks
        the scheduler about it if this one stops first. From then on a stop signal breaks the
        launcher's wait on the queue (it polls for hours and never reads the stop request)."""
        for job, handle in zip(jobs, handles):
            if job.trial_number is not None:
                self.stored.set_attrs(job.trial_number, TrialAttrs.submitted(scheduled.name_of(handle)))
        self.stop.break_waits()

    def _followed(self, job: Job, handle: Any, submitted: float) -> RunResult:
        ended = scheduled.follow(handle, give_up=lambda: self.stop.requested or self._out_of_time())
        if ended.returned is not None:
            return _checked(lost_jobs.waited(self._returned(ended.returned), submitted), handle)
        if ended.raised is not None:
            return failed_job(ended.raised)
        lost_jobs.keep_log(self._folder(job), scheduled.launcher_log(handle))
        if ended.still_active and job.trial_number is None:  # a confirmation run: nobody reads it later
            with contextlib.suppress(Exception):
                handle.cancel(check=False)
            return RunResult(Status.INTERRUPTED, f"{ended.name} was cancelled: the sweep stopped before it ended")
        if ended.still_active:
            return RunResult(
                Status.INTERRUPTED,
                f"{ended.name} was still {ended.state} when the sweep stopped: "
                "the next sweep of the study reads its result",
            )
        left = lost_jobs.left_result(self._folder(job), since=submitted)
        if left is not None:
            return lost_jobs.waited(left, submitted)
        return RunResult(
            Status.INTERRUPTED if self.stop.requested else Status.ERROR,
            f"the scheduler ended {ended.name} ({ended.state or 'state unknown'}) before it had a result",
        )

    def _folder(self, job: Job) -> Path | None:
        """Where the job runs and writes its result.json (None: a run with no folder of its own)."""
        return self.plan.sweep_dir / job.subdir if job.subdir is not None else None

    def _out_of_time(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def _returned(self, job: Any) -> RunResult:
        if job.status == JobStatus.COMPLETED:
            return as_result(job.return_value, self.plan.objectives)
        raised = getattr(job, "_return_value", None)  # read as is: Hydra's getter prints a line first
        if isinstance(raised, BaseException) and is_disk_full(raised):
            measured = self.disk.met(raised)
            if measured is not None:  # measured, and only its result.json found no room
                return measured
            return failed_job(raised)
        try:
            job.return_value  # re-raises the job's exception
        except Exception as exc:  # noqa: BLE001 - a failed job is data
            return failed_job(exc)
        return RunResult(Status.ERROR, f"the job ended as {job.status.name} without an exception")

    @contextlib.contextmanager
    def on_node(self, host: str | None) -> Iterator[None]:
        """While inside, jobs go to the node `host` (the confirmation's runs all on one node): the
        SLURM launcher's sbatch --nodelist; other launchers run where they run."""
        params = getattr(self.launcher, "params", None)
        if host is None or not isinstance(params, dict) or "additional_parameters" not in params:
            yield
            return
        before = params["additional_parameters"]
        params["additional_parameters"] = {**(before or {}), "nodelist": host}
        try:
            yield
        finally:
            params["additional_parameters"] = before


Run = Callable[..., RunResult]
