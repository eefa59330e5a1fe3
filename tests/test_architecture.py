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
# processes' entry points: the CLI, the report's CLI, the measuring child's two mains, and the
# child's lifeline (a measuring process whose parent is gone ends itself at once)
ENTRY_POINTS = {"__main__.py", "report/__main__.py", "measure/worker.py", "measure/probe.py", "measure/lifeline.py",
                "measure/zygote.py", "measure/ranks.py"}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Absolute names of the sweeper modules `path` imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_sweep_side_never_imports_torch():
    code = ("import sys, sweeper.search.sweep, sweeper.search.outputs, sweeper.report.load, sweeper.report.page, "
            "sweeper.store.heartbeat, sweeper.runner.run, sweeper.__main__; "
            "import hydra_plugins.throughput_sweeper.throughput_sweeper; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hydra_loads_the_plugin_config_without_optuna():
    code = "import sys, hydra_plugins.throughput_sweeper.config; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        pytest.param("measure", ("sweeper.search", "sweeper.store", "sweeper.runner", "sweeper.report"), id="measure"),
        pytest.param("report", ("sweeper.search", "sweeper.runner", "sweeper.measure"), id="report"),
        pytest.param("store", ("sweeper.search", "sweeper.runner", "sweeper.measure", "sweeper.report"), id="store"),
        pytest.param("runner", ("sweeper.search", "sweeper.store", "sweeper.measure", "sweeper.report"), id="runner"),
    ],
)
def test_each_side_imports_only_what_it_may(package, forbidden):
    crossing = {
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in (PACKAGE / package).rglob("*.py")
        for name in imported(path)
        if name.startswith(forbidden)
    }
    assert crossing == set()


def test_only_entry_points_exit_the_process():
    found = []
    for path in modules():
        rel = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in ("exit", "_exit")
                    and isinstance(node.value, ast.Name) and node.value.id in ("sys", "os")):
                found.append(rel)
    assert set(found) <= ENTRY_POINTS, sorted(set(found) - ENTRY_POINTS)


def test_no_module_over_400_lines_no_class_over_200():
    too_long = []
    for path in modules():
        text = path.read_text()
        if len(text.splitlines()) > 400:
            too_long.append(f"{path.relative_to(PACKAGE)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 200:
                too_long.append(f"{path.relative_to(PACKAGE)}:{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []


def test_stored_attributes_are_spelled_in_one_place():
    """Trial attributes are read through sweeper.result.TrialRecord, study attributes through
    sweeper.store.study; nowhere else does code reach into user_attrs."""
    owners = {"result.py", "store/study.py"}
    found = [
        str(path.relative_to(PACKAGE)) for path in modules()
        if str(path.relative_to(PACKAGE)) not in owners and "user_attrs" in path.read_text()
    ]
    assert found == []
