"""Attention: capture of F.scaled_dot_product_attention and of the hand-written softmax form, the
planner's facts, the template's space, the generated kernels' results checked against torch on
the CPU (`cpu_exec`), the simulator's model and a tune on the simulated device."""

from __future__ import annotations

import dataclasses
import math
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cuda_agent
import cpu_exec
from helpers import Fn, fast_first
from cuda_agent.agents.vocab import SpaceIndex
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.costmodel.model import simulate
from cuda_agent.space.slots import Config, Target
from cuda_agent.space.space import Space

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`emulated`: every case's kernels on the CPU emulator) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_attention")

ROOT = Path(__file__).resolve().parents[1]
ATTENTION_PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("attention_*.py"))
TARGET = Target()


def graph_of(f, *shapes):
    return capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes])


def attention_node(g):
    (node,) = [n for n in g.live() if n.op == "attention"]
    return node


def space_of(f, *shapes) -> Space:
    return Space.for_plan(make_plan(graph_of(f, *shapes)), TARGET)


def sdpa(**kw):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)


def manual(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v


# -- capture -------------------------------------------------------------------------------------

@pytest.mark.parametrize("f,shapes,scale,causal,masked", [
    (sdpa(), [(2, 3, 37, 16)] * 3, 0.25, False, False),
    (sdpa(is_causal=True, scale=0.3), [(2, 37, 20)] * 3, 0.3, True, False),
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [(2, 3, 37, 16)] * 3 + [(37, 37)], 0.25, False, True),
    (manual, [(2, 3, 37, 16)] * 3, 0.25, False, False),
    (lambda q, k, v: F.softmax(torch.matmul(q, k.transpose(1, 2)) * 0.125, dim=2) @ v,
     [(2, 37, 16)] * 3, 0.125, False, False),
    (lambda q, k, v: torch.softmax((q * 0.5) @ k.transpose(-2, -1), -1) @ v,
     [(37, 16)] * 3, 0.5, False, False),
    (lambda q, k, v, m: torch.softmax(m + q @ k.transpose(-2, -1) / 4.0, dim=-1) @ v,
     [(2, 37, 16)] * 3 + [(2, 1, 37)], 0.25, False, True),
])
def test_both_forms_capture_to_one_attention_node(f, shapes, scale, causal, masked):
    g = graph_of(f, *shapes)
    node = attention_node(g)
    assert node.attr("scale") == pytest.approx(scale, rel=1e-12)
    assert (node.attr("causal"), node.attr("masked")) == (causal, masked)
    assert node.shape == shapes[0]
    # nothing of the softmax or the products is left to compute: only views of the inputs
    assert {n.op for n in g.live()} <= {"input", "permute", "attention"}


def test_a_product_that_is_not_attention_stays_a_matmul():
    g = graph_of(lambda a, b: torch.softmax(a, dim=-1) @ b, (2, 37, 16), (2, 16, 20))
    assert [n.op for n in g.live() if n.op in ("matmul", "attention")] == ["matmul"]
    g = graph_of(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), dim=1) @ v,
                 *[(2, 37, 37)] * 3)  # softmax over the queries, not the keys
    assert not [n for n in g.live() if n.op == "attention"]


@pytest.mark.parametrize("f,shapes,words", [
    (sdpa(dropout_p=0.1), [(2, 37, 16)] * 3, "dropout"),
    (sdpa(), [(2, 37, 160)] * 3, "head dim 160"),
    (lambda q, k, v: F.scaled_dot_product_attention(torch.relu(q), k, v), [(2, 37, 16)] * 3,
     "computed attention query"),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     [(2, 4, 37, 16), (2, 2, 37, 16), (2, 2, 37, 16)], "grouped-query"),
])
def test_unsupported_attention_is_named(f, shapes, words):
    with pytest.raises(UnsupportedError, match=words):
        make_plan(graph_of(f, *shapes))


def test_reduction_after_attention_is_a_two_kernel_program():
    p = make_plan(graph_of(lambda q, k, v: F.scaled_dot_product_attention(q, k, v).sum(-1),
                           *[(2, 37, 16)] * 3))
    assert p.kind == "program" and p.family == "attention+reduction"


