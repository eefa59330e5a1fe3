"""`python -m sweeper [overrides]` measures one configuration; `-m` sweeps (hydra/sweeper=throughput)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from . import isolation, resolvers
from .lock import MeasureLock, describe
from .paths import config_dir
from .report_text import describe_config, format_result
from .run import RESULT_FILE, checked_spec, measure_spec
from .validation import ConfigError

# exit codes of a single measured run
EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


@contextlib.contextmanager
def exclusive_measurement() -> Iterator[None]:
    """Wait while another sweeper measures on this machine: both figures would be wrong."""
    lock = MeasureLock("cpu", {"what": "python -m sweeper"})
    lock.acquire(on_wait=lambda h: print(f"waiting: this machine is measuring for {describe(h)}",
                                         file=sys.stderr, flush=True))
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def interruptible() -> Iterator[list[int]]:
    """SIGTERM/SIGINT stop the run's whole process group; the caller exits 128 + signal."""
    stopped: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        stopped.append(signum)
        isolation.interrupt(f"stopped by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stopped
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def measure_job(cfg: DictConfig) -> dict[str, Any]:
    """The Hydra task function: a single run prints its figures, a sweep job returns them."""
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return {**measure_spec(checked_spec(cfg), out_dir), "job_dir": str(out_dir)}
    try:
        spec = checked_spec(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    print(f"sweeper: measuring {describe_config(cfg)}", flush=True)
    with exclusive_measurement(), interruptible() as stopped:
        result = measure_spec(spec, out_dir)
    if stopped:
        print(f"interrupted: {result.get('reason')}", file=sys.stderr)
        sys.exit(128 + stopped[0])
    if result["status"] == "invalid":
        print(f"error: {result['reason']}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    print(format_result(result))
    print(f"  {'result':<16}  {out_dir / RESULT_FILE}")
    if result["status"] != "ok":
        print(f"  worker log: {result['log']}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    return result


def register_plugin() -> None:
    """Hydra finds plugins by listing the hydra_plugins namespace package, which fails for
    some installs (setuptools' editable path hooks can't be listed): register ours directly."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.throughput_sweeper.throughput_sweeper import ThroughputSweeper

    Plugins.instance().register(ThroughputSweeper)


def main() -> None:
    resolvers.register()
    register_plugin()
    hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(measure_job)()


if __name__ == "__main__":
    main()
