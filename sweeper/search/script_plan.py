"""A user's script in a sweep's plan (task=script): the knobs its command reads, and what to say
before trial 1 about those it cannot see and about a baseline the command line left at
sweeper's defaults."""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution

from .. import command
from ..config import plain


def script_space(
    space: dict[str, BaseDistribution], base: DictConfig, asked: frozenset[str]
) -> tuple[dict[str, BaseDistribution], list[str]]:
    """A script's space: the knobs its command or environment reads, and what to say about the
    rest and about those applied at its first step."""
    kept, note = command.searchable(list(space), command.template(base.task), list(base.task.reads), sorted(asked))
    notes = [note] if note else []
    if applied := sorted(k for k in kept if k in command.AT_FIRST_STEP):
        notes.append(
            f"task=script: {', '.join(applied)} {'is' if len(applied) == 1 else 'are'} applied inside the script "
            "by sweeper.track at its first "
            "step: searched once the baseline shows that the script uses sweeper.track or sweeper.step"
        )
    return {k: space[k] for k in kept}, notes


def baseline_note(base: DictConfig, fixed: Sequence[str]) -> str | None:
    """Before a script's trial 1: the knobs its command passes that the command line left at
    sweeper's defaults. The baseline is the composed config, not what the script runs today,
    so a speedup over it may be over a configuration the script never used."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in fixed}
    named = command.named_knobs(command.template(base.task), list(base.task.reads))
    left = sorted(k for k in named if command.script_only(k) and k not in given)
    if not left:
        return None
    defaults = " ".join(f"{k}={plain(OmegaConf.select(base, k))}" for k in left)
    return (
        f"task=script: your configuration is sweeper's defaults for what the command passes ({defaults}), "
        "not what your script runs today: give its current values on the command line, "
        f"e.g. {left[0]}=<your value>, so that the speedup is over the configuration you use"
    )
