"""Operators a user's program may hold that no suite here wrote, found refused or mis-planned by
batches of KernelBench-style operators written for the purpose (`benchmarks/unseen_ops.py`,
131 in all, 2026-12-06: 33 refused at the day's start, 13 after; results in
`benchmarks/results/2026-12-06-unseen-ops-cpu*.json`): log-sigmoid, adaptive pooling, einsum,
masked_fill, var_mean, `&` and `|` on masks, cummax and cummin (values), torch.where against
zeros_like (a constant broadcast by an expand, which the planner took for a reduced value read
across rows), a row value expanded before use, max's unused indices over a dim of size 1, a
per-channel scale after group norm (computed in group norm's own shape), an instance norm of
unsqueezed rows added to a matrix (an input placed by the value it meets, the output
squeezed), a transposed input read in place, two matrix products (or two pools) meeting at an
elementwise op (LLaMA's gate), einsum scores before a masked softmax, and attention over
projections viewed and transposed into heads. Each is captured and planned, and its generated
kernels (the default configuration and a few sampled ones, those the CPU emulator runs) agree
with torch."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from helpers import Fn

X2 = (37, 50)  # odd sizes: partial warps, rows not a multiple of any vector width
X4 = (3, 5, 12, 8)

CASES = {
    # name: (forward, input shapes, plan kind)
    "log_sigmoid": (lambda x: F.logsigmoid(x * 30), [X2], "map"),
    "where_zeros_like": (lambda x: torch.where(x > 0, x, torch.zeros_like(x)).clamp(max=1.0),
                         [X2], "map"),
    "expanded_row_mean": (lambda x: x - x.mean(1, keepdim=True).expand_as(x), [X2], "reduce"),
    "adaptive_avg_global": (lambda x: F.adaptive_avg_pool2d(x, 1), [X4], "reduce"),
    "adaptive_max_global": (lambda x: F.adaptive_max_pool2d(x, (1, 1)), [X4], "reduce"),
    "adaptive_avg_windows": (lambda x: F.adaptive_avg_pool2d(x, (4, 2)), [X4], "pool"),
    "adaptive_max_windows_1d": (lambda x: F.adaptive_max_pool1d(x, 4), [(3, 5, 12)], "pool"),
    "group_norm_then_channel_scale": (lambda x, s: F.group_norm(x, 5) * s + 0.5,
                                      [(3, 10, 6, 4), (10, 1, 1)], "reduce"),
    "instance_norm_of_unsqueezed_rows": (
        lambda x, y: (F.instance_norm(x.unsqueeze(1).unsqueeze(1)).squeeze(1).squeeze(1) + y) * y,
        [X2, X2], "reduce"),
    "masked_fill_softmax": (lambda x: torch.softmax(x.masked_fill(x < -1.0, float("-inf")), -1),
                            [X2], "reduce"),
    "max_over_a_dim_of_one": (lambda x: torch.max(x.sum(1, keepdim=True), dim=1, keepdim=True)[0],
                              [X2], "reduce"),
    "var_mean_sum": (lambda x: (lambda vm: vm[0] + vm[1])(torch.var_mean(x, dim=1)), [X2],
                     "reduce"),
    "mask_and_count": (lambda x: ((x > 0) & (x < 1)).float().sum(dim=1)
                       + ((x < -1) | (x > 2)).float().mean(dim=1), [X2], "reduce"),
    "transposed_then_scaled": (lambda x: x.transpose(1, 2).contiguous() * 2.0 + 1.0,
                               [(4, 6, 10)], "map"),
    "transposed_square": (lambda x: x.transpose(0, 1) * 3.0, [(9, 9)], "map"),
    "softmax_of_transposed": (lambda x: torch.softmax(x.transpose(1, 2), dim=-1),
                              [(4, 10, 6)], "reduce"),
    "cummax_rows": (lambda x: torch.cummax(x, dim=1)[0] * 2.0, [X2], "scan"),
    "cummin_reversed": (lambda x: torch.cummin(x.flip(0), dim=0)[0].flip(0), [X2], "scan"),
    "einsum_batched_product": (lambda a, b: torch.einsum("bij,jk->bik", a, b),
                               [(3, 9, 7), (7, 5)], "gemm"),
    "einsum_attention_scores": (lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k),
                                [(2, 3, 6, 4), (2, 3, 5, 4)], "gemm"),
}


def _graph(name: str):
    f, shapes, _ = CASES[name]
    return capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_operator_is_captured_and_planned(name):
    plan = make_plan(_graph(name))
    assert plan.kind == CASES[name][2], name
    assert Space.for_plan(plan, Target()).templates, name


def _emulatable(space: Space, cfg) -> bool:
    return all(not L.library and L.block[1:] == (1, 1) for L in space.render(cfg).launches)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")
@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_kernels_agree_with_torch(name):
    f, shapes, _ = CASES[name]
    plan = make_plan(_graph(name))
    space = Space.for_plan(plan, Target())
    torch.manual_seed(0)
    ins = [torch.randn(*s) for s in shapes]
    want = f(*[t.double() for t in ins]).float().numpy().reshape(plan.out_shape)
    ops = [ins[k].reshape(plan.operand_shapes[k]).numpy() for k in plan.operands]
    configs = [c for c in [space.default()] + space.sample(12, random.Random(0))
               if _emulatable(space, c)][:4]
    assert configs, f"{name}: no configuration the emulator runs"
    for cfg in configs:
        err = cpu_exec.max_rel_error(space.render(cfg), ops, want)
        assert err < 1e-4, (name, cfg.short(), err)  # the verifier's fp32 tolerance


def test_log_sigmoid_is_stable_where_sigmoid_underflows():
    """log(sigmoid(x)) is -softplus(-x): at x = -200 sigmoid underflows to 0 and its log to
    -inf; the lowering keeps -200 (softplus's linear branch)."""
    from test_capture import interpret

    g = capture(Fn, [lambda x: F.logsigmoid(x)], lambda: [torch.randn(4)])
    x = torch.tensor([-200.0, -5.0, 0.0, 40.0])
    got = interpret(g, [x])
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, F.logsigmoid(x.double()), rtol=1e-12, atol=1e-12)


