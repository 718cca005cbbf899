"""Policy networks: one small network per agent, one masked categorical head per slot it owns,
and a centralized critic with one value per agent.

Decisions are made slot by slot in `SLOT_ORDER` (the template first). Each head sees its
agent's trunk features plus the one-hot of every slot decided so far, so choices that depend on
each other (threads per row and block size) are made consistently; the mask comes from the
space, so an invalid configuration can never be sampled. A slot belongs to exactly one agent.

Episodes (training and `tune --strategy marl`) do not call `act`: they score every remaining
configuration with these heads, each normalised over its slot's domain, and draw from that
distribution conditioned on what the space holds (`decode.py` says why: on sparse spaces the
slot-by-slot masks of `act` leave the later agents forced choices). `evaluate` serves both,
since a decision records its own masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..space.slots import AGENTS
from .observe import GLOBAL_STATE_DIM, OBS_DIM
from .vocab import SLOT_ORDER, SpaceIndex, owner, values

SLOT_SIZES = [len(values(s)) for s in SLOT_ORDER]
SLOT_OFFSETS = np.concatenate([[0], np.cumsum(SLOT_SIZES)]).astype(int)
CTX_DIM = int(SLOT_OFFSETS[-1])
# A masked logit: finite, so that 0 * log p stays 0 and gradients stay finite (with -inf,
# the entropy's 0 * -inf is NaN and poisons the update even behind a mask).
MASKED = -1e9


def agent_groups(mode: str) -> dict[str, list[str]]:
    """multi: the four agents, each owning its slots; single: one agent owning every slot."""
    if mode == "single":
        return {"single": list(SLOT_ORDER)}
    if mode != "multi":
        raise ValueError(f"agents must be 'multi' or 'single', not {mode!r}")
    return {a: [s for s in SLOT_ORDER if owner(s) == a] for a in AGENTS}


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, out))


class AgentNet(nn.Module):
    def __init__(self, slots: list[str], hidden: int) -> None:
        super().__init__()
        self.slots = slots
        self.trunk = nn.Sequential(nn.Linear(OBS_DIM, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.heads = nn.ModuleDict({
            s.replace(".", "_"): nn.Linear(hidden + CTX_DIM, len(values(s))) for s in slots})

    def logits(self, h: torch.Tensor, ctx: torch.Tensor, slot: str) -> torch.Tensor:
        return self.heads[slot.replace(".", "_")](torch.cat([h, ctx], dim=-1))


@dataclass
class Decision:
    """One sampled joint action with everything PPO needs to re-evaluate it later."""

    actions: np.ndarray  # value index per slot (SLOT_ORDER)
    masks: np.ndarray  # concatenated bool masks, CTX_DIM long
    logp: dict[str, float]  # per agent group, under the (tempered) behaviour policy
    temperature: dict[str, float]


class MultiAgentPolicy(nn.Module):
    def __init__(self, mode: str = "multi", hidden: int = 64) -> None:
        super().__init__()
        self.mode = mode
        self.hidden = hidden
        self.groups = agent_groups(mode)
        self.group_of = {s: g for g, slots in self.groups.items() for s in slots}
        self.nets = nn.ModuleDict({g: AgentNet(slots, hidden) for g, slots in self.groups.items()})
        self.critic = _mlp(GLOBAL_STATE_DIM, hidden, len(self.groups))

    def net(self, group: str) -> AgentNet:
        """The group's network (nn.ModuleDict's items are typed as any Module)."""
        net = self.nets[group]
        assert isinstance(net, AgentNet)
        return net

    def obs_agent(self, group: str) -> str:
        """Which agent's local metrics a group observes (the single agent sees config's)."""
        return group if group in AGENTS else "config"

    @torch.no_grad()
    def act(self, obs: dict[str, np.ndarray], index: SpaceIndex, rng: np.random.Generator,
            temperature: dict[str, float] | None = None, greedy: bool = False,
            rows: np.ndarray | None = None) -> Decision:
        """Sample one joint action among the configurations `rows` (default: all); masks keep
        every decision inside them, so the result is always one of those configurations."""
        temperature = temperature or {}
        h = {g: self.net(g).trunk(torch.as_tensor(obs[g])) for g in self.groups}
        ctx = torch.zeros(CTX_DIM)
        rows = np.arange(len(index.configs)) if rows is None else rows
        actions = np.zeros(len(SLOT_ORDER), dtype=np.int64)
        masks = np.zeros(CTX_DIM, dtype=bool)
        logp = {g: 0.0 for g in self.groups}
        for j, slot in enumerate(SLOT_ORDER):
            g = self.group_of[slot]
            m = index.mask(rows, slot)
            lo = self.net(g).logits(h[g], ctx, slot) / temperature.get(g, 1.0)
            lo = lo.masked_fill(torch.as_tensor(~m), MASKED)
            lp = torch.log_softmax(lo, dim=-1)
            if greedy:
                a = int(torch.argmax(lp))
            else:
                p = lp.exp().numpy().astype(np.float64)
                a = int(rng.choice(len(p), p=p / p.sum()))
            actions[j] = a
            masks[SLOT_OFFSETS[j]:SLOT_OFFSETS[j + 1]] = m
            logp[g] += float(lp[a])
            ctx[SLOT_OFFSETS[j] + a] = 1.0
            rows = index.select(rows, slot, a)
        return Decision(actions, masks, logp, {g: temperature.get(g, 1.0) for g in self.groups})

    def evaluate(self, obs: dict[str, torch.Tensor], actions: torch.Tensor, masks: torch.Tensor,
                 temperature: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor],
                                                              dict[str, torch.Tensor]]:
        """Log-probabilities and entropies per group for a batch of recorded decisions."""
        n = actions.shape[0]
        h = {g: self.net(g).trunk(obs[g]) for g in self.groups}
        ctx = torch.zeros(n, CTX_DIM)
        logp = {g: torch.zeros(n) for g in self.groups}
        ent = {g: torch.zeros(n) for g in self.groups}
        for j, slot in enumerate(SLOT_ORDER):
            g = self.group_of[slot]
            m = masks[:, SLOT_OFFSETS[j]:SLOT_OFFSETS[j + 1]]
            lo = self.net(g).logits(h[g], ctx, slot) / temperature[g].unsqueeze(-1)
            lo = lo.masked_fill(~m, MASKED)
            lp = torch.log_softmax(lo, dim=-1)
            a = actions[:, j]
            logp[g] = logp[g] + lp.gather(1, a.unsqueeze(1)).squeeze(1)
            p = lp.exp()
            ent[g] = ent[g] - torch.where(m, p * lp, torch.zeros_like(p)).sum(-1)
            ctx = ctx.clone()
            ctx[torch.arange(n), SLOT_OFFSETS[j] + a] = 1.0
        return logp, ent

    def values(self, state: torch.Tensor) -> dict[str, torch.Tensor]:
        v = self.critic(state)
        return {g: v[..., k] for k, g in enumerate(self.groups)}

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "hidden": self.hidden,
                "groups": {g: list(s) for g, s in self.groups.items()},
                # the action vocabulary it was trained on: a later, larger one loads it grown
                "vocab": {s: list(values(s)) for s in SLOT_ORDER},
                "parameters": sum(p.numel() for p in self.parameters())}