# -- planning -------------------------------------------------------------------------------------

def test_plan_counts_both_products_and_fuses_the_epilogue():
    B, H, S, D = 2, 3, 40, 16
    p = make_plan(graph_of(lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2.0 + q,
                           *[(B, H, S, D)] * 3))
    assert p.kind == "attention" and p.family == "attention" and p.full_shape == (B, H, S, D)
    assert p.operands == [0, 1, 2]
    epilogue = B * H * S * D * 2  # a multiply and an add per output
    assert p.flops() == 4 * B * H * S * S * D + epilogue
    assert p.bytes_moved() == 4 * 4 * B * H * S * D  # q, k, v read and the output written
    info = p.info
    assert (info.batch_shape, info.Sq, info.Sk, info.D, info.DV) == ((B, H), S, S, D, D)
    assert info.q.batch_strides == (H * S * D, S * D) and info.k.row_stride == D


def test_causal_plan_counts_the_kept_pairs():
    B, Sq, Sk, D, DV = 2, 30, 50, 16, 8
    p = make_plan(graph_of(sdpa(is_causal=True), (B, Sq, D), (B, Sk, D), (B, Sk, DV)))
    kept = sum(min(Sk, i + 1) for i in range(Sq))  # top-left aligned: key j <= query i
    assert p.info.kept_pairs() == kept
    assert p.flops() == 2 * B * kept * (D + DV)


def test_operands_are_read_in_place_through_strides():
    # k passed as (B, D, S) and used without a transpose; a mask broadcast along the queries
    p = make_plan(graph_of(lambda q, kt, v, m: torch.softmax(q @ kt * 0.25 + m, -1) @ v,
                           (2, 37, 16), (2, 16, 41), (2, 41, 24), (41,)))
    info = p.info
    assert (info.k.row_stride, info.k.col_stride) == (1, 41)
    assert (info.mask.batch_strides, info.mask.row_stride, info.mask.col_stride) == ((0,), 0, 1)
    assert (info.Sk, info.DV) == (41, 24)


@pytest.mark.parametrize("path", ATTENTION_PROBLEMS, ids=lambda p: p.stem)
def test_attention_problems_plan_and_fit_the_vocabulary(path):
    p = make_plan(load_problem(path).graph())
    assert p.family == "attention"
    info = p.info
    assert p.flops() >= 2 * info.batch * info.kept_pairs() * (info.D + info.DV)
    sp = Space.for_plan(p, TARGET)
    assert 100 <= len(sp) <= 100_000
    assert sp.check(sp.default()) is None
    SpaceIndex.of(sp)


def test_suite_covers_the_attention_variants():
    infos = [make_plan(load_problem(p).graph()).info for p in ATTENTION_PROBLEMS]
    assert any(i.causal and i.D == 128 for i in infos)
    assert any(i.mask is not None for i in infos)
    assert any(i.Sq % 32 and i.D % 16 for i in infos)  # the odd one
    assert any(i.batch >= 256 and i.Sq >= 1024 for i in infos)  # realistic sizes


# -- the space ---------------------------------------------------------------------------------

def test_space_respects_the_launch_limits():
    sp = Space.for_plan(make_plan(load_problem(ROOT / "benchmarks" / "problems" /
                                               "attention_causal.py").graph()), TARGET)
    for cfg in random.Random(0).sample(sp.configs, 200):
        (launch,) = sp.render(cfg).launches
        assert 32 <= launch.threads <= 1024 and launch.smem <= TARGET.max_smem_per_block
    cfgs = [c.as_dict() for c in sp.configs if sp.template_of(c).name == "attention"]
    assert {sp.template_of(c).name for c in sp.configs} == {"attention", "attention_tc"}
    # a head-dim 128 query row in registers: only with the head-dim loop unrolled
    assert all(c["compute.unroll"] == "full" for c in cfgs if c["memory.cache"] == "regs")
    assert {c["memory.stages"] for c in cfgs} == {1, 2}
    assert {c["reduction.combine"] for c in cfgs} == {"shfl", "serial"}


