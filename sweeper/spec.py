"""One run's spec: the composed config as the schemas type it (sweeper.config), built once in the
parent, checked there (sweeper.validation), sent to the measuring child as JSON and read back
into the same types. Outside this module nothing reads a run's config by string key, except the
task, which stays a mapping because a user's factory receives it as one."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .choice import Choice
from .config import BackendConf, DistConf, LoaderConf, MeasureConf, TrainConf, TrialConf

# the groups every run has, each with its schema
GROUPS: dict[str, type] = {
    "loader": LoaderConf,
    "backend": BackendConf,
    "measure": MeasureConf,
    "train": TrainConf,
    "dist": DistConf,
}


class CompileMode(Choice):
    """backend.compile, as the spec holds it (the schema keeps a string, so that YAML's false
    and true parse: they mean off and default)."""

    off = "off"
    default = "default"
    max_autotune = "max-autotune"


COMPILE_MODES = tuple(mode.value for mode in CompileMode)


def normalize_compile(value: Any) -> str:
    """YAML and the command line may spell `off` as false and `default` as true (the schema
    keeps them as the strings "False" and "True"; a knob's value as stored may be a bool or
    None); a known mode becomes its CompileMode, anything else stays as given (the validator
    names it)."""
    if value is None or str(value).lower() == "false":
        return CompileMode.off
    if str(value).lower() == "true":
        return CompileMode.default
    return CompileMode(str(value)) if str(value) in COMPILE_MODES else str(value)


@dataclass(frozen=True)
class RunSpec:
    """Everything one measured run needs."""

    task: Mapping[str, Any]  # as composed, plus a script's `argv`: a user's factory gets it whole
    loader: LoaderConf
    backend: BackendConf
    measure: MeasureConf
    train: TrainConf
    dist: DistConf
    trial: TrialConf = dataclasses.field(default_factory=TrialConf)  # what a sweep races the run against
    cwd: str | None = None  # where the user's own modules are imported from

    @classmethod
    def of(cls, cfg: DictConfig) -> RunSpec:
        """From the composed config: its values resolved, typed by the schemas (a script's
        command split into its words, each with its knobs: never a shell's text)."""
        from .command import argv, is_script, shown

        task: dict[str, Any] = OmegaConf.to_container(cfg.task, resolve=True, enum_to_str=True)  # type: ignore[assignment]
        if is_script(task):
            task["argv"] = argv(cfg)
            task["command"] = shown(task["argv"])
        groups: dict[str, Any] = {name: OmegaConf.to_object(cfg[name]) for name in GROUPS}
        groups["backend"] = dataclasses.replace(groups["backend"], compile=normalize_compile(cfg.backend.compile))
        trial: Any = OmegaConf.to_object(cfg.trial) if "trial" in cfg else TrialConf()
        return cls(task=task, trial=trial, cwd=os.getcwd(), **groups)

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON-able data (enums as their values)."""
        out: dict[str, Any] = {name: _plain(dataclasses.asdict(getattr(self, name))) for name in GROUPS}
        out.update(task=dict(self.task), trial=_plain(dataclasses.asdict(self.trial)), cwd=self.cwd)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSpec:
        """Back from `to_json`, into the schemas' types (OmegaConf checks each value again)."""
        groups: dict[str, Any] = {
            name: OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), data[name]))
            for name, schema in GROUPS.items()
        }
        groups["backend"] = dataclasses.replace(groups["backend"], compile=normalize_compile(groups["backend"].compile))
        return cls(task=dict(data["task"]), trial=TrialConf(**(data.get("trial") or {})), cwd=data.get("cwd"), **groups)

    def config(self) -> dict[str, Any]:
        """The knobs as result.json records them (`config`): the task and the groups, no measure."""
        plain = self.to_json()
        return {name: plain[name] for name in ("task", "loader", "backend", "train", "dist")}

    def replace(self, **groups: Any) -> RunSpec:
        return dataclasses.replace(self, **groups)

    # ---- the task's parts sweeper itself reads ----
    @property
    def mode(self) -> str:
        return str(self.task["mode"])

    @property
    def training(self) -> bool:
        return self.mode == "train"

    @property
    def is_script(self) -> bool:
        return "command" in self.task

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.task.get("argv") or ())

    @property
    def factory(self) -> Any:
        return self.task.get("factory")

    # ---- derived once ----
    @property
    def nproc(self) -> int:
        return int(self.dist.nproc_per_node)

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per optimizer step (1 for inference): derived from train.effective_batch
        when it is set (batch_size x grad_accum_steps x nproc_per_node = effective_batch)."""
        if not self.training:
            return 1
        if self.train.effective_batch:
            return int(self.train.effective_batch) // (int(self.loader.batch_size) * self.nproc)
        return int(self.train.grad_accum_steps)

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step over all ranks."""
        return int(self.loader.batch_size) * self.grad_accum_steps * self.nproc


def _plain(value: Any) -> Any:
    """Enums as their values, containers walked (what json.dumps and the child read back)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value.value) if hasattr(value, "value") else value
    return value
