"""The learning agents: PPO math, masks, rewards, observations, training smoke runs, exact resume,
and the replay learning test on the real H200 sweeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cuda_agent.agents import checkpoint
from cuda_agent.agents.observe import (GLOBAL_DIM, LOCAL_DIM, OBS_DIM, SearchState,
                                       local_features, observe)
from cuda_agent.agents.policy import SLOT_OFFSETS, MultiAgentPolicy, agent_groups
from cuda_agent.agents.ppo import (Buffer, PPOSettings, Transition, advantages, clipped_surrogate,
                                   gae)
from cuda_agent.agents.reward import RewardSettings, aux_term, rank_rewards, rewards
from cuda_agent.agents.vocab import SLOT_ORDER, VOCAB, SpaceIndex, values
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.space.slots import Target
from cuda_agent.space.space import SCOPE_SLOT, Space

ROOT = Path(__file__).resolve().parents[1]
GOOD = ROOT / "tests" / "data" / "good"
PROBLEMS = ROOT / "benchmarks" / "problems"
H200 = ROOT / "benchmarks" / "data" / "nvidia-h200"


def space_of(path: Path) -> Space:
    return Space.for_plan(make_plan(load_problem(path).graph()), Target())


# -- PPO math ------------------------------------------------------------------------------------

def test_gae_matches_hand_computation():
    r = np.array([1.0, 0.0, 2.0])
    v = np.array([0.5, 0.2, 0.1, 0.0])
    g, lam = 0.9, 0.8
    d = [r[t] + g * v[t + 1] - v[t] for t in range(3)]
    a2 = d[2]
    a1 = d[1] + g * lam * a2
    a0 = d[0] + g * lam * a1
    adv, ret = gae(r, v, g, lam)
    np.testing.assert_allclose(adv, [a0, a1, a2])
    np.testing.assert_allclose(ret, adv + v[:3])


def test_gae_with_lambda_one_is_discounted_return_minus_value():
    r = np.array([1.0, 2.0, 3.0])
    v = np.array([0.3, -0.2, 0.7, 0.0])
    adv, ret = gae(r, v, 0.5, 1.0)
    want = [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3]
    np.testing.assert_allclose(ret, want)


def test_clipping_stops_the_gradient_outside_the_trust_region():
    old = torch.zeros(2)
    adv = torch.tensor([1.0, -1.0])
    # ratio e^0.5 > 1.2 with positive advantage: clipped, no gradient
    new = torch.tensor([0.5, 0.0], requires_grad=True)
    loss = clipped_surrogate(new, old, adv, 0.2)
    loss.backward()
    assert new.grad[0] == 0.0
    assert new.grad[1] != 0.0
    # value: -(min(r*A, clip(r)*A)).mean() = -(1.2*1 + 1*(-1)) / 2
    assert float(loss.detach()) == pytest.approx(-(1.2 - 1.0) / 2)


def test_advantages_combine_step_credit_and_within_batch_credit():
    def tr(step: int, r: float, v: float) -> Transition:
        return Transition(0, step, {"g": np.zeros(1)}, np.zeros(1), np.zeros(1), np.zeros(1),
                          {"g": 0.0}, {"g": 1.0}, {"g": v}, {"g": r}, 0, f"{step}-{r}")
    trs = [tr(1, 1.0, 0.0), tr(1, -1.0, 0.0), tr(2, 0.5, 0.0), tr(2, 0.5, 0.0)]
    s = PPOSettings(gamma=0.5, lam=1.0)
    adv, _ = advantages(trs, ["g"], s)
    # step means 0 and 0.5; GAE on means: step1 = 0 + 0.5 * 0.5, step2 = 0.5
    np.testing.assert_allclose(adv["g"], [0.25 + 1.0, 0.25 - 1.0, 0.5, 0.5])


def test_buffer_deduplicates_by_content_key_and_drops_stale_versions():
    def tr(key: str, version: int) -> Transition:
        return Transition(0, 1, {}, np.zeros(1), np.zeros(1), np.zeros(1), {}, {}, {}, {},
                          version, key)
    b = Buffer()
    assert b.add(tr("a", 0)) and not b.add(tr("a", 3)) and b.add(tr("b", 3))
    kept = b.take(min_version=2)
    assert [t.key for t in kept] == ["b"] and not b.transitions


# -- masks and the vocabulary --------------------------------------------------------------------

def _benchmark_spaces(path: Path) -> list[Space]:
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.space.program import stage_spaces

    plan = make_plan(load_problem(path).graph())
    # a multi-kernel program is searched stage by stage: each stage's space must fit
    return stage_spaces(plan, Target()) if isinstance(plan, ProgramPlan) else \
        [Space.for_plan(plan, Target())]


FAMILIES = sorted({p.stem.split("_")[0] for p in PROBLEMS.glob("*.py")})


@pytest.mark.parametrize("family", FAMILIES)
def test_every_benchmark_slot_domain_fits_the_vocabulary(family):
    """Every slot of every benchmark problem's space, with every value it may take, is in the
    agents' vocabulary (a listed configuration takes its values from these domains: the
    listing itself, minutes for the suite, is the slow test below)."""
    missing = []
    for path in sorted(PROBLEMS.glob(f"{family}_*.py")):
        for sp in _benchmark_spaces(path):
            missing += [f"{path.stem}: template {t.name}" for t in sp.templates
                        if t.name not in VOCAB[SCOPE_SLOT]]
            for slot in sp.slots:
                vocab = VOCAB.get(slot.name)
                if vocab is None:
                    missing.append(f"{path.stem}: slot {slot.name}")
                    continue
                missing += [f"{path.stem}: {slot.name}={v!r}" for v in slot.choices
                            if v not in vocab]
    assert not missing, missing[:10]


# one test per problem: the spaces take minutes together, and parallel workers share them out
@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(PROBLEMS.glob("*.py")), ids=lambda p: p.stem)
def test_every_benchmark_space_fits_the_vocabulary(path):
    for sp in _benchmark_spaces(path):
        SpaceIndex.of(sp)  # raises if a slot value is missing from VOCAB


def test_slots_are_partitioned_between_agents():
    for mode in ("multi", "single"):
        groups = agent_groups(mode)
        owned = [s for slots in groups.values() for s in slots]
        assert sorted(owned) == sorted(SLOT_ORDER) and len(owned) == len(set(owned))


@pytest.mark.parametrize("name", ["softmax_small", "sum_small", "relu_small"])
def test_masking_never_samples_an_invalid_or_excluded_configuration(name):
    space = space_of(GOOD / f"{name}.py")
    index = SpaceIndex.of(space)
    torch.manual_seed(0)
    policy = MultiAgentPolicy("multi", hidden=16)
    with torch.no_grad():  # sharpen the policy so that it would love invalid values if allowed
        for p in policy.parameters():
            p.mul_(25.0)
    rng = np.random.default_rng(0)
    obs = {g: np.random.default_rng(1).normal(size=OBS_DIM).astype(np.float32)
           for g in policy.groups}
    valid = set(space.configs)
    excluded = set(space.configs[: len(space.configs) // 2])
    rows = index.rows_excluding(excluded)
    for _ in range(150):
        d = policy.act(obs, index, rng, rows=rows)
        cfg = index.config_of({s: int(a) for s, a in zip(SLOT_ORDER, d.actions)})
        assert cfg in valid and cfg not in excluded
        for j, s in enumerate(SLOT_ORDER):  # the recorded mask allowed the action taken
            assert d.masks[SLOT_OFFSETS[j] + d.actions[j]]


def test_evaluate_reproduces_the_sampling_log_probabilities():
    space = space_of(GOOD / "softmax_small.py")
    index = SpaceIndex.of(space)
    torch.manual_seed(3)
    policy = MultiAgentPolicy("multi", hidden=16)
    rng = np.random.default_rng(0)
    obs = {g: np.zeros(OBS_DIM, dtype=np.float32) for g in policy.groups}
    temp = {g: (2.0 if g == "memory" else 1.0) for g in policy.groups}
    ds = [policy.act(obs, index, rng, temp) for _ in range(8)]
    logp, ent = policy.evaluate(
        {g: torch.as_tensor(np.stack([obs[g]] * 8)) for g in policy.groups},
        torch.as_tensor(np.stack([d.actions for d in ds])),
        torch.as_tensor(np.stack([d.masks for d in ds])),
        {g: torch.full((8,), temp[g]) for g in policy.groups})
    for g in policy.groups:
        np.testing.assert_allclose(logp[g].detach().numpy(), [d.logp[g] for d in ds], atol=1e-5)
        assert bool(torch.isfinite(ent[g]).all())


# -- rewards and observations --------------------------------------------------------------------

def test_rank_rewards_by_hand():
    s = RewardSettings(top=0.25, bottom=0.25)
    r = rank_rewards([4.0, 1.0, None, 3.0, 2.0, 5.0], s)
    # fastest first: 1.0 (+1), 2.0 (+0.5 ramp... p=0.25 -> +1), 3.0 (p=.5 -> 0), 4.0 (-1), 5.0 (-1)
    assert r == [-1.0, 1.0, None, 0.0, 1.0, -1.0]
    assert rank_rewards([2.0, 2.0], s) == [0.0, 0.0]  # a tie is noise, not information


def test_rank_reward_is_scale_free_but_time_reward_is_not():
    small, big = [0.01, 0.02, 0.03], [10.0, 20.0, 30.0]
    rank = RewardSettings()
    assert rank_rewards(small, rank) == rank_rewards(big, rank)
    raw = RewardSettings(mode="time")
    f = lambda ts: [d["g"] for d in rewards(ts, [None] * 3, [{}] * 3, ["g"], None, raw)]  # noqa
    assert f(small) != f(big)


def test_rank_over_run_punishes_a_batch_worse_than_the_run_so_far():
    history = [1.0, 1.1, 1.2, 1.3]
    batch = [3.0, 2.0, None]
    kinds = [None, None, "wrong"]
    by_batch = rewards(batch, kinds, [{}] * 3, ["g"], 1.0, RewardSettings(), history=history)
    by_run = rewards(batch, kinds, [{}] * 3, ["g"], 1.0, RewardSettings(rank_over="run"),
                     history=history)
    # within its batch the least bad of two poor candidates is rewarded +1 ...
    assert [r["g"] for r in by_batch[:2]] == [-1.0, 1.0]
    # ... against the run's history both are the slowest measured so far
    assert [r["g"] for r in by_run[:2]] == [-1.0, -1.0]
    assert by_run[2] == by_batch[2] == {"g": -1.0}  # a failure keeps its penalty
    # a batch member faster than everything before: top rank plus the improvement bonus
    best = rewards([0.5, 3.0], [None, None], [{}] * 2, ["g"], 1.0,
                   RewardSettings(rank_over="run"), history=history)
    assert best[0]["g"] == pytest.approx(1.5) and best[1]["g"] == -1.0
    # no history yet: the same as ranking within the batch
    assert rewards(batch, kinds, [{}] * 3, ["g"], None, RewardSettings(rank_over="run"),
                   history=[]) == rewards(batch, kinds, [{}] * 3, ["g"], None, RewardSettings())
    with pytest.raises(ValueError, match="rank_over"):
        rewards(batch, kinds, [{}] * 3, ["g"], None, RewardSettings(rank_over="epoch"))


def test_failures_get_their_penalty_and_aux_is_small_and_bounded():
    s = RewardSettings(aux_weight=0.05)
    out = rewards([1.0, None, 2.0], [None, "illegal_address", None],
                  [{"achieved_occupancy": 1.0}, {}, {"achieved_occupancy": 0.0}],
                  ["config", "memory"], best_before=None, settings=s)
    assert out[1] == {"config": -1.5, "memory": -1.5}
    assert out[0]["config"] == pytest.approx(1.0 + 0.05)
    assert out[2]["config"] == pytest.approx(-1.0 - 0.05)
    assert out[0]["memory"] == 1.0  # memory metrics missing: no aux term
    # gaming guard: full DRAM throughput with heavy bank conflicts earns nothing extra
    assert aux_term("memory", {"dram_throughput": 1.0, "bank_conflicts": 4.0}) == 0.0
    for agent in ("config", "memory", "compute", "reduction"):
        for c in ({"achieved_occupancy": 9e9, "dram_throughput": -5, "spills": 1e6,
                   "sync_stalls": 1e9, "issue_utilization": 1e9}, {}):
            assert -1.0 <= aux_term(agent, c) <= 1.0


def test_missing_counters_are_flagged_not_zero():
    f = local_features("memory", {"dram_throughput": 0.5})
    assert f[1] == 0.5 and f[LOCAL_DIM // 2 + 1] == 0.0  # present
    assert f[0] == 0.0 and f[LOCAL_DIM // 2] == 1.0  # sectors_per_request missing
    space = space_of(GOOD / "sum_small.py")
    # the problem's features: the global part less the 3 search-progress values
    state = SearchState(np.zeros(GLOBAL_DIM - 3, dtype=np.float32), budget=10)
    assert observe("config", state, SpaceIndex.of(space)).shape == (OBS_DIM,)


# -- training and tuning on sim ------------------------------------------------------------------

def _train(tmp: Path, iterations: int, resume: bool = False, agents: str = "multi",
           prior_weight: float = 0.0):
    from cuda_agent.agents.train import TrainSettings, Trainer

    s = TrainSettings.of(suite=str(GOOD), device="sim", iterations=iterations, episodes=2, steps=2,
                      batch=4, out=str(tmp), resume=resume, hidden=16, agents=agents,
                      prior_weight=prior_weight)
    tr = Trainer(s)
    try:
        curves = tr.train()
        return curves, {k: v.clone() for k, v in tr.policy.state_dict().items()}
    finally:
        tr.close()


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """`straight(prior_weight)`: the policy's state after 3 uninterrupted iterations, trained
    once per prior weight for the resume tests that compare with it (a training run is
    seconds of CPU)."""
    done: dict = {}

    def get(prior_weight: float = 0.0) -> dict:
        if prior_weight not in done:
            done[prior_weight] = _train(tmp_path_factory.mktemp("straight"), 3,
                                        prior_weight=prior_weight)[1]
        return done[prior_weight]
    return get


def test_train_then_tune_smoke_on_sim(tmp_path):
    from cuda_agent.agents.train import write_curves
    from cuda_agent.tuner import tune

    curves, _ = _train(tmp_path / "t", 2)
    assert len(curves) == 2 and curves[-1]["measurements"] == 2 * 2 * 2 * 4
    assert set(curves[-1]["entropy"]) == {"config", "memory", "compute", "reduction"}
    assert write_curves(curves, tmp_path / "t", "smoke").exists()
    blob = checkpoint.load(tmp_path / "t" / "policy.pt")
    assert blob["meta"]["simulated"] and blob["meta"]["trained_on"]
    r = tune(GOOD / "sum_small.py", device="sim", strategy="marl", budget=12, batch=4,
             store=":memory:", strategy_options={"policy": str(tmp_path / "t" / "policy.pt"),
                                                 "budget": 12})
    assert r.best is not None and len(r.trials) <= 12
    assert len({t.config for t in r.trials}) == len(r.trials)  # never measures twice


def test_single_agent_ablation_trains(tmp_path):
    curves, state = _train(tmp_path / "s", 1, agents="single")
    assert set(curves[-1]["entropy"]) == {"single"}


# the resume tests share one worker (`--dist loadgroup`), so `straight` trains once for both
@pytest.mark.xdist_group("test_agents_straight")
@pytest.mark.parametrize("prior_weight", [0.0, pytest.param(100.0, marks=pytest.mark.slow)])
def test_resume_from_a_checkpoint_gives_the_same_state(tmp_path, prior_weight, straight):
    """Also with the prior in training, whose per-operator cache a resumed run starts without."""
    uninterrupted = straight(prior_weight)
    _train(tmp_path / "b", 2, prior_weight=prior_weight)
    _, resumed = _train(tmp_path / "b", 3, resume=True, prior_weight=prior_weight)
    assert uninterrupted.keys() == resumed.keys()
    for k in uninterrupted:
        assert torch.equal(uninterrupted[k], resumed[k]), k


@pytest.mark.xdist_group("test_agents_straight")
def test_a_deadline_stops_training_after_the_running_iteration_and_resume_continues(tmp_path,
                                                                                   straight):
    """A deadline already past: the first iteration is finished and saved, no second one is
    sampled; resuming runs the rest and ends in the state of an uninterrupted run."""
    import time

    from cuda_agent.agents.train import TrainSettings, Trainer

    s = TrainSettings.of(suite=str(GOOD), device="sim", iterations=3, episodes=2, steps=2, batch=4,
                      out=str(tmp_path / "d"), hidden=16)
    tr = Trainer(s)
    try:
        curves = tr.train(deadline=time.time() - 1)
    finally:
        tr.close()
    assert len(curves) == 1
    assert checkpoint.load(tmp_path / "d" / "policy.pt")["meta"]["iteration"] == 1
    uninterrupted = straight()
    _, resumed = _train(tmp_path / "d", 3, resume=True)
    for k in uninterrupted:
        assert torch.equal(uninterrupted[k], resumed[k]), k


def test_a_published_policy_keeps_the_policy_and_refuses_to_resume(tmp_path):
    from cuda_agent.agents.train import TrainSettings, Trainer
    from cuda_agent.errors import SettingsError

    _train(tmp_path / "t", 1)
    src, dst = tmp_path / "t" / "policy.pt", tmp_path / "published.pt"
    checkpoint.strip_for_inference(src, dst)
    full, slim = checkpoint.load(src), checkpoint.load(dst)
    assert dst.stat().st_size < src.stat().st_size / 2
    assert full["policy"].keys() == slim["policy"].keys()
    assert all(torch.equal(full["policy"][k], slim["policy"][k]) for k in full["policy"])
    assert slim["meta"]["trained_on"] == full["meta"]["trained_on"]
    assert "optimizer" not in slim and "sampler_state" not in slim["meta"]
    (tmp_path / "r").mkdir()
    dst.replace(tmp_path / "r" / "policy.pt")
    s = TrainSettings.of(suite=str(GOOD), device="sim", iterations=2, episodes=2, steps=2, batch=4,
                      out=str(tmp_path / "r"), resume=True, hidden=16)
    with pytest.raises(SettingsError, match="cannot be resumed"):
        Trainer(s)


def test_an_old_checkpoint_loads_to_the_same_policy_every_time():
    """h200-replay-multi.pt predates heads the template library added since: they start from
    initial weights, which must not depend on the caller's random state."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/policies/h200-replay-multi.pt"
    blob = checkpoint.load(path)
    torch.manual_seed(1)
    a = checkpoint.policy_from(blob).state_dict()
    torch.manual_seed(2)
    b = checkpoint.policy_from(blob).state_dict()
    assert set(a) - set(blob["policy"]), "no head added since: the test checks nothing"
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_corrupt_checkpoint_is_a_clear_error(tmp_path):
    from cuda_agent.errors import SettingsError

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(SettingsError, match="not a readable checkpoint"):
        checkpoint.load(bad)


