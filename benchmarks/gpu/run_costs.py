"""What each run paid before its first measured window, against the windows themselves, read from
the result.json files under the folders given (a sweep's trials, truth.py's runs).

    python benchmarks/gpu/run_costs.py DIR [DIR ...]     -> a markdown table
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from sweeper.result import RunResult  # noqa: E402


def row(path: Path) -> str | None:
    result = RunResult.from_json(json.loads(path.read_text()))
    m = result.measurement
    if m is None:
        return None
    t, loader, backend = m.timing, result.config.get("loader", {}), result.config.get("backend", {})
    windows_s = t.samples_measured / m.throughput.samples_per_sec if m.throughput.samples_per_sec else 0.0
    before = (t.build_s or 0.0) + t.warmup_s
    return (
        f"| {path.parent.name} | {result.config.get('task', {}).get('name')} | {loader.get('batch_size')} | "
        f"{loader.get('num_workers')} | {backend.get('precision')} | {result.wall_s:.1f} | {t.build_s or 0:.1f} | "
        f"{t.first_batch_wait_s:.1f} | {t.first_step_s:.1f} | {t.warmup_s:.1f} | {windows_s:.1f} | "
        f"{before / windows_s if windows_s else float('nan'):.1f} | {m.throughput.samples_per_sec:,.0f} |"
    )


def main() -> None:
    print(
        "| run | task | batch | workers | precision | wall s | build s | first batch s | first step s | "
        "warm-up s (first step included) | windows s | before / windows | samples/s |"
    )
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for folder in sys.argv[1:]:
        for path in sorted(Path(folder).rglob("result.json")):
            line = row(path)
            if line:
                print(line)


if __name__ == "__main__":
    main()
