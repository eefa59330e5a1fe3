"""The machine a figure was measured on: numbers from different hardware never mix."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_fingerprint() -> dict[str, Any]:
    """What can be known without torch (a sweep driven from another Hydra app)."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "gpu": None,
        "gpu_count": 0,
        "torch": None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    info["hardware_class"] = hardware_class(info)
    return info


def fingerprint(device: torch.device) -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "gpu": gpu,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    info["hardware_class"] = hardware_class(info)
    return info


def hardware_class(info: dict[str, Any]) -> str:
    """Short stable id of what decides speed: CPU model and count, GPU, torch build."""
    key = f"{info['cpu']}|{info['cpus_available']}|{info['gpu']}|{info['torch']}"
    return hashlib.sha1(key.encode()).hexdigest()[:10]