# -- the learning test on real GPU data ----------------------------------------------------------

HOLDOUT = ("elementwise_swiglu", "elementwise_broadcast_odd", "reduce_argmin_middim",
           "reduce_sum_size1dim_odd", "softmax_log_softmax", "softmax_tinyrows_odd", "norm_l2",
           "norm_layernorm_odd")


@pytest.mark.skipif(not H200.exists(), reason="no recorded H200 sweeps")
@pytest.mark.slow  # a hundred training iterations on replay, then a comparison (tens of minutes)
def test_trained_agents_beat_random_search_on_held_out_operators(tmp_path):
    """On replay of the H200 sweeps, agents trained on the other operators reach 95 % of the
    recorded best on held-out operators (new ops and shapes of known families) in at least
    1.5 times fewer measurements than random search (issue 3 asks for fewer, with the margin
    recorded; the default, measured first, is counted for both). This can fail: an untrained
    policy does worse than random (16.5 against 12 in the replay benchmark), and with the
    slot-by-slot masks of before `agents/decode.py` the trained agents were level with random
    on these operators (medians 25.5 and 22.5 in the 2026-11-29 replay benchmark).

    Why 1.5: the margin depends on the training run, and the training data changes whenever a
    sweep is recorded again (these operators' sweeps did not change; the others' did).
    Training seeds 0, 1, 2 (100 iterations): 3.4x, 3.4x, 2.0x on the sweeps of 2026-11-30;
    1.81x (13 vs 23.5), 2.94x and 2.14x after the convolution sweeps of 2026-12-01 (a bar of
    2x, set on the first, then failed seed 0). 1.5x holds for each and still fails an
    untrained policy."""
    from cuda_agent.agents.evaluate import Contender, compare
    from cuda_agent.agents.train import TrainSettings, Trainer
    from cuda_agent.runner.replay import ReplayDevice

    device = ReplayDevice(root=H200.parent)
    s = TrainSettings.of(suite=str(PROBLEMS), holdout=HOLDOUT, device="replay", iterations=100,
                      episodes=4, steps=4, batch=8, out=str(tmp_path / "p"),
                      replay_root=str(H200.parent))
    tr = Trainer(s, device=device)
    try:
        tr.train()
    finally:
        tr.close()
    assert not set(HOLDOUT) & set(checkpoint.load(tmp_path / "p" / "policy.pt")["meta"]
                                  ["trained_on"])
    res = compare([PROBLEMS / f"{h}.py" for h in HOLDOUT],
                  # the policy alone: the analytic model's prior would beat random search
                  # without any training (`agents/prior.py`)
                  [Contender("trained", "marl", str(tmp_path / "p" / "policy.pt"), online=False,
                             prior_weight=0.0),
                   Contender("random")], device, seeds=3)
    trained, random_ = res.median("trained"), res.median("random")
    print(f"median measurements to 95% of best, held-out: trained {trained}, random {random_}, "
          f"margin {random_ - trained:+.1f} ({random_ / trained:.2f}x)")
    assert 1.5 * trained <= random_


