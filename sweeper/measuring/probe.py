"""The child side of the machine probe: `python -m sweeper.measuring.probe <device> [factory]`
prints what this machine can run as one JSON line (sweeper.machine.Machine), or one error line
and exit 2. Given a task factory it imports its module too: a broken one is found before trial 1."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main() -> None:
    from ..protocol import PARENT_PID_ENV
    from .lifeline import die_with_parent

    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or 0))  # a killed sweep leaves no probe behind
    import torch

    from ..errors import EXIT_BAD_CONFIG, InvalidConfig
    from ..procs import mapped_files
    from ..topology import openmp_runtime
    from .backend import resolve_device
    from .fingerprint import fingerprint
    from .loader import supports_in_order
    from .workload import load_factory

    try:
        device = resolve_device(sys.argv[1])
        if len(sys.argv) > 2:
            sys.path.insert(0, ".")  # the user's own modules, as the worker finds them
            load_factory(sys.argv[2])
    except InvalidConfig as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    cuda = device.type == "cuda"
    print(
        json.dumps(
            {
                "device": device.type,
                "cuda": cuda,
                "bf16": torch.cuda.is_bf16_supported() if cuda else True,
                "bf16_fast": _bf16_fast(torch, cuda),
                "fingerprint": fingerprint(device).to_dict(),
                "loader_in_order": supports_in_order(),
                "openmp": openmp_runtime(mapped_files()),
            }
        )
    )


def _bf16_fast(torch: Any, cuda: bool) -> bool:
    """Whether the device computes bf16 in hardware: a GPU without emulation (Ampere and later),
    a CPU where oneDNN has a bf16 path (AVX-512 or AMX on x86, BF16 on Arm). Elsewhere torch
    converts each op through fp32, and bf16 runs slower than fp32 (docs/search.md, the recipes)."""
    if cuda:
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # a torch before the keyword: its answer was without emulation
            return bool(torch.cuda.is_bf16_supported())
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without the op: the sampler tries bf16 as before
        return True


if __name__ == "__main__":
    main()
