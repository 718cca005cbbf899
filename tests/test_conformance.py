"""Conformance mode (issue 33, item 6): `tune --tolerance kernelbench` accepts what the field's
common harness accepts, torch.allclose(out, ref, atol=1e-2, rtol=1e-2), and keeps every other
protection of the protocol: poisoned outputs, the mutation check, the perturbed trial, the
inconclusive verdict on trivial outputs. The strict protocol stays the default; reports say
which was used. (The reference is the module in fp32 at PyTorch's defaults: a GPU worker's
matter, tests/gpu/test_train_mode_gpu.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cuda_agent.errors import SettingsError
from cuda_agent.verify.cases import CasePool, check, compare, verify
from cuda_agent.verify.settings import (KERNELBENCH, Tolerance, VerifySettings,
                                        describe_verification, parse_tolerance)

ROOT = Path(__file__).resolve().parents[1]
GOOD = ROOT / "tests" / "data" / "good"
CONFORMANCE = VerifySettings(tolerance=KERNELBENCH)


def _ref(ts):
    return torch.tanh(ts[0].double()) * 3.0 + ts[1].double()


EXAMPLES = [torch.randn(24, 40), torch.randn(40)]


def _scaled(factor: float):
    """A kernel computing the answer times `factor`: a relative error of |factor - 1|."""
    def run(ins, out):
        out.copy_((torch.tanh(ins[0]) * 3.0 + ins[1]) * factor)
    return run


def _verify(run, settings):
    return verify(run, _ref, EXAMPLES, (24, 40), torch.float32, settings)


# -- the option ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("strict", None), ("kernelbench", Tolerance(1e-2, 1e-2)), ("KernelBench", KERNELBENCH),
    ("atol=1e-3,rtol=0", Tolerance(1e-3, 0.0)), ("rtol=0.05, atol=0.1", Tolerance(0.1, 0.05)),
])
def test_tolerance_option_parses(text, want):
    assert parse_tolerance(text) == want


@pytest.mark.parametrize("text", ["loose", "atol=1e-2", "atol=x,rtol=1", "atol=-1,rtol=0",
                                  "atol=1,atol=2", "atol=1,rtol=1,eps=2", "atol=nan,rtol=0"])
def test_a_malformed_tolerance_is_a_one_line_settings_error(text):
    with pytest.raises(SettingsError) as info:
        parse_tolerance(text)
    assert "\n" not in str(info.value) and "--tolerance" in str(info.value)


def test_strict_is_the_default():
    assert VerifySettings().tolerance is None
    from cuda_agent.tuner import TuneSettings, verify_settings
    assert verify_settings(TuneSettings()).tolerance is None
    assert describe_verification(VerifySettings())["mode"] == "strict"
    v = describe_verification(CONFORMANCE)
    assert v["mode"] == "conformance" and v["tolerance"] == "allclose(atol=0.01, rtol=0.01)"
    assert "PyTorch's default settings" in v["reference"]


# -- what it accepts and rejects ----------------------------------------------------------------

def test_an_error_within_allclose_passes_conformance_and_fails_the_strict_protocol():
    run = _scaled(1.004)  # 0.4 %: inside atol + rtol * |ref|, far outside 1e-4
    strict = _verify(run, VerifySettings())
    assert not strict.ok and strict.kind == "wrong"
    assert _verify(run, CONFORMANCE).ok


def test_an_error_beyond_allclose_fails_conformance():
    res = _verify(_scaled(1.05), CONFORMANCE)
    assert not res.ok and res.kind == "wrong" and "allclose(atol=0.01, rtol=0.01)" in res.msg


def test_compare_is_elementwise_allclose():
    ref = torch.tensor([0.0, 1.0, -100.0, 5.0], dtype=torch.float64)
    ok = ref.float() + torch.tensor([0.0099, 0.0199, -1.009, 0.0])
    bad = ref.float() + torch.tensor([0.0101, 0.0, 0.0, 0.0])
    tol = KERNELBENCH
    assert compare(ok, ref, 1e-4, 10.0, tolerance=tol)[0] is None
    kind, msg, _ = compare(bad, ref, 1e-4, 10.0, tolerance=tol)
    assert kind == "wrong" and msg.startswith("1 of 4 elements fail")
    # torch.allclose agrees on both
    assert torch.allclose(ok.double(), ref, atol=1e-2, rtol=1e-2)
    assert not torch.allclose(bad.double(), ref, atol=1e-2, rtol=1e-2)


# -- the protections stay ---------------------------------------------------------------------

def test_conformance_still_catches_an_unwritten_element():
    def run(ins, out):  # the last column is never written: the poison stays there
        out[:, :-1].copy_((torch.tanh(ins[0]) * 3.0 + ins[1])[:, :-1])
    res = _verify(run, CONFORMANCE)
    assert not res.ok and res.kind == "unwritten"


def test_conformance_still_catches_a_mutated_input():
    def run(ins, out):
        out.copy_(torch.tanh(ins[0]) * 3.0 + ins[1])
        ins[1].mul_(1.0 + 1e-7)  # within any tolerance, still a mutation
    res = _verify(run, CONFORMANCE)
    assert not res.ok and res.kind == "mutated_input"


def test_conformance_still_runs_the_perturbed_trial():
    """Replaying the first trial's answer: the perturbed twin's reference differs from its base
    beyond the tolerance, so the replay fails on it."""
    pool = CasePool(_ref, EXAMPLES, (24, 40), torch.float32, CONFORMANCE)
    trials = pool.trials_for(0)
    assert trials[-1].label.startswith("perturbed")
    first = trials[0].ref.clone()

    def replay(ins, out):
        out.copy_(first)
    honest = check(_scaled(1.0), pool, [trials[0], trials[-1]])
    assert honest.ok
    res = check(replay, pool, [trials[0], trials[-1]])
    assert not res.ok and "perturbed" in res.msg


def test_conformance_calls_trivial_outputs_inconclusive():
    """Outputs all below atol: zeros pass allclose on every trial, so passing proves nothing
    (the strict protocol's relative bounds tell them apart)."""
    def tiny(ts):
        return ts[0].double() * 1e-6

    def exact(ins, out):
        out.copy_(ins[0] * 1e-6)
    res = verify(exact, tiny, [torch.randn(16, 32)], (16, 32), torch.float32, CONFORMANCE)
    assert not res.ok and res.kind == "degenerate" and "zeros" in res.msg
    assert verify(exact, tiny, [torch.randn(16, 32)], (16, 32), torch.float32).ok


# -- tune and its report --------------------------------------------------------------------------

def test_report_states_the_tolerance(tmp_path):
    from cuda_agent.tuner import tune

    tune(GOOD / "relu_small.py", out=tmp_path / "c", device="sim", budget=1,
         store=str(tmp_path / "s.db"), tolerance="kernelbench", workers=1, strategy="random")
    tune(GOOD / "relu_small.py", out=tmp_path / "s", device="sim", budget=1,
         store=str(tmp_path / "s.db"), workers=1, strategy="random")
    conf = json.loads((tmp_path / "c" / "report.json").read_text())["verification"]
    strict = json.loads((tmp_path / "s" / "report.json").read_text())["verification"]
    assert conf["mode"] == "conformance" and conf["tolerance"] == "allclose(atol=0.01, rtol=0.01)"
    assert strict["mode"] == "strict"


def test_conformance_records_are_kept_apart_from_strict_ones(tmp_path):
    """A candidate accepted at 1e-2 is no result of the strict protocol: a strict run on the
    same store measures again instead of reusing it."""
    from cuda_agent.tuner import tune

    store = str(tmp_path / "s.db")
    tune(GOOD / "sum_small.py", device="sim", budget=2, store=store, tolerance="kernelbench",
         workers=1, strategy="random")
    again = tune(GOOD / "sum_small.py", device="sim", budget=2, store=store, workers=1,
                 strategy="random")
    assert not any(t.measurement.reused for t in again.trials)
    third = tune(GOOD / "sum_small.py", device="sim", budget=2, store=store, workers=1,
                 strategy="random")
    assert all(t.measurement.reused for t in third.trials)


def test_conformance_on_replay_is_refused():
    from cuda_agent.tuner import check_tolerance

    with pytest.raises(SettingsError, match="strict protocol"):
        check_tolerance("kernelbench", "replay")
    check_tolerance("strict", "replay")


def test_cli_rejects_a_malformed_tolerance_in_one_line(tmp_path):
    out = tmp_path / "never"
    proc = subprocess.run([sys.executable, "-c", "from cuda_agent.cli import main; main()",
                           "tune", str(GOOD / "relu_small.py"), "--device", "sim",
                           "--tolerance", "atol=1e-2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "--tolerance" in err[0]
    assert not out.exists()


def test_the_conformance_reference_runs_at_pytorch_s_defaults():
    """The worker holds strict fp32 (TF32 off) for its witness and baselines; conformance
    mode's reference runs under PyTorch's own defaults (cuDNN TF32 on, matmul TF32 off), read
    before the worker changed them, and the worker's settings come back after it."""
    from cuda_agent.runner import launcher
    from cuda_agent.runner.worker import TORCH_DEFAULTS, torch_defaults, use_precision

    conv, matmul = launcher.conv_tf32(TORCH_DEFAULTS), launcher.matmul_tf32(TORCH_DEFAULTS)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        use_precision("fp32")
        with torch_defaults():
            now = launcher.tf32_flags()
            assert (launcher.conv_tf32(now), launcher.matmul_tf32(now)) == (conv, matmul)
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