def test_adaptive_pooling_with_windows_of_varying_length_is_refused_in_one_line():
    with pytest.raises(UnsupportedError, match=r"adaptive avg pooling of \(12, 8\) to \(5, 3\)"):
        capture(Fn, [lambda x: F.adaptive_avg_pool2d(x, (5, 3))], lambda: [torch.randn(*X4)])


def test_adaptive_max_pooling_indices_are_refused_by_name():
    g = capture(Fn, [lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True)[1].float()],
                lambda: [torch.randn(*X4)])
    with pytest.raises(UnsupportedError, match="max pooling indices"):
        make_plan(g)


def test_a_value_read_across_rows_is_still_refused():
    """The broadcast rule frees only a dim a value was broadcast along: each row's mean read
    as a column's (x - x.mean(1) on a square x: element (i, j) takes row j's mean) is still
    refused, not computed as a row's own."""
    g = capture(Fn, [lambda x: x - x.mean(1)], lambda: [torch.randn(40, 40)])
    with pytest.raises(UnsupportedError, match="cross-row access"):
        make_plan(g)


def test_view_strides_follow_torch_s_view_rule():
    """`gemm.view_strides` against torch's own views of permuted tensors: the same strides
    where torch views without a copy, None where torch refuses the view."""
    from cuda_agent.ir.gemm import view_strides

    rng = random.Random(0)
    checked = refused = 0
    for _ in range(300):
        shape = tuple(rng.choice((1, 2, 3, 4)) for _ in range(rng.randint(2, 5)))
        perm = list(range(len(shape)))
        rng.shuffle(perm)
        t = torch.empty(shape).permute(perm)
        flat = [s for s in t.shape]
        # a random regrouping of the permuted shape's elements into a new shape
        new: list[int] = []
        while flat:
            k = rng.randint(1, min(2, len(flat)))
            new.append(int(np.prod(flat[:k])))
            flat = flat[k:]
            if rng.random() < 0.2:
                new.append(1)
        got = view_strides(tuple(t.shape), tuple(t.stride()), tuple(new))
        try:
            want = t.view(new).stride()
        except RuntimeError:
            assert got is None, (shape, perm, new)
            refused += 1
            continue
        assert got is not None, (shape, perm, new)
        assert [g for g, s in zip(got, new) if s != 1] == \
            [w for w, s in zip(want, new) if s != 1], (shape, perm, new)
        checked += 1
    assert checked > 50 and refused > 20, (checked, refused)


