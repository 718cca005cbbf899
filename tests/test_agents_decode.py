"""Ranked and conditioned decoding (cuda_agent/agents/decode.py): never an invalid, excluded or
duplicate configuration; ranked order is the policy's own order; PPO recomputes the same
log-probabilities; on a sparse subset every agent still has a say."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import good_space, sharp_policy
from cuda_agent.agents.decode import domain_masks, ranked, sample, sample_local, score_rows
from cuda_agent.agents.episode import Episode
from cuda_agent.agents.observe import OBS_DIM, observe
from cuda_agent.agents.policy import SLOT_OFFSETS, MultiAgentPolicy
from cuda_agent.agents.reward import RewardSettings
from cuda_agent.agents.vocab import SLOT_ORDER, SpaceIndex, owner
from cuda_agent.runner.records import Measurement
from cuda_agent.space.slots import AGENTS

space_of = good_space


def random_obs(policy: MultiAgentPolicy, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {g: rng.normal(size=OBS_DIM).astype(np.float32) for g in policy.groups}


@pytest.mark.parametrize("name", ["softmax_small", "sum_small", "relu_small"])
def test_ranked_and_sampled_picks_are_valid_distinct_and_not_excluded(name):
    space = space_of(name)
    index = SpaceIndex.of(space)
    policy = sharp_policy()
    obs = random_obs(policy)
    excluded = set(space.configs[::3])
    rows = index.rows_excluding(excluded)
    scored = score_rows(policy, obs, index, rows)
    assert np.isfinite(scored.logp).all()
    top = ranked(scored, 10)
    picks = top + sample(scored, 40, np.random.default_rng(0), exclude=set(top))
    configs = [index.configs[int(scored.rows[k])] for k in picks]
    assert len(configs) == len(set(configs)) == min(50, len(rows))
    assert all(c in set(space.configs) and c not in excluded for c in configs)
    # ranked order is the policy's order: non-increasing log-probability, and the first is
    # the most probable of all remaining rows
    lps = scored.logp[top]
    assert all(a >= b for a, b in zip(lps, lps[1:]))
    assert lps[0] == scored.logp.max()
    # every recorded action is inside its recorded mask
    for k in picks:
        d = scored.decision(k, {}, list(policy.groups))
        for j in range(len(SLOT_ORDER)):
            assert d.masks[SLOT_OFFSETS[j] + d.actions[j]]


def test_sampling_exhausts_the_rows_without_repeats():
    index = SpaceIndex.of(space_of("sum_small"))
    policy = sharp_policy(2)
    rows = index.rows_excluding(set(index.configs[:-5]))  # five left
    scored = score_rows(policy, random_obs(policy), index, rows)
    got = sample(scored, 50, np.random.default_rng(0))
    assert sorted(got) == list(range(5))
    assert ranked(scored, 50) and len(ranked(scored, 50)) == 5


def test_evaluate_reproduces_the_scored_log_probabilities():
    index = SpaceIndex.of(space_of("softmax_small"))
    torch.manual_seed(3)
    policy = MultiAgentPolicy("multi", hidden=16)
    obs = random_obs(policy, 4)
    temp = {g: (2.0 if g == "memory" else 1.0) for g in policy.groups}
    rows = np.arange(len(index.configs))
    scored = score_rows(policy, obs, index, rows, temp)
    picks = sample(scored, 8, np.random.default_rng(0))
    ds = [scored.decision(k, temp, list(policy.groups)) for k in picks]
    logp, _ = policy.evaluate(
        {g: torch.as_tensor(np.stack([obs[g]] * len(ds))) for g in policy.groups},
        torch.as_tensor(np.stack([d.actions for d in ds])),
        torch.as_tensor(np.stack([d.masks for d in ds])),
        {g: torch.full((len(ds),), temp[g]) for g in policy.groups})
    for g in policy.groups:
        np.testing.assert_allclose(logp[g].detach().numpy(), [d.logp[g] for d in ds],
                                   atol=1e-4)


def test_a_sparse_subset_leaves_every_agent_a_choice():
    """On a handful of sampled configurations, slot-by-slot masks would force the later
    agents' values; a domain mask holds every value the row's template takes in the space."""
    space = space_of("softmax_small")
    keep = np.random.default_rng(0).choice(len(space.configs), size=min(12, len(space.configs)),
                                           replace=False)
    sub = SpaceIndex.of(space.restricted([space.configs[i] for i in keep]))
    dm = domain_masks(sub)
    for r in range(len(sub.configs)):
        same = sub.matrix[sub.matrix[:, 0] == sub.matrix[r, 0]]
        for j in range(1, len(SLOT_ORDER)):
            allowed = set(np.nonzero(dm[r, SLOT_OFFSETS[j]:SLOT_OFFSETS[j + 1]])[0].tolist())
            assert allowed == set(same[:, j].tolist()), SLOT_ORDER[j]
    assert set(np.nonzero(dm[0, :SLOT_OFFSETS[1]])[0].tolist()) == set(sub.matrix[:, 0].tolist())


def test_episode_proposes_ranked_first_then_samples():
    space = space_of("relu_small")
    policy = sharp_policy(5)
    ep = Episode(policy, space, 32, np.random.default_rng(0), RewardSettings(), 0)
    exclude = {space.configs[0]}
    out = ep.propose(6, exclude=exclude, ranked=3)
    assert len(out) == len(set(out)) == min(6, len(space.configs) - 1)
    assert space.configs[0] not in out
    # the first three are the policy's three most probable rows at the episode's start
    index = ep.index
    fresh = Episode(policy, space, 32, np.random.default_rng(0), RewardSettings(), 0)
    obs = {g: observe(policy.obs_agent(g), fresh.state, fresh.index) for g in policy.groups}
    scored = score_rows(policy, obs, index, index.rows_excluding(exclude))
    assert out[:3] == [index.configs[int(scored.rows[k])] for k in ranked(scored, 3)]


def changed_agents(a: np.ndarray, b: np.ndarray) -> set[str]:
    return {owner(SLOT_ORDER[j]) for j in np.nonzero(a != b)[0]}


@pytest.mark.parametrize("name", ["softmax_small", "sum_small"])
def test_local_picks_change_one_agent_at_a_time_in_turn(name):
    """Each local proposal differs from the best only in the slots of one agent, the agents
    taking turns (an agent with no neighbour left passes); distinct, valid, not excluded."""
    space = space_of(name)
    index = SpaceIndex.of(space)
    policy = sharp_policy(2)
    scored = score_rows(policy, random_obs(policy), index, index.rows_excluding(None))
    best = index.matrix[len(space.configs) // 2]
    exclude = {len(space.configs) // 2}  # the best itself, already measured
    picks = sample_local(scored, index.matrix, best, 12, np.random.default_rng(0), exclude)
    assert picks and len(picks) == len(set(picks)) and not set(picks) & exclude
    movers = []
    for k in picks:
        moved = changed_agents(index.matrix[int(scored.rows[k])], best)
        assert len(moved) == 1, moved  # exactly one agent's slots changed
        movers.append(moved.pop())
    having = [a for a in AGENTS if any(
        changed_agents(r, best) == {a} for r in index.matrix)]
    assert len(having) >= 2  # the test means something: several agents can move
    # turns: the first proposals visit the agents that have neighbours, in AGENTS order
    assert movers[:len(having)] == having


def test_local_picks_stop_when_every_neighbourhood_is_spent():
    space = space_of("relu_small")
    index = SpaceIndex.of(space)
    policy = sharp_policy(3)
    scored = score_rows(policy, random_obs(policy), index, index.rows_excluding(None))
    best = index.matrix[0]
    near = [r for r in range(len(index.configs))
            if len(changed_agents(index.matrix[r], best)) == 1]
    picks = sample_local(scored, index.matrix, best, len(index.configs),
                         np.random.default_rng(1), {0})
    assert sorted(picks) == sorted(near)  # every neighbour once, nothing else


def test_episode_local_share_proposes_near_the_best_after_a_measurement():
    space = space_of("softmax_small")
    policy = sharp_policy(4)
    ep = Episode(policy, space, 64, np.random.default_rng(0), RewardSettings(), 0)
    first = ep.propose(4, local=2)  # no best yet: nothing local, all sampled
    assert len(first) == 4
    ep.observe([(c, Measurement(f"k{i}", "sim", True, 1.0 + i, 0.0, 1, None, True))
                for i, c in enumerate(first)])
    best = ep.index.matrix[ep.index.position[first[0]]]
    out = ep.propose(4, exclude=set(first), local=2)
    assert len(out) == len(set(out)) == 4 and not set(out) & set(first)
    for c in out[:2]:
        assert len(changed_agents(ep.index.matrix[ep.index.position[c]], best)) == 1


def test_episode_ranks_against_the_run_with_rank_over_run():
    """A second batch slower than everything measured before: with rank_over="run" every one of
    its proposals is punished (ranks 4 to 7 of 8: the ramp's lower half, then the bottom
    quarter's -1); ranked within the batch its fastest would still earn +1."""
    space = space_of("relu_small")

    def second_batch_rewards(settings: RewardSettings) -> list[float]:
        ep = Episode(sharp_policy(3), space, 32, np.random.default_rng(0), settings, 0)
        first = ep.propose(4)
        ep.observe([(c, Measurement(f"a{i}", "sim", True, 1.0 + 0.1 * i, 0.0, 1, None, True))
                    for i, c in enumerate(first)])
        second = ep.propose(4, exclude=set(first))
        ep.observe([(c, Measurement(f"b{i}", "sim", True, 5.0 + i, 0.0, 1, None, True))
                    for i, c in enumerate(second)])
        assert len(ep.measured) == 8
        return [t.reward["config"] for t in ep.buffer.transitions[4:]]

    within = second_batch_rewards(RewardSettings(aux_weight=0.0))
    across = second_batch_rewards(RewardSettings(aux_weight=0.0, rank_over="run"))
    assert max(within) == 1.0
    assert across == pytest.approx([1 - 2 * (4 / 7 - 0.25) / 0.5, 1 - 2 * (5 / 7 - 0.25) / 0.5,
                                    -1.0, -1.0])
