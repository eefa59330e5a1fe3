"""The child side of the machine probe: `python -m sweeper.measuring.probe <device> [factory]`
prints what this machine can run as one JSON line (sweeper.machine.Machine), or one error line
and exit 2. Given a task factory it imports its module too: a broken one is found before trial 1."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
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
    a CPU as `cpu_computes_bf16` says. Elsewhere each op converts through fp32, and bf16 runs
    slower than fp32 (docs/search.md, the recipes)."""
    if cuda:
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # a torch before the keyword: its answer was without emulation
            return bool(torch.cuda.is_bf16_supported())
    try:
        onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without the op: the sampler tries bf16 as before
        return True
    capabilities: Mapping[str, Any] = getattr(torch.cpu, "get_capabilities", dict)()
    return cpu_computes_bf16(onednn, capabilities)


def cpu_computes_bf16(onednn_bf16: bool, capabilities: Mapping[str, Any]) -> bool:
    """Whether a CPU computes bf16 in hardware: oneDNN has a bf16 path (BF16 on Arm), and on x86
    the instructions for it, AVX512_BF16 or AMX-BF16. oneDNN runs bf16 on any AVX-512 CPU, but
    without those it converts through fp32: the MNIST MLP's train step ran 4x slower in bf16
    than in fp32 on such a Xeon. `capabilities`: torch.cpu.get_capabilities() (empty where this
    torch lacks it: oneDNN's answer stands)."""
    if not onednn_bf16:
        return False
    if capabilities.get("architecture") in ("x86_64", "x86"):
        return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))
    return True


if __name__ == "__main__":
    main()
