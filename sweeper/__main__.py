"""`python -m sweeper [overrides]` measures one configuration; `-m` sweeps (hydra/sweeper=throughput)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from . import resolvers
from .paths import config_dir
from .report_text import describe_config, format_result
from .run import RESULT_FILE, checked_spec, measure_spec
from .validation import ConfigError

# exit codes of a single measured run
EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


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
    result = measure_spec(spec, out_dir)
    if result["status"] == "invalid":
        print(f"error: {result['reason']}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    print(format_result(result))
    print(f"  {'result':<16}  {out_dir / RESULT_FILE}")
    if result["status"] != "ok":
        print(f"  worker log: {result['log']}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    return result


def main() -> None:
    resolvers.register()
    hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(measure_job)()


if __name__ == "__main__":
    main()
