"""The docs stay true: the site builds with every link and page in place, the settings page names
every key the schemas declare with its real default, and the front page stays a front page."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import MISSING, OmegaConf

from conftest import ROOT, child_pythonpath

DOCS = ROOT / "docs"
SETTINGS = DOCS / "settings.md"
# the sections of settings.md that document config groups' keys (the rest: task=..., hydra.sweeper)
GROUP_SECTIONS = ("loader", "backend", "train", "dist", "measure", "search")


def _rows(markdown: str) -> dict[str, dict[str, str]]:
    """settings.md's tables as {heading: {key: default cell}}, keys and cells without backticks."""
    tables: dict[str, dict[str, str]] = {}
    heading = ""
    for line in markdown.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) >= 3 and "." in cells[0]:
            tables.setdefault(heading, {})[cells[0].strip("`")] = cells[1]
    return tables


def _documented(cell: str) -> Any:
    text = cell.replace("(required)", "").strip().strip("`")
    return MISSING if text == "???" else text


def _same(cell: str, value: Any) -> bool:
    shown = _documented(cell)
    if value == MISSING or isinstance(value, str):
        return shown == value
    return yaml.safe_load(shown) == value


def _leaves(node: Any, prefix: str) -> dict[str, Any]:
    """A config node's leaf values by dotted key (MISSING kept as '???')."""
    found: dict[str, Any] = {}
    for key in node:
        value = node._get_node(key)._value()
        if OmegaConf.is_dict(node[key]) if value != MISSING else False:
            if node[key]:
                found.update(_leaves(node[key], f"{prefix}{key}."))
                continue
            value = {}
        found[f"{prefix}{key}"] = OmegaConf.to_container(node[key]) if OmegaConf.is_config(value) else value
    return found


