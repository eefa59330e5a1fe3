"""How the presets' spaces scale with the machine (sweeper.host): what the `${sweeper.*}`
resolvers of conf/search put in a space on 2 cores and on 256. Pure.

- Compute threads: powers of two up to the physical cores, as torch's own default and
  PyTorch's CPU launcher (`torch.backends.xeon.run_cpu`) count them; the SMT siblings are one
  choice more (all logical CPUs), offered, not assumed.
- Loader workers: on a few cores every count up to 4 (workers waiting on I/O may outnumber the
  cores); on more, powers of two up to the logical CPUs one process has (a 64-core box offers 8,
  16, 32, 64). On a GPU at least up to 16 (the preset's values on a single-GPU node).
- Data-parallel ranks: on the CPU up to one per physical core; on a GPU one per GPU at most.
- NUMA binding of ranks: on two nodes or more.
- OpenMP's binding: close and spread on more than two logical CPUs, close alone on two.
"""

from __future__ import annotations

from ..host import Host

# every worker count up to this many is a choice on a small machine (range(0,5))
FEW_WORKERS = 4
# the GPU preset's workers reach at least this many, whatever the cores
GPU_WORKERS_AT_LEAST = 16


def powers_of_two_upto(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    values, v = [], 1
    while v < n:
        values.append(v)
        v *= 2
    return [*values, max(1, n)]


def thread_choices(host: Host) -> list[int]:
    """Compute threads: over the physical cores, and the SMT siblings as one choice more."""
    choices = powers_of_two_upto(host.usable_physical)
    return [*choices, host.usable_logical] if host.usable_logical > choices[-1] else choices


def worker_space(host: Host) -> str:
    """The CPU preset's loader workers, as a sweep expression: range(0,5) on up to 4 CPUs
    (as on the machines the preset was tuned on), else 0 and powers of two up to the CPUs."""
    cpus = host.usable_logical
    if cpus <= FEW_WORKERS:
        return f"range(0,{FEW_WORKERS + 1})"
    return "choice(" + ",".join(map(str, [0, *powers_of_two_upto(cpus)])) + ")"


def gpu_worker_choices(host: Host) -> list[int]:
    """The GPU preset's loader workers: 0, 2, 4, 8, 16, and on to the CPUs where there are more."""
    top = max(GPU_WORKERS_AT_LEAST, host.usable_logical)
    return [0, *(n for n in powers_of_two_upto(top) if n >= 2)]


def rank_choices(host: Host) -> list[int]:
    """CPU data-parallel ranks: with two physical cores or more, powers of two up to one per core."""
    return powers_of_two_upto(host.usable_physical) if host.usable_physical >= 2 else [1]


def gpu_rank_choices(host: Host) -> list[int]:
    """GPU data-parallel ranks: one per GPU at most, powers of two up to the GPUs."""
    return powers_of_two_upto(len(host.gpus)) if len(host.gpus) >= 2 else [1]


def omp_binds(host: Host) -> list[str]:
    """backend.omp_bind values that place threads differently: on two logical CPUs, OpenMP's
    spread puts every thread count where close does (one thread on the first place, two on one
    place each, as each thread's CPUs read under GNU's libgomp; Intel's compact and scatter have
    the same two CPUs to fill), so close stands for both; on one, binding places nothing."""
    if host.logical < 2:
        return ["default"]
    return ["default", "close", "spread"] if host.logical > 2 else ["default", "close"]


def numa_modes(host: Host) -> list[str]:
    """backend.numa values that mean something: node binding needs two nodes or more."""
    return ["none", "node"] if len(host.nodes) >= 2 else ["none"]


def affinities(host: Host) -> list[str]:
    """backend.affinity values that mean something: pinning needs two cores or more."""
    return ["none", "compact", "spread"] if host.usable_logical >= 2 else ["none"]