def test_training_with_the_prior_samples_what_the_model_rates_best(tmp_path):
    """`TrainSettings.prior_weight`: the episodes propose as tuning does, among the
    configurations the analytic model rates near its best (on sim, the model is the device:
    the first batch's best is the space's best within a few percent), and the operator keeps
    its prior for later episodes; without it the untrained policy's first batch is blind."""
    from cuda_agent.costmodel.predict import simulated_times
    from cuda_agent.agents.train import TrainSettings, Trainer, run_episode

    firsts = {}
    for weight in (0.0, 100.0):
        s = TrainSettings.of(suite=str(GOOD / "sum_small.py"), device="sim", iterations=1,
                          episodes=1, steps=1, batch=4, prior_weight=weight,
                          out=str(tmp_path / str(weight)))
        tr = Trainer(s)
        try:
            op = tr.operators[0]
            ranks = []
            for seed in range(4):
                ep = run_episode(tr.policy.state_dict(), tr.policy.describe(), op, s, seed, 0,
                                 seed)
                ranks.append(ep["best_ms"])
            assert (op.prior is not None) == (weight > 0)
            every = simulated_times(op.index.space, np.arange(len(op.index.configs)),
                                    op.index.configs)  # the sim device's times, unmeasured
            firsts[weight] = float(np.median(ranks)) / np.nanmin(every)
        finally:
            tr.close()
    assert firsts[100.0] <= 1.05, firsts
    assert firsts[0.0] > firsts[100.0], firsts