def _dataclass_defaults(schema: Any, prefix: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for f in fields(schema):
        if f.name.startswith("_"):
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            found.update(_dataclass_defaults(type(default), f"{prefix}{f.name}."))
        else:
            found[prefix + f.name] = default
    return found


def test_settings_page_names_every_config_key_with_its_default():
    from sweeper.preflight import compose

    tables = _rows(SETTINGS.read_text())
    config = compose(())
    expected = {}
    for group in GROUP_SECTIONS:
        expected.update(_leaves(config[group], f"{group}."))
    documented = {
        k: v
        for heading, rows in tables.items()
        if heading.split(":")[0].strip("` ") in GROUP_SECTIONS or heading.startswith("`train`")
        for k, v in rows.items()
    }
    assert sorted(documented) == sorted(expected), "docs/settings.md and the config's keys differ"
    wrong = {k: (documented[k], expected[k]) for k in expected if not _same(documented[k], expected[k])}
    assert not wrong, f"defaults in docs/settings.md differ from conf/: {wrong}"


@pytest.mark.parametrize("task", ["mnist_mlp", "image_classification", "language_model", "custom", "script"])
def test_settings_page_names_every_task_key_with_its_default(task):
    from sweeper.preflight import compose

    documented = _rows(SETTINGS.read_text())[f"`task={task}`"]
    expected = _leaves(compose((f"task={task}",))["task"], "task.")
    assert sorted(documented) == sorted(expected)
    wrong = {k: (documented[k], expected[k]) for k in expected if not _same(documented[k], expected[k])}
    assert not wrong, f"task={task}: defaults in docs/settings.md differ from conf/: {wrong}"


def test_settings_page_names_every_sweeper_setting_with_its_default():
    from sweeper.search.settings import SweepSettings

    documented = _rows(SETTINGS.read_text())["`hydra.sweeper`: the search"]
    expected = _dataclass_defaults(SweepSettings, "hydra.sweeper.")
    assert sorted(documented) == sorted(expected)
    wrong = {k: (documented[k], expected[k]) for k in expected if not _same(documented[k], expected[k])}
    assert not wrong, f"defaults in docs/settings.md differ from SweepSettings: {wrong}"


def test_the_site_builds_strictly(tmp_path):
    """mkdocs build --strict: a broken link or anchor, or a page left out of the nav, fails."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is not installed (pip install -e '.[test]')")
        pytest.skip("mkdocs is not installed (pip install -e '.[test]')")
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "settings" / "index.html").is_file()


def test_the_readme_is_a_front_page_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in readme, "the README's test command is not the one .ci/run runs"
    assert "&& .venv/bin/sweeper -m" in readme  # the main job
    for page in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / page).is_file(), page


@dataclass(frozen=True)
class Shown:
    """A sweeper command a page shows: its arguments as a shell passes them, and the error line
    the page prints under it (None: the page shows it running)."""

    page: str
    argv: list[str]
    error: str | None = None


def _shown_commands(page: Path) -> list[Shown]:
    """Every sweeper command a page shows: in bash blocks, in console blocks (`$ ` before each
    command, its output after it) and in inline code. A command may span lines, in quotes or
    after a backslash."""
    markdown, found = page.read_text(), []
    for kind, block in re.findall(r"```(bash|console)\n(.*?)```", markdown, re.S):
        pending, lines = "", block.splitlines()
        for at, line in enumerate(lines):
            if kind == "console" and not pending and not line.startswith("$ "):
                continue  # output
            pending += line.removeprefix("$ ") + "\n"
            try:
                words = shlex.split(pending.replace("\\\n", " "), comments=True)
            except ValueError:  # a quote still open: the command goes on
                continue
            if pending.rstrip().endswith("\\"):
                continue
            pending, after = "", lines[at + 1] if at + 1 < len(lines) else ""
            error = after.removeprefix("error: ") if kind == "console" and after.startswith("error: ") else None
            found.append((words, error))
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S).replace("\n", " ")
    found += [(shlex.split(span), None) for span in re.findall(r"`((?:python -m )?sweeper [^`]+)`", prose)]
    return [
        Shown(page.name, words[3:] if words[0] == "python" else words[1:], error)
        for words, error in found
        if words[:1] == ["sweeper"] or words[:3] == ["python", "-m", "sweeper"]
    ]


def test_every_command_the_docs_show_does_what_they_say(monkeypatch):
    """A command copied from the README or the docs into a shell starts, or stops with the very
    line the page prints under it: each is read as the command line is (the same checks, from
    the repository's root), the long ones written over several lines too."""
    from sweeper import preflight, resolvers
    from sweeper.errors import ConfigError

    resolvers.register()  # as the command line's entry point does
    monkeypatch.chdir(ROOT)
    shown = [one for page in (ROOT / "README.md", *sorted(DOCS.glob("*.md"))) for one in _shown_commands(page)]
    assert len(shown) >= 30 and sum(one.error is not None for one in shown) >= 5, shown  # few: the reading broke
    for one in shown:
        command = f"{one.page}: sweeper {shlex.join(one.argv)}"
        try:
            preflight.check(preflight.one_line_commands(one.argv))
        except ConfigError as exc:
            assert str(exc) == one.error, f"{command}: {exc}"
            continue
        except Exception as exc:
            raise AssertionError(f"{command}: {exc}") from exc
        assert one.error is None or "needs a CUDA device" in one.error, f"{command}: no error, the page shows one"


# an override a page names in running text: `loader.batch_size=256`, `hydra.sweeper.timeout=6h`
_NAMED = re.compile(r"`((?:task|loader|backend|measure|train|dist|search|hydra\.sweeper)\.[a-z_.]+)=[^`\s]*`")


def test_every_key_the_pages_name_in_their_text_is_a_key_of_the_config():
    """A key written in a sentence (`task.epochs=3`) is no command the test above runs: it is held
    against the schemas here, a task's keys against every task's (which task a sentence means is
    the reader's)."""
    from sweeper.preflight import compose

    config = compose(())
    task_keys = {
        k
        for task in ("mnist_mlp", "image_classification", "language_model", "custom", "script")
        for k in _leaves(compose((f"task={task}",))["task"], "task.")
    }
    wrong = []
    for page in (ROOT / "README.md", *sorted(DOCS.glob("*.md"))):
        for key in _NAMED.findall(page.read_text()):
            known = (
                key in task_keys
                if key.startswith("task.")
                else OmegaConf.select(config, key, default=MISSING) is not MISSING
            )
            if not known:
                wrong.append(f"{page.name}: {key}")
    assert wrong == []


def test_every_exit_code_is_in_the_readme_the_reliability_page_and_the_help():
    from sweeper import errors

    codes = {value for name, value in vars(errors).items() if name.startswith("EXIT_")} | {130, 143}
    help_text = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["hydra"]["help"]["template"]
    said = help_text[help_text.index("Exit codes:") :].split("Documentation:")[0]
    for where, text in (
        ("README.md", (ROOT / "README.md").read_text()),
        ("reliability.md", (DOCS / "reliability.md").read_text()),
    ):
        table = text[text.index("xit codes\n") :]
        rows = {int(c) for c in re.findall(r"^\| (\d+)(?: / \d+)? \|", table, re.M)}
        rows |= {int(c) for c in re.findall(r"^\| \d+ / (\d+) \|", table, re.M)}
        assert codes <= rows, f"{where} lacks exit codes {sorted(codes - rows)}"
    assert all(re.search(rf"\b{code}\b", said) for code in codes), said


# how development history reads: an issue's number, a session, the parts of a piece of work
HISTORY = re.compile(
    r"\bissue ?#?\d+|\bthis session\b|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|"
    r"ninth|tenth|eleventh) part\b",
    re.IGNORECASE,
)


def test_what_ships_speaks_of_itself_alone():
    """No issue numbers or development history in the README, docs, code or configs: history is
    CHANGELOG.md's."""
    tracked = subprocess.run(
        ["git", "ls-files", "README.md", "docs", "sweeper", "conf", "hydra_plugins", "benchmarks", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in tracked.stdout.split():
        path = ROOT / name
        if path.suffix not in {".md", ".py", ".yaml", ".sh"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:20])


# the tutorial's single run and the script's own run, shortened: a second of warm-up, three windows
_QUICK = ["measure.warmup_max_s=1", "measure.windows=3", "measure.min_windows=3"]


@pytest.mark.slow
def test_the_tutorials_commands_run_as_shown(tmp_path):
    """The tutorial's first commands, copied into a shell from the repository's root: the
    script on its own prints its samples/s, and sweeper measures it once with the values given."""
    from sweeper.errors import EXIT_OK

    page = DOCS / "tutorial.md"
    script = re.search(r"\$ (python examples/train_script\.py [^\n]+)", page.read_text())
    assert script is not None
    words = shlex.split(script.group(1).replace("--max-steps 600", "--max-steps 100"))  # one line at step 100
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    alone = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, env=env)
    assert alone.returncode == 0 and "samples/s" in alone.stdout, alone.stderr[-2000:]
    single = [one for one in _shown_commands(page) if one.argv[:1] == ["task=script"]][0]
    measured = subprocess.run(
        [sys.executable, "-m", "sweeper", *single.argv, *_QUICK, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert measured.returncode == EXIT_OK, measured.stdout[-2000:] + measured.stderr[-2000:]
    assert "samples/sec" in measured.stdout and (tmp_path / "run" / "result.json").is_file()
