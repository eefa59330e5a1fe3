"""The sweep behind `python -m sweeper -m`, as the Hydra plugin calls it: a thin front that
makes the plan, opens the study, runs the loop and the confirmation, writes the outputs.

Raises sweeper.errors exceptions (ConfigError, MachineBusy, Interrupted); the plugin turns them
into exit codes.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from .. import foreign, topology
from ..config_errors import error_line
from ..description import load_description
from ..errors import (
    EXIT_LOCKED,
    ConfigError,
    Interrupted,
    MachineBusy,
    Retuned,
    RunFailed,
    signal_name,
)
from ..host import planned_for, this_host
from ..knobs import Knob
from ..runner.fork_servers import expecting
from ..runner.lock import MeasureLock, describe
from ..runner.probe import probe
from ..runner.signals import stop_on_signals
from ..store.nights import Night, Outcome
from ..store.storage import JOURNAL_PREFIX, command_line, redact, scrub_files
from ..store.study import StoredStudy, SweepSpan, start_afresh
from ..store.summary import SweepSummary
from . import preview, progress, under_load
from .confirm import run_confirmation
from .disk import check_room
from .launch import JobRunner
from .loop import optimize, typical_wall
from .opening import open_study
from .outputs import write_outputs, write_sweep_info
from .plan import SweepPlan, make_plan
from .settings import LockMode, SweepSettings
from .watch import watch


def check_lock_at_start(plan: SweepPlan) -> None:
    """lock=fail: a busy machine ends the sweep at once, with its own exit code (for cron)."""
    if plan.settings.lock != LockMode.fail:
        return
    for resource in plan.claim.locks:
        lock = MeasureLock(resource, {"what": f"study {plan.study_name}"})
        if not lock.try_acquire():
            raise MachineBusy(
                f"this machine is measuring for {describe(lock.holder())}; "
                f"hydra.sweeper.lock=fail: exiting with {EXIT_LOCKED}."
            )
        lock.release()


def busy_at_start(plan: SweepPlan, started: foreign.Snapshot) -> str | None:
    """One line when other processes loaded this machine's cores while the sweep started, from
    `started` (its first snapshot) on: the span its start took anyway, at least half a sample
    (None: quiet, not watched, or the jobs run elsewhere)."""
    limit = plan.base_value(Knob.MEASURE_FOREIGN_CPU_MAX_PCT)
    if not plan.runs_here or not plan.own_app or limit is None:
        return None
    load = foreign.since(started, topology.machine_cpus(), under_load.SAMPLE_S / 2)
    if load.cpu_pct <= float(limit):
        return None
    return (
        f"the machine is busy: {load.describe()}; a figure taken under load is measured again once it is quiet "
        f"(measure.foreign_cpu_max_pct={limit:g})"
    )


def _open_directory(plan: SweepPlan, stored: StoredStudy, started_at: float) -> None:
    """The sweep's directory and log, and its start in the study; a directory that cannot be
    written is one line before trial 1."""
    try:
        write_sweep_info(plan)
    except OSError as exc:
        raise ConfigError(
            f"hydra.sweep.dir={str(plan.sweep_dir)!r} cannot be written ({exc.strerror}): "
            "choose a directory you can write, e.g. hydra.sweep.dir=/tmp/sweeps/x."
        ) from exc
    stored.save_sweep_span(plan.setup, SweepSpan(started_at, constraints=dict(plan.settings.limits)))
    progress.open_log(plan.sweep_dir / "sweep.log")
    if plan.claim.pin is not None:  # the launcher's jobs, and their children, run there
        os.environ.update(plan.claim.env)
        many = "," in plan.claim.pin
        progress.say(f"pinned to GPU{'s' if many else ''} {plan.claim.pin}" + (" (one per rank)" if many else ""))


def announce(plan: SweepPlan, stored: StoredStudy) -> None:
    """The log's first lines: the study, the knobs, the objectives and the sampler; the order the
    preset searches in; what the plan decided that the user should hear before trial 1."""
    progress.say(
        f"sweeper: study {plan.study_name!r} in {redact(plan.storage_url)}; "
        f"{len(plan.space)} knob{'s' if len(plan.space) != 1 else ''}: {', '.join(plan.order)}; objectives "
        f"{', '.join(f'{o} ({d})' for o, d in zip(plan.objectives, plan.directions))}; "
        f"sampler {type(stored.study.sampler).__name__}"
    )
    if (quota := plan.machine.fingerprint.cpu_quota) is not None:
        progress.say(
            f"a CPU quota of {quota:g} CPU{'' if quota == 1 else 's'} (this process's cgroup): the search counts "
            f"{plan.machine.cores} "
            f"core{'s' if plan.machine.cores != 1 else ''} for threads, workers and ranks, not the host's "
            f"{plan.machine.fingerprint.cpu_count}"
        )
    if plan.search.staged and (held := plan.held_back(0) - plan.later):
        progress.say(
            f"staged: the first {plan.search.staged:.0%} of n_trials search "
            f"{', '.join(sorted(plan.main))}; the other {len(held)} knobs stay at your config's values "
            "until then (search.staged=null: all at once)"
        )
    if plan.later and plan.search.later_after:
        progress.say(
            f"{', '.join(sorted(plan.later))}: at your config's values for the first "
            f"{plan.search.later_after:.0%} of n_trials (each costs seconds of start-up a trial), "
            "then tried at the best so far and searched only if that is a gain there "
            "(search.later_after=null: searched from the start)"
        )
    for note in plan.notes:
        progress.say(note)


class Sweep:
    def __init__(
        self,
        *,
        hydra_context: HydraContext,
        task_function: TaskFunction,
        config: DictConfig,
        settings: Mapping[str, Any],
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.raw_settings = settings
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )
        # one progress line per trial is ours; Hydra's "Launching 1 jobs locally" is noise
        logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)

    def show_plan(self, settings: SweepSettings, arguments: Sequence[str]) -> None:
        """hydra.sweeper.plan: the plan for this machine or a described one, printed; nothing swept."""
        described = settings.plan != preview.HERE
        try:
            host = load_description(str(settings.plan)) if described else this_host()
        except ValueError as exc:
            raise ConfigError(f"hydra.sweeper.plan: {exc}") from exc
        with planned_for(host):
            probe_machine = (lambda device, *_: preview.described_machine(host, device)) if described else probe
            plan = self.make_plan(settings, arguments, probe_machine=probe_machine, host=host)
        preview.show(plan, described)

    def make_plan(self, settings: SweepSettings, arguments: Sequence[str], **machine: Any) -> SweepPlan:
        """The plan of this Hydra app's sweep (`machine`: a described machine's probe and host)."""
        return make_plan(
            settings,
            arguments,
            compose=self.compose,
            app_name=str(self.config.hydra.job.name),
            sweep_dir=Path(str(self.config.hydra.sweep.dir)),
            launcher=str(self.config.hydra.launcher.get("_target_", "")),
            **machine,
        )

    def compose(self, overrides: Sequence[str]) -> DictConfig:
        try:
            return self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        except Exception as exc:  # Hydra's own message names the bad key
            raise ConfigError(error_line(exc) or " ".join(str(exc).split())) from exc

    def sweep(self, arguments: Sequence[str]) -> SweepSummary | None:
        if (settings := SweepSettings.from_config(self.raw_settings)).plan is not None:
            self.show_plan(settings, arguments)
            return None
        started, started_at = time.monotonic(), time.time()
        # the machine's load from here to trial 1 (busy_at_start): the zygote's imports and the
        # study's opening take the seconds a sample would
        load_from = foreign.snapshot(topology.machine_cpus(), os.getpid())
        import_ahead(settings.storage)
        plan = self.make_plan(settings, arguments)
        stored, plan = open_study(plan)  # a storage or sampler it cannot open: one line, no sweep directory yet
        check_room(plan)
        _open_directory(plan, stored, started_at)
        announce(plan, stored)
        check_lock_at_start(plan)
        if (busy := busy_at_start(plan, load_from)) is not None:
            progress.say(busy)

        def remaining() -> float | None:
            return None if plan.deadline_s is None else plan.deadline_s - (time.monotonic() - started)

        # from here an outage of the study's storage is waited out, not a traceback (store/retry.py)
        stored.storage.ride_out(progress.say, lambda: command_line(sys.argv[1:]), remaining)

        # a zygote that starts brings the space's other start environments up beside it
        with expecting(plan.start_environments()), stop_on_signals("the sweep") as stop:
            run = JobRunner(self.launcher, plan, stored, stop, remaining)
            night = (
                watch(stored, plan, run, remaining=remaining, stopped=lambda: stop.requested)
                if plan.settings.watch
                else None
            )
            if night is not None and night.outcome == Outcome.holds and not stop.requested:
                why = "the night holds: no search (hydra.sweeper.watch)"
                summary = write_outputs(stored, plan, stored.confirmation(plan.setup), why, started_at, night)
            else:
                if night is not None and night.reference == stored.name:
                    afresh(stored, plan, night)
                summary = _search(stored, plan, run, stop, remaining, started_at, night)
        scrub_files(plan.sweep_dir, plan.storage_url)
        if stop.signum is not None:
            progress.say(f"interrupted by {signal_name(stop.signum)}: results and report are written")
            raise Interrupted(stop.signum)
        if summary.winner is None:  # a sweep with no answer fails, as a run does: cron and systemd see it
            within = " within hydra.sweeper.constraints" if summary.counts.infeasible else ""
            raise RunFailed(f"no configuration completed{within}: the reasons are in {plan.sweep_dir / 'trials.csv'}")
        if night is not None and night.outcome in (Outcome.drifted, Outcome.changed):
            raise Retuned(night.outcome.value)
        return summary


# what a sweep imports after its start on first use: an SQL storage's modules (Optuna imports
# SQLAlchemy and Alembic when the storage opens) and the report's (matplotlib, at the end)
_SQL_MODULES = ("sqlalchemy.orm", "alembic.command", "alembic.migration", "alembic.script")
_REPORT_MODULES = ("sweeper.report.page",)


def import_ahead(storage: str | None) -> None:
    """Import now what the sweep would import later on first use. Its zygote is importing torch
    on another core meanwhile, and the sweep waits for that before it can check the workload's
    module: these imports fill that wait instead of adding to the sweep's start and end."""
    sql = () if (storage or "").startswith(JOURNAL_PREFIX) else _SQL_MODULES
    if sql:  # Alembic logs its plugins' set-up at import; Optuna quiets it so before its own import
        logging.getLogger("alembic").setLevel(logging.WARNING)
    for name in (*sql, *_REPORT_MODULES):
        importlib.import_module(name)


