"""The config of `hydra/sweeper=throughput`: sweeper.search.settings.SweepSettings (one
declaration, documented there) plus what Hydra needs to instantiate the plugin."""
# No `from __future__ import annotations`: Hydra execs plugin modules outside sys.modules,
# where dataclasses cannot resolve string annotations.

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from sweeper.search.settings import SweepSettings


@dataclass
class ThroughputSweeperConf(SweepSettings):
    _target_: str = "hydra_plugins.throughput_sweeper.throughput_sweeper.ThroughputSweeper"
    # the sampler is built by the sweeper, which first knows the search space (GridSampler)
    _recursive_: bool = False


ConfigStore.instance().store(group="hydra/sweeper", name="throughput", node=ThroughputSweeperConf, provider="sweeper")
