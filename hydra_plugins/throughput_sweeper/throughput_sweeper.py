"""The Sweeper Hydra instantiates; the work happens in sweeper.search (imported lazily, so
Optuna is not imported when Hydra starts). sweeper's exceptions become exit codes here."""

from __future__ import annotations

import sys
from typing import Any, List, Optional

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from .config import ThroughputSweeperConf  # noqa: F401  (registers the config)


class ThroughputSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._sweep: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from sweeper import resolvers
        from sweeper.search.sweep import Sweep

        resolvers.register()
        self._sweep = Sweep(
            hydra_context=hydra_context, task_function=task_function, config=config, settings=self._settings
        )

    def sweep(self, arguments: List[str]) -> Optional[Any]:
        from sweeper.errors import EXIT_DISK_FULL, SweeperError, exit_code, is_disk_full

        try:
            return self._sweep.sweep(arguments)
        except SweeperError as exc:
            if not exc.said:  # an interrupted sweep, a re-tuned night: said already
                print(f"error: {exc}", file=sys.stderr)
            sys.exit(exit_code(exc))
        except OSError as exc:  # a full disk met outside the places that say it better
            if not is_disk_full(exc):
                raise
            print(f"error: no space left on device ({exc}); the study keeps what was measured", file=sys.stderr)
            sys.exit(EXIT_DISK_FULL)
