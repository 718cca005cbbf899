"""Half precision on the GPU (issue 50 item 1): an fp16 and a bf16 problem, and a small model
under `.half()` and `.bfloat16()`, tuned on the real device in their own types (tensors stored
in half, computed in float32, rounded where stored); each verified kernel and the emitted
module checked against torch: the output has torch's dtype, and its error against a float64
reference is within a small multiple of torch eager's own in that dtype. CPU counterparts:
tests/test_half_precision.py."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest
import torch

from cuda_agent.regions.tune import tune_model
from cuda_agent.tuner import tune

PROBLEMS = {
    "softmax_fp16": ('''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.float16)]


def get_init_inputs():
    return []
''', torch.float16),
    "layernorm_gelu_bf16": ('''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(4096).to(torch.bfloat16)

    def forward(self, x):
        return F.gelu(self.ln(x))


def get_inputs():
    return [torch.randn(8192, 4096, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''', torch.bfloat16),
    # the library route in half: cuBLAS/cuDNN in the problem's type, the epilogue generated
    "linear_gelu_fp16": ('''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4096).to(torch.float16)

    def forward(self, x):
        return F.gelu(self.fc(x)) * 0.5


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.float16)]


def get_init_inputs():
    return []
''', torch.float16),
    "conv_relu_bf16": ('''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 128, 3, padding=1).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.conv(x)) + 1.0


def get_inputs():
    return [torch.randn(32, 64, 56, 56, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''', torch.bfloat16),
    # reductions over columns and channels, pooling (col, chan/split, pool templates in half)
    "maxpool_fp16": ('''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 3, 2, 1)


def get_inputs():
    return [torch.randn(32, 64, 112, 112, dtype=torch.float16)]


def get_init_inputs():
    return []
''', torch.float16),
    "colsum_bf16": ('''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(64, 2048, 512, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''', torch.bfloat16),
    "batchnorm_train_bf16": ('''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(64).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(32, 64, 56, 56, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
''', torch.bfloat16),
}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _within_torchs_error(got: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor) -> None:
    """`got`'s relative-norm error against `exact` (float64) at most 4x torch eager's."""
    def rel(t):
        return float((t.double() - exact).norm() / exact.norm().clamp_min(1e-30))
    assert rel(got) <= 4 * rel(eager) + 1e-6, (rel(got), rel(eager))


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_half_problem_tunes_verified_in_its_type(name, tmp_path):
    source, dtype = PROBLEMS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune(path, out=tmp_path / "o", device="cuda", budget=16, batch=8,
                      store=str(tmp_path / "s.sqlite"), strategy="random")
    assert result.best is not None and result.best.measurement.verified is True, "; ".join(
        f"{t.measurement.error_kind}: {t.measurement.error_msg}" for t in result.trials[:3])
    if name.startswith(("linear", "conv")):  # the library route: its product in the type
        assert "ca_lib_epilogue" in (tmp_path / "o" / "model_new.py").read_text()
    mod = _load(tmp_path / "o" / "model_new.py", f"half_{name}")
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs()).cuda()
    new = mod.ModelNew(*mod.get_init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    inputs = [x.cuda() for x in mod.get_inputs()]
    with torch.no_grad():
        eager, got = ref(*inputs), new(*inputs)
        exact = ref.double()(*[x.double() for x in inputs])
    assert got.dtype == eager.dtype == dtype and got.shape == eager.shape
    _within_torchs_error(got, eager, exact)


HALF_MODEL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(1024)
        self.fc1 = nn.Linear(1024, 4096)
        self.fc2 = nn.Linear(4096, 1024)
        self.to(torch.{dt})

    def forward(self, x):
        h = self.fc2(F.gelu(self.fc1(self.ln(x))))
        return torch.softmax(x + h, -1)


def get_inputs():
    return [torch.randn(16, 512, 1024, dtype=torch.{dt})]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_model_regions_tuned_on_the_gpu(dt, tmp_path):
    path = tmp_path / f"block_{dt}.py"
    path.write_text(HALF_MODEL.format(dt=dt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(path, tmp_path / "o", device="cuda", budget=12, store=":memory:",
                            time_limit_s=300)
    assert not result.simulated
    # the layer norm, linear+gelu and linear+add+softmax generated in the model's dtype: the
    # matrix products through cuBLAS in that type, their epilogues generated
    assert sorted(result.generated()) == [r.index for r in result.split.kernels()] == [1, 2, 3]
    assert all(r.dtype == dt for r in result.split.regions)
    mod = _load(tmp_path / "o" / "model_new.py", f"half_model_{dt}")
    torch.manual_seed(0)
    ref = mod.Model().cuda()
    new = mod.ModelNew().cuda()
    new.load_state_dict(ref.state_dict())
    x = [t.cuda() for t in mod.get_inputs()]
    with torch.no_grad():
        eager, got = ref(*x), new(*x)
        exact = ref.double()(*[t.double() for t in x])
    assert got.dtype == getattr(torch, dt)
    _within_torchs_error(got, eager, exact)
