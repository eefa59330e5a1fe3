"""The sweeper's settings (`hydra.sweeper.*`), declared once: the Hydra plugin's config extends
this dataclass, and the sweep reads it typed. Keys shared with Hydra's Optuna sweeper mean the same.
"""
# No `from __future__ import annotations`: OmegaConf reads these annotations as types.

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from ..choice import Choice
from ..errors import ConfigError
from ..measurement import DEFAULT_OBJECTIVES, DIRECTIONS

# the runners-up a confirmation may take beside the search's fastest, when its first round does
# not decide: one. Confirming the fastest alone lost 0.002-0.005 of the pick on the replay bench, and a
# second runner-up costs a round's run for near-ties the rounds rarely separate (docs/benchmarks.md)
RUNNERS_UP = 1

# settings a sweep no longer has, and what does their work now: one line where a user still sets one
REMOVED = {
    "prune_ratio": "the prune floor follows the run-to-run noise (hydra.sweeper.run_noise; 0.08 = a floor "
    "at 0.80 of the best), and hydra.sweeper.race=false turns it off with the race",
    "patience": "the search stops when further trials are unlikely to beat the best beyond the run-to-run "
    "noise (hydra.sweeper.converge), at n_trials at the most",
    "confirm.min_rounds": "the rounds stop once the lead is decided beyond the run-to-run noise; a larger "
    "hydra.sweeper.run_noise asks more of one round",
    "remeasure": "hydra.sweeper.reuse=none measures every configuration, again where the study holds it",
    "reuse_studies": "hydra.sweeper.reuse=studies takes the results of the storage's other studies of the "
    "same workload and hardware class",
    "direction": "each objective has its own direction: samples_per_sec is maximized, memory and step "
    "times are minimized",
    "sweep_precision": "a sweep's runs measure to the precision the run-to-run noise asks for (0.11 at "
    "hydra.sweeper.run_noise=0.08), or to measure.rel_precision where that is looser",
    "staged": "it is search.staged now, beside the search= preset's main knobs",
    "later": "it is search.later_after now, beside the search= preset's later knobs",
    "recipes": "it is search.recipes now, beside the other start points of the search= preset",
    "warm_start": "it is search.warm_start now, beside the other start points of the search= preset",
    "quiet_wait_s": "it is measure.quiet_wait_s now, beside measure.foreign_cpu_max_pct, the load it waits out",
    "constraints.max_memory_gb": "a limit is set on any measured figure, in its own unit: "
    "hydra.sweeper.constraints={peak_memory_mb: 8192} for 8 GB",
    "confirm.runners_up": "the runner-up joins the rounds when the first round does not decide",
    "confirm.top_k": "the search's fastest is confirmed, and its runner-up joins when the first round does not "
    "decide; hydra.sweeper.confirm=0 turns the confirmation off",
    "confirm.rounds": "it is hydra.sweeper.confirm=N now: the interleaved rounds at most, 0 = no confirmation",
}


class Reuse(Choice):
    """Which results already measured answer a configuration instead of a run."""

    study = "study"  # this study's own (the same configuration, the same fixed overrides)
    studies = "studies"  # also the storage's other studies of the same workload and hardware class
    none = "none"  # none: every configuration is measured, again if the study holds it


class LockMode(Choice):
    """What a sweep does about another measurement on its machine."""

    wait = "wait"
    fail = "fail"
    off = "off"


