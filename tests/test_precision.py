"""`--precision tf32`: the user opts into TF32 tensor-core products. The tensor-core templates
then take one mma per tile instead of three (no error compensation); the result is TF32-accurate
and not fp32-accurate (executed on the CPU emulator); its candidates are other binaries (other
content keys) than the strict ones; the replayed sweeps, all strict fp32, refuse it; the GPU
worker holds kernels to torch's own TF32 answer and times the baselines with TF32 on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cpu_exec
from test_attention import TC_CASES, _inputs, space_of
from test_gemm import emulation_case, plan_of, tc_configs
from cuda_agent.errors import SettingsError
from cuda_agent.space.slots import Config, Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]
TF32 = Target(precision="tf32")
HALF = {"fp16": Target(precision="fp16"), "bf16": Target(precision="bf16")}


def _products_per_step(source: str) -> int:
    body = source[source.index("float p_[4]"):source.index("acc[i][j][0] += p_[0]")]
    return body.count("ca_mma_tf32(p_,")


def test_tf32_renders_one_product_per_tile_and_other_keys():
    plan = plan_of(lambda a, b: a @ b, (256, 128), (128, 192))
    strict, tf32 = Space.for_plan(plan, Target()), Space.for_plan(plan, TF32)
    cfg = next(c for c in tc_configs(strict) if c["compute.fresh"] == 8)
    assert _products_per_step(strict.render(cfg).source) == 3
    assert _products_per_step(tf32.render(cfg).source) == 1
    assert strict.render(cfg).fact("mma") == "tf32x3" and tf32.render(cfg).fact("mma") == "tf32"
    # the same slots, another binary and another contract: never served each other's records
    assert strict.key(cfg, "t") != tf32.key(cfg, "t")
    # the SIMT template is fp32 whatever the precision, but its records are kept apart too
    simt = strict.configs_of("gemm")[0]
    assert strict.render(simt).source == tf32.render(simt).source
    assert strict.key(simt, "t") != tf32.key(simt, "t")
    assert Target().key() == "sm_90/132sm"  # strict keys as recorded before precision existed


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_tf32_gemm_is_tf32_accurate_and_not_fp32_accurate():
    plan, strict, xs, want = emulation_case(lambda a, b: a @ b + 1.0, [(64, 256), (256, 72)],
                                            seed=4)
    tf32 = Space.for_plan(plan, TF32)
    args = [xs[k].numpy() for k in plan.operands]
    cfgs = [c for c in tc_configs(strict) if c["config.bm"] * c["config.bn"] <= 64 * 64]
    picked = [next(c for c in cfgs if c["reduction.split"] > 1),
              next(c for c in cfgs if c["compute.fresh"] == 16)]
    cpu_exec.prebuild([(sp.render(c), len(args)) for c in picked for sp in (strict, tf32)])
    for cfg in picked:
        assert cpu_exec.max_rel_error(strict.render(cfg), args, want) < 1e-5
        err = cpu_exec.max_rel_error(tf32.render(cfg), args, want)
        # TF32 keeps 11 significant bits: about 1e-3 off, never more than a few times that
        assert 1e-5 < err < 5e-3, (cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_tf32_attention_is_tf32_accurate():
    f, shapes = TC_CASES["mask_scale"]
    strict = space_of(f, *shapes)
    tf32 = Space.for_plan(strict.plan, TF32)
    xs = _inputs(shapes)
    want = f(*[x.double() for x in xs]).float().numpy()
    ins = [xs[k].numpy() for k in strict.plan.operands]
    cfg = strict.configs_of("attention_tc")[0]
    assert tf32.render(cfg).fact("mma") == "tf32"
    assert cpu_exec.max_rel_error(strict.render(cfg), ins, want) < 1e-5
    assert 1e-5 < cpu_exec.max_rel_error(tf32.render(cfg), ins, want) < 5e-3


def test_half_precision_renders_one_half_product_per_tile_and_other_keys():
    plan = plan_of(lambda a, b: a @ b, (256, 128), (128, 192))
    strict = Space.for_plan(plan, Target())
    spaces = {name: Space.for_plan(plan, t) for name, t in HALF.items()}
    cfg = next(c for c in tc_configs(strict) if c["compute.fresh"] == 16)
    keys = {strict.key(cfg, "t"), Space.for_plan(plan, TF32).key(cfg, "t")}
    for name, sp in spaces.items():
        r = sp.render(cfg)
        mma = {"fp16": "f16", "bf16": "bf16"}[name]
        assert r.fact("mma") == mma
        at = r.source.index("for (int kk = 0;")
        body = r.source[at:r.source.index("rd_ = rd_ + 1", at)]
        # two 8-deep steps: one m16n8k16 half-precision product accumulating in the tensor
        # core (no fresh partial, no TF32 product); one 8-deep step: one m16n8k8
        assert body.count(f"ca_mma16_{mma}(acc[i][j], a4_, b2_)") == 1, body
        assert "p_[" not in body and "ca_mma_tf32" not in body
        r8 = sp.render(Config.of(dict(cfg.as_dict(), **{"compute.fresh": 8})))
        assert f"ca_mma_{mma}(acc[i][j], ah_[i], bh_);" in r8.source
        keys.add(sp.key(cfg, "t"))
    assert len(keys) == 4  # four contracts, four binaries: never served each other's records


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name, bits", [("fp16", 11), ("bf16", 8)])
def test_half_precision_gemm_has_the_error_of_its_operand_rounding(name, bits):
    """Executed on the CPU emulator (its conversions round to nearest even as cvt.rn does):
    each operand rounded once to the type, products summed in fp32; the error is that of
    `bits` significant bits (fp16 11, bf16 8), above fp32's and within a small multiple of
    the unit roundoff, over split-K and both fresh-partial depths, transposed B included."""
    unit = 2.0 ** -bits
    for f, shapes in ((lambda a, b: a @ b + 1.0, [(64, 256), (256, 72)]),
                      (lambda x, w: x @ w.T, [(40, 96), (56, 96)])):
        plan, strict, xs, want = emulation_case(f, shapes, seed=5)
        half = Space.for_plan(plan, HALF[name])
        args = [xs[k].numpy() for k in plan.operands]
        cfgs = [c for c in tc_configs(strict) if c["config.bm"] * c["config.bn"] <= 64 * 64]
        picked = [next(c for c in cfgs if c["reduction.split"] > 1),
                  next(c for c in cfgs if c["compute.fresh"] == 16),
                  next(c for c in cfgs if c["compute.fresh"] == 8)]
        cpu_exec.prebuild([(half.render(c), len(args)) for c in picked])
        for cfg in picked:
            err = cpu_exec.max_rel_error(half.render(cfg), args, want)
            assert unit / 8 < err < 8 * unit, (name, cfg.short(), err)


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
def test_the_library_product_runs_in_the_opted_in_half_type():
    """Under fp16/bf16 the vendor-library template computes its product in that type, as torch
    does under autocast (operands cast, product cast back): the result has that type's error,
    the strict one fp32's; the simulator prices the half product below the strict one."""
    from cuda_agent.costmodel.model import simulate

    f = lambda x, w: torch.relu(x @ w.T + 1.0)  # noqa: E731
    plan, strict, xs, want = emulation_case(f, [(48, 128), (40, 128)], seed=6)
    args = [xs[k].numpy() for k in plan.operands]
    cfg = strict.configs_of("lib")[0]
    assert "dtype" not in next(la.library for la in strict.render(cfg).launches if la.library)
    assert cpu_exec.max_rel_error(strict.render(cfg), args, want) < 1e-5
    for name, bits in (("fp16", 11), ("bf16", 8)):
        half = Space.for_plan(plan, HALF[name])
        r = half.render(cfg)
        assert next(la.library for la in r.launches if la.library)["dtype"] == name
        err = cpu_exec.max_rel_error(r, args, want)
        assert 2.0 ** -bits / 8 < err < 8 * 2.0 ** -bits, (name, err)
    big = plan_of(f, (4096, 4096), (4096, 4096))
    s_strict, s_half = Space.for_plan(big, Target()), Space.for_plan(big, HALF["fp16"])
    cfg = s_strict.configs_of("lib")[0]
    slow = simulate(big, s_strict.render(cfg), {}, Target()).time_ms
    assert simulate(big, s_half.render(cfg), {}, HALF["fp16"]).time_ms < slow / 4


