"""How the agents' slot heads choose among the configurations a space really holds.

Why not mask slot by slot (`MultiAgentPolicy.act`)? Masking each head by the values still
reachable after the earlier slots' choices is exact for a dense space, but a space can be a
sparse subset of its template's product (a replayed sweep holds 32 to 100 sampled
configurations, a restricted space a few): there the first slots (the template, then config's)
already pin one configuration, every later head sees a single valid value, its choice is forced
with probability 1, and memory, compute and reduction neither express nor learn a preference
(measured on the held-out sweeps: `memory.cache`, `compute.*` and `reduction.combine` had 1.0
to 1.1 valid values on average when their turn came). The trained policy then ranks rows by the
config agent's guess alone, which does not transfer: the rows that guess happens to pin differ
from one sweep to the next.

Here each head is normalised over its slot's *domain* (the values the template takes in this
space, whatever the earlier slots chose) so every agent scores every configuration, and the
policy's joint distribution is conditioned on the configurations available:

    p(row | rows) = prod_j p_j(row_j | obs, row_<j) / Z(rows)

Sampling without replacement from these scores is exactly drawing from the conditioned
distribution over the rows not yet taken. For PPO each group's log-probability is the sum of
its heads' terms; Z is shared by every candidate of a step, and with advantages centred per
batch its gradient term cancels, so it is left out (a `Decision` stores the domain masks, and
`MultiAgentPolicy.evaluate` recomputes the same sums).

Ranked decoding returns the most probable rows first: a trained policy's first proposals on a
new operator are its best guesses instead of samples that spend the first, most valuable
measurements on configurations it rates lower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..space.slots import AGENTS
from .policy import CTX_DIM, MASKED, SLOT_OFFSETS, Decision, MultiAgentPolicy
from .vocab import SLOT_ORDER, SpaceIndex, owner

CHUNK = 4096  # rows scored per forward pass (bounds memory on large spaces)


@dataclass
class Scored:
    """Rows of a space with their log-probabilities under the policy, and what PPO needs."""

    rows: np.ndarray  # space rows, in the order given
    actions: np.ndarray  # (len(rows), len(SLOT_ORDER)) value index per slot
    logp: np.ndarray  # unnormalised joint log-probability per row (sum over groups)
    group_logp: dict[str, np.ndarray]  # per agent group
    masks: np.ndarray  # (len(rows), CTX_DIM) bool: each slot's domain for the row's template

    def decision(self, k: int, temperature: dict[str, float], groups: list[str]) -> Decision:
        """The k-th scored row as a `Decision` (actions, masks and log-probabilities that
        `MultiAgentPolicy.evaluate` recomputes)."""
        return Decision(actions=self.actions[k].copy(), masks=self.masks[k].copy(),
                        logp={g: float(self.group_logp[g][k]) for g in groups},
                        temperature={g: temperature.get(g, 1.0) for g in groups})


def domain_masks(index: SpaceIndex) -> np.ndarray:
    """(rows, CTX_DIM) bool: per row, each slot's domain: the values any configuration of the
    space with the same template takes there (the template slot: the templates present).
    Cached on the index: it depends on the space only."""
    if index._domains is not None:
        return index._domains
    matrix = index.matrix.astype(np.int64)
    n = matrix.shape[0]
    templates, which = np.unique(matrix[:, 0], return_inverse=True)
    which = which.reshape(-1)
    table = np.zeros((len(templates), CTX_DIM), dtype=bool)
    for j in range(len(SLOT_ORDER)):
        table[which, SLOT_OFFSETS[j] + matrix[:, j]] = True
    table[:, SLOT_OFFSETS[0]:SLOT_OFFSETS[1]] = False
    table[:, SLOT_OFFSETS[0] + templates] = True
    out = table[which] if n else np.zeros((0, CTX_DIM), dtype=bool)
    index._domains = out
    return out


@torch.no_grad()
def score_rows(policy: MultiAgentPolicy, obs: dict[str, np.ndarray], index: SpaceIndex,
               rows: np.ndarray, temperature: dict[str, float] | None = None) -> Scored:
    """Every configuration in `rows` scored by the policy's slot heads, each head normalised
    over its slot's domain (see the module's docstring)."""
    temperature = temperature or {}
    groups = list(policy.groups)
    rows = np.asarray(rows, dtype=np.int64)
    matrix = index.matrix[rows].astype(np.int64)
    masks = domain_masks(index)[rows]
    n = len(rows)
    group_logp = {g: np.zeros(n) for g in groups}
    h = {g: policy.net(g).trunk(torch.as_tensor(obs[g])) for g in groups}
    for start in range(0, n, CHUNK):
        a = torch.as_tensor(matrix[start:start + CHUNK])
        m = torch.as_tensor(masks[start:start + CHUNK])
        b = a.shape[0]
        ctx = torch.zeros(b, CTX_DIM)
        for j, slot in enumerate(SLOT_ORDER):
            mj = m[:, SLOT_OFFSETS[j]:SLOT_OFFSETS[j + 1]]
            if int(mj.sum(1).max()) > 1:  # a slot with one value everywhere scores 0
                g = policy.group_of[slot]
                lo = (policy.net(g).logits(h[g].expand(b, -1), ctx, slot)
                      / temperature.get(g, 1.0))
                lp = torch.log_softmax(lo.masked_fill(~mj, MASKED), dim=-1)
                taken = lp.gather(1, a[:, j:j + 1]).squeeze(1)
                group_logp[g][start:start + b] += taken.double().numpy()
            ctx[torch.arange(b), SLOT_OFFSETS[j] + a[:, j]] = 1.0
    total = np.sum([group_logp[g] for g in groups], axis=0) if groups else np.zeros(n)
    return Scored(rows, matrix, total, group_logp, masks)


def ranked(scored: Scored, k: int) -> list[int]:
    """Positions (into `scored.rows`) of the k most probable rows, best first; ties broken by
    row order so that the result is deterministic."""
    order = np.lexsort((np.arange(len(scored.logp)), -scored.logp))
    return [int(i) for i in order[:k]]


def sample(scored: Scored, k: int, rng: np.random.Generator,
           exclude: set[int] | None = None) -> list[int]:
    """k distinct positions drawn one after another from the conditioned distribution over the
    positions not yet drawn (nor in `exclude`)."""
    taken = np.zeros(len(scored.logp), dtype=bool)
    if exclude:
        taken[list(exclude)] = True
    out: list[int] = []
    for _ in range(k):
        if taken.all():
            break
        lp = np.where(taken, -np.inf, scored.logp)
        p = np.exp(lp - lp.max())
        i = int(rng.choice(len(p), p=p / p.sum()))
        out.append(i)
        taken[i] = True
    return out


# per agent, the columns of the slots the *other* agents own: a neighbour of a configuration for
# agent a agrees with it on all of them
_OTHERS = {a: np.asarray([j for j, s in enumerate(SLOT_ORDER) if owner(s) != a])
           for a in AGENTS}


def neighbours(scored: Scored, matrix: np.ndarray, best: np.ndarray, agent: str,
               taken: np.ndarray) -> np.ndarray:
    """Positions (into `scored.rows`, not `taken`) of the configurations that differ from the
    row `best` only in slots `agent` owns: that agent explores while the others keep the best
    configuration's choices."""
    cols = _OTHERS[agent]
    same = (matrix[scored.rows][:, cols] == best[cols]).all(axis=1)
    return np.nonzero(same & ~taken)[0]


def sample_local(scored: Scored, matrix: np.ndarray, best: np.ndarray, k: int,
                 rng: np.random.Generator, exclude: set[int], first_agent: int = 0) -> list[int]:
    """k distinct positions near `best`, one agent at a time: the i-th is drawn, from the
    policy's distribution conditioned on that neighbourhood, among the configurations that
    change only agent ``AGENTS[(first_agent + i) % 4]``'s slots (an agent whose neighbourhood
    is exhausted passes its turn to the next). Fewer than k when every neighbourhood is empty."""
    taken = np.zeros(len(scored.logp), dtype=bool)
    if exclude:
        taken[list(exclude)] = True
    out: list[int] = []
    turn = first_agent
    for _ in range(k):
        for step in range(len(AGENTS)):
            near = neighbours(scored, matrix, best, AGENTS[(turn + step) % len(AGENTS)], taken)
            if len(near):
                break
        else:
            break
        turn += step + 1
        lp = scored.logp[near]
        p = np.exp(lp - lp.max())
        i = int(near[rng.choice(len(near), p=p / p.sum())])
        out.append(i)
        taken[i] = True
    return out
