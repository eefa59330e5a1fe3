"""The machine a figure was measured on (no torch): numbers from different hardware never mix.

`Fingerprint` is what a run records of the machine; `Machine` is what the probe
(sweeper.runner.probe, answered by sweeper.measuring.probe in a child) found out before a
sweep's first trial.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from . import share


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def nvidia_driver() -> str | None:
    """The NVIDIA kernel module's version, where one is loaded (torch does not say it)."""
    line = _first_line("/proc/driver/nvidia/version") or ""
    words = line.split("Kernel Module", 1)[-1].split() if "Kernel Module" in line else []
    return next((w for w in words if w[:1].isdigit()), None)


def host_facts() -> dict[str, Any]:
    """What every fingerprint holds, known without torch."""
    quota = share.quota_cpus()
    return {
        "kernel": platform.release(),
        "governor": _first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "driver": nvidia_driver(),
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_available": share.usable_cores(len(os.sched_getaffinity(0)), quota),
        "cpu_quota": quota,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


@dataclass(frozen=True)
class Fingerprint:
    """The hardware and software a run was measured on; `hardware_class` says which runs compare."""

    hostname: str = ""
    cpu: str = ""
    cpu_count: int | None = None
    # the cores the run could keep busy before it pinned itself (backend.affinity): its affinity's,
    # fewer under a cgroup CPU quota (sweeper.share)
    cpus_available: int | None = None
    cpu_quota: float | None = None  # the cgroup's CPU quota, in CPUs (None: none)
    python: str | None = None
    platform: str | None = None
    # torch's intra-op and inter-op threads in the run
    threads: int | None = None
    interop_threads: int | None = None
    gpu: str | None = None
    gpu_count: int = 0
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    # said in the difference between two nights, never part of the hardware class: the NVIDIA
    # driver, the kernel's release and the CPU frequency governor (None where not readable)
    driver: str | None = None
    kernel: str | None = None
    governor: str | None = None
    hardware_class: str = ""

    @classmethod
    def of(cls, facts: Mapping[str, Any]) -> Fingerprint:
        """From what was found out; the hardware class computed from it."""
        made = cls.from_dict(facts)
        return replace(made, hardware_class=hardware_class(made))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Fingerprint:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in known and v is not None})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """The machine in one line, as the terminal summary and the report say it."""
        return (
            f"{self.hostname}: {self.cpu}, {self.cpus_available} cores"
            + (f" (a CPU quota of {self.cpu_quota:g})" if self.cpu_quota is not None else "")
            + f", {self.gpu or 'no GPU'}, torch {self.torch}"
            + (f", CUDA {self.cuda}" if self.cuda else "")
        )


def hardware_class(info: Fingerprint) -> str:
    """Short stable id of what decides speed: CPU model and count, GPU, torch build."""
    key = f"{info.cpu}|{info.cpus_available}|{info.gpu}|{info.torch}"
    return hashlib.sha1(key.encode()).hexdigest()[:10]


# what two nights' fingerprints are compared on, and the words for each. A difference in the
# first group makes the night "changed" (it decides speed); the rest are only said
DECIDING = {
    "cpu": "CPU",
    "cpus_available": "cores",
    "gpu": "GPU",
    "gpu_count": "GPUs",
    "torch": "torch",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "driver": "driver",
}
SAID = {"kernel": "kernel", "governor": "CPU governor", "python": "Python"}


@dataclass(frozen=True)
class Change:
    """One fact that differs between two fingerprints: 'torch 2.13.0 -> 2.14.1'."""

    field: str
    before: Any
    after: Any
    decides: bool  # whether it decides speed (DECIDING) or is only said (SAID)

    def __str__(self) -> str:
        label = {**DECIDING, **SAID}.get(self.field, self.field.replace("_", " "))
        return f"{label} {self.before} -> {self.after}"


def changes(before: Fingerprint, after: Fingerprint) -> list[Change]:
    """What differs from `before` to `after`, the deciding facts first. A fact one side could not
    read (None: an earlier version's record, a governor the VM hides) is no difference."""
    found = []
    for names, decides in ((DECIDING, True), (SAID, False)):
        for name in names:
            old, new = getattr(before, name), getattr(after, name)
            if old not in (None, "") and new not in (None, "") and old != new:
                found.append(Change(name, old, new, decides))
    return found


def host_fingerprint() -> Fingerprint:
    """What can be known without torch (a sweep driven from another Hydra app)."""
    return Fingerprint.of(host_facts())


@dataclass(frozen=True)
class Machine:
    """What this machine (and the workload on it) can run."""

    device: str  # "cpu" or "cuda": what backend.device resolves to here
    cuda: bool
    bf16: bool  # the device runs bf16
    # ... and computes it in hardware (measuring/probe.py): where it is emulated, bf16 runs slower
    # than fp32, and the recipes leave it to the sampler
    bf16_fast: bool = True
    fingerprint: Fingerprint = field(default_factory=host_fingerprint)
    # channels_last only means something for convolutional models; None = not known
    convolutional: bool | None = None
    # DataLoader(in_order=...) exists in the installed torch (2.6 and later)
    loader_in_order: bool = True
    # the OpenMP runtime torch loads: gnu | intel | none (which OpenMP knobs mean something)
    openmp: str = "gnu"

    @property
    def hardware_class(self) -> str:
        return self.fingerprint.hardware_class

    @property
    def gpu_count(self) -> int:
        return self.fingerprint.gpu_count if self.cuda else 0

    @property
    def cores(self) -> int:
        return int(self.fingerprint.cpus_available or 1)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Machine:
        """From the probe's answer (a cached one may lack fields added since: their defaults)."""
        values = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        return cls(**{**values, "fingerprint": Fingerprint.from_dict(values.get("fingerprint"))})

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fingerprint": self.fingerprint.to_dict()}

    @classmethod
    def this_host(cls) -> Machine:
        """Without a probe: another Hydra app's jobs measure themselves on the CPU side."""
        return cls(device="cpu", cuda=False, bf16=True)