@dataclass
class SearchConf:
    """A search= preset: what a sweep searches, in what order, and where it starts. A config
    without a search group (another Hydra app's) searches its hydra.sweeper.params with these
    defaults."""

    # the preset's name (auto: gpu where backend.device resolves to CUDA, else cpu)
    preset: str = "none"
    # knob -> Hydra sweep expression; hydra.sweeper.params and the command line add to them
    params: Dict[str, str] = field(default_factory=dict)
    # the knobs that move throughput most, searched first where `staged` asks for it
    main: List[str] = field(default_factory=list)
    # knobs that cost seconds of start-up a trial and leave the steady rate alone (how loader
    # workers start): held at your config's values for the first `later_after` of n_trials,
    # then tried once at the best so far and searched only if that was a gain there
    later: List[str] = field(default_factory=list)
    # this share of n_trials searches the main knobs (and those you swept) alone, the others
    # held at your config's values; null or 0 = the whole space from the start: staging helps
    # only where the secondary knobs' defaults are already best
    staged: Optional[float] = None
    # the share of n_trials before the `later` knobs open; null or 0 = searched from the start
    later_after: Optional[float] = 0.5
    # after the baseline, the practitioners' recipes: the largest batch, bf16 where the device
    # computes it in hardware, pinned memory on CUDA, the cores split between loader workers and
    # compute threads from either side: points often near the best, measured before the sampler
    # learns anything
    recipes: bool = True
    # after the baseline, the winners of this study's workload on the lab's other hardware
    # classes (the storage's studies whose names differ from this one's in the class alone)
    warm_start: bool = True

    def check(self) -> None:
        """The shares are shares of n_trials: one line naming the value otherwise."""
        if self.staged is not None and not 0 <= self.staged < 1:
            raise ConfigError(
                f"search.staged={self.staged} is invalid: expected a share of n_trials in [0, 1) (the "
                "trials that search the main knobs alone), or null."
            )
        if self.later_after is not None and not 0 <= self.later_after <= 1:
            raise ConfigError(
                f"search.later_after={self.later_after} is invalid: expected a share of n_trials in "
                "[0, 1] (the trials before the preset's later knobs open), or null."
            )


