"""Deferred epilogues on the GPU (`partition.defer_epilogues`, `ir/sink.py`): a program whose
convolution's or matrix product's epilogue its reader applies, the library stage cuDNN's or
cuBLAS's call alone, its result the buffer the reader reads (`["product", j]`). Each problem is
tuned on the device (the library floor, the bare product here, is measured first), verified
against torch, and the emitted module compared with the reference in float64. CPU counterparts: tests/test_deferred_epilogue.py (emulator)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from cuda_agent.tuner import tune

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"

PROBLEMS = {
    # conv_transpose2d_min_sum_gelu_add's pattern at a small size
    "tconv_bias_min": HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(16, 24, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return torch.min(self.up(x) + 0.1, dim=1, keepdim=True).values


def get_inputs():
    return [torch.randn(8, 16, 32, 32)]


def get_init_inputs():
    return []
''',
    "linear_relu_layernorm": HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.norm = nn.Linear(512, 768), nn.LayerNorm(768)

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x)))


def get_inputs():
    return [torch.randn(1024, 512)]


def get_init_inputs():
    return []
''',
    "conv_gelu_groupnorm": HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(16, 32, 3), nn.GroupNorm(4, 32)

    def forward(self, x):
        return self.norm(F.gelu(self.conv(x)))


def get_inputs():
    return [torch.randn(8, 16, 34, 34)]


def get_init_inputs():
    return []
''',
    # conv_transpose2d_bn_tanh_maxpool_groupnorm's first half: training BatchNorm's statistics
    # in buffers, the pool normalising and applying tanh as it loads
    "tconv_bn_tanh_pool": HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.bn = nn.ConvTranspose2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32)

    def forward(self, x):
        return F.max_pool2d(torch.tanh(self.bn(self.up(x))), 2)


def get_inputs():
    return [torch.randn(8, 16, 32, 32)]


def get_init_inputs():
    return []
''',
    # conv2d_subtract_hardswish_maxpool_mish's pattern: the pool applies the bias, the
    # subtraction and hardswish to every element it loads
    "conv_hardswish_pool_mish": HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3)

    def forward(self, x):
        return F.mish(F.max_pool2d(F.hardswish(self.conv(x) - 0.5), 2))


def get_inputs():
    return [torch.randn(8, 16, 34, 34)]


def get_init_inputs():
    return []
''',
}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_bare_library_product_feeds_its_reader_on_the_gpu(name, tmp_path):
    path = tmp_path / f"{name}.py"
    path.write_text(PROBLEMS[name])
    # strict fp32: the comparison below holds fp32's error
    result = tune(path, out=tmp_path / "o", device="cuda", budget=8, batch=8,
                  store=str(tmp_path / "s.sqlite"), baselines=False, strategy="random",
                  precision="fp32")
    # the library floor is measured first (issue 48): with stage 0 bare (test below), every
    # library candidate is cuDNN's or cuBLAS's call alone feeding the reader
    bare = [t for t in result.trials if t.library]
    assert bare, "no bare library candidate was measured"
    assert any(t.measurement.ok and t.measurement.verified for t in bare), [
        (t.measurement.error_kind, t.measurement.error_msg) for t in bare]
    assert result.best is not None and result.best.measurement.verified
    spec = importlib.util.spec_from_file_location(f"model_new_{name}",
                                                  tmp_path / "o" / "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs()).cuda()
    torch.manual_seed(0)
    new = mod.ModelNew(*mod.get_init_inputs()).cuda()
    with torch.device("cuda"):
        x = mod.get_inputs()[0]
    with torch.no_grad():
        want, got = ref.double()(x.double()), new(x)
    err = float((got.double() - want).norm() / want.norm())
    assert err < 1e-4, err


def test_the_programs_defer(tmp_path):
    """The problems plan with the bare product (so the test above tries it)."""
    from cuda_agent.problem import load_problem
    from cuda_agent.ir.planning import make_plan

    for name, source in PROBLEMS.items():
        path = Path(tmp_path) / f"{name}.py"
        path.write_text(source)
        plan = make_plan(load_problem(path).graph())
        first = plan.program.stages[0].graph
        assert not any(n.op in ("add", "sub", "relu", "gelu", "hardswish")
                       for n in first.nodes), name