def test_vector_loads_only_where_rows_are_aligned():
    sp = space_of(sdpa(), *[(2, 37, 33)] * 3)  # head dim 33: rows are not 16-byte aligned
    assert {c["memory.vec"] for c in (c.as_dict() for c in sp.configs)} - {"-"} == {1}
    sp = space_of(lambda q, kt, v: torch.softmax(q @ kt, -1) @ v,
                  (2, 37, 16), (2, 16, 37), (2, 37, 16))  # k read down its columns
    assert {c["memory.vec"] for c in (c.as_dict() for c in sp.configs)} - {"-"} == {1}
    sp = space_of(sdpa(), *[(2, 37, 32)] * 3)
    assert {c["memory.vec"] for c in (c.as_dict() for c in sp.configs)} - {"-"} == {1, 4}


# -- results on the CPU --------------------------------------------------------------------------

CASES = {
    "sdpa_4d": (sdpa(), [(2, 2, 45, 16)] * 3),
    "causal_rectangular": (sdpa(is_causal=True), [(2, 53, 24), (2, 37, 24), (2, 37, 24)]),
    "mask_scale_value_dim": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
        [(2, 41, 40), (2, 61, 40), (2, 61, 20), (41, 61)]),
    "manual_odd_epilogue": (lambda q, k, v: manual(q, k, v) * 2.0 + q, [(3, 70, 36)] * 3),
    "manual_transposed_k": (lambda q, kt, v: torch.softmax(q @ kt * 0.2, dim=-1) @ v,
                            [(2, 38, 17), (2, 17, 39), (2, 39, 17)]),
}
SAMPLE = 6  # configurations per case besides the default


def _inputs(shapes):
    torch.manual_seed(0)
    return [torch.randn(*s) for s in shapes]


@pytest.fixture(scope="module")
def emulated():
    """Every case's default and a sample of its configurations, run on the CPU."""
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    jobs = []
    for name, (f, shapes) in CASES.items():
        sp = space_of(f, *shapes)
        xs = _inputs(shapes)
        want = f(*[x.double() for x in xs]).float().numpy()
        ins = [xs[k].numpy() for k in sp.plan.operands]
        for cfg in [sp.default()] + random.Random(name).sample(sp.configs, SAMPLE):
            jobs.append((name, cfg, sp.render(cfg), ins, want))

    def run(job):
        name, cfg, rendered, ins, want = job
        return name, cfg, cpu_exec.max_rel_error(rendered, ins, want)

    cpu_exec.prebuild([(rendered, len(ins)) for _, _, rendered, ins, _ in jobs])
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(run, jobs))


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_kernels_compute_what_torch_computes(name, emulated):
    runs = [(cfg, err) for case, cfg, err in emulated if case == name]
    assert len(runs) == SAMPLE + 1
    for cfg, err in runs:
        assert err < 1e-4, f"{cfg.short()}: relative error {err}"  # NaN (unwritten) fails too


def test_sampled_configurations_span_the_slots(emulated):
    seen: dict[str, set] = {}
    for _, cfg, _ in emulated:
        for k, v in cfg.as_dict().items():
            seen.setdefault(k, set()).add(v)
    assert seen["memory.stages"] == {1, 2} and seen["memory.cache"] == {"regs", "smem"}
    assert seen["reduction.combine"] == {"shfl", "serial"} and len(seen["config.tpr"]) >= 3


def test_the_emulator_catches_a_wrong_kernel():
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    f, shapes = CASES["causal_rectangular"]
    sp = space_of(f, *shapes)
    r = sp.render(sp.default())
    xs = _inputs(shapes)
    want = f(*[x.double() for x in xs]).float().numpy()
    # off by one on the causal diagonal: each query loses its own key
    wrong = dataclasses.replace(r, source=r.source.replace("kj <= qi", "kj < qi + 0 * kj"))
    assert wrong.source != r.source
    ins = [x.numpy() for x in xs]
    assert cpu_exec.max_rel_error(r, ins, want) < 1e-4
    assert not cpu_exec.max_rel_error(wrong, ins, want) < 1e-4


# -- the simulated device ------------------------------------------------------------------------

def _sim_ms(sp: Space, cfg: Config) -> float:
    return simulate(sp.plan, sp.render(cfg), {}, TARGET).time_ms