@dataclass
class SweepSettings:
    # any Optuna sampler as a _target_ node (TPESampler, NSGAIISampler, GPSampler, RandomSampler,
    # GridSampler: its search_space comes from params); TPE starts after 5 random trials unless
    # sampler.n_startup_trials says otherwise
    sampler: Dict[str, Any] = field(default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": None})
    # any Optuna storage URL or journal:<path>; null = sqlite:///outputs/sweeper.db under the working directory
    storage: Optional[str] = None
    # null = <task>-<mode>-<device>-<hardware class>; the same name continues the study
    study_name: Optional[str] = None
    # trials in the study in total (a second run of the same command continues up to this)
    n_trials: int = 20
    # trials measured at once, launched as one batch through hydra/launcher (each job on a
    # machine of its own, e.g. hydra/launcher=submitit_slurm); 1 with the basic launcher
    n_jobs: int = 1
    # knob -> Hydra sweep expression, e.g. loader.batch_size: choice(64,256); added to the preset
    params: Optional[Dict[str, str]] = None
    # wall budget for the whole sweep including the confirmation: 8h, 30m, 90s; null = none
    timeout: Optional[str] = None
    # print the plan and measure nothing: `here` (this machine, with an estimate of the sweep's
    # wall time) or a machine description file (python -m sweeper.host prints this machine's);
    # null = sweep
    plan: Optional[str] = None
    # measured figures to optimise: samples_per_sec, peak_memory_mb, step_time_p95_ms, ...
    objectives: List[str] = field(default_factory=lambda: list(DEFAULT_OBJECTIVES))
    # limits on measured figures, figure -> limit: a cost (memory, step time) at most its limit,
    # samples_per_sec at least its; a configuration past one is measured and kept, never ranked,
    # confirmed or the winner. {step_time_p99_ms: 50, peak_memory_mb: 40000}: a latency budget and
    # a memory cap (the device's memory on a GPU; peak_rss_mb: the host's)
    constraints: Dict[str, float] = field(default_factory=dict)
    # the confirmation: the search's fastest re-measured against the baseline in up to this many
    # interleaved rounds, the order rotated each round (A base, base A, ...); they stop once the
    # one test (sweeper/verdict.py) has decided the lead (one round can do it). The runner-up joins
    # when the first round does not decide. 0 = no confirmation
    confirm: int = 3
    # stop before n_trials once the search has converged: none of the last trials the sampler
    # chose was faster than the best before it by the one test (sweeper/verdict.py), after each
    # main knob was measured at two values at least (search/converge.py); false = every trial
    converge: bool = True
    # race each trial against the best so far: one whose 95% interval lies wholly below the
    # best's, widened to where the test calls one run slower than another, stops early (pruned,
    # both in its reason), and so does one whose first two windows run slower than the best by
    # the test (below 0.80 of it at run_noise=0.08); the baseline is never raced
    race: bool = True
    # the run-to-run spread of one configuration's figure on this kind of machine (relative
    # sigma), the prior of the sweep's noise estimate, which the points measured more than once
    # update (sweeper/noise.py). The one test every decision makes (sweeper/verdict.py) reads the
    # estimate: racing and its floor, a gain, convergence, the confirmation, the watch. null or
    # 0 = the windows' noise alone
    run_noise: Optional[float] = 0.08
    # which results answer a configuration instead of a run: this study's (study); also the
    # storage's other studies of the same workload and hardware class and the same fixed
    # overrides (studies: a study named per night, say; they rank as this study's own and count
    # as reused, and the confirmation measures the winner and the baseline again side by side);
    # none: every configuration is measured, again where the study holds it
    reuse: Reuse = Reuse.study
    # one measurement per machine (per GPU): wait for another sweeper's trial, fail at once
    # when the machine is busy at the start (exit code 75), or off
    lock: LockMode = LockMode.wait
    # the nightly watch: before the search, the study's confirmed winner and your configuration
    # measured side by side against their confirmed figures. The night holds (no search, exit 0),
    # drifted (exit 3) or changed fingerprint (exit 4), and then re-tunes (search/watch.py)
    watch: bool = False

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> "SweepSettings":
        """Typed settings from the plugin's keyword arguments (Hydra has checked the types)."""
        try:
            merged = OmegaConf.merge(OmegaConf.structured(cls), dict(values))
        except ValidationError as exc:  # a value its field's type refuses: one line, named in full
            choices = str(exc).splitlines()[0].partition("expected one of [")[2].rstrip("]")
            expected = f"expected one of {choices}" if choices else str(exc).splitlines()[0]
            raise ConfigError(f"hydra.sweeper.{exc.full_key}={exc.value!r} is invalid: {expected}.") from exc
        settings = OmegaConf.to_object(merged)
        assert isinstance(settings, cls)
        settings.check()
        return settings

    def check(self) -> None:
        if self.n_trials < 1:
            raise ConfigError(f"hydra.sweeper.n_trials={self.n_trials} is invalid: expected an integer >= 1.")
        if self.n_jobs < 1:
            raise ConfigError(f"hydra.sweeper.n_jobs={self.n_jobs} is invalid: expected an integer >= 1.")
        if self.run_noise is not None and not 0 <= self.run_noise < 1:
            raise ConfigError(
                f"hydra.sweeper.run_noise={self.run_noise} is invalid: expected a relative spread in "
                "[0, 1) (0.08 = 8% between runs of one configuration), or null."
            )
        if self.confirm < 0:
            raise ConfigError(
                f"hydra.sweeper.confirm={self.confirm} is invalid: expected an integer >= 0 (the interleaved "
                "rounds at most; 0 = no confirmation)."
            )
        for figure, limit in self.limits.items():
            if figure not in DIRECTIONS:
                raise ConfigError(
                    f"hydra.sweeper.constraints: {figure!r} is not a measured figure: expected some of "
                    f"{', '.join(DIRECTIONS)}, each with its limit ({{step_time_p99_ms: 50}})."
                )
            if not limit > 0:
                raise ConfigError(f"hydra.sweeper.constraints.{figure}={limit} is invalid: expected a number > 0.")

    @property
    def grid(self) -> bool:
        """Whether the sampler is Optuna's GridSampler: it measures every point of the space, and
        takes no account of queued ones (a recipe would be measured twice)."""
        return str((self.sampler or {}).get("_target_", "")).endswith("GridSampler")

    @property
    def limits(self) -> dict[str, float]:
        """hydra.sweeper.constraints as figure -> limit (none set: empty)."""
        return {str(k): float(v) for k, v in (self.constraints or {}).items()}

    @property
    def run_spread(self) -> float:
        """run_noise as a number (null = 0: the windows' noise alone)."""
        return self.run_noise or 0.0

    @property
    def confirmation_runs(self) -> int:
        """The confirmation's runs at most: each round the winner, the baseline and a runner-up."""
        return self.confirm * (2 + RUNNERS_UP)

    @property
    def first_round_runs(self) -> int:
        """Runs of the confirmation's first round, the runner-up joined: what a time budget keeps
        for it (the confirmation runs as many rounds as the budget then holds; none where it cannot
        hold the winner's and the baseline's runs)."""
        return 1 + RUNNERS_UP + 1 if self.confirm else 0
