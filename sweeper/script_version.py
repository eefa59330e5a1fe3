"""Which version of a user's script a sweep measures: the script file its command names and, where
that file lies in a git work tree, the tree's commit and its uncommitted changes, as one digest.

A study's setup is the command line, and a script's contents are not on it: without this, an
edited train.py (a new model, a new augmentation) would be answered from the results of the
script as it was. The digest joins the setup, so an edited script is measured anew.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# the setup's entry that carries a script's version: never a Hydra override (those never begin
# with '#'), so it is told apart and left out of every command line made from a setup
SETUP_NOTE = "#script "
_GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ScriptVersion:
    """A script as a sweep measured it."""

    path: str | None  # the script file, as the command names it (None: none found)
    digest: str  # 12 hex digits over the file's bytes and, in a git work tree, its state
    commit: str | None = None  # the work tree's HEAD (its first 12 digits)
    dirty: bool = False  # the work tree had uncommitted changes to tracked files

    def setup_entry(self) -> str:
        """The setup's entry: '#script train.py@1a2b3c4d5e6f'."""
        return f"{SETUP_NOTE}{self.path or 'command'}@{self.digest}"

    def describe(self) -> str:
        """'train.py (sha 1a2b3c4d5e6f; commit 0a1b2c3d4e5f, with uncommitted changes)'."""
        tree = ""
        if self.commit:
            tree = f"; commit {self.commit}" + (", with uncommitted changes" if self.dirty else "")
        return f"{self.path or 'the command'} (sha {self.digest}{tree})"


def script_file(words: Sequence[str], cwd: Path) -> Path | None:
    """The file the command runs: its first word ending in .py, or the module after `-m` as a
    file under `cwd` (not imported: importing a package runs its code); None when neither is a
    file here."""
    for i, word in enumerate(words):
        if word.endswith(".py"):
            path = cwd / word
            return path if path.is_file() else None
        if word == "-m" and i + 1 < len(words):
            base = cwd / Path(*words[i + 1].split("."))
            for candidate in (base.with_suffix(".py"), base / "__main__.py"):
                if candidate.is_file():
                    return candidate
            return None
    return None


Git = Callable[[Sequence[str], Path], bytes | None]


def _git(args: Sequence[str], where: Path) -> bytes | None:
    """git's output in `where`; None without git, outside a work tree, or on any failure."""
    try:
        done = subprocess.run(["git", *args], cwd=where, capture_output=True, timeout=_GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def version_of(words: Sequence[str], cwd: Path, git: Git = _git) -> ScriptVersion:
    """The version of what the command runs: its script file's bytes, and where that file (or,
    without one, the working directory) lies in a git work tree, HEAD and the diff of tracked
    files against it: an edit to a module the script imports changes the digest too."""
    path = script_file(words, cwd)
    digest = hashlib.sha256()
    digest.update(" ".join(words[:1]).encode())  # the program: python or another
    if path is not None:
        digest.update(path.read_bytes())
    where = path.parent if path is not None else cwd
    head = git(["rev-parse", "HEAD"], where)
    commit, dirty = None, False
    if head:
        commit = head.decode().strip()[:12]
        changes = git(["diff", "HEAD", "--no-ext-diff", "--no-color"], where) or b""
        dirty = bool(changes.strip())
        digest.update(head.strip() + b"\0" + changes)
    shown = None
    if path is not None:
        shown = str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)
    return ScriptVersion(shown, digest.hexdigest()[:12], commit, dirty)


def split_setup(setup: Sequence[str]) -> tuple[list[str], str | None]:
    """A stored setup's command-line overrides, and its script version's entry (None: none)."""
    notes = [s for s in setup if s.startswith(SETUP_NOTE)]
    return [s for s in setup if not s.startswith(SETUP_NOTE)], notes[0] if notes else None


def other_versions(setups: Iterable[Sequence[str]], setup: Sequence[str]) -> list[str | None]:
    """The script versions (their setup entries; None: not recorded) that the study's other
    setups of the same command line hold: what an edited script differs from."""
    overrides, own = split_setup(setup)
    found: list[str | None] = []
    for other in setups:
        theirs, entry = split_setup(other)
        if theirs == overrides and entry != own and entry not in found:
            found.append(entry)
    return found


def changed_note(version: ScriptVersion, others: Sequence[str | None]) -> str | None:
    """Before trial 1, where the study measured this command with another version of the script."""
    if not others:
        return None
    was = ", ".join(o.removeprefix(SETUP_NOTE) if o else "a version not recorded" for o in others)
    return (
        f"the script is not the one this study's earlier sweeps of this command measured ({was}): "
        f"{version.describe()} is measured anew, as a setup of its own"
    )
