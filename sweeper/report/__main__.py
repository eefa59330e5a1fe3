"""python -m sweeper.report <sweep dir> | --storage URL --study NAME [--out report.html]

Regenerates a sweep's report from its stored study at any time, also while the sweep runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..paths import SWEEP_FILE, not_a_sweep_dir
from ..store.storage import default_storage, open_storage, redact
from ..store.study import stored_name
from .load import load_report_data
from .page import write_report


@dataclass(frozen=True)
class _Source:
    """Where the report's study is: the storage URL (None: not said), the study's name (None:
    not said) and the sweep's fixed overrides (None: no sweep directory given)."""

    storage: str | None
    study: str | None
    fixed: list[str] | None = None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sweeper.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", nargs="?", type=Path, help="a sweep's directory (holds sweep.json)")
    parser.add_argument("--storage", help="Optuna storage URL (needed when the sweep dir's URL had a password)")
    parser.add_argument(
        "--study",
        help="study name: as stored (name@hardware class), or as you named it when the "
        "storage holds it for one hardware class",
    )
    parser.add_argument("--out", type=Path, help="where to write (default: <sweep dir>/report.html or ./report.html)")
    return parser


def _from_sweep_dir(sweep_dir: Path, given: _Source) -> _Source | str:
    """The study a sweep directory's sweep.json names, what was given on the command line
    first; or the one-line error that says why it cannot be read from there."""
    info_path = sweep_dir / SWEEP_FILE
    if not info_path.is_file():
        return f"{not_a_sweep_dir(sweep_dir)}: give a sweep's directory or --storage URL --study NAME."
    info = json.loads(info_path.read_text())
    storage = given.storage
    if storage is None:
        if info.get("storage_has_password"):
            return (
                "this sweep's storage URL has a password, which sweeper never writes down: pass it with --storage URL."
            )
        storage = info["storage"]
    return _Source(storage, given.study or info["study"], info["fixed_overrides"])


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    given = _Source(args.storage, args.study)
    source = given if args.sweep_dir is None else _from_sweep_dir(args.sweep_dir, given)
    if isinstance(source, str):
        print(f"error: {source}", file=sys.stderr)
        return 2
    storage, study = source.storage or default_storage(), source.study
    if not study:
        parser.print_usage(sys.stderr)
        print(
            "error: give a sweep directory, or --study NAME (and --storage URL unless it is the default "
            "sqlite:///outputs/sweeper.db).",
            file=sys.stderr,
        )
        return 2
    out = args.out or ((args.sweep_dir / "report.html") if args.sweep_dir else Path("report.html"))
    try:
        study = stored_name(open_storage(storage), study)
        data = load_report_data(storage, study, source.fixed)
    except KeyError:
        print(f"error: no study {study!r} in {redact(storage)}.", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_report(data, out)
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
