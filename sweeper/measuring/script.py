"""A user's training script (task=script), measured as it runs: started in a process group of
its own within the run's session, its steps read as sweeper.track sends them (a FIFO) or as it
prints them (`sweeper: samples=N` on stdout, for loops that cannot call sweeper.track), timed by
the same loop as sweeper's own (timing.measure, its clock the script's step times), then
stopped (SIGTERM, then SIGKILL to its group) once the figure is known.

Steps are timed on the host. On a GPU that is the device's rate over a window of many steps:
the host can run ahead of the device only by the CUDA launch queue's depth (and a step that
reads a loss or synchronizes waits for the device), so over hundreds of steps the host's step
ends keep the device's pace; only the first and last few steps of a window can be off by the
queue, which is why windows hold many steps.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..outcome import last_line
from ..protocol import DEADLINE_ENV, LINE_PREFIX, STEPS_ENV, Step, parse_stdout_line, parse_step_records, scratch_dir
from ..result import Status, looks_like_oom
from .harness import own_thread

# after SIGTERM, a script gets this long to exit before its group is killed
STOP_GRACE_S = 5.0
# a tracked script's steps and output are read at most this often: each step carries its own end
# time, so a late read moves no figure (the CPU monitors' spans shift by as much, against at least
# three windows of 0.5 s), and sweeper's threads wake four times a second, not at every step or
# line: a wake-up costs 0.1-0.2 ms of a core on a VM, and a thread woken at each step took 12% of
# one at 3,000 steps a second; ten reads a second cost 0.15-0.5% of a core more than four
# (benchmarks/script_harness.py). Between two reads the output pipe holds 1 MiB: a script that
# prints more than 4 MiB a second waits on it. A script that prints its steps is read at once:
# the time its line is read is its step's end.
STEP_READ_S = 0.25
# the buffers of the steps FIFO and the output pipe, asked of the kernel so that what comes
# between two reads does not block the script: 37,000 steps, or 1 MiB of output (Linux's default
# is 64 KiB; unprivileged processes may ask for up to 1 MiB)
PIPE_BYTES = 1 << 20
# a script's last words are looked for in this much of the end of what it printed since the last
# read (more where these bytes hold fewer than the lines kept)
TAIL_BYTES = 16 << 10
_LINE_PREFIX = LINE_PREFIX.encode()
# the first step must come this long before measure.timeout_s, so that the run can say why
NO_STEPS_MARGIN_S = 3.0
# what a script that reports no steps is told to do (docs/your-code.md)
HOW_TO_REPORT = (
    "call sweeper.track(loader) (or sweeper.step(n)) in its loop, add sweeper's SweeperCallback to a "
    "Lightning or Hugging Face Trainer, or print 'sweeper: samples=N' after each step"
)


class ScriptFailed(Exception):
    """The script cannot be measured (it ended, never reported, or garbled its line); `status`
    and the message are the run's outcome."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class _Exited:
    returncode: int


