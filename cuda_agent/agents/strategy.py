"""The agents as a search strategy: `tune --strategy marl [--policy CKPT]`.

Warm-started from a trained checkpoint (or fresh), they propose batches of configurations,
learn online from each batch's measurements (PPO on this operator's experience: fine-tuning),
and declare the search done once it has plateaued.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from ..runner.records import Measurement
from ..search.base import Strategy, register
from ..search.prior_rank import model_pick
from ..space.slots import Config
from ..space.space import Space
from . import checkpoint
from .episode import Episode
from .policy import MultiAgentPolicy
from .ppo import PPOSettings
from .reward import RewardSettings


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread within the block. The policy is a few small layers, so more
    threads only wait on each other, and while the compile processes beside it keep the cores
    busy that waiting dominates: with 2 threads on 2 busy cores the agents spent 24 s of a
    40-measurement search proposing and learning, with 1 thread 4.3 s (on the H200 machine
    their searches took 31 s where the other strategies took 1.3 to 6.3 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


LOCAL_SHARE = 0.0
"""share of each batch, once a best exists, drawn near the best configuration so far (one agent's
slots changed at a time: `decode.sample_local`); the rest is sampled from the whole space.
Off: the fold policies' first guesses are often cuDNN configurations, whose neighbours (the
epilogue's block, items and vector width) all time the same, so the measurements spent there
are lost; at 0.5 the agents needed as many or more measurements on every convolution of an A/B
(docs/journal.md: agents/strategy.py)."""

EXPLORE_ON_STALL = 1.0
"""the factor on one agent's temperature after a batch without improvement (1: off)"""

SPREAD = 0
"""how many of the first sampled proposals are drawn hotter (`spread_temperature`; 0: none)"""

PRIOR_WEIGHT = 100.0
"""the weight of the analytic model's estimate in the proposals (`prior.py`; 0: off): a
configuration the model rates 1.1x slower than another is e^-9.5 times as likely to be
proposed, so the policy's preferences decide among the configurations the model rates within
a few percent of each other, and online learning moves them. At 100 the agents reach 95 % of
the best in fewer measurements than at 30, 10 or none, on replay and live, and policies trained
with the prior in their episodes beat an untrained policy under it (docs/journal.md:
agents/strategy.py)."""

RANKED_FIRST = 3
"""a trained policy's first proposals on a new operator: its most probable configurations"""

ONLINE_PPO = PPOSettings(epochs=4, lr=9e-3)
"""Online fine-tuning on the operator being tuned. With the training run's settings scaled down
(2 epochs at 9e-4) the updates hardly move the proposals: the agents propose nearly the same
configurations with learning on and off, re-measuring cuDNN with different epilogues. Ten
times the step and 4 epochs reach 95 % of the best in fewer measurements on replay
(docs/journal.md: agents/strategy.py)."""


