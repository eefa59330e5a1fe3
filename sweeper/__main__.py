"""`python -m sweeper [overrides]` measures one configuration; `-m` sweeps (hydra/sweeper=throughput).

The one place, with the Hydra plugin, where sweeper's exceptions become exit codes.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from . import resolvers
from .config import error_line
from .errors import ConfigError, Interrupted, RunFailed, SweeperError, exit_code, signal_name
from .paths import config_dir
from .result import RunResult, Status
from .runner.isolation import IN_FLIGHT
from .runner.lock import claim_for, held
from .runner.run import RESULT_FILE, checked_spec, measure_spec
from .runner.signals import stop_on_signals
from .runner.text import describe_config, format_result
from .runner.zygote import start_early


def measure_once(cfg: DictConfig, out_dir: Path) -> RunResult:
    """A single run, as a person starts it: holds the machine (the same lock a sweep on this
    device takes), stops on SIGTERM/SIGINT, prints its figures."""
    spec = checked_spec(cfg)
    print(f"sweeper: measuring {describe_config(cfg)}", flush=True)
    claim = claim_for(str(spec["backend"]["device"]))
    with held(claim.resource, "python -m sweeper", on_wait=lambda line: print(line, file=sys.stderr, flush=True)), \
            stop_on_signals("the run") as stop:
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
    """The scheduler's job this process runs in (SLURM's, where a launcher submitted it)."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"slurm:{job}" if job else None


def measure_in_job(spec: dict[str, Any], out_dir: Path) -> RunResult:
    """A sweep's job, where it runs (this machine, or the node a scheduler chose): it holds that
    machine's lock (or its GPU's) while it measures, so two jobs never measure on one machine at
    once, whoever submitted them."""
    from .search import progress  # the sweep's log, where the job runs in the sweep's process

    claim = claim_for(str(spec["backend"]["device"]))
    stopped = lambda: IN_FLIGHT.stopped is not None  # noqa: E731 - the sweep's SIGTERM, in this process
    job = scheduler_job()
    if not spec["measure"]["lock"]:
        result = measure_spec(spec, out_dir, env=claim.env, scheduler_job=job)
    else:
        with held(claim.resource, f"a sweep's job in {out_dir}", on_wait=progress.say, should_stop=stopped) as got:
            result = (measure_spec(spec, out_dir, env=claim.env, scheduler_job=job) if got
                      else RunResult(Status.INTERRUPTED, IN_FLIGHT.stopped))
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
        sys.exit(exit_code(exc))


def register_plugin() -> None:
    """Hydra finds plugins by listing the hydra_plugins namespace package, which fails for
    some installs (setuptools' editable path hooks can't be listed): register ours directly."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.throughput_sweeper.throughput_sweeper import ThroughputSweeper

    Plugins.instance().register(ThroughputSweeper)


# Hydra's flags that choose another primary config
_CONFIG_FLAGS = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir")
# Hydra's flags that take a value: what follows them is not an override
_FLAG_VALUES = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-p", "--package",
                "--experimental-rerun"}


def overrides_of(argv: list[str]) -> list[str]:
    """The key=value overrides of a command line (Hydra's flags and their values left out)."""
    found, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _FLAG_VALUES:
            skip = True
        elif not arg.startswith("-") and "=" in arg:
            found.append(arg)
    return found


def check_overrides(argv: list[str]) -> None:
    """Hydra's grammar errors, and values or keys the config's schemas refuse, as one line
    (Hydra's own message is several, and exits 1)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    fixed = []
    for override in overrides_of(argv):
        if "\n" in override or "\r" in override:
            raise ConfigError(f"{override.partition('=')[0]}: a value cannot hold a line break "
                              f"(got {override.partition('=')[2]!r}): write it on one line.")
        try:
            parser.parse_overrides([override])
        except Exception as exc:  # noqa: BLE001 - OverrideParseException and the grammar's own
            lines = [line for line in str(exc).splitlines()[1:] if line.strip() and not line.startswith("See https")]
            why = " ".join(lines) or str(exc).splitlines()[0]
            raise ConfigError(f"cannot read {override!r}: {why} (Hydra's override grammar: choice(a,b), "
                              "range(start,stop[,step]), interval(low,high), tag(log,...), shuffle(...)).") from exc
        parsed = parser.parse_overrides([override])[0]
        check_launcher_installed(override)
        if not parsed.is_sweep_override() and not override.lstrip("+~").startswith(("hydra.", "hydra/")):
            fixed.append(override)
    if not any(arg in _CONFIG_FLAGS or arg.startswith(tuple(f"{f}=" for f in _CONFIG_FLAGS)) for arg in argv):
        check_composed(fixed)  # (another primary config may have keys of its own: Hydra checks those)


# launchers sweeper's README names, and the package that brings each
_LAUNCHER_PACKAGES = {"submitit_slurm": "sweeper[slurm] (hydra-submitit-launcher)",
                      "submitit_local": "sweeper[slurm] (hydra-submitit-launcher)",
                      "ray": "hydra-ray-launcher", "joblib": "hydra-joblib-launcher", "rq": "hydra-rq-launcher"}


def check_launcher_installed(override: str) -> None:
    """hydra/launcher=<name> that no installed Hydra plugin provides: one line naming the package."""
    key, _, name = override.lstrip("+").partition("=")
    if key != "hydra/launcher":
        return
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # discovering the plugins registers their configs
    installed = sorted(entry.removesuffix(".yaml") for entry in ConfigStore.instance().list("hydra/launcher"))
    if name not in installed:
        package = _LAUNCHER_PACKAGES.get(name, "the Hydra launcher plugin that provides it")
        raise ConfigError(f"hydra/launcher={name} is not installed (installed: {', '.join(installed)}): "
                          f"pip install {package}.")


def check_composed(fixed: list[str]) -> None:
    """Compose the config with the fixed overrides as Hydra will: a value of the wrong type or
    choice, or a key the config does not have, is one line (a sweep's values are checked
    against the same schemas by the plan)."""
    try:
        _compose(tuple(fixed))
    except Exception as exc:  # noqa: BLE001 - Hydra's composition errors: the schema's become one line
        line = error_line(exc, _compose(()))
        if line is not None:
            raise ConfigError(line) from exc


@functools.lru_cache(maxsize=32)
def _compose(overrides: tuple[str, ...]) -> Any:
    """sweeper's config with these overrides (Hydra's compose API, initialized here unless a
    caller has initialized it already); kept, for a caller that checks many command lines."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose("config", overrides=list(overrides))
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _stopped_while_starting(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT before a run or sweep has its own handlers: nothing was measured yet."""
    print(f"interrupted by {signal_name(signum)} while starting: nothing was measured", file=sys.stderr)
    sys.exit(128 + signum)


# Hydra's flags that print and exit: no run follows, so no zygote is started for one
_ASKS_ONLY = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc", "--version"}


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped_while_starting)
    resolvers.register()
    register_plugin()
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exit_code(exc))
    if not _ASKS_ONLY.intersection(sys.argv[1:]):
        start_early()  # its torch import runs beside Hydra's start and config composition
    hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(measure_job)()


if __name__ == "__main__":
    main()
