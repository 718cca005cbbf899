"""Training: the agents refine every operator of a suite, episode after episode, and learn by
multi-agent PPO.

Sampling and learning are decoupled: samplers keep producing episodes with the policy version
published last, while the learner updates on the episodes already collected; every transition
carries the version that sampled it and those older than `max_staleness` versions are dropped.
A sampler job is a plain function of (policy weights, operator, seeds): threads of this process
run it (`fleet.py`), or with `ray` the sampler actors of a Ray fleet (`cuda_agent/fleet/`).
Checkpoints are written atomically after every iteration and a run resumes from one exactly
where it stopped (a Ray fleet's run from its last update, not bit for bit).
"""

from __future__ import annotations

import copy
import json
import math
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..build.builder import Builder
from ..errors import DeviceError, SettingsError, UnsupportedError
from ..example_data import example_suite
from ..problem_child import LoadLimits, load_problem_bounded
from ..runner.devices import Device
from ..search.stop import StopRule
from ..space.slots import AGENTS
from ..store import Store
from ..settings import RunSettings, with_run_fields
from ..tuner import Tuner, open_device
from . import checkpoint
from .episode import Episode
from .fleet import LocalFleet
from .policy import MultiAgentPolicy
from .ppo import PPOSettings, update
from .prior import POOL
from .reward import RewardSettings
from .vocab import SpaceIndex


TRAIN_RUN = RunSettings(strategy="random", baselines=False, profile_every=4, time_limit_s=None)
"""training's run settings unless told otherwise: the operators' measurers ask no strategy
(the episodes propose: `EpisodeProposer`) and time no baselines; Nsight Compute every 4th
candidate on cuda; no time limit"""


@dataclass
class TrainSettings:
    """Everything a training run takes."""

    suite: str = field(default_factory=example_suite)
    """directory of problem files (or a comma-separated list of files)"""
    holdout: tuple[str, ...] = ()
    """problem names kept out of training (for held-out evaluation)"""
    agents: str = "multi"
    """multi: the four agents; single: one agent owning every slot (the ablation)"""
    iterations: int = 20
    episodes: int = 4
    """episodes per iteration, each on an operator drawn from the suite"""
    operators_per_iteration: int = 0
    """0: every episode draws its own operator; n > 0: an iteration's episodes share n operators,
    grouped, so one device set-up (inputs, reference answers) serves several episodes; on a
    GPU, where setting up a 1-2 GB problem costs seconds, this is most of the training time"""
    steps: int = 4
    """steps per episode"""
    batch: int = 8
    """joint actions measured per step"""
    hidden: int = 64
    explore: str = "targeted"
    """targeted: one agent at a time gets a raised temperature (on a schedule and when an
    episode stalls); none: every agent samples at temperature 1"""
    explore_temperature: float = 2.0
    stall_steps: int = 2
    """steps without improvement after which the next agent's temperature is raised"""
    max_staleness: int = 1
    """drop experience sampled by a policy more than this many versions old"""
    prior_weight: float = 0.0
    """the analytic model's estimate added to the episodes' proposal scores, as tuning adds it
    (`prior.py`, `strategy.PRIOR_WEIGHT`); 0: off. With it the policy is trained on the
    batches it will see when tuning: configurations the model already rates near the best, to
    be told apart by what the model misses"""
    sim_constants: str | None = None
    """the analytic model's constants for the prior (`costmodel/folds.py`: a fold's file, fitted
    without the problems held out of this run; None: the shipped model)"""
    samplers: int = 1
    """episodes sampled concurrently: threads of this process (one on the cuda device), or with
    `ray` the sim/replay fleet's sampler actors (on cuda: one per GPU of the cluster)"""
    ray: str | None = None
    """None: sample in this process. "auto" (a running cluster, else a local one started for
    the run), "local" (a local one started for the run) or a cluster's address: sample on a
    Ray fleet (`fleet/`), the learner here, asynchronous"""
    out: str = "runs/train"
    """checkpoint, curves and plots go here"""
    resume: bool = False
    reward: RewardSettings = field(default_factory=RewardSettings)
    ppo: PPOSettings = field(default_factory=PPOSettings)
    run: RunSettings = TRAIN_RUN
    """the run settings (`settings.RunSettings`), of which training reads: `device` (cuda, sim
    or replay; None: cuda when a GPU is present, else sim), `replay_root`, `seed`, `store`
    (None: in memory), `profile_every` (on cuda, the agents' local metrics come from Nsight
    Compute for every n-th candidate) and `time_limit_s` (no update is started that the last
    one's duration says would end past it; None: no limit); each operator's measurer takes
    them whole"""

    @staticmethod
    def of(**fields: Any) -> "TrainSettings":
        """The settings from training's fields and the run's by name (the Python API's
        shorthand): ``TrainSettings.of(suite="p", device="sim", iterations=2)``."""
        # a name of both (training's `batch`) is TrainSettings's own
        return with_run_fields(TrainSettings, TRAIN_RUN, fields)