@register("marl")
class AgentsStrategy(Strategy):
    """Multi-agent PPO behind ask/tell (`agents="single"`: the single-agent ablation)."""

    adaptive = True

    def __init__(self, space: Space, seed: int = 0, policy: str | Path | MultiAgentPolicy |
                 None = None, agents: str = "multi", online: bool = True, patience: int = 3,
                 budget: int = 64, reward: RewardSettings | None = None,
                 ppo: PPOSettings | None = None, temperature: float = 1.0,
                 ranked: int | None = None, local_share: float = LOCAL_SHARE,
                 explore_temperature: float = EXPLORE_ON_STALL, spread: int = SPREAD,
                 spread_temperature: float = 3.0, prior_weight: float = PRIOR_WEIGHT,
                 sim_constants: Any = None, **options: Any) -> None:
        super().__init__(space, seed, **options)
        torch.manual_seed(seed)
        if isinstance(policy, MultiAgentPolicy):
            self.policy = policy
        elif policy:
            self.policy = checkpoint.policy_from(checkpoint.load(policy))
        else:
            self.policy = MultiAgentPolicy(agents)
        self.online = online
        self.patience = patience
        self.ppo = ppo or ONLINE_PPO
        self._optimizer: torch.optim.Optimizer | None = None  # made at the first update
        self.episode = Episode(self.policy, space, budget, np.random.default_rng(seed),
                               reward or RewardSettings(), episode_id=0,
                               prior_weight=prior_weight, prior_constants=sim_constants)
        self.generator = torch.Generator().manual_seed(seed)
        self.done = False
        self.stalled_batches = 0
        # below 1, a trained policy exploits what it learned more sharply
        self.temperature = {g: temperature for g in self.policy.groups}
        if not 0.0 <= local_share <= 1.0:
            raise ValueError(f"local_share must be in [0, 1], got {local_share}")
        self.local_share = local_share
        if prior_weight < 0:
            raise ValueError(f"prior_weight must be at least 0, got {prior_weight}")
        if explore_temperature < 1.0:
            raise ValueError(f"explore_temperature must be at least 1, got {explore_temperature}")
        self.explore_temperature = explore_temperature
        if spread < 0 or spread_temperature < 1.0:
            raise ValueError("spread must be at least 0 and spread_temperature at least 1")
        # the first `spread` sampled proposals (after the ranked ones) are drawn with every
        # agent's temperature times `spread_temperature`: a flatter first look at the space
        self.spread_left = spread
        self.spread_temperature = spread_temperature
        # the first `ranked` proposals of the run are the policy's most probable
        # configurations, best first; sampling takes over after them (exploration)
        # (default: RANKED_FIRST with a trained checkpoint, none for a fresh policy, whose
        # "most probable" configurations are arbitrary)
        self.ranked_left = ranked if ranked is not None else (
            RANKED_FIRST if policy is not None and not isinstance(policy, MultiAgentPolicy)
            else 0)

    @property
    def ready(self) -> bool:
        return self.episode.ready

    def temperatures(self) -> dict[str, float]:
        """Each agent's sampling temperature for the next batch: after a batch that did not
        improve, one agent's is raised (`explore_temperature`), the next agent's after the
        next such batch, in turn; the others keep theirs (training's targeted exploration,
        `train.temperatures`, applied while tuning)."""
        if self.explore_temperature == 1.0 or self.stalled_batches == 0:
            return self.temperature
        groups = list(self.policy.groups)
        hot = groups[(self.stalled_batches - 1) % len(groups)]
        return {g: t * (self.explore_temperature if g == hot else 1.0)
                for g, t in self.temperature.items()}

    def template_picks(self) -> list[Config] | None:
        if not self.episode.prior_weight:
            return None
        with one_thread():
            return self.episode.model_picks()

    def stage_pick(self, space: Space) -> Config | None:
        if not self.episode.prior_weight:
            return None

        with one_thread():
            return model_pick(space, self.episode.prior_constants)

    def ask(self, n: int) -> list[Config]:
        temperature = self.temperatures()
        spreading = self.ranked_left == 0 and self.spread_left > 0
        if spreading:
            temperature = {g: t * self.spread_temperature for g, t in temperature.items()}
        with one_thread():
            out = self.episode.propose(n, exclude=self.proposed,
                                       temperature=temperature,
                                       ranked=self.ranked_left,
                                       local=round(n * self.local_share))
        self.ranked_left = max(0, self.ranked_left - len(out))
        if spreading:
            self.spread_left = max(0, self.spread_left - len(out))
        self.proposed.update(out)
        return out

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """Adam over the policy, made when first needed: its constructor imports Dynamo
        (`torch._disable_dynamo`), ~0.6 s that would come before the first measurement."""
        if self._optimizer is None:
            self._optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.ppo.lr)
        return self._optimizer

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        self.proposed.update(c for c, _ in results)  # the tuner may measure others (default)
        improved = self.episode.observe(results)
        self.stalled_batches = 0 if improved else self.stalled_batches + 1
        if self.online:
            with one_thread():
                self.episode.learn(self.optimizer, self.ppo, self.generator)
        if self.stalled_batches >= self.patience:
            self.done = True


@register("marl_noprior")
class AgentsWithoutPriorStrategy(AgentsStrategy):
    """The agents without the analytic model's prior: its ablation, run beside "marl" in
    `cuda-agent bench --strategies marl,marl_noprior`."""

    def __init__(self, space: Space, seed: int = 0, **options: Any) -> None:
        options.setdefault("prior_weight", 0.0)
        super().__init__(space, seed, **options)


@register("marl_untrained")
class UntrainedAgentsStrategy(AgentsStrategy):
    """The agents with a fresh policy and everything else as "marl" (the analytic model's
    prior, online learning, the search settings): what training adds, measured beside the
    trained policy in `cuda-agent bench --strategies marl,marl_untrained` (issue 3's "the
    same policy untrained"). A checkpoint given to the bench is ignored here. Like a trained
    policy, its first `RANKED_FIRST` proposals are its most probable configurations under
    policy and prior (a fresh policy's scores are near uniform: in effect the model's top
    picks), so the two differ only in what training put in the weights."""

    def __init__(self, space: Space, seed: int = 0, **options: Any) -> None:
        options["policy"] = None
        options.setdefault("ranked", RANKED_FIRST)
        super().__init__(space, seed, **options)


@register("marl_single")
class SingleAgentStrategy(AgentsStrategy):
    """One agent over every slot, from a single-agent checkpoint (`cuda-agent bench
    --single-policy`): the ablation of the split into four agents, run beside "marl"."""

    def __init__(self, space: Space, seed: int = 0, **options: Any) -> None:
        options.setdefault("agents", "single")
        super().__init__(space, seed, **options)
        if self.policy.mode != "single":
            raise ValueError(f"marl_single needs a single-agent checkpoint; this one has "
                             f"{self.policy.mode!r} agents")
