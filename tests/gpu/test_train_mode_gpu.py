"""The mode the user holds the module in, on the GPU (issue 33, items 3 and 6).

A problem with BatchNorm, held in training mode as `Model(*get_init_inputs())` leaves it, is
tuned on the GPU; its emitted ModelNew must compute what the training-mode module computes
(batch statistics) and leave the same running statistics after each forward. A module whose
constructor calls .eval() is tuned and checked in eval mode. In conformance mode
(`tolerance="kernelbench"`) the emitted module passes KernelBench's own check against the module
at PyTorch's default settings, and the report says which tolerance was used.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from cuda_agent.tuner import tune

pytestmark = pytest.mark.gpu

HEADER = "import torch\nimport torch.nn as nn\n\n\n"
PROBLEMS = {
    # conv -> BatchNorm2d -> relu, the chain issue 33 found wrong by a relative error of 1.0
    "conv_bn_relu": HEADER + '''class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(16, 8, 34, 30)]


def get_init_inputs():
    return [8, 24]
''',
    "linear_bn1d_relu": HEADER + '''class Model(nn.Module):
    def __init__(self, n, m):
        super().__init__()
        self.fc = nn.Linear(n, m)
        self.bn = nn.BatchNorm1d(m, momentum=0.3)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x)))


def get_inputs():
    return [torch.randn(96, 200)]


def get_init_inputs():
    return [200, 136]
''',
    "plain_bn2d": HEADER + '''class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(12, 40, 27, 33) * 2 + 1]


def get_init_inputs():
    return [40]
''',
}
EVAL_PROBLEM = HEADER + '''class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
        self.eval()  # the user holds it in eval mode

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(12, 40, 27, 33)]


def get_init_inputs():
    return [40]
'''


def _tune(tmp_path: Path, name: str, source: str, **kw):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    result = tune(path, out=tmp_path / "o", device="cuda", budget=kw.pop("budget", 10),
                  batch=10, store=str(tmp_path / "s.sqlite"), baselines=False,
                  **{"strategy": "random", **kw})
    assert result.best is not None, "no verified kernel: " + "; ".join(
        f"{t.measurement.error_kind}: {t.measurement.error_msg}" for t in result.trials[:3])
    spec = importlib.util.spec_from_file_location(f"model_new_{name}", tmp_path / "o" /
                                                  "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    return result, mod, report


def _pair(mod):
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs()).cuda()
    torch.manual_seed(0)
    new = mod.ModelNew(*mod.get_init_inputs()).cuda()
    return ref, new


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_emitted_module_matches_the_training_mode_module_and_its_running_stats(name, tmp_path):
    result, mod, report = _tune(tmp_path, name, PROBLEMS[name])
    assert result.best.measurement.verified is True
    assert report["verification"]["mode"] == "strict"
    assert [u["op"] for u in mod.STATE_UPDATES] == ["increment", "running_stats"]
    ref, new = _pair(mod)
    assert ref.training and new.training
    ref64 = ref.double()  # the reference in float64, the module as the user holds it
    for step in range(3):  # running statistics accumulate over forwards
        torch.manual_seed(100 + step)
        with torch.device("cuda"):
            x = mod.get_inputs()[0]
        with torch.no_grad():
            want, got = ref64(x.double()), new(x)
        assert got.shape == want.shape and got.dtype == torch.float32
        assert _rel(got, want) < 1e-4, (step, _rel(got, want))
        for (k, a), (k2, b) in zip(ref64.named_buffers(), new.named_buffers()):
            assert k == k2
            if a.is_floating_point():
                assert _rel(b, a) < 1e-5, (step, k, _rel(b, a))
            else:
                assert int(a) == int(b) == step + 1, k
    # the eval-mode answer (what was verified before) is far from it
    with torch.no_grad():
        stale = ref64.eval()(x.double())
    assert _rel(stale, want) > 0.05
    with pytest.raises(RuntimeError, match="train/eval mode"):
        new.eval()(x)


def test_a_module_held_in_eval_mode_is_tuned_in_eval_mode(tmp_path):
    result, mod, _ = _tune(tmp_path, "bn_eval", EVAL_PROBLEM)
    assert result.plan.kind != "program" and mod.STATE_UPDATES == []
    ref, new = _pair(mod)
    assert not ref.training and not new.training
    with torch.device("cuda"):
        x = mod.get_inputs()[0]
    before = [b.clone() for b in new.buffers()]
    with torch.no_grad():
        want, got = ref.double()(x.double()), new(x)
    assert _rel(got, want) < 1e-4
    assert all(torch.equal(a, b) for a, b in zip(before, new.buffers()))  # nothing updated


@pytest.mark.parametrize("name", ["conv_bn_relu", "linear_bn1d_relu"])
def test_conformance_mode_passes_kernelbench_s_check_and_says_so(name, tmp_path):
    result, mod, report = _tune(tmp_path, name, PROBLEMS[name], tolerance="kernelbench")
    assert report["verification"]["mode"] == "conformance"
    assert report["verification"]["tolerance"] == "allclose(atol=0.01, rtol=0.01)"
    assert "conformance tolerance, allclose(atol=0.01, rtol=0.01)" in \
        (tmp_path / "o" / "model_new.py").read_text()
    ref, new = _pair(mod)
    # KernelBench's check, PyTorch's defaults (cuDNN may use TF32), the module as held
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = True, False
    try:
        with torch.device("cuda"):
            x = mod.get_inputs()[0]
        with torch.no_grad():
            want, got = ref(x), new(x)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    assert torch.allclose(got, want, atol=1e-2, rtol=1e-2)
    for a, b in zip(ref.buffers(), new.buffers()):
        assert torch.allclose(b.double(), a.double(), atol=1e-2, rtol=1e-2)


# a grouped convolution fixes its groups: no chunk of the channels runs it, and training-mode
# statistics span the batch, so the float64 reference runs in host memory
HOST_PROBLEM = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1, groups=4, bias=False)
        self.bn = nn.BatchNorm2d(64)

    def forward(self, x):
        return torch.nn.functional.relu6(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(16, 32, 256, 256)]


def get_init_inputs():
    return []
'''
# a depthwise one is chunked along the channels (the worker's copies take any slice of them)
DEPTHWISE_PROBLEM = HOST_PROBLEM.replace("nn.Conv2d(32, 64, 3, padding=1, groups=4",
                                         "nn.Conv2d(64, 64, 3, padding=1, groups=64").replace(
    "torch.randn(16, 32, 256, 256)", "torch.randn(16, 64, 256, 256)")


@pytest.mark.parametrize("name,source,verification", [
    ("grouped_bn_host", HOST_PROBLEM, "host"), ("depthwise_bn_chunked", DEPTHWISE_PROBLEM,
                                                "chunked")])
def test_a_training_mode_chain_after_a_grouped_convolution_checks_its_running_stats(
        name, source, verification, tmp_path):
    """The realistic suite's fused_depthwise_batchnorm_relu6 and
    fused_conv2d_grouped_batchnorm_silu (2026-12-06): with the reference in host memory, its
    running statistics stayed on the CPU and every candidate failed."""
    # strict fp32: the bare cuDNN product is a candidate of this convolution's stage too
    # (its epilogue-less output feeds the BatchNorm stage), and the checks below hold fp32's
    # error, not TF32's (`--precision auto` would let cuDNN use TF32, as torch does)
    result, mod, report = _tune(tmp_path, name, source, budget=6, precision="fp32")
    assert report["memory"]["verification"] == verification
    assert result.best.measurement.verified is True
    ref, new = _pair(mod)
    with torch.device("cuda"):
        x = mod.get_inputs()[0]
    ref64 = ref.double()
    with torch.no_grad():
        want, got = ref64(x.double()), new(x)
    assert _rel(got, want) < 1e-4
    spread = ref64.bn.running_var.sqrt().norm()
    for (k, a), b in zip(ref64.named_buffers(), new.buffers()):
        if k.endswith("running_mean"):
            # a batch mean near zero (a convolution of zero-mean data) has no relative
            # precision to keep: its error counts against the spread it is normalised by
            assert float((b.double() - a).norm() / spread) < 1e-6, k
        elif a.is_floating_point():
            assert _rel(b, a) < 1e-5, k
