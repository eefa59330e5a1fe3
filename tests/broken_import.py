"""A workload module that raises while it is imported (task.factory=broken_import:build)."""

raise RuntimeError("this module is broken on purpose")


def build(task):  # pragma: no cover - never reached
    return None
