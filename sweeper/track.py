"""The one line a training script changes to be measured by sweeper (task=script):

    for batch in sweeper.track(loader):      # or: sweeper.step(n) after each step
        ...

Under sweeper (its step FIFO named in $SWEEPER_STEPS), each step's end time, its loader wait
and its sample count go to the measuring process, which times the script as it times its own
loop; before the first step, the settings a process can change at any time that the sweep set
(flush_denormal, threads, cudnn.benchmark, TF32: $SWEEPER_FIRST_STEP) are applied here. Outside
sweeper `track` returns the iterable itself and `step` returns at once: nothing to measure,
nothing paid. Imports no torch (a batch's size is read from `.shape`; the settings use the
script's own torch).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from .protocol import FIRST_STEP_ENV, LOADER_CPUS_ENV, STEPS_ENV, step_record

T = TypeVar("T")
Samples = int | Callable[[Any], int] | None


class _Sender:
    """The open FIFO of this process (opened on the first step, again after a fork)."""

    def __init__(self, path: str) -> None:
        self.path, self.fd, self.pid = path, -1, -1
        self.rank = int(os.environ.get("RANK", "0"))

    def send(self, ended: float, wait_s: float | None, samples: int) -> None:
        if self.pid != os.getpid():
            self.fd, self.pid = os.open(self.path, os.O_WRONLY), os.getpid()
        os.write(self.fd, step_record(self.rank, ended, wait_s, samples))


_PATH = os.environ.get(STEPS_ENV)
_SENDER = _Sender(_PATH) if _PATH else None


def first_step_lines(settings: Mapping[str, Any]) -> list[str]:
    """The PyTorch lines that apply these settings (what the log says, what a script would write)."""
    lines = []
    if settings.get("flush_denormal"):
        lines.append("torch.set_flush_denormal(True)")
    if settings.get("threads") is not None:
        lines.append(f"torch.set_num_threads({int(settings['threads'])})")
    if settings.get("cudnn_benchmark"):
        lines.append("torch.backends.cudnn.benchmark = True")
    if settings.get("tf32"):
        lines += [
            "torch.backends.cuda.matmul.allow_tf32 = True",
            "torch.backends.cudnn.allow_tf32 = True",
        ]
    return lines


class _FirstStep:
    """The sweep's per-process settings, applied once, before the script's first step."""

    applied = False

    @classmethod
    def apply(cls) -> None:
        if cls.applied:
            return
        cls.applied = True
        settings = json.loads(os.environ.get(FIRST_STEP_ENV) or "{}")
        torch = sys.modules.get("torch")
        if not settings or torch is None:  # a script without torch has none of these settings
            return
        lines = first_step_lines(settings)
        for line in lines:  # the lines the log shows are the lines that ran (built from bools and an int)
            exec(line, {"torch": torch})
        print(f"sweeper.track applied at the first step: {'; '.join(lines)}", file=sys.stderr)


def leading_dimension(batch: Any) -> int | None:
    """The samples in a batch: the leading dimension of its first tensor (anything with a
    `.shape`), found in tuples, lists and dicts; None where there is none."""
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(batch, Mapping):
        return next((n for n in map(leading_dimension, batch.values()) if n is not None), None)
    if isinstance(batch, (list, tuple)):
        return next((n for n in map(leading_dimension, batch) if n is not None), None)
    return None


def count_samples(samples: Samples, fallback: int | None = None) -> Callable[[Any], int]:
    """The function that counts a batch's samples: `samples` itself, a constant, or the batch's
    leading dimension (then `fallback`, a loader's batch_size); a ValueError that says what to
    pass where none of these tells."""
    if callable(samples):
        return samples
    if isinstance(samples, int):
        return lambda batch: samples

    def count(batch: Any) -> int:
        found = leading_dimension(batch)
        if found is not None:
            return found
        if isinstance(fallback, int):
            return fallback
        raise ValueError(
            f"sweeper: cannot tell how many samples a {type(batch).__name__} batch holds: "
            "pass samples=<int> or samples=<function of the batch>"
        )

    return count


def _pin_workers(loader: Any) -> None:
    """backend.affinity: the DataLoader's workers on the loader's cores (a worker_init_fn of
    sweeper's before the loader's own)."""
    cpus = os.environ.get(LOADER_CPUS_ENV)
    own = getattr(loader, "worker_init_fn", "absent")
    if not cpus or own == "absent" or not getattr(loader, "num_workers", 0) or getattr(own, "sweeper_pins", False):
        return
    cores = tuple(int(c) for c in cpus.split(","))

    def pin_then_init(worker_id: int) -> None:
        os.sched_setaffinity(0, cores)
        if callable(own):
            own(worker_id)

    pin_then_init.sweeper_pins = True  # type: ignore[attr-defined]
    loader.worker_init_fn = pin_then_init


class _Tracked(Generic[T]):
    """The iterable, measured: each time the loop asks for the next batch, the step before it
    has ended."""

    def __init__(self, iterable: Iterable[T], samples: Samples, sender: _Sender) -> None:
        self._iterable, self._sender = iterable, sender
        self._count = count_samples(samples, getattr(iterable, "batch_size", None))
        _pin_workers(iterable)

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        _FirstStep.apply()
        send, count = self._sender.send, self._count
        iterator = iter(self._iterable)
        while True:
            asked = time.monotonic()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            got = time.monotonic()
            yield batch  # the loop's body runs here: the step ends when it asks again
            send(time.monotonic(), got - asked, count(batch))


def track(iterable: Iterable[T], samples: Samples = None) -> Iterable[T]:
    """`for batch in sweeper.track(loader):` -- measured under sweeper, the iterable itself
    outside it. `samples`: an int, or a function of the batch, where the batch's size is not the
    leading dimension of its first tensor (a DataLoader's batch_size is the fallback)."""
    if _SENDER is None:
        return iterable
    return _Tracked(iterable, samples, _SENDER)


class StepClock:
    """For loops sweeper does not own, told of their steps by hooks (sweeper.integrations):
    `began()` once a step's batch is in hand, `ended(samples)` when its optimizer step is done.
    The loader's wait is the time from the last step's end to this one's beginning (what the
    framework did in between included). Outside sweeper both return at once."""

    def __init__(self) -> None:
        self._last_end: float | None = None
        self._began: float | None = None

    def start(self) -> None:
        """Training starts: the first step's wait is counted from here."""
        self._last_end = time.monotonic()

    def began(self) -> None:
        if _SENDER is not None:
            _FirstStep.apply()
            self._began = time.monotonic()

    def ended(self, samples: int) -> None:
        if _SENDER is None:
            return
        now = time.monotonic()
        wait = None if self._began is None or self._last_end is None else max(0.0, self._began - self._last_end)
        _SENDER.send(now, wait, int(samples))
        self._last_end, self._began = now, None


def step(samples: int) -> None:
    """After each step of a loop with no single iterable: `sweeper.step(n)` (n samples). The
    loader's wait is not known this way (sweeper.track knows it)."""
    if _SENDER is not None:
        _FirstStep.apply()  # from the second step on
        _SENDER.send(time.monotonic(), None, int(samples))
