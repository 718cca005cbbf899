"""CUDA autocast on the GPU (issue 50 item 1): a small model whose forward() runs under
`torch.autocast("cuda", dtype=...)`, tuned on the device region by region with the casts torch's
autocast policy applies (ir/autocast.py), and an fp32-policy problem (softmax, layer norm on a
half input under autocast) tuned as one kernel; each checked against torch's own autocast
output: the same dtype, and within a small multiple of torch's own error against a float64
reference. CPU counterparts: tests/test_autocast.py."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest
import torch

from cuda_agent.regions.split import KERNEL
from cuda_agent.regions.tune import tune_model

MODEL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(1024)
        self.fc1 = nn.Linear(1024, 4096)
        self.fc2 = nn.Linear(4096, 1024)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.{dt}):
            h = self.fc2(F.gelu(self.fc1(self.ln(x))))
            return torch.softmax(x + h, -1)


def get_inputs():
    return [torch.randn(16, 512, 1024)]


def get_init_inputs():
    return []
'''

UPCAST = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return torch.softmax(x, -1) + F.layer_norm(x, (4096,))


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.float16)]


def get_init_inputs():
    return []
'''


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rel(t: torch.Tensor, exact: torch.Tensor) -> float:
    return float((t.double() - exact).norm() / exact.norm().clamp_min(1e-30))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_autocast_model_tuned_on_the_gpu_matches_torchs_autocast(dt, tmp_path):
    path = tmp_path / f"autocast_{dt}.py"
    path.write_text(MODEL.format(dt=dt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(path, tmp_path / "o", device="cuda", budget=12, store=":memory:",
                            time_limit_s=300)
    assert not result.simulated
    kernels = result.split.kernels()
    assert sorted(result.generated()) == [r.index for r in kernels]
    assert all(r.autocast == dt for r in result.split.regions)
    # the products in the autocast type (cuBLAS, generated epilogues), torch's casts before
    products = [r for r in kernels if "linear" in r.ops]
    assert len(products) == 2 and all(dt in r.dtype for r in products)
    assert all(r.kind == KERNEL or set(r.ops) == {"_to_copy"} for r in result.split.regions)
    mod = _load(tmp_path / "o" / "model_new.py", f"autocast_model_{dt}")
    torch.manual_seed(0)
    ref = mod.Model().cuda()
    new = mod.ModelNew().cuda()
    new.load_state_dict(ref.state_dict())
    x = [t.cuda() for t in mod.get_inputs()]
    with torch.no_grad():
        eager = ref(*x)  # the user's forward(): torch's autocast on the GPU
        got = new(*x)
        exact = ref.double()(*[t.double() for t in x])  # autocast leaves float64 alone
    assert got.dtype == eager.dtype
    assert _rel(got, exact) <= 4 * _rel(eager, exact) + 1e-6, (_rel(got, exact),
                                                               _rel(eager, exact))
    # and near torch's own autocast answer, at the half type's rounding
    assert _rel(got, eager.double()) <= (2e-3 if dt == "float16" else 1.6e-2)


def test_autocast_upcast_problem_tunes_as_one_kernel(tmp_path):
    from cuda_agent.tuner import tune

    path = tmp_path / "autocast_upcast.py"
    path.write_text(UPCAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune(path, out=tmp_path / "o", device="cuda", budget=16, batch=8,
                      store=":memory:")
    assert result.best is not None
    mod = _load(tmp_path / "o" / "model_new.py", "autocast_upcast")
    ref, new = mod.Model().cuda(), mod.ModelNew().cuda()
    x = [t.cuda() for t in mod.get_inputs()]
    with torch.no_grad():
        eager, got = ref(*x), new(*x)
        exact = torch.softmax(x[0].double(), -1) + torch.nn.functional.layer_norm(
            x[0].double(), (4096,))
    assert got.dtype == eager.dtype == torch.float32  # fp32 out of half in, as autocast
    assert _rel(got, exact) <= 4 * _rel(eager, exact) + 1e-6
