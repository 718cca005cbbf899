"""Every family verifies on the GPU, odd sizes included: a short random search per problem must
find at least one verified kernel, and the emitted ModelNew must match the reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from cuda_agent.tuner import tune

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parents[2]
PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("*_odd.py")) + \
    sorted((ROOT / "tests" / "data" / "good").glob("*.py"))
# scans are new (not yet run on a GPU): every form, not only the odd sizes
PROBLEMS += [p for p in sorted((ROOT / "benchmarks" / "problems").glob("scan_*.py"))
             if p not in PROBLEMS]


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_family_verifies_and_model_new_matches(path, tmp_path):
    result = tune(path, out=tmp_path / "o", device="cuda", budget=12, batch=12,
                  store=str(tmp_path / "s.sqlite"), baselines=False, strategy="random")
    assert result.best is not None, "no verified kernel: " + "; ".join(
        f"{t.measurement.error_kind}: {t.measurement.error_msg}" for t in result.trials[:3])
    assert result.best.measurement.verified is True
    # the emitted module, loaded on its own, computes what Model computes
    spec = importlib.util.spec_from_file_location("model_new_under_test", tmp_path / "o" / "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs()).cuda()
    torch.manual_seed(0)
    new = mod.ModelNew(*mod.get_init_inputs()).cuda()
    with torch.device("cuda"):
        inputs = mod.get_inputs()
    inputs = [x.cuda() for x in inputs]
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.is_floating_point:
        rel = float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))
        assert rel < 1e-4, rel
    else:
        assert torch.equal(got, want)