def test_the_suite_loads_without_listing_its_spaces(tmp_path):
    """Listing a space takes seconds and the default suite has over a hundred problems:
    loading the suite lists none (with progress reported per problem), and an iteration lists
    only the spaces of the operators its episodes drew, announced before each."""
    from cuda_agent.agents.train import TrainSettings, Trainer

    s = TrainSettings.of(suite=str(GOOD), device="sim", iterations=1, episodes=1, steps=1,
                      batch=2, hidden=16, out=str(tmp_path / "p"))
    loaded: list = []
    tr = Trainer(s, loading=lambda i, n, name: loaded.append((i, n, name)))
    try:
        n = len(tr.operators)
        assert n == 3 and loaded[0] == (0, 3, "relu_small") and loaded[-1] == (3, 3, "")
        assert not any(op.prepared for op in tr.operators)
        assert not any("configs" in vars(op.tuner.space) for op in tr.operators)
        listed: list = []
        tr.train(preparing=listed.append)
        prepared = [op.name for op in tr.operators if op.prepared]
        assert listed == prepared and len(prepared) == 1
    finally:
        tr.close()


def test_operators_per_iteration_groups_the_episodes(tmp_path):
    """Episodes of one update can share operators, grouped, so a device sets each up once."""
    from cuda_agent.agents.train import TrainSettings, Trainer

    s = TrainSettings.of(suite=str(GOOD), device="sim", iterations=1, episodes=4, steps=1, batch=2,
                      operators_per_iteration=2, out=str(tmp_path / "p"))
    tr = Trainer(s)
    try:
        for it in range(5):
            ks = [k for k, *_ in tr._plan_jobs(it)]
            assert len(set(ks)) <= 2
            assert ks[0] == ks[1] and ks[2] == ks[3]
    finally:
        tr.close()


