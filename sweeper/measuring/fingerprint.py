"""The device fingerprint of a run, as torch sees it (threads, GPU, CUDA, cuDNN)."""

from __future__ import annotations

import torch

from .. import share
from ..machine import Fingerprint, host_facts


def fingerprint(device: torch.device, cpus_available: int | None = None) -> Fingerprint:
    """`cpus_available`: the machine's cores as the run found them before pinning itself
    (backend.affinity), so that a pinned run is still on the same hardware class; fewer under
    its cgroup's CPU quota, as the host's facts count them."""
    facts = host_facts()
    return Fingerprint.of(
        {
            **facts,
            **({"cpus_available": share.usable_cores(cpus_available, facts["cpu_quota"])} if cpus_available else {}),
            "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        }
    )
