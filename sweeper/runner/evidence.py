"""Evidence that the kernel killed a run for memory: the OOM-kill counter of the memory cgroup
the runs live in (cgroup v2 `memory.events`, v1 `memory.oom_control`), read before and after.
A SIGKILL with the counter risen is an OOM kill, whatever the log says (pure parsing + reads)."""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def memory_cgroup_files(proc_cgroup: str, root: Path | None = None) -> list[Path]:
    """Where this process's memory cgroup keeps its OOM-kill counter, from /proc/self/cgroup."""
    root = root or CGROUP_ROOT
    found = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        rel = path.lstrip("/")
        if hierarchy == "0" and controllers == "":  # cgroup v2
            for base in (root, root / "unified"):
                found.append(base / rel / "memory.events")
        elif "memory" in controllers.split(","):  # cgroup v1
            found.append(root / "memory" / rel / "memory.oom_control")
    return found


def parse_oom_kills(text: str) -> int | None:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return None


def oom_kills() -> int | None:
    """The OOM kills counted in this process's memory cgroup so far; None where none is readable."""
    try:
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for path in memory_cgroup_files(own):
        try:
            count = parse_oom_kills(path.read_text())
        except OSError:
            continue
        if count is not None:
            return count
    return None


def oom_killed(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before
