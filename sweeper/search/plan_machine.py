"""The machine a plan measures on: the probe's answer after the checks a run there would make,
and the devices each of its measurements claims (the GPUs of its most ranks)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ..errors import ConfigError
from ..host import Host, this_host
from ..knobs import Knob
from ..machine import Machine
from ..runner.lock import DeviceClaim, claim_for
from ..spec import RunSpec
from ..validation import check_command_here, check_config
from .checks import BASIC_LAUNCHER, check_device


def machine_for(
    base: DictConfig,
    own_app: bool,
    script: bool,
    launcher: str,
    probe_machine: Callable[[str, str | None, str], Machine],
) -> Machine:
    """The machine the runs measure on, after the checks a run of this config would make there:
    this host's probe for sweeper's own workloads, this host alone for another app's jobs."""
    if not own_app:
        return Machine.this_host()
    spec = RunSpec.of(base)
    check_config(spec)
    if launcher == BASIC_LAUNCHER:  # the runs run here; a cluster's job checks on its node
        check_command_here(spec)
    machine = probe_machine(
        str(base.backend.device), None if script else str(base.task.factory), str(base.measure.isolation)
    )
    if machine.cuda and base.measure.memory_limit_gb is not None:
        raise ConfigError(
            f"measure.memory_limit_gb={base.measure.memory_limit_gb} limits the address space, which "
            "the CUDA libraries need far more of than they use: set measure.memory_limit_gb=null on a GPU."
        )
    check_device(base, machine, launcher, script)
    return machine


def most_ranks(space: Mapping[str, BaseDistribution], base: DictConfig) -> int:
    """The most data-parallel ranks a trial of this plan may run: the GPUs the sweep claims."""
    dist = space.get(Knob.DIST_NPROC_PER_NODE)
    values: list[Any] = list(dist.choices) if isinstance(dist, CategoricalDistribution) else []
    if isinstance(dist, IntDistribution):
        values = [dist.high]
    given = OmegaConf.select(base, Knob.DIST_NPROC_PER_NODE, default=1)
    return max(int(v) for v in [*values, given or 1] if str(v).isdigit())


def claim_of(base: DictConfig, own_app: bool, host: Host, space: Mapping[str, BaseDistribution]) -> DeviceClaim:
    """What each measurement locks: the CPU, or a GPU per rank of the plan's most ranks."""
    device = str(base.backend.device) if own_app else "cpu"
    # this machine's GPUs as CUDA will see them (the driver's, CUDA_VISIBLE_DEVICES) at the claim
    gpus = None if host is this_host() else len(host.gpus)
    return claim_for(device, gpus=gpus, ranks=most_ranks(space, base))
