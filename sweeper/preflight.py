"""Every mistake on a command line, found before Hydra starts: one line that names the value and
what is allowed (ConfigError, exit 2), and no run or sweep directory left behind.

Hydra's own messages for these are several lines, list the schemas as options, and exit 1;
here the command line is parsed with Hydra's parser and composed with Hydra's compose API, as
Hydra will compose it, and each failure is said in sweeper's words.
"""

from __future__ import annotations

import difflib
import functools
import re
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config_errors import error_line
from .errors import ConfigError
from .knobs import Knob
from .paths import config_dir

# Hydra's flags that choose another primary config
CONFIG_FLAGS = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir")
# Hydra's flags that take a value: what follows them is not an override
FLAG_VALUES = {*CONFIG_FLAGS, "-p", "--package", "--experimental-rerun", "-sc", "--shell-completion"}
# Hydra's flags that print and exit: nothing is run, so nothing is checked
ASKS_ONLY = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc", "--version"}
MULTIRUN_FLAGS = ("-m", "--multirun")

# launchers the docs name, and the package that brings each
LAUNCHER_PACKAGES = {
    "submitit_slurm": "torch-sweeper[slurm] (hydra-submitit-launcher)",
    "submitit_local": "torch-sweeper[slurm] (hydra-submitit-launcher)",
    "ray": "hydra-ray-launcher",
    "joblib": "hydra-joblib-launcher",
    "rq": "hydra-rq-launcher",
}


def overrides_of(argv: Sequence[str]) -> list[str]:
    """The key=value overrides of a command line (Hydra's flags and their values left out)."""
    found, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in FLAG_VALUES:
            skip = True
        elif not arg.startswith("-") and "=" in arg:
            found.append(arg)
    return found