def test_sim_model_follows_the_work():
    shapes = [(8, 8, 1024, 64)] * 3
    full, causal = space_of(sdpa(), *shapes), space_of(sdpa(is_causal=True), *shapes)
    cfg = full.default()
    assert cfg in causal.index
    # causal attention visits about half the key tiles
    assert 0.4 < _sim_ms(causal, cfg) / _sim_ms(full, cfg) < 0.75
    times = [_sim_ms(full, c) for c in random.Random(0).sample(full.configs, 50)]
    floor_ms = full.plan.flops() / TARGET.fp32_flops * 1e3
    assert min(times) > floor_ms and max(times) > 2 * min(times)
    # padding the K rows removes the bank conflicts of the G threads of a row
    d = cfg.as_dict()
    padded, unpadded = Config.of({**d, "memory.pad": 1}), Config.of({**d, "memory.pad": 0})
    assert _sim_ms(full, padded) < _sim_ms(full, unpadded)


def test_tune_an_attention_problem_on_sim(tmp_path):
    path = ROOT / "benchmarks" / "problems" / "attention_manual_odd.py"
    r = cuda_agent.tune(path, out=tmp_path / "o", device="sim", budget=6, store=":memory:",
                        strategy="random")
    assert r.simulated and r.best is not None and len(r.trials) == 6
    assert "ca_attention" in (tmp_path / "o" / "kernel.cu").read_text()
    times = [t.measurement.time_ms for t in r.trials if t.measurement.time_ms]
    assert len(times) == 6 and max(times) > min(times)
    assert np.isfinite(times).all()


# -- the tensor-core template ----------------------------------------------------------------------

TC_CASES = {
    "sdpa_4d": CASES["sdpa_4d"],
    "causal_rectangular": CASES["causal_rectangular"],
    "mask_scale": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
        [(2, 41, 40), (2, 61, 40), (2, 61, 24), (41, 61)]),
    "manual_odd_epilogue": (lambda q, k, v: manual(q, k, v) * 2.0 + q, [(3, 70, 32)] * 3),
}


@pytest.mark.parametrize("name", fast_first(sorted(TC_CASES), ["sdpa_4d", "causal_rectangular"]))
def test_tensor_core_kernels_compute_what_torch_computes(name):
    """Every configuration of the 3xTF32 template (tiles, single and double buffering, fast
    exp) on odd sequence lengths, masks, scales, causal drops and a fused epilogue: within
    the fp32 verifier's tolerance."""
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    f, shapes = TC_CASES[name]
    sp = space_of(f, *shapes)
    tc = sp.configs_of("attention_tc")
    assert len({(c["memory.stages"], c["compute.fastmath"]) for c in tc}) == 4
    xs = _inputs(shapes)
    want = f(*[x.double() for x in xs]).float().numpy()
    ins = [xs[k].numpy() for k in sp.plan.operands]
    for cfg in tc:
        err = cpu_exec.max_rel_error(sp.render(cfg), ins, want)
        assert err < 1e-5, f"{cfg.short()}: relative error {err}"


def test_tensor_core_attention_needs_its_compensation_terms():
    """Without the small parts' products (plain TF32) the kernel is off by far more than the
    fp32 verifier allows: the split is what makes the tensor cores fit for strict fp32."""
    if not cpu_exec.available():
        pytest.skip("g++ is not available")
    f, shapes = TC_CASES["sdpa_4d"]
    sp = space_of(f, *shapes)
    cfg = sp.configs_of("attention_tc")[0]
    r = sp.render(cfg)
    plain = dataclasses.replace(r, source=r.source.replace(
        "ca_mma_tf32(p_, as_, bb_); ca_mma_tf32(p_, ab_, bs_); ", ""))
    assert plain.source != r.source
    xs = _inputs(shapes)
    want = f(*[x.double() for x in xs]).float().numpy()
    ins = [xs[k].numpy() for k in sp.plan.operands]
    assert cpu_exec.max_rel_error(r, ins, want) < 1e-5
    assert cpu_exec.max_rel_error(plain, ins, want) > 1e-4
