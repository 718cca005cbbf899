"""Losses lower to elementwise ops and reductions that match torch (checked with the IR
interpreter of test_capture), plan onto the templates, and the generated kernels of sampled
configurations match torch on the CPU emulator: cross-entropy with class-index targets (ignored
rows, label smoothing) and probability targets, nll_loss of log_softmax, KL divergence, triplet
margin. Cross-entropy also tunes end to end on the simulated device."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture as capture_problem
from cuda_agent.ir.capture import lower
from cuda_agent.ir.planning import make_plan
from cuda_agent.verify.cases import IndexDomain, make_case
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.space.templates.rowcommon import make_passes
from helpers import Fn, fast_first
from test_capture import interpret

ROOT = Path(__file__).resolve().parents[1]
N, C = 37, 50  # odd sizes: partial warps, rows not a multiple of any vector width

CASES = {
    "mse": (lambda a, b: F.mse_loss(a, b), "reduction"),
    "l1_sum": (lambda a, b: F.l1_loss(a, b, reduction="sum"), "reduction"),
    "smooth_l1": (lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), "reduction"),
    "huber": (lambda a, b: F.huber_loss(a, b, delta=2.0), "reduction"),
    "kl_none": (lambda a, b: F.kl_div(a, b.abs(), reduction="none"), "elementwise"),
    "hinge": (lambda a, b: F.hinge_embedding_loss(a, torch.sign(b)), "reduction"),
    "soft_margin": (lambda a, b: F.soft_margin_loss(a, torch.sign(b)), "reduction"),
    "cosine": (lambda a, b: 1 - F.cosine_similarity(a, b, dim=1), "reduction"),
    "bce": (lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b)), "reduction"),
}


def capture(f, n=2, shape=(8, 16)):
    with torch.device("meta"):
        ins = [torch.randn(*shape) for _ in range(n)]
    return lower(torch.export.export(Fn(f), tuple(ins)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_lowering_matches_torch_and_plans(name):
    f, family = CASES[name]
    g = capture(f)
    x = [torch.randn(8, 16, dtype=torch.float64) for _ in range(2)]
    torch.testing.assert_close(interpret(g, x), f(*x).double(), rtol=1e-12, atol=1e-12)
    assert make_plan(g).family == family


@pytest.mark.parametrize("f", [
    lambda a, b: F.kl_div(torch.log_softmax(a, -1), torch.softmax(b, -1), reduction="batchmean"),
], ids=["kl_batchmean_of_softmaxes"])
def test_losses_needing_two_kernels_become_programs(f):
    """A total over rows of per-row softmax terms over other dims: two stages, each kernel a
    row pattern, and the composed program agrees with torch on the CPU emulator."""
    import random

    import cpu_exec
    from cuda_agent.space.program import StageSpace, stage_spaces
    from cuda_agent.space.slots import Target

    g = capture(f)
    x = [torch.randn(8, 16, dtype=torch.float64) for _ in range(2)]
    torch.testing.assert_close(interpret(g, x), f(*x).double(), rtol=1e-12, atol=1e-12)
    plan = make_plan(g)
    assert plan.kind == "program" and len(plan.program.stages) >= 2
    if not cpu_exec.available():
        return
    spaces = stage_spaces(plan, Target())
    ok = [[c for c in sp.configs if sp.template_of(c).name in ("row", "map", "split")]
          for sp in spaces]
    fixed = [cs[0] for cs in ok]
    want = f(*x).numpy()
    for stage, cs in enumerate(ok):
        space = StageSpace.of(plan, stage, spaces, fixed)
        for cfg in random.Random(stage).sample(cs, min(2, len(cs))):
            err = cpu_exec.max_rel_error(space.render(cfg), [t.float().numpy() for t in x],
                                         want.reshape(plan.out_shape))
            assert err < 1e-4, (stage, cfg.short(), err)


# -- class-target losses ---------------------------------------------------------------------------

def _targets(ignore: int = -100) -> torch.Tensor:
    t = torch.randint(0, C, (N,), generator=torch.Generator().manual_seed(0))
    t[3] = t[17] = ignore  # ignored rows: excluded from the sum and from the mean's count
    return t


def _logits(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


CLASS_CASES = {
    "ce_mean": lambda x, t: F.cross_entropy(x, t),
    "ce_sum_smoothed": lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.1),
    "ce_mean_smoothed": lambda x, t: F.cross_entropy(x, t, label_smoothing=0.3),
    "ce_none": lambda x, t: F.cross_entropy(x, t, reduction="none"),
    "ce_ignore_5": lambda x, t: F.cross_entropy(x, t, ignore_index=5),
    "nll_log_softmax": lambda x, t: F.nll_loss(F.log_softmax(x, 1), t),
    "nll_sum": lambda x, t: F.nll_loss(x, t, reduction="sum"),
}
PROB_CASES = {
    "ce_probs": lambda x, p: F.cross_entropy(x, p.softmax(1)),
    "ce_probs_smoothed_sum": lambda x, p: F.cross_entropy(x, p.softmax(1), reduction="sum",
                                                          label_smoothing=0.2),
}


def _class_inputs(name: str = ""):
    return [_logits(N, C), _targets(5 if name == "ce_ignore_5" else -100)]


def _prob_inputs():
    return [_logits(N, C), _logits(N, C, seed=2)]


def _graph(f, make):
    return capture_problem(Fn, [f], make)


@pytest.mark.parametrize("name", sorted(CLASS_CASES) + sorted(PROB_CASES))
def test_class_losses_lower_to_torch_and_plan_on_the_row_template(name):
    f = CLASS_CASES.get(name) or PROB_CASES[name]
    make = (lambda: _class_inputs(name)) if name in CLASS_CASES else _prob_inputs
    g = _graph(f, make)
    x = make()
    want = f(*x).double()
    got = interpret(g, [t.double() if t.is_floating_point() else t for t in x])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    plan = make_plan(g)
    assert plan.family == "reduction" and plan.kind == "reduce" and plan.R == C
    assert bool(plan.outer) == (name != "ce_none")  # a total over rows, except per-row losses
    assert [t.name for t in Space.for_plan(plan, Target()).templates] == ["row"]
    if name in CLASS_CASES:
        gin = g.inputs[1]
        assert (gin.dtype, gin.index_bound) == ("int64", C)
        assert gin.index_ignore == (5 if name == "ce_ignore_5" else -100)
        assert plan.operand_shapes[1] == (N, 1)  # a target is read once per row
        # the pick of x[i, t_i] is a one-hot reduction in the first pass, beside the max
        kinds = {plan.graph[r].attr("kind") for r in plan.levels[0]}
        assert "sum" in kinds and ("max" in kinds) == (name != "nll_sum")


@pytest.mark.parametrize("f,match", [
    (lambda x, t: F.cross_entropy(x, t, weight=x.sum(0)), "weights"),
    (lambda x, t: F.cross_entropy(x.view(N, C, 1), t.view(N, 1)), "logits of shape"),
    (lambda x, t: F.nll_loss(x, t + 1), "class indices only"),
    (lambda x, t: x.sum(1) * t, "int64"),
])
def test_unsupported_class_losses_say_why(f, match):
    with pytest.raises(UnsupportedError, match=match):
        make_plan(_graph(f, _class_inputs))


def test_index_draws_stay_valid_and_exercise_ignored_rows():
    ex = [torch.randn(64, 10), torch.zeros(64, dtype=torch.int64)]
    doms = [None, IndexDomain(10, -100)]
    seen_ignored = False
    for trial in range(4):
        t = make_case(ex, trial, 0, domains=doms).tensors[1]
        assert t.dtype == torch.int64
        ok = (t >= 0) & (t < 10)
        assert bool((ok | (t == -100)).all())
        assert bool(ok.any())
        seen_ignored |= bool((t == -100).any())
    assert seen_ignored


# -- generated kernels on the CPU emulator ---------------------------------------------------------

def _emulate(f, make, n_configs: int, seed: int = 0) -> set:
    """Run the default and sampled configurations on the emulator; return the slot values
    covered (so that a test can check both ways of meeting the partial totals ran)."""
    g = _graph(f, make)
    plan = make_plan(g)
    space = Space.for_plan(plan, Target())
    ins = make()
    want = f(*[t.double() if t.is_floating_point() else t for t in ins]).float().numpy()
    ops = [ins[k].reshape(plan.operand_shapes[k]).numpy() for k in plan.operands]
    covered = set()
    cfgs = [space.default()] + space.sample(n_configs, random.Random(seed))
    rendered = [space.render(cfg) for cfg in cfgs]
    cpu_exec.prebuild([(r, len(ops)) for r in rendered])
    for cfg, r in zip(cfgs, rendered):
        err = cpu_exec.max_rel_error(r, ops, want.reshape(plan.out_shape))
        assert err < 1e-4, (cfg.short(), err)  # the verifier's fp32 tolerance
        covered.update(cfg.items)
    return covered


needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")


@needs_gxx
@pytest.mark.parametrize("name", fast_first(["ce_mean_smoothed", "ce_none", "ce_ignore_5",
                                              "nll_log_softmax"],
                                             ["ce_mean_smoothed", "nll_log_softmax"]))
def test_cross_entropy_class_targets_kernels_match_torch(name):
    covered = _emulate(CLASS_CASES[name], lambda: _class_inputs(name), 6)
    if name != "ce_none":
        assert {("reduction.cross", "two_pass"), ("reduction.cross", "last_block")} <= covered


@needs_gxx
def test_cross_entropy_probability_targets_kernels_match_torch():
    _emulate(PROB_CASES["ce_probs_smoothed_sum"], _prob_inputs, 6)


ONLINE_EXTRAS = {
    # a cross-entropy's sums of p and p * x join the (max, sum of exp) pass: one read, no cache
    "ce_probs_mean": (lambda x, p: F.cross_entropy(x, p), 1),
    "ce_probs_none": (lambda x, p: F.cross_entropy(x, p, reduction="none"), 1),
    # a softmax scaled by the row's target mass: the output pass re-reads x, so clusters (a
    # row split over blocks, x kept on chip) combine the extra sum across the blocks too
    "softmax_times_mass": (lambda x, p: torch.softmax(x, 1) * p.sum(1, keepdim=True), 2),
}


@needs_gxx
@pytest.mark.parametrize("name", sorted(ONLINE_EXTRAS))
def test_online_pass_computes_the_other_first_level_sums(name):
    """Reductions needing no row maximum ride along with the online softmax pass."""
    f, n_passes = ONLINE_EXTRAS[name]
    rows, cols = 7, 300  # rows a cluster of 2-8 blocks can split
    make = lambda: [_logits(rows, cols), _logits(rows, cols, seed=2).softmax(1)]  # noqa: E731
    plan = make_plan(_graph(f, make))
    space = Space.for_plan(plan, Target())
    passes = make_passes(plan, True)
    assert len(passes) == n_passes and len(passes[0].reducers) == 2 + (2 if "ce" in name else 1)
    online = [c for c in space.configs if c["compute.algo"] == "online"]
    rng = random.Random(3)
    picked = rng.sample([c for c in online if c["config.cluster"] == 1], 4)
    clustered = [c for c in online if c["config.cluster"] > 1 and c["config.block"] <= 64]
    assert bool(clustered) == (n_passes > 1)
    picked += rng.sample(clustered, min(3, len(clustered)))
    ins = make()
    ins[0][1, cols - 1] = 30.0  # a row maximum in the last element (the last cluster block's)
    want = f(*[t.double() for t in ins]).float().numpy()
    ops = [ins[k].reshape(plan.operand_shapes[k]).numpy() for k in plan.operands]
    rendered = [space.render(cfg) for cfg in picked]
    cpu_exec.prebuild([(r, len(ops)) for r in rendered])
    for cfg, r in zip(picked, rendered):
        err = cpu_exec.max_rel_error(r, ops, want.reshape(plan.out_shape))
        assert err < 1e-5, (cfg.short(), err)


@needs_gxx
def test_kl_div_batchmean_kernels_match_torch():
    def kl(p, q):
        return F.kl_div(torch.log(p), q, reduction="batchmean")

    def make():
        return [_logits(16, 1000).softmax(1), _logits(16, 1000, seed=2).softmax(1)]

    _emulate(kl, make, 4)


@needs_gxx
def test_triplet_margin_kernels_match_torch():
    def make():
        return [_logits(N, 24), _logits(N, 24, seed=2), _logits(N, 24, seed=3)]

    covered = _emulate(lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=2.0), make, 6)
    assert ("reduction.cross", "last_block") in covered


def test_cross_entropy_tunes_end_to_end_on_the_simulator(tmp_path):
    import cuda_agent

    r = cuda_agent.tune(ROOT / "benchmarks/problems/loss_cross_entropy_odd.py",
                        out=tmp_path / "o", device="sim", budget=6, store=":memory:",
                        strategy="random")
    assert r.simulated and r.best is not None and len(r.trials) == 6
    src = (tmp_path / "o" / "kernel.cu").read_text()
    assert "ca_row" in src and "const long long* __restrict__ in1" in src
    model_new = (tmp_path / "o" / "model_new.py").read_text()
    assert "'int64'" in model_new