class Script:
    """The script's process group, its output (teed to the run's log) and its steps."""

    def __init__(
        self, words: Sequence[str], env: Mapping[str, str], cwd: str | None, preexec: Callable[[], None] | None = None
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="sweeper-steps-", dir=scratch_dir()))
        self.tracked = False  # its steps came through sweeper.track / sweeper.step (not printed lines)
        fifo = self._dir / "steps"
        os.mkfifo(fifo)
        self._steps_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self._keep_fd = os.open(fifo, os.O_WRONLY)  # the FIFO never reads as ended while we hold it
        self.tail: deque[str] = deque(maxlen=40)
        self.steps_seen = 0
        self._events: queue.Queue[Any] = queue.Queue()
        self._batch: deque[Step] = deque()  # steps of the batch read last, not yet taken
        self.started = time.monotonic()

        def start() -> None:  # in the child, before exec (no thread of ours runs yet)
            os.setpgid(0, 0)  # its own group, in the run's session: stopped as one, killed with the run
            if preexec is not None:
                preexec()

        self.proc = subprocess.Popen(
            list(words),
            cwd=cwd,
            env={**os.environ, **env, STEPS_ENV: str(fifo), "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=start,
        )
        for fd in (self._steps_fd, self.proc.stdout.fileno()):  # type: ignore[union-attr]
            with contextlib.suppress(OSError, AttributeError):  # not Linux, or above the system's cap
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self._reader = own_thread(self._read)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- the reader thread: the script's output and its steps, in the order they came --
    def _read(self) -> None:
        out = self.proc.stdout.fileno()  # type: ignore[union-attr]
        buffers = {out: b"", self._steps_fd: b""}
        while True:
            ready, _, _ = select.select([out, self._steps_fd], [], [])
            if self._steps_fd in ready:
                self._read_steps(buffers)
            if out in ready:
                chunk = os.read(out, PIPE_BYTES)
                if not chunk:  # the script and everything it started closed its output
                    self._drain_steps(buffers)
                    self._events.put(_Exited(self.proc.wait()))
                    return
                os.write(sys.stdout.fileno(), chunk)  # the run's log
                self._output(out, buffers, chunk)
            if self.tracked:  # what comes next is read in one batch, STEP_READ_S from now
                time.sleep(STEP_READ_S)

    def _read_steps(self, buffers: dict[int, bytes]) -> None:
        """What the steps FIFO holds, as one event: the steps whole so far (a record cut by the
        read waits in `buffers` for its rest)."""
        try:
            chunk = os.read(self._steps_fd, PIPE_BYTES)
        except BlockingIOError:
            return
        fd = self._steps_fd
        try:
            steps, buffers[fd] = parse_step_records(buffers[fd] + chunk)
        except ValueError as exc:  # what follows is no more readable: the run ends on it
            buffers[fd] = b""
            self._events.put(ScriptFailed(Status.ERROR, str(exc)))
            return
        if steps:
            self.tracked = True  # sweeper.track or sweeper.step runs inside it
            self._events.put(steps)  # one event a batch of steps

    def _drain_steps(self, buffers: dict[int, bytes]) -> None:
        while select.select([self._steps_fd], [], [], 0)[0]:
            before = buffers[self._steps_fd]
            self._read_steps(buffers)
            if buffers[self._steps_fd] == before:
                return

    def _output(self, fd: int, buffers: dict[int, bytes], chunk: bytes) -> None:
        """The script's output lines: the last kept for its last words, and a `sweeper:` line as a
        step. Output with no such line is split only where its last words lie: a script printing
        a line at each of thousands of steps a second costs one search of each read, not Python's
        work on every line."""
        whole, _, buffers[fd] = (buffers[fd] + chunk).rpartition(b"\n")
        if _LINE_PREFIX not in whole:
            self.tail.extend(last_words(whole, self.tail.maxlen or 0))
            return
        for line in whole.split(b"\n"):
            text = line.decode(errors="replace")
            if text.strip():
                self.tail.append(text)
            try:
                said = parse_stdout_line(text)
            except ValueError as exc:
                self._events.put(ScriptFailed(Status.ERROR, str(exc)))
                continue
            if said is not None:
                self._events.put([Step(0, time.monotonic(), said[1], said[0])])

    # -- for the measuring loop --
    def next_step(self, deadline: float | None) -> Step:
        """The next step any rank reported; ScriptFailed when the script ended, garbled a line or
        reported nothing by `deadline` (monotonic)."""
        if not self._batch:
            self._batch.extend(self._next_batch(deadline))
        self.steps_seen += 1
        return self._batch.popleft()

    def _next_batch(self, deadline: float | None) -> list[Step]:
        """The next batch of steps the reader handed over (ScriptFailed as next_step says)."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            raise ScriptFailed(
                Status.ERROR,
                f"no steps reported in the {deadline - self.started:.0f} s that "  # type: ignore[operator]
                "measure.timeout_s left the script: " + HOW_TO_REPORT,
            ) from None
        if isinstance(event, ScriptFailed):
            raise event
        if isinstance(event, _Exited):
            raise exit_failure(event.returncode, list(self.tail), self.steps_seen)
        return event

    def stop(self) -> None:
        """SIGTERM to its group, SIGKILL after the grace; then reaped, and the FIFO gone."""
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.pid, signal.SIGKILL)  # what it left of its group (loader workers, ranks)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._reader.join(timeout=STOP_GRACE_S)
        for fd in (self._steps_fd, self._keep_fd):
            os.close(fd)
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()


class ScriptSteps:
    """The script's steps as timing.measure's loop sees them: `next_batch` waits for rank 0's
    next step (the other ranks' steps since add their samples to it), `step` ends it when the
    script said it ended, and `clock` is that step time (so a window is the script's own time)."""

    def __init__(
        self, script: Script, first_deadline: float | None, on_first: Callable[[], None] = lambda: None
    ) -> None:
        self.script, self.first_deadline, self.on_first = script, first_deadline, on_first
        self.now = script.started
        self.others = 0  # samples of the other ranks since rank 0's last step
        self.wait_known = True

    def clock(self) -> float:
        return self.now

    def next_batch(self) -> Step:
        while True:
            found = self.script.next_step(self.first_deadline if self.script.steps_seen == 0 else None)
            if self.script.steps_seen == 1:
                self.on_first()
            if found.rank == 0:
                break
            self.others += found.samples
        self.wait_known = self.wait_known and found.wait_s is not None
        self.now += found.wait_s or 0.0  # the batch arrived
        if not self.others:  # one rank, or none between: the step as it came (replace costs µs a step)
            return found
        step, self.others = found._replace(samples=found.samples + self.others), 0
        return step

    def step(self, step: Step) -> None:
        self.now = max(self.now, step.ended)

    @staticmethod
    def samples_of(step: Step) -> int:
        return step.samples


def exit_failure(returncode: int, tail: list[str], steps_seen: int) -> ScriptFailed:
    """Why a script that exited on its own, before its figure was known, failed the run: from its
    exit code, its last lines of output (`tail`) and the steps it reported."""
    said = " ".join(tail)
    where = f"after {steps_seen} steps"
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return ScriptFailed(
            Status.OOM if looks_like_oom(said) else Status.CRASH, f"the script was killed by {name} {where}"
        )
    if looks_like_oom(said):
        return ScriptFailed(Status.OOM, f"the script ran out of memory {where}: {last_line(chr(10).join(tail))}")
    if returncode:
        return ScriptFailed(
            Status.ERROR,
            f"the script exited with code {returncode} {where}: {last_line(chr(10).join(tail)) or 'no output'}",
        )
    if not steps_seen:  # it ran its loop, or none, without telling sweeper of a step
        return ScriptFailed(
            Status.ERROR,
            "the script ended (exit code 0) without reporting a step: " + HOW_TO_REPORT,
        )
    return ScriptFailed(
        Status.ERROR,
        f"the script ended (exit code 0) {where}, before its figure was known: "
        "let it run longer than warm-up and the windows take (more steps or epochs)",
    )


def last_words(output: bytes, lines: int) -> list[str]:
    """The last `lines` lines of `output` (whole lines) that are not blank, decoded: read from
    its end, TAIL_BYTES at first and more only where those hold fewer lines."""
    span = TAIL_BYTES
    while True:
        part = output[-span:].split(b"\n")
        whole = part if span >= len(output) else part[1:]  # the first may be cut by the slice
        said = [line for line in whole if line.strip()]
        if len(said) >= lines or span >= len(output):
            return [line.decode(errors="replace") for line in said[-lines:]] if lines else []
        span *= 4


def first_step_deadline(started: float, timeout_s: float) -> float:
    """When a script that reported no step is given up: a little before the parent kills the run
    ($SWEEPER_DEADLINE, which counts from the run's start, the zygote's start included)."""
    own = started + max(timeout_s * 0.5, timeout_s - NO_STEPS_MARGIN_S)
    killed_at = os.environ.get(DEADLINE_ENV)
    if killed_at:
        return max(started, min(own, float(killed_at) - NO_STEPS_MARGIN_S))
    return own
