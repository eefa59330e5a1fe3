"""What this machine can run, asked in a child process (torch stays out of the sweep's own
process; the child is sweeper.measuring.probe) and kept per host and hardware: a later sweep on
the same machine, torch build and visible GPUs reads the answer instead of importing torch again."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata

from ..errors import ConfigError
from ..machine import Machine, host_facts
from ..paths import cache_dir, write_atomically
from ..procs import nvidia_gpus
from ..protocol import PARENT_PID_ENV, PROBE_MODULE, THREAD_ENV_VARS
from .fork_servers import ZygoteUnavailable, zygote_for


def machine_key(device: str) -> str:
    """Everything the probe's answer depends on, known without torch."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    facts = {
        "answer": 4,  # what the probe answers: a new field or rule asks again
        **host_facts(),
        "device": device,
        "torch": torch_version,
        "executable": sys.executable,
        "gpus": nvidia_gpus(),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **{name: os.environ.get(name) for name in THREAD_ENV_VARS},
    }
    return hashlib.sha1(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def check_factory(device: str, factory: str, isolation: str, timeout_s: float) -> None:
    if isolation == "fork":
        try:
            zygote = zygote_for([factory])
        except ZygoteUnavailable:
            pass  # the trials will be spawned; the probe child checks as they will import
        else:
            if factory in zygote.failed:
                raise ConfigError(zygote.failed[factory])
            return
    _ask(device, factory, timeout_s)


def _ask(device: str, factory: str | None, timeout_s: float) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", PROBE_MODULE, device, *([factory] if factory else [])],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(last.removeprefix("error: "))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def probe(device: str, factory: str | None = None, isolation: str = "spawn", timeout_s: float = 120) -> Machine:
    """The machine, and (given a task factory) that its module imports: found out before trial 1.
    A machine known from the cache is not asked again. With forked runs the zygote starts now
    (warm for trial 1) and checks the factory as the trials will import it."""
    path = cache_dir() / "machines" / f"{machine_key(device)}.json"
    machine = None
    if path.exists():
        try:
            machine = Machine.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, OSError):
            machine = None  # unreadable: ask again
    if machine is None:
        answer = _ask(device, factory, timeout_s)
        write_atomically(path, lambda tmp: None if tmp.write_text(json.dumps(answer)) else None)
        machine = Machine.from_dict(answer)
        checked = True
    else:
        checked = False
    if factory and (isolation == "fork" or not checked):
        check_factory(device, factory, isolation, timeout_s)
    return machine
