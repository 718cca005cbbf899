"""Whole models on the GPU (issue 50): the issue's models tuned region by region on the real
device, and the emitted module's output, running statistics and gradients checked against the
model on CUDA tensors, where each kernel region runs its generated kernels. Not run on the CPU
(no GPU there): `tests/test_regions.py` checks the wiring on CPU tensors."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest
import torch

from cuda_agent.regions.tune import tune_model

MODELS = Path(__file__).resolve().parents[2] / "benchmarks" / "models"


@pytest.mark.parametrize("name", ["masked_cumsum", "densenet_transition", "mlp3", "lstm_head",
                                  "vit"])
def test_whole_model_on_the_gpu(name, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(MODELS / f"{name}.py", tmp_path, device="cuda", budget=12,
                            store=":memory:", time_limit_s=300)
    assert not result.simulated
    spec = importlib.util.spec_from_file_location(f"gpu_whole_{name}", tmp_path / "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs()).cuda()
    new = mod.ModelNew(*mod.get_init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    inputs = [t.cuda() for t in mod.get_inputs()]
    with torch.no_grad():
        expect, got = ref(*inputs), new(*inputs)
    torch.testing.assert_close(got, expect, rtol=1e-3, atol=1e-3)
    for (n, b), (_, c) in zip(ref.named_buffers(), new.named_buffers()):
        torch.testing.assert_close(c, b, rtol=1e-3, atol=1e-4, msg=n)
    if any(True for _ in ref.parameters()):
        ref(*inputs).square().sum().backward()
        new(*inputs).square().sum().backward()
        for (n, p), (_, q) in zip(ref.named_parameters(), new.named_parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-2, atol=1e-3, msg=n)
