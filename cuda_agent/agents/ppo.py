"""Multi-agent PPO, in one file: the buffer, advantages, the clipped objective and the update.

Each agent group has its own log-probability (the sum over its heads), its own reward (the
team's rank reward plus its own auxiliary term) and its own value head on the centralized
critic, which sees the global state (MAPPO). An episode is one operator refined over several
steps; every step is a batch of joint actions measured together. Advantages combine two parts:
GAE over the steps on the batch-mean reward (credit across steps), plus each candidate's
reward minus its batch mean (credit within the batch, where the rank reward lives).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .policy import MultiAgentPolicy


@dataclass
class PPOSettings:
    """PPO hyper-parameters (defaults suit the tiny networks and short episodes here)."""

    lr: float = 3e-3
    """Adam learning rate"""
    clip: float = 0.2
    """ratio clipping of the surrogate objective"""
    epochs: int = 4
    """passes over the collected data per update"""
    minibatch: int = 64
    gamma: float = 0.9
    """discount over episode steps"""
    lam: float = 0.9
    """GAE lambda"""
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5


@dataclass
class Transition:
    """One measured candidate, with what is needed to recompute its probability."""

    episode: int
    step: int
    obs: dict[str, np.ndarray]
    state: np.ndarray
    actions: np.ndarray
    masks: np.ndarray
    logp: dict[str, float]
    temperature: dict[str, float]
    value: dict[str, float]
    reward: dict[str, float]
    version: int  # policy version that sampled it
    key: str  # content key, for deduplication


def gae(rewards: np.ndarray, values: np.ndarray, gamma: float, lam: float
        ) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation for one episode.

    `rewards` has T entries, `values` T + 1 (the last is the bootstrap, 0 at episode end).
    Returns (advantages, returns), each of length T.
    """
    T = len(rewards)
    adv = np.zeros(T, dtype=np.float64)
    last = 0.0
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * values[t + 1] - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + values[:T]


def clipped_surrogate(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip: float) -> torch.Tensor:
    """PPO's clipped objective, as a loss to minimise (mean over the batch)."""
    ratio = torch.exp(new_logp - old_logp)
    return -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()


def advantages(transitions: list[Transition], groups: list[str], settings: PPOSettings
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per group: advantage and return for every transition (in the given order)."""
    adv = {g: np.zeros(len(transitions)) for g in groups}
    ret = {g: np.zeros(len(transitions)) for g in groups}
    by_episode: dict[int, list[int]] = {}
    for i, tr in enumerate(transitions):
        by_episode.setdefault(tr.episode, []).append(i)
    for idx in by_episode.values():
        steps = sorted({transitions[i].step for i in idx})
        pos = {s: k for k, s in enumerate(steps)}
        for g in groups:
            mean_r = np.zeros(len(steps))
            mean_v = np.zeros(len(steps) + 1)
            count = np.zeros(len(steps))
            for i in idx:
                k = pos[transitions[i].step]
                mean_r[k] += transitions[i].reward[g]
                mean_v[k] += transitions[i].value[g]
                count[k] += 1
            mean_r /= np.maximum(count, 1)
            mean_v[:-1] /= np.maximum(count, 1)
            a_step, r_step = gae(mean_r, mean_v, settings.gamma, settings.lam)
            for i in idx:
                k = pos[transitions[i].step]
                within = transitions[i].reward[g] - mean_r[k]
                adv[g][i] = a_step[k] + within
                ret[g][i] = r_step[k] + within
    return adv, ret


def update(policy: MultiAgentPolicy, optimizer: torch.optim.Optimizer,
           transitions: list[Transition], settings: PPOSettings, generator: torch.Generator
           ) -> dict[str, Any]:
    """Run PPO epochs over `transitions`; returns losses and entropies for the curves."""
    groups = list(policy.groups)
    if not transitions:
        return {}
    adv, ret = advantages(transitions, groups, settings)
    n = len(transitions)
    obs = {g: torch.as_tensor(np.stack([t.obs[g] for t in transitions])) for g in groups}
    state = torch.as_tensor(np.stack([t.state for t in transitions]))
    actions = torch.as_tensor(np.stack([t.actions for t in transitions]))
    masks = torch.as_tensor(np.stack([t.masks for t in transitions]))
    temp = {g: torch.as_tensor([t.temperature[g] for t in transitions], dtype=torch.float32)
            for g in groups}
    old = {g: torch.as_tensor([t.logp[g] for t in transitions], dtype=torch.float32)
           for g in groups}
    A = {g: torch.as_tensor(adv[g], dtype=torch.float32) for g in groups}
    A = {g: (a - a.mean()) / (a.std() + 1e-8) if n > 1 else a for g, a in A.items()}
    R = {g: torch.as_tensor(ret[g], dtype=torch.float32) for g in groups}
    stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "approx_kl": []}
    ent_sum = {g: 0.0 for g in groups}
    ent_n = 0
    for _ in range(settings.epochs):
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, settings.minibatch):
            mb = perm[start:start + settings.minibatch]
            logp, ent = policy.evaluate({g: obs[g][mb] for g in groups}, actions[mb], masks[mb],
                                        {g: temp[g][mb] for g in groups})
            values = policy.values(state[mb])
            # summed from a zero tensor, not sum()'s int 0: the same values, typed as tensors
            zero = torch.zeros(())
            pl = sum((clipped_surrogate(logp[g], old[g][mb], A[g][mb], settings.clip)
                      for g in groups), zero)
            vl = sum((((values[g] - R[g][mb]) ** 2).mean() for g in groups), zero)
            el = sum((ent[g].mean() for g in groups), zero)
            loss = pl + settings.vf_coef * vl - settings.ent_coef * el
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), settings.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                kl = sum(float((old[g][mb] - logp[g]).mean()) for g in groups) / len(groups)
            stats["policy_loss"].append(float(pl.detach()))
            stats["value_loss"].append(float(vl.detach()))
            stats["approx_kl"].append(kl)
            for g in groups:
                ent_sum[g] += float(ent[g].detach().mean())
            ent_n += 1
    out: dict[str, Any] = {k: float(np.mean(v)) for k, v in stats.items()}
    out["entropy"] = {g: ent_sum[g] / max(1, ent_n) for g in groups}
    out["samples"] = n
    return out


@dataclass
class Buffer:
    """Experience, deduplicated by content key within an episode: measuring the same kernel
    twice teaches nothing new and would over-weight it."""

    transitions: list[Transition] = field(default_factory=list)
    seen: set[tuple[int, str]] = field(default_factory=set)

    def add(self, tr: Transition) -> bool:
        k = (tr.episode, tr.key)
        if k in self.seen:
            return False
        self.seen.add(k)
        self.transitions.append(tr)
        return True

    def take(self, min_version: int) -> list[Transition]:
        """All transitions sampled by a policy no older than `min_version` (bounded staleness);
        the buffer is emptied."""
        out = [t for t in self.transitions if t.version >= min_version]
        self.transitions = []
        self.seen = set()
        return out
