"""OmegaConf resolvers the search presets use, e.g. ${sweeper.thread_choices:}."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from . import topology


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def powers_of_two_upto(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself: candidate thread counts for n cores."""
    values, v = [], 1
    while v < n:
        values.append(v)
        v *= 2
    return [*values, n]


def register() -> None:
    if not OmegaConf.has_resolver("sweeper.cores"):
        OmegaConf.register_new_resolver("sweeper.cores", cores)
    if not OmegaConf.has_resolver("sweeper.affinities"):
        # pinning means something with two cores or more
        OmegaConf.register_new_resolver(
            "sweeper.affinities", lambda: ",".join(topology.AFFINITIES if cores() >= 2 else ("none",))
        )
    if not OmegaConf.has_resolver("sweeper.allocators"):
        OmegaConf.register_new_resolver("sweeper.allocators", lambda: ",".join(topology.installed_allocators()))
    if not OmegaConf.has_resolver("sweeper.nproc_choices"):
        # data-parallel ranks: with two cores or more, 1, 2, 4, ... up to one per core
        OmegaConf.register_new_resolver(
            "sweeper.nproc_choices", lambda: ",".join(map(str, powers_of_two_upto(cores()) if cores() >= 2 else [1]))
        )
    if not OmegaConf.has_resolver("sweeper.numa_modes"):
        # node binding of the ranks where the machine has two NUMA nodes or more
        OmegaConf.register_new_resolver("sweeper.numa_modes", lambda: ",".join(topology.numa_modes()))
    if not OmegaConf.has_resolver("sweeper.thread_choices"):
        OmegaConf.register_new_resolver(
            "sweeper.thread_choices", lambda: ",".join(map(str, powers_of_two_upto(cores())))
        )
    if not OmegaConf.has_resolver("sweeper.help_groups"):  # sweeper --help (conf/config.yaml)
        from . import __version__, help

        OmegaConf.register_new_resolver("sweeper.help_groups", help.groups_text)
        OmegaConf.register_new_resolver("sweeper.help_keys", help.keys_text)
        OmegaConf.register_new_resolver("sweeper.version", lambda: __version__)
