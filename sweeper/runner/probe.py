"""What this machine can run, asked once per sweep in a child process, so torch stays out of
the sweep's own process (the child is sweeper.measure.probe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..errors import ConfigError
from ..machine import Machine
from ..protocol import PARENT_PID_ENV, PROBE_MODULE


def probe(device: str, factory: str | None = None, timeout_s: float = 120) -> Machine:
    """The machine, and (given a task factory) that its module imports: found out before trial 1."""
    proc = subprocess.run(
        [sys.executable, "-m", PROBE_MODULE, device, *([factory] if factory else [])],
        capture_output=True, text=True, timeout=timeout_s, env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(last.removeprefix("error: "))
    return Machine.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))