def test_a_checkpoint_of_a_smaller_vocabulary_loads_with_its_heads_grown(tmp_path):
    """Values appended to a slot (GEMM stages 3 and 4) must not orphan trained policies: the
    old values keep their logits exactly, the new ones start at the head's mean bias."""
    from cuda_agent.agents.checkpoint import grown_state
    from cuda_agent.agents.policy import CTX_DIM

    torch.manual_seed(0)
    trained = MultiAgentPolicy("multi")
    slot = "memory.stages"
    j = SLOT_ORDER.index(slot)
    keep = [0, 1, len(values(slot)) - 1]  # an older build knew 1, 2 and the absent marker
    dropped = [int(SLOT_OFFSETS[j]) + i for i in range(len(values(slot))) if i not in keep]
    hidden = trained.hidden
    ctx_keep = [c for c in range(CTX_DIM) if c not in dropped]
    old = {}
    for key, v in trained.state_dict().items():
        if ".heads." in key:
            if key.endswith(".weight"):
                v = torch.cat([v[:, :hidden], v[:, [hidden + c for c in ctx_keep]]], dim=1)
            if "heads.memory_stages." in key:
                v = v[keep]
        old[key] = v.clone()
    with pytest.raises(RuntimeError):
        MultiAgentPolicy("multi").load_state_dict(old)
    grown = MultiAgentPolicy("multi")
    grown.load_state_dict(grown_state(old, grown))
    # same logits on every old value, for a context of old values only
    ctx = torch.zeros(CTX_DIM)
    ctx[ctx_keep[::3]] = 1.0
    h = torch.randn(hidden)
    for s in SLOT_ORDER:
        g = trained.group_of[s]
        a = trained.nets[g].logits(h, ctx, s)
        b = grown.nets[g].logits(h, ctx, s)
        rows = keep if s == slot else list(range(len(values(s))))
        assert torch.allclose(a[rows], b[rows], atol=1e-5), s
    head = grown.nets[grown.group_of[slot]].heads["memory_stages"]
    assert torch.all(head.weight[2:4] == 0)
    old_bias = old["nets.memory.heads.memory_stages.bias"]
    assert torch.allclose(head.bias[2:4], old_bias[:2].mean().expand(2))


