"""OmegaConf resolvers the search presets use, e.g. ${sweeper.thread_choices:}, and those that
spell sweeper's knobs as a framework's command line takes them (task=script): Lightning's
precision names, a flag per precision for the Hugging Face Trainer, loader settings that only
exist with workers."""

from __future__ import annotations

from omegaconf import OmegaConf

from . import share, topology


def cores() -> int:
    """The cores this process may keep busy: its affinity's, fewer under a cgroup CPU quota."""
    return share.cores_here()


def powers_of_two_upto(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself: candidate thread counts for n cores."""
    values, v = [], 1
    while v < n:
        values.append(v)
        v *= 2
    return [*values, n]


# backend.precision as Lightning's Trainer(precision=...) names it
LIGHTNING_PRECISION = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}


def lightning_precision(precision: str) -> str:
    """`--trainer.precision ${sweeper.lightning_precision:${backend.precision}}`."""
    try:
        return LIGHTNING_PRECISION[str(precision)]
    except KeyError:
        raise ValueError(
            f"sweeper.lightning_precision: {precision!r} is not a backend.precision ({', '.join(LIGHTNING_PRECISION)})"
        ) from None


def equals(value: object, expected: object) -> bool:
    """`--bf16 ${sweeper.equals:${backend.precision},bf16}`: one flag of several values."""
    return str(value) == str(expected)


def if_workers(value: object, workers: int) -> object:
    """A loader setting that exists only with worker processes (persistent_workers,
    prefetch_factor): the value with workers, false or null without (a DataLoader refuses them)."""
    if int(workers) > 0:
        return value
    return False if isinstance(value, bool) else None


def precisions() -> str:
    """The precisions a run here can take: fp16 only with a GPU (it needs a GradScaler on CUDA)."""
    from .runner.lock import visible_gpus

    return "fp32,bf16,fp16" if visible_gpus() else "fp32,bf16"


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
    for name, function in (
        ("sweeper.lightning_precision", lightning_precision),
        ("sweeper.equals", equals),
        ("sweeper.if_workers", if_workers),
        ("sweeper.precisions", precisions),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
    if not OmegaConf.has_resolver("sweeper.help_groups"):  # sweeper --help (conf/config.yaml)
        from . import __version__, help

        OmegaConf.register_new_resolver("sweeper.help_groups", help.groups_text)
        OmegaConf.register_new_resolver("sweeper.help_keys", help.keys_text)
        OmegaConf.register_new_resolver("sweeper.version", lambda: __version__)
