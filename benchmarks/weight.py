"""How much there is to learn and carry: hydra.sweeper's settings, every key a user sets, the
functions over 60 lines and the lines in sweeper/, at the checkout given (default: this one).

    python benchmarks/weight.py [CHECKOUT]    # e.g. a `git worktree` of an earlier commit
"""

from __future__ import annotations

import ast
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from sweeper.preflight import compose  # noqa: E402
from sweeper.search.settings import SweepSettings  # noqa: E402


def settings(schema: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    for f in fields(schema):
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        out += settings(type(default), f"{prefix}{f.name}.") if is_dataclass(default) else [prefix + f.name]
    return out


def leaves(node: Any, prefix: str) -> list[str]:
    out: list[str] = []
    for key in node:
        value = node._get_node(key)
        nested = OmegaConf.is_dict(value) and len(value) and key != "params"
        out += leaves(node[key], f"{prefix}{key}.") if nested else [prefix + str(key)]
    return out


def main() -> None:
    sweep = [k for k in settings(SweepSettings) if k != "params"]
    config = compose(())
    keys = [k for group in config if group != "hydra" for k in leaves(config[group], f"{group}.")]
    long, lines = [], 0
    for path in sorted((ROOT / "sweeper").rglob("*.py")):
        text = path.read_text()
        lines += len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                if (n := node.end_lineno - node.lineno + 1) > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} ({n})")
    print(f"hydra.sweeper settings besides params: {len(sweep)} ({', '.join(sweep)})")
    print(
        f"keys a user sets: {len(keys) + len(sweep) + 1} (the config's {len(keys)}, hydra.sweeper's {len(sweep) + 1})"
    )
    print(f"functions over 60 lines: {len(long)} {long}")
    print(f"lines in sweeper/: {lines}")


if __name__ == "__main__":
    main()