@dataclass
class Operator:
    """One problem of the suite, ready for episodes. Its space is listed (`index`) when an
    episode first needs it: listing a space takes seconds, a suite has over a hundred
    problems, and a short run draws only some of them."""

    name: str
    tuner: Tuner
    best_known: float | None = None  # best time seen in training, to normalise curves
    prior: np.ndarray | None = None
    """the analytic model's prior over `index` (`prior.py`), modelled by the first episode
    that needs it and kept when it covers the whole space (it depends on nothing else)"""
    _index: SpaceIndex | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def prepared(self) -> bool:
        return self._index is not None

    @property
    def index(self) -> SpaceIndex:
        with self._lock:  # samplers are threads: one listing per operator
            if self._index is None:
                self._index = SpaceIndex.of(self.tuner.space)
            return self._index


def suite_files(suite: str) -> list[Path]:
    p = Path(suite)
    files = sorted(p.glob("*.py")) if p.is_dir() else [Path(x) for x in suite.split(",") if x]
    if not files:
        raise SettingsError(f"--suite {suite}: no problem files")
    return files


def resumable(path: Path, agents: str) -> dict[str, Any]:
    """The checkpoint `--resume` continues from, or a one-line `SettingsError` naming it: a
    published policy (no training state) or one trained with other agents cannot go on (the
    CLI asks before it loads the suite)."""
    blob = checkpoint.load(path)
    meta = blob["meta"]
    if meta.get("resumable") is False:
        raise SettingsError(f"{path}: a published policy without its training state "
                            "(optimizer, random states) cannot be resumed; pass it to "
                            "`tune --policy`, or train anew")
    if meta["settings"]["agents"] != agents:
        raise SettingsError(f"{path}: trained with --agents {meta['settings']['agents']}")
    return blob


def training_device(settings: TrainSettings, notify: Callable[[str], None]) -> Device:
    """The device a training run (or a sampler of its Ray fleet) measures on."""
    return open_device(settings.run.device, settings.run, notify)


def operator_tuner(path: Path, settings: TrainSettings, device: Device, store: Store,
                   builder: Builder | None, notify: Callable[[str], None]) -> Tuner:
    """One problem of the suite, loaded for episodes: searched through `Tuner.engine` (the
    episodes propose, no strategy asks)."""
    run = settings.run  # its import limits (its time limit is the whole training's)
    limits = LoadLimits.of(run.import_timeout_s, None, run.import_memory_bytes)
    return Tuner(load_problem_bounded(path, limits), run, device=device, store=store,
                 notify=notify, builder=builder)