def test_emulated_half_rounding_matches_torch():
    """The emulator's fp32 -> fp16/bf16 conversions (nearest even, subnormals, overflow) agree
    bit for bit with torch's on edge cases and random values, so the emulated GEMM's error is
    the GPU's."""
    if not cpu_exec.available():
        pytest.skip("needs g++ for the CPU emulator")
    import numpy as np

    edge = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e-8, 2.0 ** -24, 3 * 2.0 ** -25,
            2.0 ** -14, 1.00048828125, 1.00146484375, 3.0e38, float("inf"), -7.3e-6]
    xs = torch.tensor(edge + torch.randn(4000, generator=torch.Generator().manual_seed(1))
                      .mul(torch.logspace(-9, 6, 4000)).tolist(), dtype=torch.float32)
    got = cpu_exec.round_half(xs.numpy())
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        want = xs.to(dtype).float().numpy()
        assert np.array_equal(got[name], want), name


def test_the_simulator_prices_one_product_below_three():
    from cuda_agent.costmodel.model import simulate

    plan = plan_of(lambda a, b: a @ b, (4096, 4096), (4096, 4096))
    strict, tf32 = Space.for_plan(plan, Target()), Space.for_plan(plan, TF32)
    cfg = next(c for c in tc_configs(strict) if c["reduction.split"] == 1 and
               c["config.bm"] == c["config.bn"] == 128 and c["config.warp"] == "64x64")
    slow = simulate(plan, strict.render(cfg), {}, Target()).time_ms
    fast = simulate(plan, tf32.render(cfg), {}, TF32).time_ms
    assert fast < 0.8 * slow
    fp16 = Space.for_plan(plan, HALF["fp16"])
    assert simulate(plan, fp16.render(cfg), {}, HALF["fp16"]).time_ms < fast