def afresh(stored: StoredStudy, plan: SweepPlan, night: Night) -> None:
    """A night that drifted, or changed in a fact the hardware class leaves out (the driver),
    re-tunes in its own study from a fresh start: the older figures no longer say how fast this
    machine runs (StoredStudy.start_afresh), and their winner is measured again early."""
    if night.outcome not in (Outcome.drifted, Outcome.changed):
        return
    first = start_afresh(stored, plan.setup)
    progress.say(
        f"re-tuning from trial #{first} on: the study's {first} earlier trials teach the sampler, "
        "and no figure of theirs is ranked"
    )


def _search(
    stored: StoredStudy,
    plan: SweepPlan,
    run: JobRunner,
    stop: Any,
    remaining: Callable[[], float | None],
    started_at: float,
    night: Night | None,
) -> SweepSummary:
    """The search, the confirmation and the outputs."""
    progress.start_bar(plan.settings.n_trials)
    try:
        why = optimize(
            stored,
            plan,
            run,
            remaining=remaining,
            stopped=lambda: f"stopped by {signal_name(stop.signum)}" if stop.requested else None,
        )
    finally:
        progress.close_bar()
    progress.say(f"stopped: {why}")
    decision = (
        None
        if stop.requested
        else run_confirmation(
            stored,
            plan,
            run,
            remaining=remaining,
            typical_wall_s=typical_wall(stored, plan),
            stopped=lambda: stop.requested,
        )
    )
    return write_outputs(stored, plan, decision, why, started_at, night)
