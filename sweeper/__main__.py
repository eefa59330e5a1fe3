"""`python -m sweeper [overrides]` measures one configuration; `-m` sweeps (hydra/sweeper=throughput).

The one place, with the Hydra plugin, where sweeper's exceptions become exit codes.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from . import __version__, preflight, resolvers
from .errors import ConfigError, Interrupted, RunFailed, SweeperError, exit_code, signal_name
from .paths import config_dir
from .result import RunResult, Status
from .runner.fork_servers import start_early
from .runner.isolation import IN_FLIGHT
from .runner.lock import claim_for, held
from .runner.run import RESULT_FILE, checked_spec, measure_spec
from .runner.signals import stop_on_signals
from .runner.text import describe_config, format_result
from .spec import RunSpec


def measure_once(cfg: DictConfig, out_dir: Path) -> RunResult:
    """A single run, as a person starts it: holds the machine (the same lock a sweep on this
    device takes), stops on SIGTERM/SIGINT, prints its figures."""
    spec = checked_spec(cfg)
    print(f"sweeper: measuring {describe_config(spec)}", flush=True)
    claim = claim_for(str(spec.backend.device), ranks=spec.nproc)
    with (
        held(claim.locks, "python -m sweeper", on_wait=lambda line: print(line, file=sys.stderr, flush=True)),
        stop_on_signals("the run") as stop,
    ):
        result = measure_spec(spec, out_dir, env=claim.env)
    if stop.signum is not None:
        print(f"interrupted: {result.reason}", file=sys.stderr)
        raise Interrupted(stop.signum)
    if result.status == Status.INVALID:
        raise ConfigError(result.reason or "invalid configuration")
    print(format_result(result))
    print(f"  {'result':<16}  {out_dir / RESULT_FILE}")
    if not result.ok:
        print(f"  worker log: {result.log}", file=sys.stderr)
        raise RunFailed(result.reason or str(result.status))
    return result


def scheduler_job() -> str | None:
    """The scheduler's job this process runs in, as SLURM names it (`slurm:4242_1` for task 1 of
    array 4242: its SLURM_JOB_ID is a number of its own, which sacct does not list by)."""
    from .search.scheduled import slurm_job_name

    name = slurm_job_name(os.environ)
    return f"slurm:{name}" if name else None


def measure_in_job(spec: RunSpec, out_dir: Path) -> RunResult:
    """A sweep's job, where it runs (this machine, or the node a scheduler chose): it holds that
    machine's lock (or its GPU's) while it measures, so two jobs never measure on one machine at
    once, whoever submitted them."""
    from .search import progress  # the sweep's log, where the job runs in the sweep's process

    claim = claim_for(str(spec.backend.device), ranks=spec.nproc)
    stopped = lambda: IN_FLIGHT.stopped is not None  # noqa: E731 - the sweep's SIGTERM, in this process
    job = scheduler_job()
    if not spec.measure.lock:
        result = measure_spec(spec, out_dir, env=claim.env, scheduler_job=job)
    else:
        with held(claim.locks, f"a sweep's job in {out_dir}", on_wait=progress.say, should_stop=stopped) as got:
            result = (
                measure_spec(spec, out_dir, env=claim.env, scheduler_job=job)
                if got
                else RunResult(Status.INTERRUPTED, IN_FLIGHT.stopped)
            )
    return result.replace(job_dir=str(out_dir))


def measure_job(cfg: DictConfig) -> RunResult:
    """The Hydra task function: a sweep's job returns its result, a single run prints it."""
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return measure_in_job(checked_spec(cfg), out_dir)
    try:
        return measure_once(cfg, out_dir)
    except SweeperError as exc:
        if isinstance(exc, ConfigError):  # the others have printed what happened
            print(f"error: {exc}", file=sys.stderr)
            preflight.discard_run_dir(out_dir)  # nothing ran: leave no directory behind
        sys.exit(exit_code(exc))


def register_plugin() -> None:
    """Hydra finds plugins by listing the hydra_plugins namespace package, which fails for
    some installs (setuptools' editable path hooks can't be listed): register ours directly."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.throughput_sweeper.throughput_sweeper import ThroughputSweeper

    Plugins.instance().register(ThroughputSweeper)


def _stopped_while_starting(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT before a run or sweep has its own handlers: nothing was measured yet."""
    print(f"interrupted by {signal_name(signum)} while starting: nothing was measured", file=sys.stderr)
    sys.exit(128 + signum)


def version_line() -> str:
    """sweeper's version and the versions of what it measures with, without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (
        f"sweeper {__version__} (torch {of('torch')}, optuna {of('optuna')}, hydra-core {of('hydra-core')}, "
        f"Python {sys.version.split()[0]})"
    )


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped_while_starting)
    resolvers.register()
    register_plugin()
    if "--version" in sys.argv[1:]:
        print(version_line())
        sys.exit(0)
    sys.argv[1:] = preflight.one_line_commands(sys.argv[1:])
    try:
        preflight.check(sys.argv[1:])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exit_code(exc))
    if not preflight.ASKS_ONLY.intersection(sys.argv[1:]):
        start_early()  # its torch import runs beside Hydra's start and config composition
    hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(measure_job)()


if __name__ == "__main__":
    main()