def test_replay_refuses_tf32_and_sim_tunes_with_it(tmp_path):
    from cuda_agent.tuner import tune

    problem = ROOT / "benchmarks/problems/gemm_odd.py"
    for precision in ("tf32", "fp16", "bf16"):
        with pytest.raises(SettingsError, match="strict fp32"):
            tune(problem, device="replay", precision=precision, budget=2, strategy="random")
    with pytest.raises(SettingsError, match="unknown precision"):
        tune(problem, device="sim", precision="bf8", budget=2, strategy="random")
    r = tune(problem, out=tmp_path / "o", device="sim", precision="tf32", budget=4, batch=4,
             baselines=False, strategy="random")
    assert r.space.target.precision == "tf32"
    assert "Precision: TF32" in (tmp_path / "o" / "model_new.py").read_text()
    r = tune(problem, out=tmp_path / "h", device="sim", precision="bf16", budget=4, batch=4,
             baselines=False, strategy="random")
    assert "Precision: bf16 (opted in)" in (tmp_path / "h" / "model_new.py").read_text()


def test_cli_rejects_an_unknown_precision_in_one_line(tmp_path):
    out = tmp_path / "never"
    proc = subprocess.run([sys.executable, "-c", "from cuda_agent.cli import main; main()",
                           "tune", str(ROOT / "benchmarks/problems/gemm_odd.py"), "--device",
                           "sim", "--precision", "fp8", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "unknown precision 'fp8'" in err[0]
    assert not out.exists()


def test_the_worker_times_and_witnesses_with_the_chosen_precision():
    pytest.importorskip("cuda_agent.runner.worker")
    from cuda_agent.runner.worker import use_precision

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        use_precision("tf32")
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        use_precision("fp32")
        assert not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    from cuda_agent.runner.worker import precision_context

    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        ctx = precision_context(name)
        assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == dtype
    assert not isinstance(precision_context("tf32"), torch.autocast)


@pytest.mark.parametrize("backend", ["nvrtc", "nvcc"])
def test_lower_precision_kernels_compile_for_sm90(tmp_path, backend):
    """The TF32, fp16 and bf16 forms of tensor-core GEMM configurations (a sample) and an
    attention compile, with NVRTC and the real nvcc."""
    from helpers import nvcc_available
    from cuda_agent.build.builder import Builder, BuildInput

    if backend == "nvcc" and not nvcc_available():
        pytest.skip("nvcc is not on PATH")
    import random as _random

    gemm = Space.for_plan(plan_of(lambda x, w: x @ w.T + 1.0, (96, 72), (40, 72)), TF32)
    f, shapes = TC_CASES["sdpa_4d"]
    att = Space.for_plan(space_of(f, *shapes).plan, TF32)
    picked = [(gemm, c) for c in _random.Random(0).sample(tc_configs(gemm), 4)]
    picked += [(att, att.configs_of("attention_tc")[0])]
    rendered = [sp.render(c) for sp, c in picked]
    assert all(r.fact("mma") == "tf32" for r in rendered)
    for name, target in HALF.items():  # the half-precision products, and attention's TF32
        half = Space.for_plan(gemm.plan, target)
        sample = _random.Random(1).sample(tc_configs(half), 3)
        sample += [next(c for c in tc_configs(half) if c["compute.fresh"] == fresh and
                        c not in sample) for fresh in (8, 16)]  # both mma shapes
        rendered += [half.render(c) for c in sample]
        hatt = Space.for_plan(att.plan, target)
        rendered.append(hatt.render(picked[-1][1]))
        assert rendered[-1].fact("mma") == "tf32"
    with Builder(backend, 2, cache_dir=tmp_path) as b:
        builds = b.build([BuildInput(r.source, "sm_90") for r in rendered])
    assert all(x.ok for x in builds), [x.error_msg for x in builds if not x.ok]


def test_auto_reads_the_tf32_flags_the_problem_file_sets_in_the_loaders_child(tmp_path):
    """The file is imported in a child process (`problem_child`): "auto" must read the flags
    the file set there, not this process's (a fresh process: TF32 convolutions)."""
    from cuda_agent.problem_child import load_problem_bounded
    from cuda_agent.settings import RunSettings
    from cuda_agent.tuner import Tuner

    source = (ROOT / "tests" / "data" / "good" / "softmax_small.py").read_text()
    strict = tmp_path / "strict_softmax.py"
    strict.write_text("import torch\ntorch.backends.cudnn.allow_tf32 = False\n" + source)
    assert torch.backends.cudnn.allow_tf32  # this process: torch's default
    tuner = Tuner(load_problem_bounded(strict), RunSettings(device="sim", baselines=False))
    try:
        assert tuner.settings.precision == "fp32", tuner.settings.precision
        assert tuner.settings.precision_asked == "auto"
    finally:
        tuner.close()
