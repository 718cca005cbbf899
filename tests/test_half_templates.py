"""The column, channel, split and pool templates in half precision (issue 50 item 1): fp16 and
bf16 tensors loaded through the prelude's `ca_ld*` overloads into float registers, reduced in
float32, stored rounded to nearest even through the element types `ca_f16`/`ca_bf16`.

Checked on the CPU: a covering sample of each template's configurations runs on the emulator
(2-D blocks included: the col template's) and passes the verifier against a float64 reference
within torch's own error in that dtype; the kernels compile with nvcc for sm_90; a kernel
storing through the wrong type, or accumulating in half, is caught; the coverage check below
the space (`planning.half_covered`, the region split's) agrees with the templates."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
import torch.nn.functional as F

import cpu_exec
from cuda_agent.build.compiler import compile_source
from cuda_agent.ir.planning import half_covered, make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space
from cuda_agent.space.templates import TEMPLATES
from helpers import covering_sample, nvcc_available
from test_half_precision import HALF, _emulated_candidate, _graph, _reference, _witness

needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")

# (function, inputs maker (dtype), the templates offered)
CASES = {
    "col_sum": (lambda x: x.sum(0), lambda dt: [torch.randn(300, 40).to(dt)], {"col"}),
    "col_softmax": (lambda x: torch.softmax(x, 1), lambda dt: [torch.randn(4, 50, 33).to(dt)],
                    {"col"}),
    "chan_mean": (lambda x: x.mean((0, 2, 3)), lambda dt: [torch.randn(4, 12, 9, 9).to(dt)],
                  {"chan", "split"}),
    "chan_batch_norm_train": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda dt: [torch.randn(4, 12, 9, 9).to(dt), torch.randn(12).to(dt),
                    torch.randn(12).to(dt)], {"chan", "split"}),
    "split_long_rows": (lambda x: x.sum(-1), lambda dt: [torch.randn(2, 60000).to(dt)],
                        {"row", "split"}),
    "max_pool": (lambda x: F.max_pool2d(x, 3, 2, 1), lambda dt: [torch.randn(2, 4, 17, 17).to(dt)],
                 {"pool"}),
    "avg_pool_relu": (lambda x: F.relu(F.avg_pool2d(x, 2)),
                      lambda dt: [torch.randn(2, 4, 16, 16).to(dt)], {"pool"}),
}


def _plan(name, dt):
    f, make, _ = CASES[name]
    ins = make(dt)
    return f, ins, make_plan(_graph(f, ins))


@pytest.mark.parametrize("name", sorted(CASES))
def test_templates_take_the_half_plans_and_the_split_check_agrees(name):
    _, _, plan = _plan(name, torch.bfloat16)
    assert half_covered(plan)
    space = Space.for_plan(plan, Target())
    assert {t.name for t in space.templates} == CASES[name][2]
    assert half_covered(plan) == any(t.applies(plan) and t.takes_half for t in TEMPLATES)
    src = space.render(space.default()).source
    assert "const ca_bf16* __restrict__ in0" in src and "ca_bf16* __restrict__ out" in src


@needs_gxx
@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_kernels_pass_the_verifier_in_half(name, dt):
    f, ins, plan = _plan(name, dt)
    space = Space.for_plan(plan, Target())
    cfgs = covering_sample(space.configs, space.default(), seed=name)[:6]
    # every template offered, its default at least
    cfgs += [c for c in space.template_defaults() if c not in cfgs]
    rendered = [space.render(c) for c in cfgs]
    cpu_exec.prebuild([(r, len(plan.operands)) for r in rendered])
    out = f(*ins)
    for cfg, r in zip(cfgs, rendered):
        res = verify_emulated(r, plan, f, ins, out.shape, dt)
        assert res.ok, (space.template_of(cfg).name, cfg.short(), res.msg)


def verify_emulated(rendered, plan, f, ins, shape, dt):
    from cuda_agent.verify.cases import verify

    return verify(_emulated_candidate(rendered, plan, dt), _reference(f), ins, shape, dt,
                  witness=_witness(f))


@needs_gxx
@pytest.mark.parametrize("name", ["col_sum", "chan_mean", "max_pool"])
def test_storing_through_the_wrong_type_is_caught(name):
    """An fp16 kernel whose stores round to bf16 first (three bits fewer): its conversion in
    the prelude replaced, every other line the same."""
    f, ins, plan = _plan(name, torch.float16)
    space = Space.for_plan(plan, Target())
    r = space.render(space.default())
    good = verify_emulated(r, plan, f, ins, f(*ins).shape, torch.float16)
    assert good.ok, good.msg
    old = "static inline unsigned short ca_f32_f16(float f) { return (unsigned short)ca_f16_bits(f); }"
    assert old in r.source
    bad = dataclasses.replace(r, source=r.source.replace(
        old, "static inline unsigned short ca_f32_f16(float f) { "
             "return (unsigned short)ca_f16_bits(ca_bf16_value(ca_bf16_bits(f))); }"))
    res = verify_emulated(bad, plan, f, ins, f(*ins).shape, torch.float16)
    assert not res.ok and res.kind == "wrong", res.msg


@needs_gxx
def test_accumulating_in_half_is_caught():
    """A column sum whose running sums are rounded to fp16 at every step (not float32, as
    torch and the templates keep them)."""
    f = (lambda x: x.sum(0))
    ins = [torch.rand(4096, 64).half()]
    plan = make_plan(_graph(f, ins))
    space = Space.for_plan(plan, Target())
    r = space.render(space.default())
    src, n = re.subn(r"(acc\w+) \+= (\w+);", r"\1 = ca_round_f16(\1 + \2);", r.source)
    assert n >= 1
    good = verify_emulated(r, plan, f, ins, (64,), torch.float16)
    res = verify_emulated(dataclasses.replace(r, source=src), plan, f, ins, (64,), torch.float16)
    assert good.ok, good.msg
    assert not res.ok and res.kind == "wrong", res.msg


@pytest.mark.skipif(not nvcc_available(), reason="needs nvcc")
@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ["col_softmax", "chan_batch_norm_train", "split_long_rows",
                                  "max_pool"])
def test_half_kernels_compile_with_nvcc_for_sm90(name, dt):
    _, _, plan = _plan(name, dt)
    space = Space.for_plan(plan, Target())
    cfgs = covering_sample(space.configs, space.default(), seed=name)[:3]
    cfgs += [c for c in space.template_defaults() if c not in cfgs]
    for cfg in cfgs:
        out = compile_source(space.render(cfg).source, "sm_90", "nvcc")
        assert out.cubin is not None, (cfg.short(), out.log[:2000])


@pytest.mark.parametrize("dt", HALF, ids=["fp16", "bf16"])
def test_half_running_statistics_update_as_torchs(dt):
    """A half model's batch norm in training mode: the kernels leave the batch statistics in
    float32, the running buffers (in the model's type) are updated as torch updates them."""
    from cuda_agent.runner.launcher import update_state

    x = torch.randn(8, 6, 5, 5).to(dt)
    rm, rv = torch.randn(6).to(dt), (torch.rand(6) + 0.5).to(dt)
    want_m, want_v = rm.clone(), rv.clone()
    F.batch_norm(x, want_m, want_v, training=True, momentum=0.1)
    mean = x.float().mean((0, 2, 3))
    var = x.float().var((0, 2, 3), unbiased=False)
    ws = torch.cat([mean, var]).view(torch.uint8)
    bufs = {"m": rm, "v": rv}
    update_state([{"op": "running_stats", "momentum": 0.1, "count": 8 * 25, "mean": (0, 6),
                   "var": (24, 6), "running_mean": "m", "running_var": "v"}], ws, bufs.__getitem__)
    assert rm.dtype == rv.dtype == dt
    # within one rounding of the type (torch's CPU kernel orders the variance's arithmetic
    # its own way)
    eps = torch.finfo(dt).eps
    torch.testing.assert_close(rm.float(), want_m.float(), rtol=eps, atol=1e-6)
    torch.testing.assert_close(rv.float(), want_v.float(), rtol=eps, atol=1e-6)


def test_half_batch_norm_in_training_tunes_on_the_simulator(tmp_path):
    """A bf16 BatchNorm2d in training mode: statistics over the channels (chan/split in bf16,
    the batch mean and variance written in float32 beside the output) tuned and emitted."""
    import warnings

    from cuda_agent import tuner

    src = tmp_path / "bn_train_bf16.py"
    src.write_text('''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(16).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(8, 16, 12, 12, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tuner.tune(src, out=tmp_path / "out", device="sim", budget=4, store=":memory:")
    assert res.best is not None
    text = (tmp_path / "out" / "model_new.py").read_text()
    assert "OUT_DTYPE = torch.bfloat16" in text and "ca_bf16" in text


class _SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return torch.softmax(self.fc(h.mean((2, 3))), -1)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_half_cnn_regions_are_tuned(train):
    """A bf16 CNN: the convolution (cuDNN in bf16, its bias generated), batch norm, pooling,
    the mean over the image and the classifier are kernel regions in bf16; only the batch
    counter goes to torch."""
    from cuda_agent.regions.split import KERNEL, TORCH, split_model

    with torch.device("meta"):
        m = _SmallCNN().to(torch.bfloat16).train(train)
        split = split_model(m, [torch.empty(4, 8, 16, 16, dtype=torch.bfloat16)])
    kinds = [(r.kind, r.ops) for r in split.regions]
    if train:
        assert kinds == [(KERNEL, ["conv2d"]), (TORCH, ["add_"]),
                         (KERNEL, ["batch_norm", "relu", "max_pool2d", "mean"]),
                         (KERNEL, ["linear", "softmax"])]
    else:
        assert kinds == [(KERNEL, ["conv2d", "batch_norm", "relu", "max_pool2d", "mean"]),
                         (KERNEL, ["linear", "softmax"])]
    assert all("bfloat16" in r.reason for r in split.kernels())
