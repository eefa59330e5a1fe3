"""A user's training script as sweeper runs it (task=script), decided on the sweep's side: the
command's words with the knobs interpolated (split first, then each word resolved, so a value
is one argument and never shell text), which knobs the command names, and each knob as an
environment variable. Pure: OmegaConf, no torch.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError
from .knobs import Knob

# the groups whose keys are knobs a script may read
KNOB_GROUPS = ("loader", "backend", "train", "dist")
# knobs sweeper applies from outside the script's process (environment, affinity, preload,
# launcher): searched for any script. The others only the script itself can apply.
OUTSIDE = (
    Knob.BACKEND_DEVICE,
    Knob.BACKEND_THREADS,
    Knob.BACKEND_AFFINITY,
    Knob.BACKEND_ALLOCATOR,
    Knob.BACKEND_OMP_BIND,
    Knob.BACKEND_KMP_BLOCKTIME,
    Knob.BACKEND_NUMA,
    Knob.DIST_NPROC_PER_NODE,
)
# knobs sweeper.track applies inside the script's process at its first step (settings a process
# can change at any time): searched for a script once its baseline shows that it uses
# sweeper.track or sweeper.step. Inter-op threads must be set before any work: not among them.
AT_FIRST_STEP = (Knob.BACKEND_FLUSH_DENORMAL, Knob.BACKEND_CUDNN_BENCHMARK, Knob.BACKEND_TF32)
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_]\w*(?:\.\w+)+)\s*\}")
# `python` in a command is the Python that runs sweeper (the one with torch and sweeper)
PYTHONS = ("python", "python3")


def is_script(task: Mapping[str, Any]) -> bool:
    return "command" in task


def template(task: DictConfig) -> str:
    """task.command as written, its interpolations not resolved."""
    container = OmegaConf.to_container(task, resolve=False)
    assert isinstance(container, dict)
    return str(container["command"])


def named_knobs(command: str, reads: Sequence[str] = ()) -> set[str]:
    """The knobs the command interpolates (`${loader.batch_size}`), and those the script reads
    from its environment (task.reads)."""
    return {*_REFERENCE.findall(command), *reads}


def script_name(words: Sequence[str]) -> str:
    """What the command runs, in a word: the script's file stem, the module after -m, else the
    program."""
    for i, word in enumerate(words):
        if word.endswith(".py"):
            return word.rsplit("/", 1)[-1][:-3]
        if word == "-m" and i + 1 < len(words):
            return words[i + 1].rsplit(".", 1)[-1]
    return words[0].rsplit("/", 1)[-1] if words else "script"


def searchable(
    space: Sequence[str], command: str, reads: Sequence[str], asked: Sequence[str]
) -> tuple[list[str], str | None]:
    """The knobs of a script's sweep: those sweeper applies from outside, and those only the
    script applies that its command names (or task.reads). A knob the user swept that the
    script cannot see is refused (every value would measure the same run); a preset's is
    dropped, and the note says which."""
    named = named_knobs(command, reads)
    unseen = [k for k in space if script_only(k) and k not in named]
    refused = sorted(k for k in unseen if k in asked)
    if refused:
        raise ConfigError(
            f"{refused[0]} is swept, but the script cannot see it: task.command does not name "
            f"${{{refused[0]}}} and task.reads does not list it, so every value would measure the same "
            "run. Name it in the command (or in task.reads), or do not sweep it."
        )
    kept = [k for k in space if k not in unseen]
    note = (
        (
            f"task=script: the preset's {', '.join(sorted(unseen))} are not searched: the command does not name them "
            "(write ${...} in task.command, or list them in task.reads, to search them)"
        )
        if unseen
        else None
    )
    return kept, note


def script_only(knob: str) -> bool:
    """A knob only the script can apply (batch, workers, precision, compile, ...)."""
    return knob.split(".")[0] in KNOB_GROUPS and knob not in OUTSIDE and knob not in AT_FIRST_STEP


def argv(cfg: DictConfig) -> list[str]:
    """The command's words, each with its interpolations resolved against the whole config:
    `--batch-size ${loader.batch_size}` gives two words whatever the value holds."""
    words = shlex.split(template(cfg.task))
    if not words:
        raise ConfigError(
            "task.command is empty: give the command that runs your script, e.g. "
            "task.command='python train.py --batch-size ${loader.batch_size}'."
        )
    root = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False, enum_to_str=True))
    root._sweeper_argv = words
    resolved = OmegaConf.to_container(root._sweeper_argv, resolve=True)
    assert isinstance(resolved, list)
    return [_word(value) for value in resolved]


def _word(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def env_name(knob: str) -> str:
    """loader.batch_size -> SWEEPER_LOADER_BATCH_SIZE."""
    return "SWEEPER_" + knob.upper().replace(".", "_")


def knob_env(plain: Mapping[str, Any]) -> dict[str, str]:
    """Every knob of the run (a spec as JSON) as the variable a script may read (null as the
    empty string)."""
    env = {}
    for group in KNOB_GROUPS:
        for key, value in plain[group].items():
            env[env_name(f"{group}.{key}")] = "" if value is None else _word(value)
    return env


def shown(words: Sequence[str]) -> str:
    """The words as a command line one can paste into a shell."""
    return shlex.join(words)