@pytest.mark.parametrize("mode", ["multi", "single"])
def test_a_checkpoint_from_before_a_slot_was_added_loads(mode):
    """A slot added to a template (the split template's config.out_grid) adds a head, context
    columns and one observation column per agent, inside the decision order: a policy trained
    before must load, with the same trunk activations, critic values and logits on the slots it
    knew, the new slot's observation column having no effect until fine-tuning."""
    from cuda_agent.agents.checkpoint import grown_state
    from cuda_agent.agents.observe import GLOBAL_STATE_DIM, OBS_DIM
    from cuda_agent.agents.policy import CTX_DIM

    torch.manual_seed(1)
    trained = MultiAgentPolicy(mode)
    slot = "config.out_grid"
    j = SLOT_ORDER.index(slot)
    ctx_keep = [c for c in range(CTX_DIM)
                if not SLOT_OFFSETS[j] <= c < SLOT_OFFSETS[j + 1]]
    obs_col = OBS_DIM - len(SLOT_ORDER) + j  # the slot's config feature
    state_col = GLOBAL_STATE_DIM - len(SLOT_ORDER) + j
    hidden = trained.hidden
    old = {}
    for key, v in trained.state_dict().items():
        if "heads.config_out_grid." in key:
            continue
        if ".heads." in key and key.endswith(".weight"):
            v = torch.cat([v[:, :hidden], v[:, [hidden + c for c in ctx_keep]]], dim=1)
        if key.endswith("trunk.0.weight"):
            v = torch.cat([v[:, :obs_col], v[:, obs_col + 1:]], dim=1)
        if key == "critic.0.weight":
            v = torch.cat([v[:, :state_col], v[:, state_col + 1:]], dim=1)
        old[key] = v.clone()
    vocab = {s: list(values(s)) for s in SLOT_ORDER if s != slot}
    grown = MultiAgentPolicy(mode)
    with pytest.raises(RuntimeError):
        grown.load_state_dict(old)
    grown.load_state_dict(grown_state(old, grown, vocab))
    obs = torch.randn(OBS_DIM)
    state = torch.randn(GLOBAL_STATE_DIM)
    ctx = torch.zeros(CTX_DIM)
    ctx[ctx_keep[::3]] = 1.0
    # the old policy's own inputs: the same vectors without the new slot's column
    for g in trained.groups:
        h_new = grown.nets[g].trunk(torch.cat([obs[:obs_col], torch.tensor([0.7]),
                                               obs[obs_col + 1:]]))
        h_ref = torch.tanh(torch.nn.functional.linear(
            torch.cat([obs[:obs_col], obs[obs_col + 1:]]), old[f"nets.{g}.trunk.0.weight"],
            old[f"nets.{g}.trunk.0.bias"]))
        h_ref = trained.nets[g].trunk[3](trained.nets[g].trunk[2](h_ref))
        assert torch.allclose(h_new, h_ref, atol=1e-5), g
        for s in grown.groups[g]:
            if s != slot:
                assert torch.allclose(trained.nets[g].logits(h_ref, ctx, s),
                                      grown.nets[g].logits(h_ref, ctx, s), atol=1e-5), s
    v_ref = torch.nn.functional.linear(torch.cat([state[:state_col], state[state_col + 1:]]),
                                       old["critic.0.weight"], old["critic.0.bias"])
    v_ref = trained.critic[1:](v_ref)
    v_new = grown.critic(torch.cat([state[:state_col], torch.tensor([-0.4]),
                                    state[state_col + 1:]]))
    assert torch.allclose(v_ref, v_new, atol=1e-5)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "benchmarks" / "policies")
                                        .glob("*.pt")))
