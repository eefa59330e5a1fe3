"""Hydra's sweep grammar -> Optuna distributions, the conditional space, and their errors."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from sweeper.errors import ConfigError
from sweeper.search import space as ss


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("choice(1,2,3)", CategoricalDistribution([1, 2, 3]), id="choice"),
        pytest.param("a,b", CategoricalDistribution(["a", "b"]), id="plain-list"),
        pytest.param("true,false", CategoricalDistribution([True, False]), id="bools"),
        pytest.param("range(0,5)", IntDistribution(0, 4), id="range-excludes-stop"),
        pytest.param("range(32,1025,32)", IntDistribution(32, 1024, step=32), id="range-step"),
        pytest.param("range(0,10,3)", IntDistribution(0, 9, step=3), id="range-step-uneven"),
        pytest.param("interval(0.1,1)", FloatDistribution(0.1, 1.0), id="float-interval"),
        pytest.param("interval(1,10)", IntDistribution(1, 10), id="int-interval"),
        pytest.param("int(interval(1,100))", IntDistribution(1, 100), id="int-cast"),
        pytest.param("tag(log,interval(0.001,1))", FloatDistribution(0.001, 1.0, log=True), id="log-float"),
        pytest.param("tag(log,interval(1,64))", IntDistribution(1, 64, log=True), id="log-int"),
        pytest.param("tag(log,int(interval(1,64)))", IntDistribution(1, 64, log=True), id="log-int-cast"),
    ],
)
def test_grammar_to_distribution(text, expected):
    assert ss.to_distribution("k", text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("tag(log,range(1,64,2))", "cannot combine log with step", id="log-step"),
        pytest.param("tag(log,choice(1,2))", "needs interval", id="log-choice"),
        pytest.param("interval(5,1)", "low < high", id="empty-interval"),
        pytest.param("tag(log,interval(0,1))", "low > 0", id="log-zero"),
        pytest.param("range(5,1)", "start < stop", id="empty-range"),
        pytest.param("choice(1,2", "search param k=", id="syntax"),
    ],
)
def test_grammar_errors_are_one_line(text, message):
    with pytest.raises(ConfigError) as err:
        ss.to_distribution("k", text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_fixed_value_in_params_is_refused():
    with pytest.raises(ConfigError, match="single value"):
        ss.build_space({"loader.batch_size": "64"})


CPU = ss.Context(cuda=False, bf16=True, convolutional=False)
GPU = ss.Context(cuda=True, bf16=False, convolutional=True)


@pytest.mark.parametrize(
    ("key", "chosen", "ctx", "active"),
    [
        pytest.param("loader.prefetch_factor", {"loader.num_workers": 0}, CPU, False, id="prefetch-0-workers"),
        pytest.param("loader.prefetch_factor", {"loader.num_workers": 2}, CPU, True, id="prefetch-workers"),
        pytest.param("loader.persistent_workers", {"loader.num_workers": 0}, GPU, False, id="persistent-0"),
        pytest.param("loader.pin_memory", {}, CPU, False, id="pin-cpu"),
        pytest.param("loader.pin_memory", {}, GPU, True, id="pin-gpu"),
        pytest.param("backend.channels_last", {}, CPU, False, id="channels-last-mlp"),
        pytest.param("backend.channels_last", {}, GPU, True, id="channels-last-conv"),
        pytest.param("backend.channels_last", {}, ss.Context(False, True, None), True, id="channels-last-unknown"),
        pytest.param("backend.tf32", {}, CPU, False, id="tf32-cpu"),
        pytest.param("loader.batch_size", {}, CPU, True, id="batch"),
        pytest.param("loader.in_order", {"loader.num_workers": 0}, CPU, False, id="in-order-0"),
        pytest.param("loader.multiprocessing_context", {"loader.num_workers": 3}, CPU, True, id="mp-context"),
    ],
)
def test_conditional_space(key, chosen, ctx, active):
    assert ss.is_active(key, chosen, ctx) is active


def test_precisions_the_machine_cannot_run_are_dropped():
    space = {"backend.precision": CategoricalDistribution(["fp32", "bf16", "fp16"])}
    assert ss.restrict_to_machine(space, CPU)["backend.precision"].choices == ("fp32", "bf16")
    assert ss.restrict_to_machine(space, GPU)["backend.precision"].choices == ("fp32", "fp16")
    only_fp16 = {"backend.precision": CategoricalDistribution(["fp32", "fp16"])}
    assert "backend.precision" not in ss.restrict_to_machine(only_fp16, CPU)  # nothing left to choose


def test_in_order_is_dropped_where_the_installed_torch_lacks_it():
    space = {
        "loader.in_order": CategoricalDistribution([True, False]),
        "loader.multiprocessing_context": CategoricalDistribution(["forkserver", "spawn"]),
    }
    old_torch = ss.Context(cuda=False, bf16=True, convolutional=False, loader_in_order=False)
    assert set(ss.restrict_to_machine(space, old_torch)) == {"loader.multiprocessing_context"}
    assert set(ss.restrict_to_machine(space, CPU)) == set(space)


def test_baseline_value_is_made_part_of_the_space():
    """A choice takes your value as one choice more; a range is searched as you wrote it, your
    value kept in the baseline alone (range(1,10) once became range(1,65) for a batch of 64)."""
    assert ss.include_value(CategoricalDistribution([128, 256]), 64).choices == (128, 256, 64)
    assert ss.include_value(IntDistribution(1, 10), 64) == IntDistribution(1, 10)
    assert ss.include_value(FloatDistribution(0.1, 1.0), 2.0) == FloatDistribution(0.1, 1.0)
    assert ss.include_value(CategoricalDistribution([1, 2]), None).choices == (1, 2, None)


def test_conditioned_knobs_are_suggested_last():
    order = ss.suggestion_order(["loader.prefetch_factor", "loader.num_workers", "backend.precision"])
    assert order[-1] == "loader.prefetch_factor"
    # the binding after what decides whether it is sampled: workers, ranks, affinity
    order = ss.suggestion_order(["backend.omp_bind", "loader.num_workers", "dist.nproc_per_node", "backend.affinity"])
    assert order[-1] == "backend.omp_bind"


@pytest.mark.parametrize(
    ("chosen", "sampled"),
    [
        pytest.param({"loader.num_workers": 0, "dist.nproc_per_node": 1}, True, id="one-process-alone"),
        pytest.param({"loader.num_workers": 2, "backend.affinity": "none"}, False, id="workers-share-its-core"),
        pytest.param({"loader.num_workers": 0, "dist.nproc_per_node": 2}, False, id="ranks-share-its-core"),
        pytest.param({"loader.num_workers": 2, "backend.affinity": "compact"}, True, id="affinity-places-them"),
    ],
)
def test_openmp_binding_is_sampled_only_where_it_pins_the_compute_threads_alone(chosen, sampled):
    """OpenMP's binding pins the process's thread to one core as OpenMP starts, and its loader
    workers and ranks inherit that core: without affinity to place them, the preset leaves the
    process unbound."""
    assert ss.is_active("backend.omp_bind", chosen, CPU) is sampled
    assert ss.dead_value("backend.omp_bind") == "default"


def test_cpu_placement_and_allocator_evidence():
    from sweeper.topology import Placement, allocator_in_maps, place

    # compact: compute threads on the first cores, loader workers on the rest
    assert place("compact", range(8), 2, 4) == Placement((0, 1), (2, 3, 4, 5, 6, 7))
    # spread: compute spaced evenly over the machine
    assert place("spread", range(8), 2, 4) == Placement((0, 4), (1, 2, 3, 5, 6, 7))
    # threads unset: the cores the workers leave; no core left over: the workers share
    assert place("compact", [0, 1], None, 1) == Placement((0,), (1,))
    assert place("spread", [0, 1], 2, 2) == Placement((0, 1), (0, 1))
    assert place("none", [0, 1], 1, 1) is None
    maps = "7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"
    assert allocator_in_maps(maps) == "jemalloc" and allocator_in_maps("libc.so.6") == "default"


def test_an_effective_batch_keeps_only_the_batch_sizes_that_divide_it():
    from optuna.distributions import IntDistribution

    from sweeper.errors import ConfigError

    space = {
        "loader.batch_size": CategoricalDistribution([32, 64, 96, 128, 512]),
        "backend.threads": CategoricalDistribution([1, 2]),
    }
    held = ss.hold_effective_batch(space, 256)
    assert held["loader.batch_size"].choices == (32, 64, 128) and held["backend.threads"] is space["backend.threads"]
    ranged = ss.hold_effective_batch({"loader.batch_size": IntDistribution(16, 80, step=16)}, 96)
    assert ranged["loader.batch_size"].choices == (16, 32, 48)
    assert ss.hold_effective_batch(space, None) is space
    with pytest.raises(ConfigError, match="train.effective_batch=100: no loader.batch_size of the search space"):
        ss.hold_effective_batch({"loader.batch_size": CategoricalDistribution([64, 128])}, 100)


def test_ranks_the_preset_chose_never_oversubscribe_and_always_hold_the_effective_batch():
    knobs = {"loader.batch_size": 64, "loader.num_workers": 0, "backend.threads": 1, "dist.nproc_per_node": 2}
    assert ss.unsampled_reason(knobs, 2, None, ranks_from_preset=True) is None
    over = {**knobs, "backend.threads": 2}
    assert "2 ranks x (2 threads, 0 loader workers) oversubscribe the 2 cores" in ss.unsampled_reason(
        over, 2, None, ranks_from_preset=True
    )
    assert ss.unsampled_reason(over, 2, None, ranks_from_preset=False) is None  # the user asked for it
    assert "2 ranks x (1 thread, 2 loader workers) oversubscribe" in ss.unsampled_reason(
        {**knobs, "loader.num_workers": 2}, 2, None, ranks_from_preset=True
    )
    assert "3 ranks x (1 thread, 1 loader worker) oversubscribe" in ss.unsampled_reason(
        {**knobs, "loader.num_workers": 1, "dist.nproc_per_node": 3}, 2, None, ranks_from_preset=True
    )
    assert "loader.batch_size=64 x dist.nproc_per_node=2 does not divide train.effective_batch=96" in (
        ss.unsampled_reason(knobs, 2, 96, ranks_from_preset=False)
    )


def test_an_oversubscribed_point_is_fitted_to_the_cores_each_rank_has_where_the_space_allows():
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space = {"backend.threads": CategoricalDistribution([None, 1, 2, 4]), "loader.num_workers": IntDistribution(0, 4)}
    point = {"loader.batch_size": 64, "loader.num_workers": 4, "backend.threads": 4, "dist.nproc_per_node": 2}
    assert ss.within_cores(point, 4, space) == {**point, "backend.threads": 2, "loader.num_workers": 2}
    assert ss.within_cores({**point, "backend.threads": None}, 4, space) == {
        **point,
        "backend.threads": None,
        "loader.num_workers": 2,
    }  # null threads: one per rank already fits
    assert ss.within_cores({**point, "loader.num_workers": 1, "backend.threads": 2}, 4, space) is None  # fits
    assert ss.within_cores(point, 4, {"loader.num_workers": space["loader.num_workers"]}) is None  # threads fixed
    assert ss.within_cores({**point, "dist.nproc_per_node": 8}, 4, space) is None  # 8 ranks never fit 4 cores


def test_numa_binding_lives_only_with_ranks_and_kmp_blocktime_only_under_intel_openmp():
    ctx = ss.Context(cuda=False, bf16=True, convolutional=None)
    assert not ss.is_active("backend.numa", {"dist.nproc_per_node": 1}, ctx)
    assert ss.is_active("backend.numa", {"dist.nproc_per_node": 2}, ctx)
    space = {
        "backend.kmp_blocktime": CategoricalDistribution([None, 0, 200]),
        "backend.omp_bind": CategoricalDistribution(["default", "close"]),
    }
    assert set(ss.restrict_to_machine(space, ctx)) == {"backend.omp_bind"}
    intel = ss.Context(cuda=False, bf16=True, convolutional=None, openmp="intel")
    assert set(ss.restrict_to_machine(space, intel)) == set(space)