def group_options(group: str) -> list[str]:
    """The options of one of sweeper's config groups (`task`: mnist_mlp, ...), as conf/ ships them."""
    folder = Path(config_dir()) / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def config_groups() -> list[str]:
    return sorted(p.name for p in Path(config_dir()).iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def check(argv: Sequence[str]) -> None:
    """Raise ConfigError for the first mistake on this command line; do nothing for a command
    that only asks (--help, --cfg, -sc ...)."""
    if ASKS_ONLY.intersection(argv):
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    fixed, swept = [], set()
    multirun = any(arg in MULTIRUN_FLAGS for arg in argv)
    for override in overrides_of(argv):
        parsed = _parse(parser, override)
        check_group_choice(parsed)
        check_launcher_installed(override)
        check_sweep_expression(parsed, override, multirun)
        if parsed.is_sweep_override():
            swept.add(parsed.key_or_group)
        else:
            fixed.append(override)
    if any(arg in CONFIG_FLAGS or arg.startswith(tuple(f"{f}=" for f in CONFIG_FLAGS)) for arg in argv):
        return  # another primary config may have keys of its own: Hydra checks those
    composed = check_composed(fixed)
    check_resolves(composed)
    check_required(composed, swept)
    check_output_dir(composed, multirun)
    if not multirun:  # a sweep's plan checks every value of its ranges the same way
        from .runner.run import checked_spec

        checked_spec(composed)


def check_sweep_expression(parsed: Any, override: str, multirun: bool) -> None:
    """A sweep expression searches a knob, in a sweep: not Hydra's own settings, and not a single
    run; a sweep's setting needs a sweep too (Hydra's answers name neither the fix nor the exit
    code a mistake has, or ignore the setting)."""
    key = parsed.key_or_group
    from .search.settings import REMOVED

    if (name := key.removeprefix("hydra.sweeper.")) in REMOVED:
        raise ConfigError(f"hydra.sweeper.{name} was removed: {REMOVED[name]}.")
    if not multirun and key.startswith("hydra.sweeper."):
        raise ConfigError(
            f"{override} sets the sweep, and without -m sweeper measures one configuration: add -m to sweep "
            "(from Python: sweeper.sweep)."
        )
    if key == "hydra.sweeper.params" and parsed.value() is not None:  # Hydra merges it from a file only
        raise ConfigError(
            f"{override}: on the command line, a sweep expression goes on its knob, e.g. "
            "'loader.batch_size=choice(256,512)' (hydra.sweeper.params is for a config file)."
        )
    if not parsed.is_sweep_override():
        return
    params = "hydra.sweeper.params."
    if key.startswith(params):
        raise ConfigError(
            f"{override}: a sweep expression goes on the knob itself, "
            f"'{key[len(params) :]}={override.partition('=')[2]}' (hydra.sweeper.params is for a config file)."
        )
    if key.startswith("hydra."):
        raise ConfigError(
            f"{override}: {key} takes one value; sweep expressions search the knobs, e.g. "
            "'loader.batch_size=choice(64,256)'."
        )
    if not multirun:
        raise ConfigError(
            f"{override}: a sweep expression searches a knob: add -m to sweep (from Python: sweeper.sweep), "
            "or give one value."
        )


def _parse(parser: Any, override: str) -> Any:
    if ("\n" in override or "\r" in override) and not _quoted_command(parser, override):
        raise ConfigError(
            f"{override.partition('=')[0]}: a value cannot hold a line break "
            f"(got {override.partition('=')[2]!r}): write it on one line (a quoted "
            f"{Knob.TASK_COMMAND} may span lines)."
        )
    try:
        return parser.parse_overrides([override])[0]
    except Exception as exc:  # OverrideParseException and the grammar's own
        lines = [line for line in str(exc).splitlines()[1:] if line.strip() and not line.startswith("See https")]
        why = " ".join(lines) or str(exc).splitlines()[0]
        key, _, value = override.partition("=")
        if ("'" in value) != ('"' in value) and value[:1] not in "'\"":  # quotes inside, not around it
            quote = '"' if "'" in value else "'"
            raise ConfigError(
                f"cannot read {override!r}: a value that holds quotes is quoted whole, as Hydra reads it: "
                f"{key}={quote}{value}{quote}"
            ) from exc
        raise ConfigError(
            f"cannot read {override!r}: {why} (Hydra's override grammar: choice(a,b), "
            "range(start,stop[,step]), interval(low,high), tag(log,...), shuffle(...))."
        ) from exc


def _quoted_command(parser: Any, override: str) -> bool:
    """Whether the override is a quoted task.command: a shell command, split into words as a
    shell splits it (shlex), so a line break between words is a space, as in a script."""
    from hydra.errors import OverrideParseException

    try:
        parsed = parser.parse_overrides([override])[0]
    except OverrideParseException:  # an unquoted line break: Hydra's lexer refuses it
        return False
    return parsed.key_or_group == Knob.TASK_COMMAND and isinstance(parsed.value(), str)


_LINE_BREAK = re.compile(r"[ \t]*[\r\n]+[ \t]*")


def one_line_commands(argv: Sequence[str]) -> list[str]:
    """The command line with a quoted task.command written over several lines (as the docs write
    a long one) joined into one, where that leaves the command's words as they were: the sweep's
    log, its reproduce line and its stored overrides are then one line each. A line break inside
    one of the command's own quoted arguments is kept."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, joined = OverridesParser.create(), []
    for arg in argv:
        if "=" in arg and _LINE_BREAK.search(arg) and _quoted_command(parser, arg):
            flat = _LINE_BREAK.sub(" ", arg)
            before, after = (str(parser.parse_overrides([a])[0].value()) for a in (arg, flat))
            arg = flat if shlex.split(before) == shlex.split(after) else arg
        joined.append(arg)
    return joined


def check_group_choice(parsed: Any) -> None:
    """`task=nonexistent`: the group's real options, and the nearest one."""
    group = parsed.key_or_group
    if group not in config_groups() or parsed.is_delete():
        return
    options = group_options(group)
    value = parsed.value()
    chosen = [str(v) for v in getattr(value, "list", None) or [value]]
    for name in chosen:
        if name not in options:
            close = difflib.get_close_matches(name, options, n=1)
            hint = f" (did you mean {group}={close[0]}?)" if close else ""
            raise ConfigError(f"{group}={name} is not a {group} option: choose one of {', '.join(options)}{hint}.")


def check_launcher_installed(override: str) -> None:
    """hydra/launcher=<name> that no installed Hydra plugin provides: one line naming the package."""
    key, _, name = override.lstrip("+").partition("=")
    if key != "hydra/launcher":
        return
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # discovering the plugins registers their configs
    installed = sorted(entry.removesuffix(".yaml") for entry in ConfigStore.instance().list("hydra/launcher"))
    if name not in installed:
        package = LAUNCHER_PACKAGES.get(name, "the Hydra launcher plugin that provides it")
        raise ConfigError(
            f"hydra/launcher={name} is not installed (installed: {', '.join(installed)}): pip install {package}."
        )


def check_composed(fixed: Sequence[str]) -> Any:
    """Compose the config, Hydra's part included, with the fixed overrides as Hydra will: a
    value of the wrong type or choice, or a key the config does not have (at any depth,
    `hydra.sweeper.*` included) is one line with the nearest key. Returns the composed config."""
    try:
        return compose(tuple(fixed))
    except Exception as exc:  # Hydra's composition errors become one line
        line = error_line(exc, compose(()), overrides=fixed)
        if line is None:
            first = " ".join(str(exc).split())[:300]
            line = f"cannot compose the config: {first}"
        raise ConfigError(line) from exc


# required keys, and what to give them
_REQUIRED = {
    Knob.TASK_COMMAND: "task=script needs the command that runs your script: "
    "task.command='python train.py --batch-size ${loader.batch_size}'.",
    Knob.TASK_FACTORY: "task=custom needs the function that builds your workload: task.factory=my_module:build.",
}


def check_resolves(composed: Any) -> None:
    """Every ${...} of the config (a script's command names knobs so) points at a key: a
    misspelt one is one line with the nearest key, not OmegaConf's traceback. Hydra's own part
    resolves only when Hydra runs (${now:...}, ${hydra:...})."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    try:
        OmegaConf.to_container(OmegaConf.masked_copy(composed, [k for k in composed if k != "hydra"]), resolve=True)
    except InterpolationResolutionError as exc:
        raise ConfigError(error_line(exc, composed) or " ".join(str(exc).split())) from exc


def check_required(composed: Any, swept: set[str]) -> None:
    """A required key (`???` in conf/) that the command line leaves unset."""
    from omegaconf import OmegaConf

    for key in sorted(OmegaConf.missing_keys({k: composed[k] for k in composed if k != "hydra"})):
        if key not in swept:
            raise ConfigError(_REQUIRED.get(key, f"{key} is required: give it a value ({key}=...)."))


def check_output_dir(composed: Any, multirun: bool) -> None:
    """hydra.run.dir (or hydra.sweep.dir) where no directory can be made: one line, before Hydra
    makes it. Probed by making and removing a directory at its nearest existing parent."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        target = Path(str(composed.hydra.sweep.dir if multirun else composed.hydra.run.dir)).expanduser()
    except Exception:  # noqa: BLE001 - an interpolation of the user's own that only Hydra resolves
        return
    target = target if target.is_absolute() else Path.cwd() / target
    parent = target
    while not parent.exists():
        parent = parent.parent
    if parent != target and not parent.is_dir():
        raise ConfigError(f"{key}={target} cannot be created: {parent} is a file, not a directory.")
    if parent == target and not target.is_dir():
        raise ConfigError(f"{key}={target} is a file, not a directory: choose another directory.")
    try:
        Path(tempfile.mkdtemp(prefix=".sweeper-probe-", dir=parent)).rmdir()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"{key}={target} cannot be written ({why} in {parent}): "
            f"choose a directory you can write, e.g. {key}=outputs/mine."
        ) from exc


@functools.lru_cache(maxsize=32)
def compose(overrides: tuple[str, ...]) -> Any:
    """sweeper's config, Hydra's part included, with these overrides (Hydra's compose API,
    initialized here unless a caller has initialized it already); kept, for a caller that
    checks many command lines."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=True)


# what a run directory holds when the run stopped before measuring: Hydra's record and its (empty)
# job log, and the worker's verdict on a configuration this machine cannot run (`invalid`) with its log
_UNMEASURED = {".hydra", "result.json", "worker.log"}


def _unmeasured(entry: Path) -> bool:
    return entry.name in _UNMEASURED or (entry.suffix == ".log" and entry.stat().st_size == 0)


def discard_run_dir(path: Path) -> None:
    """Remove the directory of a run that measured nothing (a ConfigError), and the folders Hydra
    made above it when they are left empty; a directory holding anything else is left alone."""
    import shutil

    if not path.is_dir() or not all(_unmeasured(p) for p in path.iterdir()):
        return
    shutil.rmtree(path, ignore_errors=True)
    for parent in list(path.parents)[:3]:  # outputs/runs/<date>, as Hydra made them
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
