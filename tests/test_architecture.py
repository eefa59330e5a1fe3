"""The rules that keep the architecture visible: which side imports what, where the process
may exit, how large a module or class may grow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "sweeper"
# processes' entry points: the CLI, the report's CLI, the data sets' CLI (python -m sweeper.data),
# the measuring child's two mains, and the child's lifeline (a measuring process whose parent is
# gone ends itself at once)
ENTRY_POINTS = {
    "__main__.py",
    "report/__main__.py",
    "data.py",
    "measuring/worker.py",
    "measuring/probe.py",
    "measuring/lifeline.py",
    "measuring/fork_server.py",
    "measuring/ranks.py",
}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Absolute names of the modules `path` imports, at its top or inside a function (relative
    imports resolved; `from package import module` names the module)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            submodules = {f"{module}.{alias.name}" for alias in node.names}
            found = {
                m
                for m in submodules
                if (ROOT / Path(*m.split("."))).with_suffix(".py").exists() or (ROOT / Path(*m.split("."))).is_dir()
            }
            names.update(found or {module})
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_sweep_side_never_imports_torch():
    code = (
        "import sys, sweeper.search.sweep, sweeper.search.outputs, sweeper.report.load, sweeper.report.page, "
        "sweeper.store.heartbeat, sweeper.runner.run, sweeper.__main__; "
        "import hydra_plugins.throughput_sweeper.throughput_sweeper; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hydra_loads_the_plugin_config_without_optuna():
    code = "import sys, hydra_plugins.throughput_sweeper.config; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        pytest.param(
            "measuring", ("sweeper.search", "sweeper.store", "sweeper.runner", "sweeper.report"), id="measure"
        ),
        pytest.param("report", ("sweeper.search", "sweeper.runner", "sweeper.measuring"), id="report"),
        pytest.param("store", ("sweeper.search", "sweeper.runner", "sweeper.measuring", "sweeper.report"), id="store"),
        pytest.param("runner", ("sweeper.search", "sweeper.store", "sweeper.measuring", "sweeper.report"), id="runner"),
    ],
)
def test_each_side_imports_only_what_it_may(package, forbidden):
    crossing = {
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in (PACKAGE / package).rglob("*.py")
        for name in imported(path)
        if _within(name, forbidden)
    }
    assert crossing == set()


def test_no_module_of_the_package_imports_itself_in_a_circle():
    """Import cycles, top-level and function-level alike (a lazy import is still a dependency)."""
    graph = {module_name(p): {n for n in imported(p) if n.startswith("sweeper")} for p in modules()}
    # importing a package runs its __init__; a module importing its own package's __init__ is not a cycle
    graph = {m: {n for n in deps if n != m and not m.startswith(n + ".")} for m, deps in graph.items()}
    cycles = []

    def visit(node: str, path: list[str], seen: set[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, path + [nxt], seen)

    for start in sorted(graph):
        visit(start, [start], {start})
    assert sorted(set(cycles)) == []


def test_only_entry_points_exit_the_process():
    found = []
    for path in modules():
        rel = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("exit", "_exit")
                and isinstance(node.value, ast.Name)
                and node.value.id in ("sys", "os")
            ):
                found.append(rel)
    assert set(found) <= ENTRY_POINTS, sorted(set(found) - ENTRY_POINTS)


def test_no_module_over_400_lines_no_class_over_200_no_function_over_60():
    too_long = []
    limits = {ast.ClassDef: 200, ast.FunctionDef: 60, ast.AsyncFunctionDef: 60}
    for path in modules():
        text = path.read_text()
        if len(text.splitlines()) > 400:
            too_long.append(f"{path.relative_to(PACKAGE)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            limit = limits.get(type(node))
            if limit is not None and (n := node.end_lineno - node.lineno + 1) > limit:
                too_long.append(f"{path.relative_to(PACKAGE)}:{node.name}: {n} lines")
    assert too_long == []


def test_stored_attributes_are_spelled_in_one_place():
    """Trial attributes are read through sweeper.store.record.TrialRecord (written as its
    TrialAttrs spells them, by the study and its queue), study attributes through
    sweeper.store.study and, the nights', sweeper.store.nights; nowhere else does code reach into
    user_attrs."""
    owners = {"store/record.py", "store/study.py", "store/queue.py", "store/nights.py"}
    found = [
        str(path.relative_to(PACKAGE))
        for path in modules()
        if str(path.relative_to(PACKAGE)) not in owners and "user_attrs" in path.read_text()
    ]
    assert found == []


def _config_keys() -> set[str]:
    """Every key of the shipped configs: a figure that echoes a setting (device, nproc_per_node)
    shares its name, and a config key may be spelled where the config is read."""
    import yaml

    keys: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                keys.add(str(key))
                walk(value)

    for path in (ROOT / "conf").rglob("*.yaml"):
        walk(yaml.safe_load(path.read_text()))
    return keys


def test_figure_names_are_spelled_only_where_they_are_defined():
    """A figure is read as an attribute of the typed measurement; its name as a string lives in
    sweeper/measurement.py."""
    from sweeper.measurement import FIGURE_NAMES

    names = set(FIGURE_NAMES) - _config_keys()
    found = []
    for path in modules():
        rel = str(path.relative_to(PACKAGE))
        if rel == "measurement.py":
            continue
        tree = ast.parse(path.read_text())
        in_text = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in in_text:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert found == []


@pytest.mark.parametrize(
    ("values", "home"),
    [
        pytest.param("sweeper.measurement:Stopped", "measurement.py", id="stopped"),
        pytest.param("sweeper.search.settings:LockMode", "search/settings.py", id="lock"),
        pytest.param("sweeper.search.settings:Reuse", "search/settings.py", id="reuse"),
    ],
)
def test_enum_values_are_spelled_only_in_their_enum(values, home):
    """Why a run stopped, what the lock does, which results a sweep reuses: each value a member of
    its enum, compared as the member everywhere else (a misspelt string would compare unequal,
    silently). Values shorter than four letters, or that are words of other things (off,
    wait, fail, pruned, none, study), are left to the enum's type."""
    import importlib

    module, _, name = values.partition(":")
    enum = getattr(importlib.import_module(module), name)
    spelled = {m.value for m in enum if len(m.value) >= 4} - {"wait", "fail", "pruned", "none", "study"}
    found = []
    for path in modules():
        rel = str(path.relative_to(PACKAGE))
        if rel == home:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in spelled:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    # `+trial=raced`: the name of the config option a raced trial gets, not a run's verdict
    assert [f for f in found if not f.startswith("config.py:") or "'raced'" not in f] == []


def test_knob_names_are_spelled_only_in_sweeper_knobs():
    """A knob is named by `Knob.LOADER_BATCH_SIZE`, never by its dotted string outside
    sweeper/knobs.py, which holds each name against its schema's fields at import: a typo read
    through `.get` would be silently None."""
    from sweeper.knobs import Knob

    names = {value for name, value in vars(Knob).items() if name.isupper()}
    found = []
    for path in modules():
        rel = str(path.relative_to(PACKAGE))
        if rel == "knobs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert found == []
