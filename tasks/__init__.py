"""The benchmark workloads moved to `sweeper.tasks`; this name keeps configs and scripts that
still say `tasks.mnist_mlp:build` working for one release (0.2), with a warning."""

import importlib
import sys
import warnings

MOVED = ("mnist_mlp", "image_classification", "language_model")

warnings.warn(
    "the package `tasks` is now `sweeper.tasks` (e.g. task.factory=sweeper.tasks.mnist_mlp:build); "
    "`tasks` goes away in sweeper 0.2",
    FutureWarning,
    stacklevel=2,
)
for _name in MOVED:
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"sweeper.tasks.{_name}")
