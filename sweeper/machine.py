"""The machine a figure was measured on (no torch): numbers from different hardware never mix.

`Machine` is what the probe (sweeper.runner.probe, answered by sweeper.measure.probe in a
child) found out before a sweep's first trial.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from dataclasses import dataclass, field
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_facts() -> dict[str, Any]:
    """What every fingerprint holds, known without torch."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def host_fingerprint() -> dict[str, Any]:
    """What can be known without torch (a sweep driven from another Hydra app)."""
    info: dict[str, Any] = {**host_facts(), "gpu": None, "gpu_count": 0, "torch": None}
    info["hardware_class"] = hardware_class(info)
    return info


def hardware_class(info: dict[str, Any]) -> str:
    """Short stable id of what decides speed: CPU model and count, GPU, torch build."""
    key = f"{info['cpu']}|{info['cpus_available']}|{info['gpu']}|{info['torch']}"
    return hashlib.sha1(key.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Machine:
    """What this machine (and the workload on it) can run."""

    device: str  # "cpu" or "cuda": what backend.device resolves to here
    cuda: bool
    bf16: bool  # the device runs bf16
    fingerprint: dict[str, Any] = field(default_factory=host_fingerprint)
    # channels_last only means something for convolutional models; None = not known
    convolutional: bool | None = None
    # DataLoader(in_order=...) exists in the installed torch (2.6 and later)
    loader_in_order: bool = True
    # the OpenMP runtime torch loads: gnu | intel | none (which OpenMP knobs mean something)
    openmp: str = "gnu"

    @property
    def hardware_class(self) -> str:
        return str(self.fingerprint["hardware_class"])

    @property
    def gpu_count(self) -> int:
        return int(self.fingerprint.get("gpu_count") or 0) if self.cuda else 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Machine:
        return cls(device=d["device"], cuda=bool(d["cuda"]), bf16=bool(d["bf16"]),
                   fingerprint=d["fingerprint"], convolutional=d.get("convolutional"),
                   loader_in_order=bool(d.get("loader_in_order", True)), openmp=str(d.get("openmp", "gnu")))

    @classmethod
    def this_host(cls) -> Machine:
        """Without a probe: another Hydra app's jobs measure themselves on the CPU side."""
        return cls(device="cpu", cuda=False, bf16=True)