def test_the_shipped_policies_load_with_this_build(name):
    """The committed checkpoints are what `tune --policy` and the GPU comparisons use: a
    template change that orphans them must fail here, not on the GPU machine."""
    from cuda_agent.agents import checkpoint

    checkpoint.policy_from(checkpoint.load(ROOT / "benchmarks" / "policies" / name))


def test_the_agents_propose_and_learn_on_one_thread(monkeypatch):
    """The strategy's policy work runs on one torch thread (more only contend with the
    compile processes: 24 s against 4.3 s of a search on two busy cores), and the process's
    setting is restored after each ask and tell."""
    import torch

    from cuda_agent.agents.strategy import AgentsStrategy
    from cuda_agent.runner.records import Measurement

    seen: list[int] = []
    strategy = AgentsStrategy(space_of(GOOD / "sum_small.py"), seed=0, budget=8)
    for name in ("propose", "learn"):
        original = getattr(strategy.episode, name)

        def spy(*args, _original=original, **kwargs):
            seen.append(torch.get_num_threads())
            return _original(*args, **kwargs)

        monkeypatch.setattr(strategy.episode, name, spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        configs = strategy.ask(4)
        assert torch.get_num_threads() == 2
        strategy.tell([(c, Measurement(f"k{i}", "sim", True, 1.0 + i))
                       for i, c in enumerate(configs)])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 1]


