"""The search= preset a sweep searches, typed (`auto`: gpu or cpu by the device), with the
knobs sweeper's own workload adds where they can pay: torch.compile's modes for a long job,
how files are decoded for data on disk."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from ..errors import ConfigError
from ..knobs import Knob
from ..machine import Machine
from .settings import SearchConf

# the config composed with these overrides (Hydra's compose, as the plan was given it)
Compose = Callable[[Sequence[str]], DictConfig]


def preset(base: DictConfig, compose: Compose, fixed: list[str], device_kind: str) -> SearchConf:
    """The search= preset, typed; `auto` picks gpu or cpu by the device. A config without a
    search group (another Hydra app's) has the schema's defaults, and whatever `+search.*` it
    was given."""
    if "search" not in base or base.search is None:
        return SearchConf()
    if base.search.preset == "auto":
        base = compose([*fixed, f"search={'gpu' if device_kind == 'cuda' else 'cpu'}"])
    try:  # a search node of another app's is typed here; sweeper's own was typed by Hydra
        search = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SearchConf), base.search))
    except ValidationError as exc:
        raise ConfigError(f"search.{exc.full_key}={exc.value!r} is invalid: {str(exc).splitlines()[0]}.") from exc
    assert isinstance(search, SearchConf)
    search.params = {str(k): str(v) for k, v in search.params.items()}
    search.check()
    return search


def searched(
    base: DictConfig, compose: Compose, fixed: list[str], machine: Machine, *, workload_knobs: bool
) -> SearchConf:
    """The preset, with the knobs sweeper's own workload adds where they can pay: a long job's
    (torch.compile's modes) and data on disk's."""
    chosen = preset(base, compose, fixed, machine.device)
    if workload_knobs:
        chosen = with_job_knobs(chosen, OmegaConf.select(base, Knob.MEASURE_JOB_SAMPLES, default=None), machine.cuda)
        chosen = with_file_knobs(chosen, base, machine.cuda)
    return chosen


# what torch.compile may pay for over a long job: its modes on a GPU (max-autotune's minutes of
# autotuning pay only there), the default one on a CPU
JOB_COMPILE = {True: "choice(off,default,max-autotune)", False: "choice(off,default)"}


def with_job_knobs(search: SearchConf, job_samples: float | None, cuda: bool) -> SearchConf:
    """With measure.job_samples, torch.compile is one of the preset's `later` knobs: its
    compilation is start-up the job pays once, so it is tried once at the best so far and
    searched only where it made that configuration finish the job sooner (search/held_back.py),
    which it does only where the job is long enough."""
    if not job_samples:
        return search
    params = {Knob.BACKEND_COMPILE: JOB_COMPILE[cuda], **search.params}
    return dataclasses.replace(search, params=params, later=[*search.later, Knob.BACKEND_COMPILE])


# how files may be decoded: on a GPU also the whole batch on the device (nvJPEG), which on a CPU
# would only move the decoding from the workers to the loop
FILE_DECODERS = {True: "choice(pil,torchvision,device)", False: "choice(pil,torchvision)"}


def with_file_knobs(search: SearchConf, base: DictConfig, cuda: bool) -> SearchConf:
    """Where the workload decodes files of its own (task.data_dir), how it decodes them is one of
    the preset's knobs: PIL, torchvision.io with transforms.v2 on tensors, or on a GPU the batch
    decoded there. Generated images are never encoded, so the knob means nothing there and is
    not searched."""
    if OmegaConf.select(base, Knob.TASK_DECODER, default=None) is None or not OmegaConf.select(
        base, Knob.TASK_DATA_DIR, default=None
    ):
        return search
    return dataclasses.replace(search, params={Knob.TASK_DECODER: FILE_DECODERS[cuda], **search.params})