def temperatures(settings: TrainSettings, groups: list[str], episode_seed: int,
                 stalled: int) -> dict[str, float]:
    """Targeted exploration: raise exactly one agent's temperature, chosen by the schedule
    (rotating over episodes) and moved on to the next agent each time the episode stalls."""
    if settings.explore == "none":
        return {g: 1.0 for g in groups}
    k = (episode_seed + stalled // max(1, settings.stall_steps)) % len(groups)
    return {g: settings.explore_temperature if i == k else 1.0 for i, g in enumerate(groups)}


class EpisodeProposer:
    """A training episode as the search loop's proposer (`search.engine.Proposer`): each ask
    is a step of `settings.batch` joint actions at the temperatures targeted exploration sets
    (`temperatures`), each tell the step's observation (its rewards and transitions); done
    after `settings.steps` steps. Asked after each tell: every step samples from what the last
    one observed."""

    adaptive = True
    ask_in_background = False

    def __init__(self, ep: Episode, settings: TrainSettings, seed: int) -> None:
        self.ep = ep
        self.settings = settings
        self.seed = seed
        self.groups = list(ep.policy.groups)
        self.seen: set = set()
        self.steps = 0

    @property
    def done(self) -> bool:
        return self.steps >= self.settings.steps

    def ask(self, n: int, clock: str = "strategy_s") -> list:
        temp = temperatures(self.settings, self.groups, self.seed,
                            self.ep.state.since_improvement)
        configs = self.ep.propose(self.settings.batch, self.seen, temp)
        self.seen.update(configs)
        self.steps += 1
        return configs

    def tell(self, results: list) -> None:
        self.ep.observe(results)


def run_episode(policy_state: dict[str, Any], policy_meta: dict[str, Any], op: Operator,
                settings: TrainSettings, episode_id: int, version: int, seed: int
                ) -> dict[str, Any]:
    """One sampler job: a fresh copy of the published policy refines one operator, through
    the search loop (`Tuner.engine`: measured on the operator's device, kept in its store);
    only Ctrl-C stops an episode early (its steps are its budget)."""
    policy = MultiAgentPolicy(policy_meta["mode"], policy_meta["hidden"])
    policy.load_state_dict(policy_state)
    rng = np.random.default_rng(seed)
    ep = Episode(policy, op.tuner.space, settings.steps * settings.batch, rng, settings.reward,
                 episode_id, version, op.index, prior_weight=settings.prior_weight,
                 prior_constants=settings.sim_constants)
    ep.prior = op.prior
    op.tuner.engine(EpisodeProposer(ep, settings, seed), StopRule(), batch=settings.batch,
                    best_ms=lambda: ep.state.best_ms).run()
    if op.prior is None and ep.prior is not None and len(op.index.configs) <= POOL:
        op.prior = ep.prior  # a pooled prior depends on the policy's scores: not kept
    return {"operator": op.name, "transitions": ep.buffer.transitions, "curve": ep.curve,
            "rewards": ep.rewards, "version": version, "best_ms": ep.state.best_ms}


class Trainer:
    def __init__(self, settings: TrainSettings, device: Device | None = None,
                 notify: Callable[[str], None] = lambda s: None,
                 loading: Callable[[int, int, str], None] | None = None) -> None:
        """`loading(done, total, name)` follows the suite's problems being loaded (captured
        and planned), for a progress bar."""
        self.s = settings
        self.notify = notify
        self.out = Path(settings.out)
        run = settings.run
        torch.manual_seed(run.seed)
        random.seed(run.seed)
        self.rng = np.random.default_rng(run.seed)
        self.device = device or training_device(settings, notify)
        self._own_device = device is None
        self.store = Store(run.store or ":memory:")
        if settings.sim_constants:
            from ..costmodel.folds import load

            seen = sorted(set(load(settings.sim_constants).fitted_on) & set(settings.holdout))
            if seen:  # the prior would carry the held-out problems' measurements into training
                raise SettingsError(f"{settings.sim_constants}: fitted on held-out problems "
                                    f"({', '.join(seen[:5])}{', ...' if len(seen) > 5 else ''})")
        files = [f for f in suite_files(settings.suite) if f.stem not in set(settings.holdout)]
        if not files:
            raise SettingsError("every problem of the suite is held out")
        self.operators: list[Operator] = []
        self.files: dict[str, str] = {}
        """each operator's problem file (a Ray fleet's samplers load them themselves)"""
        self.fleet_report: dict[str, Any] | None = None
        """with `ray`: what the fleet did and what it lost (`fleet/learner.py`)"""
        self.fleet: Any = None
        """with `ray`, while `train` runs: the fleet (its sampler actors, what is in flight)"""
        # one compile pool for the suite, not one per problem
        self.builder = None if self.device.kind == "replay" else Builder()
        for i, f in enumerate(files):
            if loading:
                loading(i, len(files), f.stem)
            try:
                tuner = operator_tuner(f, settings, self.device, self.store, self.builder,
                                       notify)
            except (DeviceError, UnsupportedError) as exc:
                if self.device.kind != "replay":
                    raise
                # no recorded sweep to learn from, or a multi-kernel program (not replayable)
                notify(f"skipped {f.stem}: {exc}")
                continue
            self.operators.append(Operator(f.stem, tuner))
            self.files[f.stem] = str(f.resolve())
        if loading:
            loading(len(files), len(files), "")
        if not self.operators:
            raise SettingsError("no problem of the suite can be trained on with this device")
        self.policy = MultiAgentPolicy(settings.agents, settings.hidden)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=settings.ppo.lr)
        self.generator = torch.Generator().manual_seed(run.seed)
        self.version = 0
        self.iteration = 0
        self.curves: list[dict[str, Any]] = []
        self.measurements = 0
        self.sampler_state: dict[str, Any] = {}
        self.pending_jobs: list[tuple[int, int, int, int]] = []
        self.saved_iteration = 0
        """the iteration the checkpoint on disk holds (what Ctrl-C keeps; 0: none saved)"""
        ckpt = self.out / "policy.pt"
        if settings.resume and ckpt.exists():
            self._resume(ckpt)

    # -- checkpoints ------------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        s = asdict(self.s)
        return {"iteration": self.iteration, "version": self.version,
                "measurements": self.measurements, "curves": self.curves, "settings": s,
                "trained_on": [op.name for op in self.operators],
                "gpu": self.device.gpu_name(), "device": self.device.kind,
                "simulated": self.device.simulated, "best_known":
                {op.name: op.best_known for op in self.operators},
                "generator": self.generator.get_state().tolist(),
                # the episodes in flight, so that a resumed run samples exactly them again
                "sampler_state": self.sampler_state, "pending_jobs": self.pending_jobs}

    def save(self) -> Path:
        path = self.out / "policy.pt"
        checkpoint.save(path, self.policy, self._meta(), self.optimizer, self.rng)
        self.saved_iteration = self.iteration
        return path

    def _resume(self, path: Path) -> None:
        blob = resumable(path, self.s.agents)
        meta = blob["meta"]
        self.policy.load_state_dict(blob["policy"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.rng.bit_generator.state = blob["numpy_rng"]
        torch.set_rng_state(blob["torch_rng"])
        random.setstate(blob["python_rng"])
        self.generator.set_state(torch.tensor(meta["generator"], dtype=torch.uint8))
        self.iteration, self.version = meta["iteration"], meta["version"]
        self.saved_iteration = self.iteration
        self.measurements, self.curves = meta["measurements"], meta["curves"]
        for op in self.operators:
            op.best_known = meta["best_known"].get(op.name)
        self.sampler_state = meta["sampler_state"]
        self.pending_jobs = [tuple(j) for j in meta["pending_jobs"]]
        self.notify(f"resumed from {path} at iteration {self.iteration}")

    # -- the loop ---------------------------------------------------------------------------------
    def _plan_jobs(self, it: int) -> list[tuple[int, int, int, int]]:
        """(operator, episode id, policy version, seed) of iteration `it`'s episodes."""
        jobs = []
        n = self.s.operators_per_iteration
        chosen = [int(self.rng.integers(len(self.operators))) for _ in range(n)] if n > 0 else []
        for e in range(self.s.episodes):
            k = chosen[e * n // self.s.episodes] if n > 0 else \
                int(self.rng.integers(len(self.operators)))
            jobs.append((k, it * self.s.episodes + e, self.version,
                         self.s.run.seed * 1_000_003 + it * 1009 + e))
        return jobs

    def _submit(self, fleet: LocalFleet, preparing: Callable[[str], None] | None = None
                ) -> list:
        # the jobs' operators are listed here, one after another, where a progress bar can
        # say so (samplers listing them at once would only contend for the interpreter)
        for k, *_ in self.pending_jobs:
            op = self.operators[k]
            if not op.prepared:
                if preparing:
                    preparing(op.name)
                op.index  # noqa: B018 - lists the space
        meta = self.policy.describe()
        return fleet.submit(run_episode, [
            (self.sampler_state, meta, self.operators[k], self.s, eid, version, seed)
            for k, eid, version, seed in self.pending_jobs])

    def train(self, progress: Callable[[dict[str, Any]], None] | None = None,
              deadline: float | None = None, preparing: Callable[[str], None] | None = None
              ) -> list[dict[str, Any]]:
        """Run the remaining iterations. `deadline` (a `time.time()` value): the next
        iteration's episodes are not sampled when the last iteration's duration would carry it
        past the deadline; the run stops there with its checkpoint saved, and `resume` continues
        it (a GPU call has a hard time limit, and a cut run would lose its last update).
        `preparing(name)` is called before an operator's space is first listed.
        With `ray` set the episodes are sampled on a Ray fleet (`fleet/learner.py`)."""
        if self.s.ray is not None:
            from ..fleet.learner import train_on_ray

            return train_on_ray(self, progress, deadline)
        fleet = LocalFleet(self.s.samplers if self.device.kind != "cuda" else 1)
        pending: list = []
        try:
            if self.iteration < self.s.iterations:
                if not self.pending_jobs:  # a fresh run; a resumed one re-runs its saved jobs
                    self.sampler_state = copy.deepcopy(self.policy.state_dict())
                    self.pending_jobs = self._plan_jobs(self.iteration)
                pending = self._submit(fleet, preparing)
            while self.iteration < self.s.iterations:
                t0 = time.perf_counter()
                episodes = fleet.gather(pending)
                self.iteration += 1
                # the next episodes are sampled with the policy published so far while this
                # update runs: sampling and learning are decoupled, staleness is one version
                # planned even after the last iteration: the checkpoint then holds them, and a
                # run resumed with more iterations continues exactly as an uninterrupted one
                self.sampler_state = copy.deepcopy(self.policy.state_dict())
                self.pending_jobs = self._plan_jobs(self.iteration)
                more = self.iteration < self.s.iterations and (
                    deadline is None or time.time() + time.perf_counter() - t0 < deadline)
                pending = self._submit(fleet, preparing) if more else []
                fresh = [t for ep in episodes for t in ep["transitions"]
                         if t.version >= self.version - self.s.max_staleness]
                stale = sum(len(ep["transitions"]) for ep in episodes) - len(fresh)
                stats = update(self.policy, self.optimizer, fresh, self.s.ppo, self.generator)
                self.version += 1
                self.curves.append(self._curve_row(episodes, stats, stale,
                                                   time.perf_counter() - t0))
                self.save()
                if progress:
                    progress(self.curves[-1])
                if not more:
                    break
        except KeyboardInterrupt:
            # Ctrl-C: the episodes in flight are not waited for (they stop at their next
            # measurement, `interrupt.STOP`), nor those not begun; the checkpoint on disk
            # is the last finished iteration's
            for f in pending:
                f.cancel()
            pending = []
            raise
        finally:
            if pending:
                fleet.gather(pending)
            fleet.close()
        return self.curves

    def _curve_row(self, episodes: list[dict[str, Any]], stats: dict[str, Any], stale: int,
                   seconds: float) -> dict[str, Any]:
        by_name = {op.name: op for op in self.operators}
        ratios = []
        for ep in episodes:
            op = by_name[ep["operator"]]
            self.measurements += len(ep["curve"])
            if ep["best_ms"] and (op.best_known is None or ep["best_ms"] < op.best_known):
                op.best_known = ep["best_ms"]
        for ep in episodes:
            op = by_name[ep["operator"]]
            if ep["best_ms"] and op.best_known:
                ratios.append(op.best_known / ep["best_ms"])  # 1.0 = as good as ever found
        rewards = [r for ep in episodes for r in ep["rewards"]]
        return {"iteration": self.iteration, "version": self.version,
                "measurements": self.measurements,
                "mean_reward": float(np.mean(rewards)) if rewards else None,
                "episode_best_vs_known": float(np.mean(ratios)) if ratios else None,
                "entropy": stats.get("entropy", {}), "policy_loss": stats.get("policy_loss"),
                "value_loss": stats.get("value_loss"), "approx_kl": stats.get("approx_kl"),
                "samples": stats.get("samples", 0), "stale_dropped": stale,
                "seconds": seconds}

    def close(self) -> None:
        for op in self.operators:
            op.tuner.close()
        if self.builder is not None:
            self.builder.close()
        if self._own_device:
            self.device.close()
        self.store.close()


def write_curves(curves: list[dict[str, Any]], out: Path, title: str) -> Path:
    """curves.json and a PNG: best-vs-known and reward against measurements, entropy per agent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "curves.json").write_text(json.dumps(curves, indent=2) + "\n")
    x = [c["measurements"] for c in curves]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(x, [c["episode_best_vs_known"] for c in curves], marker=".")
    axes[0].set(xlabel="measurements", ylabel="episode best / best known (1 = best)",
                title="best so far")
    axes[1].plot(x, [c["mean_reward"] for c in curves], marker=".")
    axes[1].set(xlabel="measurements", ylabel="mean reward", title="reward")
    groups = sorted({g for c in curves for g in (c.get("entropy") or {})})
    for g in groups:
        axes[2].plot(x, [(c.get("entropy") or {}).get(g, math.nan) for c in curves], label=g)
    axes[2].set(xlabel="measurements", ylabel="entropy (nats)", title="per-agent entropy")
    if groups:
        axes[2].legend()
    fig.suptitle(title)
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["TrainSettings", "Trainer", "write_curves", "AGENTS"]
