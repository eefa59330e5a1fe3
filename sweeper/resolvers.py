"""OmegaConf resolvers the search presets use, e.g. ${sweeper.thread_choices:}, and those that
spell sweeper's knobs as a framework's command line takes them (task=script): Lightning's
precision names, a flag per precision for the Hugging Face Trainer, loader settings that only
exist with workers."""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import OmegaConf

from . import host, share, topology
from .search import scaling


def cores() -> int:
    """The cores this process may keep busy: its affinity's, fewer under a cgroup CPU quota."""
    return share.cores_here()


def _listed(values: Sequence[object]) -> str:
    return ",".join(map(str, values))


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
    return "fp32,bf16,fp16" if host.planned().gpus else "fp32,bf16"


def register() -> None:
    if not OmegaConf.has_resolver("sweeper.cores"):
        OmegaConf.register_new_resolver("sweeper.cores", cores)
    # the presets' spaces, scaled to the machine planned for (sweeper.search.scaling)
    for name, make in (
        ("sweeper.affinities", lambda: _listed(scaling.affinities(host.planned()))),
        ("sweeper.allocators", lambda: _listed(topology.installed_allocators())),
        ("sweeper.nproc_choices", lambda: _listed(scaling.rank_choices(host.planned()))),
        ("sweeper.gpu_rank_choices", lambda: _listed(scaling.gpu_rank_choices(host.planned()))),
        ("sweeper.numa_modes", lambda: _listed(scaling.numa_modes(host.planned()))),
        ("sweeper.omp_binds", lambda: _listed(scaling.omp_binds(host.planned()))),
        ("sweeper.thread_choices", lambda: _listed(scaling.thread_choices(host.planned()))),
        ("sweeper.worker_space", lambda: scaling.worker_space(host.planned())),
        ("sweeper.gpu_worker_choices", lambda: _listed(scaling.gpu_worker_choices(host.planned()))),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, make)
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
