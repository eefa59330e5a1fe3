"""What this machine can run, asked once per sweep in a child process (torch stays out of the
sweeper's own process): `python -m sweeper.probe <device>` prints JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .validation import ConfigError


def probe(device: str, timeout_s: float = 120) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper.probe", device],
        capture_output=True, text=True, timeout=timeout_s,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(last.removeprefix("error: "))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    import torch

    from .backend import resolve_device
    from .errors import InvalidConfig
    from .fingerprint import fingerprint

    try:
        device = resolve_device(sys.argv[1])
    except InvalidConfig as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    cuda = device.type == "cuda"
    print(json.dumps({
        "device": device.type,
        "cuda": cuda,
        "bf16": torch.cuda.is_bf16_supported() if cuda else True,
        "fingerprint": fingerprint(device),
    }))


if __name__ == "__main__":
    main()
