"""The child side of the machine probe: `python -m sweeper.measure.probe <device>` prints what
this machine can run as one JSON line (sweeper.machine.Machine), or one error line and exit 2."""

from __future__ import annotations

import json
import sys


def main() -> None:
    import torch

    from ..errors import EXIT_BAD_CONFIG, InvalidConfig
    from .backend import resolve_device
    from .fingerprint import fingerprint

    try:
        device = resolve_device(sys.argv[1])
    except InvalidConfig as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    cuda = device.type == "cuda"
    print(json.dumps({
        "device": device.type,
        "cuda": cuda,
        "bf16": torch.cuda.is_bf16_supported() if cuda else True,
        "fingerprint": fingerprint(device),
    }))


if __name__ == "__main__":
    main()
