"""What cannot run, found before trial 1: a search space with a value a run would refuse, n_jobs
with a launcher that runs jobs one by one here, CUDA knobs or fp16 without CUDA. Each is one
ConfigError line naming the value and what is allowed."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace

from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from ..config_errors import error_line
from ..errors import ConfigError
from ..host import planned
from ..knobs import Knob
from ..machine import Machine
from ..spec import GROUPS, RunSpec
from ..validation import check_config, fp16_without_cuda
from . import space as sp
from .settings import SweepSettings

_MISSING = object()

# an integer range of fewer values is checked value by value (task.heads=range(1,5): 3 does not
# divide the width); a longer one, and a float interval, at its two ends
EVERY_VALUE_UP_TO = 256


def check_space(base: DictConfig, space: Mapping[str, BaseDistribution], own_app: bool) -> None:
    """Every knob is a key of the config and every value of its range is one a run accepts."""
    for key in space:
        if OmegaConf.select(base, key, default=_MISSING) is _MISSING:
            raise ConfigError(f"search param {key!r} is not a key of the config (typo?).")
    if not own_app:
        return
    spec = RunSpec.of(base)
    for key, dist in space.items():
        group, _, leaf = key.partition(".")
        if (group not in GROUPS and group != "task") or "." in leaf:
            continue
        if isinstance(dist, CategoricalDistribution):
            values = list(dist.choices)
        elif isinstance(dist, IntDistribution) and (dist.high - dist.low) // dist.step < EVERY_VALUE_UP_TO:
            values = list(range(dist.low, dist.high + 1, dist.step))  # a value inside may be the bad one
        elif isinstance(dist, (IntDistribution, FloatDistribution)):
            values = [dist.low, dist.high]
        for value in values:
            typed = copy.deepcopy(base[group])
            try:  # its type and choice, as Hydra will check it when the trial is composed
                OmegaConf.update(typed, leaf, value, merge=False)
            except Exception as exc:  # OmegaConf's ValidationError and kin
                raise ConfigError(f"search param {key}: {error_line(exc, base) or exc}") from exc
            if group == "task":  # a mapping, as a user's factory receives it
                trial_spec = spec.replace(task={**spec.task, **OmegaConf.to_container(typed, resolve=True)})  # type: ignore[dict-item]
            else:
                trial_spec = spec.replace(**{group: OmegaConf.to_object(typed)})
            # batch x ranks against the effective batch: held per trial
            trial_spec = trial_spec.replace(train=replace(trial_spec.train, effective_batch=None, grad_accum_steps=1))
            if key in sp.NEEDS_WORKERS:
                loader = trial_spec.loader
                trial_spec = trial_spec.replace(loader=replace(loader, num_workers=max(1, loader.num_workers)))
            if key == Knob.BACKEND_NUMA and value != "none":  # it binds ranks: checked with a rank per node
                ranks = max(trial_spec.nproc, len(planned().nodes))
                trial_spec = trial_spec.replace(dist=replace(trial_spec.dist, nproc_per_node=ranks))
            try:
                check_config(trial_spec)
            except ConfigError as exc:
                raise ConfigError(f"search param {key}: {exc}") from exc


# Hydra's launcher that runs each job in the sweep's own process, one after another
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def check_launcher(settings: SweepSettings, launcher: str) -> None:
    """n_jobs > 1 needs a launcher that runs jobs elsewhere: the basic one runs them here, one by one."""
    if settings.n_jobs > 1 and launcher == BASIC_LAUNCHER:
        raise ConfigError(
            f"hydra.sweeper.n_jobs={settings.n_jobs} launches that many trials at once, and "
            "hydra/launcher=basic runs them here, one after another, on one machine that measures "
            "one at a time: use a launcher with machines of its own (hydra/launcher=submitit_slurm, "
            "pip install 'torch-sweeper[slurm]') or hydra.sweeper.n_jobs=1."
        )


def check_device(base: DictConfig, machine: Machine, launcher: str, script: bool) -> None:
    """What cannot run on the device the runs have (this machine, the basic launcher): search=gpu
    without CUDA would measure CPU runs with knobs that mean nothing there, and your own fp16
    without CUDA would leave the sweep no baseline. One line, before trial 1."""
    if launcher != BASIC_LAUNCHER or machine.device == "cuda":
        return
    if "search" in base and base.search and base.search.get("preset") == "gpu":
        raise ConfigError(
            f"search=gpu searches CUDA knobs (cuDNN, TF32, pinned memory, fp16), and the runs here have no "
            f"CUDA device (backend.device={base.backend.device} is {machine.device} on this machine): use "
            "search=auto or search=cpu, or a launcher whose jobs run on GPU nodes (hydra/launcher=submitit_slurm)."
        )
    # a script runs its loop as it likes; another Hydra app has no backend group
    if not script and OmegaConf.select(base, Knob.BACKEND_PRECISION) == "fp16":
        raise ConfigError(fp16_without_cuda(f"{machine.device} (backend.device={base.backend.device})"))
