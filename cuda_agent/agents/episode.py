"""An episode: the agents refining one operator over several steps.

Each step the agents propose a batch of joint actions (configurations) from their current
observations; the batch is measured; rewards are computed within the batch and the search state
(best so far, its metrics) moves on. Used both by training samplers and by `tune --strategy marl`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..background import in_background
from ..runner.records import Measurement
from ..search.prior_rank import first_of_each_template
from ..space.slots import Config
from ..space.space import Space
from .decode import ranked as top_k
from .decode import sample, sample_local, score_rows
from .observe import SearchState, global_state, observe, problem_features
from .policy import Decision, MultiAgentPolicy
from .prior import sim_prior
from .ppo import Buffer, PPOSettings, Transition, update
from .reward import RewardSettings, rewards
from .vocab import SpaceIndex


class Episode:
    def __init__(self, policy: MultiAgentPolicy, space: Space, budget: int,
                 rng: np.random.Generator, reward: RewardSettings, episode_id: int,
                 version: int = 0, index: SpaceIndex | None = None,
                 prior_weight: float = 0.0, prior_constants: Any = None) -> None:
        self.policy = policy
        self.space = space
        # the space's index lists every configuration (seconds for a large space): listed in a
        # background thread, so that a tune measures its untuned default meanwhile (`ready`)
        self._index = index
        self._index_future = None if index is not None else in_background(
            SpaceIndex.of, space, name="cuda-agent-index")
        self.rng = rng
        self.reward = reward
        self.episode_id = episode_id
        self.version = version
        self.state = SearchState(problem_features(space.plan, space, space.target), budget)
        self.pending: dict[Config, tuple[Decision, dict[str, np.ndarray], np.ndarray,
                                         dict[str, float]]] = {}
        self.buffer = Buffer()
        self.curve: list[tuple[int, float | None]] = []  # (measurements, best ms)
        self.rewards: list[float] = []
        self.measured: list[float] = []  # every successful time so far (RewardSettings.rank_over)
        self.local_turn = 0  # the agent whose neighbourhood the next local proposal explores
        # the analytic model's estimate added to the policy's scores (`prior.py`; 0: off),
        # modelled once, at the first proposal
        self.prior_weight = prior_weight
        # the model's constants (`costmodel/folds.py`: a fold's, fitted without this problem;
        # None: the shipped model)
        self.prior_constants = prior_constants
        self.prior: np.ndarray | None = None
        self.prior_seed: int | None = None

    @property
    def index(self) -> SpaceIndex:
        """The space's index, waiting for the background listing where it is still running
        (an error raised there, a slot outside the vocabulary, is raised here)."""
        if self._index is None:
            assert self._index_future is not None
            self._index = self._index_future.result()
        return self._index

    @property
    def ready(self) -> bool:
        """Whether the index is listed: proposing will not wait for it."""
        return self._index is not None or (self._index_future is not None
                                           and self._index_future.done())

    @property
    def groups(self) -> list[str]:
        return list(self.policy.groups)

    def _prior(self, scored: Any) -> np.ndarray:
        """The model's prior over the index (`prior.sim_prior`), modelled once; `scored` (the
        policy's scores of the rows) picks the pool of a large space."""
        if self.prior_seed is None:  # drawn even when the prior was given (a trainer's
            # cache), so the episode's random stream does not depend on the cache
            self.prior_seed = int(self.rng.integers(2**31))
        if self.prior is None:
            full = np.full(len(self.index.configs), -np.inf)
            full[scored.rows] = scored.logp
            self.prior = sim_prior(self.space, self.index.configs, full,
                                   seed=self.prior_seed, constants=self.prior_constants)
        return self.prior

    def model_picks(self) -> list[Config]:
        """The model's fastest configuration of each template (the prior's highest value
        among its configurations), in the space's template order."""
        if self.prior is None:
            obs = {g: observe(self.policy.obs_agent(g), self.state, self.index)
                   for g in self.groups}
            self._prior(score_rows(self.policy, obs, self.index,
                                   self.index.rows_excluding(set())))
        assert self.prior is not None
        order = np.argsort(-self.prior, kind="stable")
        return first_of_each_template(self.space, (self.index.configs[int(i)] for i in order))

    def propose(self, n: int, exclude: set[Config] | None = None,
                temperature: dict[str, float] | None = None, ranked: int = 0,
                local: int = 0) -> list[Config]:
        """Up to `n` distinct configurations not in `exclude`: the first `ranked` are the
        policy's most probable remaining configurations (exploitation, see `decode.py`), then
        up to `local` are drawn near the best configuration so far, one agent's slots changed
        at a time (`decode.sample_local`), and the rest are sampled from the whole space."""
        exclude = exclude or set()
        obs = {g: observe(self.policy.obs_agent(g), self.state, self.index) for g in self.groups}
        gstate = global_state(self.state, self.index)
        with torch.no_grad():
            values = {g: float(v) for g, v in self.policy.values(torch.as_tensor(gstate)).items()}
        rows = self.index.rows_excluding(exclude)
        out: list[Config] = []
        if len(rows) == 0:
            self.state.step += 1
            return out
        # every remaining configuration scored once; the first `ranked` are the most probable
        # (exploitation), the rest drawn from the policy conditioned on what remains
        scored = score_rows(self.policy, obs, self.index, rows, temperature)
        if self.prior_weight:
            prior = self._prior(scored)
            # proposals only: the decisions keep the policy's own log-probabilities
            scored.logp = scored.logp + self.prior_weight * prior[scored.rows]
        picks = top_k(scored, min(ranked, n))
        best = self.state.best_config
        if local and best is not None and best in self.index.position:
            near = sample_local(scored, self.index.matrix,
                                self.index.matrix[self.index.position[best]],
                                min(local, n - len(picks)), self.rng, set(picks),
                                self.local_turn)
            self.local_turn += len(near)
            picks += near
        picks += sample(scored, n - len(picks), self.rng, exclude=set(picks))
        for k in picks:
            cfg = self.index.configs[int(scored.rows[k])]
            out.append(cfg)
            self.pending[cfg] = (scored.decision(k, temperature or {}, self.groups), obs,
                                 gstate, values)
        self.state.step += 1
        return out

    def observe(self, results: list[tuple[Config, Measurement]]) -> bool:
        """Score a measured batch; returns True when it improved on the best so far."""
        times = [m.time_ms if m.ok else None for _, m in results]
        kinds = [m.error_kind for _, m in results]
        counters = [m.counters for _, m in results]
        per = rewards(times, kinds, counters, self.groups, self.state.best_ms, self.reward,
                      history=self.measured)
        self.measured += [t for t in times if t is not None and np.isfinite(t)]
        improved = False
        for (cfg, m), r in zip(results, per):
            improved |= self.state.update(cfg, m.ok, m.time_ms, m.counters)
            self.curve.append((self.state.spent, self.state.best_ms))
            entry = self.pending.pop(cfg, None)
            if entry is None:  # measured but not proposed by the policy (the default config)
                continue
            d, obs, gstate, values = entry
            self.rewards.append(float(np.mean(list(r.values()))))
            self.buffer.add(Transition(self.episode_id, self.state.step, obs, gstate, d.actions,
                                       d.masks, d.logp, d.temperature, values, r, self.version,
                                       m.key))
        if not improved:
            self.state.since_improvement += 1
        return improved

    def learn(self, optimizer: torch.optim.Optimizer, settings: PPOSettings,
              generator: torch.Generator) -> dict[str, Any]:
        """Online fine-tuning on this episode's experience so far."""
        return update(self.policy, optimizer, self.buffer.transitions, settings, generator)