class SwiGLU(torch.nn.Module):
    """LLaMA's MLP gate: two products of one input meeting at an elementwise op."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(24, 20, bias=False)
        self.up = torch.nn.Linear(24, 20)

    def forward(self, x):
        return F.silu(self.gate(x)) * self.up(x)


def _emulate_program(model: torch.nn.Module, graph, xs: list[torch.Tensor],
                     samples: int = 3) -> None:
    """Each stage's configurations the emulator runs, the other stages fixed, against torch."""
    from cuda_agent.space.program import StageSpace, stage_spaces

    plan = make_plan(graph)
    spaces = stage_spaces(plan, Target())
    ok = [[c for c in sp.configs if _emulatable(sp, c)] for sp in spaces]
    assert all(ok)
    state = dict(model.named_parameters())
    gins = graph.inputs
    ins = [(xs[gins[k].arg_index] if gins[k].role == "input" else state[gins[k].target]
            ).detach().numpy() for k in plan.operands]
    with torch.no_grad():
        want = model(*xs).numpy()
    fixed = [cs[0] for cs in ok]
    for stage, cs in enumerate(ok):
        space = StageSpace.of(plan, stage, spaces, fixed)
        for cfg in random.Random(stage).sample(cs, min(samples, len(cs))):
            err = cpu_exec.max_rel_error(space.render(cfg), ins, want.reshape(plan.out_shape))
            assert err < 1e-4, (stage, cfg.short(), err)


def test_einsum_scores_then_a_masked_softmax_are_two_stages():
    """einsum's decomposition ends its product with reshapes of the flattened batch; the
    product is taken over the batch dims themselves, so the softmax after it is a stage of its
    own with nothing between (before: refused, a reshape after the product)."""
    torch.manual_seed(0)
    model = Fn(lambda q, k: torch.softmax((lambda s: s.masked_fill(s < -1.0, float("-inf")))(
        torch.einsum("bhqd,bhkd->bhqk", q, k)), dim=-1))
    shapes = [(2, 3, 6, 4), (2, 3, 5, 4)]
    g = capture(Fn, [model.f], lambda: [torch.randn(*s) for s in shapes])
    assert [st.plan.kind for st in make_plan(g).program.stages] == ["gemm", "reduce"]
    if cpu_exec.available():
        _emulate_program(model, g, [torch.randn(*s) for s in shapes])


class Projections(torch.nn.Module):
    """A transformer block's attention: q, k, v each a linear layer viewed as (B, S, H, D) and
    transposed to (B, H, S, D)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x):
        b, s, _ = x.shape
        heads = [m(x).view(b, s, 2, 8).transpose(1, 2) for m in (self.q, self.k, self.v)]
        return F.scaled_dot_product_attention(*heads)


def test_projections_viewed_and_transposed_into_attention():
    """Each projection's stage writes its product in its own layout; the attention stage reads
    the buffers through the view and the transpose by strides (a stage cannot write its output
    permuted: before, refused as a reshape after the product). Each stage's configurations the
    emulator runs agree with torch."""
    torch.manual_seed(0)
    model = Projections()
    g = capture(Projections, [], lambda: [torch.randn(2, 6, 16)])
    assert [st.plan.kind for st in make_plan(g).program.stages] == \
        ["gemm", "gemm", "gemm", "attention"]
    if cpu_exec.available():
        _emulate_program(model, g, [torch.randn(2, 6, 16)], samples=2)


@pytest.mark.parametrize("which", ["products", "pools"])
def test_two_structured_ops_meeting_at_an_elementwise_op_are_two_stages(which):
    """The first op's result is cut into a buffer; the second's stage reads it in its
    epilogue (before, two such ops in one problem were refused): LLaMA's gate, and an average
    and a max pool of one input added. Each stage's configurations the emulator runs agree
    with torch, the other stage fixed."""
    torch.manual_seed(0)
    if which == "products":
        model, shape, kinds = SwiGLU(), (6, 24), ["gemm", "gemm"]
    else:
        model, shape, kinds = Fn(lambda x: F.avg_pool2d(x, 2) + F.max_pool2d(x, 2)), \
            (2, 3, 8, 10), ["pool", "pool"]
    g = capture(type(model), [] if which == "products" else [model.f],
                lambda: [torch.randn(*shape)])
    assert [st.plan.kind for st in make_plan(g).program.stages] == kinds
    if cpu_exec.available():
        _emulate_program(model, g, [torch.randn(*shape)])


def test_a_permute_of_a_computed_value_is_refused_in_one_line():
    g = capture(Fn, [lambda x: torch.exp(x).transpose(0, 1) * 2], lambda: [torch.randn(8, 8)])
    with pytest.raises(UnsupportedError, match="permute of a computed value"):
        make_plan(g)


def test_cummax_indices_are_refused_by_name():
    with pytest.raises(UnsupportedError, match="cummax's indices"):
        make_plan(capture(Fn, [lambda x: torch.cummax(x, dim=1)[1].float()],
                          lambda: [torch.randn(*X2)]))
