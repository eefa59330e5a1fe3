"""The plain loops' own throughput log, as a training script keeps one: samples counted after each
step against perf_counter, the rate of each second printed, and at the end the figure, the
samples over the time after a warm-up of `skip` seconds. Nothing of sweeper's."""

import json
import time
from collections.abc import Callable, Iterable
from typing import Any


class Stopwatch:
    def __init__(self, seconds: float, skip: float) -> None:
        self.seconds, self.skip = seconds, skip
        self.start = self.second = time.perf_counter()
        self.second_samples, self.counted, self.counted_from = 0, 0, None

    def step(self, samples: int) -> bool:
        """After a step of `samples`: True when the run is over (its figure printed)."""
        now = time.perf_counter()
        self.second_samples += samples
        if now - self.second >= 1.0:
            print(f"{now - self.start:.1f} {self.second_samples / (now - self.second):.1f}", flush=True)
            self.second, self.second_samples = now, 0
        if self.counted_from is not None:
            self.counted += samples
        elif now - self.start >= self.skip:
            self.counted_from = now
        if now - self.start < self.seconds:
            return False
        print(json.dumps({"samples_per_sec": self.counted / (now - self.counted_from)}), flush=True)
        return True


def run(
    loader: Iterable[Any],
    step: Callable[[Any], int],
    seconds: float,
    skip: float,
    each_epoch: Callable[[], None] = lambda: None,
) -> None:
    """Epoch after epoch over `loader` (`each_epoch` before each), `step` returning each batch's
    samples, until `seconds` have passed; the figure printed at the end."""
    clock = Stopwatch(seconds, skip)
    while True:
        each_epoch()
        for batch in loader:
            if clock.step(step(batch)):
                return