def test_a_stalled_search_raises_one_agents_temperature_at_a_time():
    """Targeted exploration while tuning: after each batch without improvement the next agent
    (in turn) samples hotter, the others stay; an improving batch cools them all again."""
    from cuda_agent.agents.strategy import AgentsStrategy
    from cuda_agent.runner.records import Measurement

    strategy = AgentsStrategy(space_of(GOOD / "sum_small.py"), seed=0, budget=64,
                              explore_temperature=3.0, patience=10**6)
    groups = list(strategy.policy.groups)
    assert strategy.temperatures() == {g: 1.0 for g in groups}

    def batch(time_ms: float) -> None:
        configs = strategy.ask(2)
        strategy.tell([(c, Measurement(f"k{time_ms}{i}", "sim", True, time_ms))
                       for i, c in enumerate(configs)])

    batch(1.0)  # the first measurements improve on nothing: no stall
    hot = []
    for _ in range(len(groups) + 1):
        batch(2.0)  # slower than the best: a stall
        t = strategy.temperatures()
        raised = [g for g in groups if t[g] != 1.0]
        assert len(raised) == 1 and t[raised[0]] == 3.0
        hot.append(raised[0])
    assert hot == groups + groups[:1]
    batch(0.5)
    assert strategy.temperatures() == {g: 1.0 for g in groups}
    with pytest.raises(ValueError, match="explore_temperature"):
        AgentsStrategy(space_of(GOOD / "sum_small.py"), explore_temperature=0.5)


def test_the_first_sampled_proposals_spread_hotter_then_cool():
    """`spread`: after the ranked proposals, the next N are drawn at every agent's temperature
    times `spread_temperature`; then sampling returns to the agents' own temperatures."""
    from cuda_agent.agents.strategy import AgentsStrategy

    strategy = AgentsStrategy(space_of(GOOD / "sum_small.py"), seed=0, budget=64, ranked=2,
                              spread=3, spread_temperature=4.0, patience=10**6)
    seen: list[dict[str, float]] = []
    original = strategy.episode.propose

    def spy(*args, **kwargs):
        seen.append(dict(kwargs["temperature"]))
        return original(*args, **kwargs)

    strategy.episode.propose = spy  # type: ignore[method-assign]
    for _ in range(4):
        strategy.ask(2)
    hot = [set(t.values()) for t in seen]
    # ranked batch at 1; two batches of spread (3 proposals: 2 then 1 left); then back to 1
    assert hot == [{1.0}, {4.0}, {4.0}, {1.0}]
    with pytest.raises(ValueError, match="spread"):
        AgentsStrategy(space_of(GOOD / "sum_small.py"), spread=-1)


def test_the_untrained_and_single_agent_ablations_use_the_policy_they_name(tmp_path):
    """`marl_untrained` is the trained strategy with fresh weights whatever checkpoint the
    bench hands it; `marl_single` tunes with a single-agent checkpoint and refuses a four-agent
    one (comparing the wrong policy would be a silent error in issue 3's comparison)."""
    from cuda_agent.agents.strategy import SingleAgentStrategy, UntrainedAgentsStrategy

    space = space_of(GOOD / "sum_small.py")
    multi, single = MultiAgentPolicy("multi", 16), MultiAgentPolicy("single", 16)
    with torch.no_grad():
        for p in multi.parameters():
            p.fill_(0.5)
    checkpoint.save(tmp_path / "multi.pt", multi, {"trained_on": []})
    checkpoint.save(tmp_path / "single.pt", single, {"trained_on": []})

    from cuda_agent.agents.strategy import RANKED_FIRST

    untrained = UntrainedAgentsStrategy(space, seed=0, policy=str(tmp_path / "multi.pt"))
    # its first proposals ranked as a trained policy's are: the two differ only in the weights
    assert untrained.policy.mode == "multi" and untrained.ranked_left == RANKED_FIRST
    assert not any(torch.all(p == 0.5) for p in untrained.policy.parameters())

    chosen = SingleAgentStrategy(space, seed=0, policy=str(tmp_path / "single.pt"))
    assert chosen.policy.mode == "single" and chosen.ranked_left > 0
    assert len(chosen.ask(4)) == 4
    with pytest.raises(ValueError, match="single-agent checkpoint"):
        SingleAgentStrategy(space, seed=0, policy=str(tmp_path / "multi.pt"))
