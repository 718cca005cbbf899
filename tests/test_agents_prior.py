"""The analytic model's prior on the agents' proposals (cuda_agent/agents/prior.py): its values
are the model's own ranking, bounded; a large space is modelled on a pool; with a weight the
episode's ranked proposals follow policy + prior while the decisions PPO learns from keep the
policy's own log-probabilities."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helpers import ConvBatchNormRelu, good_space, sharp_policy
from cuda_agent.agents import prior as prior_mod
from cuda_agent.agents.decode import ranked, score_rows
from cuda_agent.agents.episode import Episode
from cuda_agent.agents.observe import observe
from cuda_agent.agents.prior import FLOOR, sim_prior
from cuda_agent.agents.reward import RewardSettings
from cuda_agent.agents.strategy import AgentsStrategy
from cuda_agent.costmodel.predict import simulated_times

space_of = good_space


@pytest.mark.parametrize("name", ["relu_small", "sum_small"])
def test_prior_is_the_models_ranking_bounded(name):
    space = space_of(name)
    configs = space.configs
    assert len(configs) <= prior_mod.POOL  # modelled whole
    prior = sim_prior(space, configs)
    times = simulated_times(space, np.arange(len(configs)), configs)
    ok = np.isfinite(times)
    assert ok.sum() > 10 and len(set(np.round(times[ok], 9))) > 2  # the model tells them apart
    assert prior.max() == 0.0 and prior.min() >= FLOOR
    assert prior[int(np.nanargmin(times))] == 0.0
    expect = np.maximum(FLOOR, -np.log(times[ok] / times[ok].min()))
    assert prior[ok] == pytest.approx(expect)
    assert (prior[~ok] == FLOOR).all()  # what the model rejects is the least likely
    # the model's order is the prior's order
    faster, slower = np.nanargmin(times), np.nanargmax(times)
    assert prior[faster] > prior[slower]


def test_a_large_space_is_modelled_on_a_pool_the_rest_neutral(monkeypatch):
    space = space_of("relu_small")
    configs = space.configs
    n = len(configs)
    pool = 16
    modelled: list[np.ndarray] = []
    real = prior_mod.simulated_times

    def spy(space_, rows, configs_, constants=None):
        modelled.append(np.asarray(rows))
        return real(space_, rows, configs_, constants)

    monkeypatch.setattr(prior_mod, "simulated_times", spy)
    logp = np.arange(n, dtype=float)  # the policy prefers the last rows
    prior = sim_prior(space, configs, logp, pool=pool, seed=3)
    rows = modelled[0]
    assert len(rows) == len(set(rows.tolist())) == pool
    assert set(range(n - pool // 2, n)) <= set(rows.tolist())  # the policy's top half
    outside = np.setdiff1d(np.arange(n), rows)
    assert len(set(prior[outside])) == 1  # one neutral value: the pool's median
    assert prior[outside][0] == pytest.approx(np.median(prior[rows]))


def test_episode_ranks_by_policy_plus_prior_and_keeps_the_policys_logp():
    space = space_of("sum_small")
    policy = sharp_policy(7)
    weight = 5.0
    ep = Episode(policy, space, 32, np.random.default_rng(0), RewardSettings(), 0,
                 prior_weight=weight)
    out = ep.propose(4, ranked=4)
    fresh = Episode(policy, space, 32, np.random.default_rng(0), RewardSettings(), 0)
    obs = {g: observe(policy.obs_agent(g), fresh.state, fresh.index) for g in policy.groups}
    index = fresh.index
    scored = score_rows(policy, obs, index, index.rows_excluding(set()))
    own = [index.configs[int(scored.rows[k])] for k in ranked(scored, 4)]
    prior = sim_prior(space, index.configs)
    scored.logp = scored.logp + weight * prior[scored.rows]
    assert out == [index.configs[int(scored.rows[k])] for k in ranked(scored, 4)]
    assert out != own  # the prior moved the policy's own first choices
    for cfg in out:  # PPO's behaviour log-probabilities: the policy's alone
        d = ep.pending[cfg][0]
        alone = score_rows(policy, obs, index, np.asarray([index.position[cfg]]))
        # float32 sums in another order (per head against the batch's scoring): 1e-6
        # apart; the prior's term would move it by its weight times the prior, ~1e-1
        assert sum(d.logp.values()) == pytest.approx(float(alone.logp[0]), rel=1e-5)


def test_strategy_rejects_a_negative_prior_weight():
    with pytest.raises(ValueError, match="prior_weight"):
        AgentsStrategy(space_of("relu_small"), prior_weight=-1.0)


@pytest.mark.parametrize("stage", [0, 1])
def test_a_program_stage_is_modelled_as_the_whole_program_would_be(stage, monkeypatch):
    """A stage's configurations get the whole program's modelled time (the other stages at
    their fixed configurations), while the other stages are rendered once, not once per
    configuration."""
    from cuda_agent.ir.capture import capture
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.costmodel.model import simulate
    from cuda_agent.space.program import StageSpace, stage_spaces
    from cuda_agent.space.slots import Target

    plan = make_plan(capture(ConvBatchNormRelu, [3, 8], lambda: [torch.randn(4, 3, 32, 32)]))
    spaces = stage_spaces(plan, Target())
    assert len(spaces) == 2  # the convolution; the norm, its statistics as side outputs
    space = StageSpace.of(plan, stage, spaces, [sp.default() for sp in spaces])
    configs = random.Random(stage).sample(space.configs, 24)
    whole = [simulate(space.plan, space.render(c), None, space.target) for c in configs]
    want = np.array([r.time_ms if not r.error_kind else np.nan for r in whole])
    assert np.isfinite(want).sum() > 10

    renders = {i: 0 for i in range(len(spaces))}
    for i, sp in enumerate(spaces):
        monkeypatch.setattr(sp, "render", _counting(sp.render, renders, i))
    got = simulated_times(space, np.arange(len(configs)), configs)
    assert np.allclose(got, want, rtol=1e-12, equal_nan=True)
    assert renders[stage] == len(configs)
    assert all(n == 1 for i, n in renders.items() if i != stage)


def _counting(render, counts: dict, i: int):
    def counted(cfg):
        counts[i] += 1
        return render(cfg)
    return counted
