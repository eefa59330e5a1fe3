"""The Sweeper Hydra instantiates; the work happens in sweeper.sweep (imported lazily)."""

from __future__ import annotations

from typing import Any, List, Optional

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from .config import ConfirmConf, ConstraintsConf  # noqa: F401  (registers the config)


class ThroughputSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self._settings = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in settings.items()
        }
        self._sweep: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from sweeper import resolvers
        from sweeper.sweep import Sweep, SweepSettings

        resolvers.register()
        self._sweep = Sweep(SweepSettings(**self._settings))
        self._sweep.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Optional[Any]:
        from sweeper.sweep import run_sweep

        return run_sweep(self._sweep, arguments)
