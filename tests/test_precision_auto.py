"""`--precision auto` (the default): each product at the precision the user's torch gives it.

A fresh process lets cuDNN's fp32 convolutions use TF32 (`cudnn.allow_tf32`) and keeps cuBLAS's
matrix products strict (`float32_matmul_precision` "highest"): "auto" resolves to "tf32:conv",
so a convolution's tensor-core kernel takes one TF32 product per tile and its library step may
use TF32, while a matrix product keeps three products and a strict library call. Flags the
process sets (a problem file, a user's script) are read as they are when the run starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_gemm import plan_of, tc_configs
from cuda_agent import precision as prec
from cuda_agent.errors import SettingsError
from cuda_agent.runner import launcher
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "benchmarks/problems"


@pytest.fixture
def flags():
    """Set the process's TF32 flags inside a test; put them back after."""
    saved = launcher.tf32_flags()
    try:
        yield launcher.set_tf32
    finally:
        launcher.restore_tf32_flags(saved)


def test_auto_resolves_to_the_flags_of_the_process(flags):
    flags(True, False)  # torch's own defaults
    assert prec.resolve("auto", "cuda") == "tf32:conv"
    assert prec.resolve("auto", None) == "tf32:conv"
    flags(True, True)
    assert prec.resolve("auto", "sim") == "tf32"
    flags(False, True)
    assert prec.resolve("auto", "cuda") == "tf32:matmul"
    flags(False, False)
    assert prec.resolve("auto", "cuda") == "fp32"
    flags(True, True)
    assert prec.resolve("auto", "replay") == "fp32"  # the recorded sweeps are strict
    for asked in ("fp32", "tf32", "fp16", "bf16"):
        assert prec.resolve(asked, "cuda") == asked  # an explicit choice is kept


def test_a_fresh_process_resolves_auto_to_tf32_convolutions():
    import subprocess
    import sys

    code = ("from cuda_agent.precision import resolve; print(resolve('auto', 'cuda'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "tf32:conv"


def test_each_product_takes_its_own_flag():
    pp = prec.product_precision
    assert [pp("tf32:conv", op) for op in ("conv", "matmul")] == ["tf32", "fp32"]
    assert [pp("tf32:matmul", op) for op in ("conv", "matmul")] == ["fp32", "tf32"]
    assert [pp("tf32", op) for op in ("conv", "matmul")] == ["tf32", "tf32"]
    assert [pp("fp32", op) for op in ("conv", "matmul")] == ["fp32", "fp32"]
    assert [pp("bf16", op) for op in ("conv", "matmul")] == ["bf16", "bf16"]
    with pytest.raises(ValueError):
        pp("tf32", "pool")


def _conv_plan():
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem

    return make_plan(load_problem(PROBLEMS / "conv2d_standard.py").graph())


def test_a_convolution_under_tf32_conv_takes_one_product_a_matrix_product_three():
    target = Target(precision="tf32:conv")
    conv = Space.for_plan(_conv_plan(), target)
    mm = Space.for_plan(plan_of(lambda a, b: a @ b, (256, 128), (128, 192)), target)
    assert {conv.render(c).fact("mma") for c in tc_configs(conv)[:8]} == {"tf32"}
    assert {mm.render(c).fact("mma") for c in tc_configs(mm)[:8]} == {"tf32x3"}
    # another contract, another binary: a strict convolution's records are never served
    strict = Space.for_plan(_conv_plan(), Target())
    cfg = tc_configs(conv)[0]
    assert conv.key(cfg, "t") != strict.key(cfg, "t")
    assert Target(precision="tf32:matmul").key() != target.key()


def _library_call(space: Space) -> dict:
    cfg = space.configs_of("lib")[0]
    return next(la.library for la in space.render(cfg).launches if la.library)


def test_the_library_step_may_use_tf32_only_where_the_contract_lets_its_product():
    conv, mm = _conv_plan(), plan_of(lambda a, b: torch.relu(a @ b), (256, 128), (128, 192))
    assert _library_call(Space.for_plan(conv, Target(precision="tf32:conv"))).get("tf32")
    assert not _library_call(Space.for_plan(mm, Target(precision="tf32:conv"))).get("tf32")
    assert _library_call(Space.for_plan(mm, Target(precision="tf32:matmul"))).get("tf32")
    assert not _library_call(Space.for_plan(conv, Target(precision="fp32"))).get("tf32")


def test_the_worker_sets_each_flag_as_the_contract_says(flags):
    from cuda_agent.runner.worker import use_precision

    use_precision("tf32:conv")
    assert launcher.tf32_state() == (True, False)
    use_precision("tf32:matmul")
    assert launcher.tf32_state() == (False, True)
    use_precision("fp32")
    assert launcher.tf32_state() == (False, False)


def test_a_default_tune_reports_auto_and_what_it_resolved_to(tmp_path, flags):
    from cuda_agent.emit import report_dict
    from cuda_agent.tuner import tune

    flags(True, False)  # as a fresh process has them
    r = tune(PROBLEMS / "conv2d_standard.py", out=tmp_path / "o", device="sim", budget=4,
             batch=4, baselines=False, strategy="random")
    assert r.settings.precision == "tf32:conv" and r.settings.precision_asked == "auto"
    assert r.space.target.precision == "tf32:conv"
    d = report_dict(r)
    assert d["precision"] == "tf32:conv" and d["precision_asked"] == "auto"
    assert "resolved to tf32:conv" in d["precision_note"]
    assert "--precision auto resolved to tf32:conv" in (tmp_path / "o" / "model_new.py").read_text()
    strict = tune(PROBLEMS / "conv2d_standard.py", device="sim", budget=2, batch=2,
                  baselines=False, strategy="random", precision="fp32")
    assert strict.settings.precision == "fp32" and strict.settings.precision_asked is None


def test_replay_takes_auto_as_strict_and_refuses_tf32(flags):
    from cuda_agent.tuner import check_precision

    check_precision("auto", "replay")
    with pytest.raises(SettingsError, match="strict fp32"):
        check_precision("tf32:conv", "replay")
    with pytest.raises(SettingsError, match="unknown precision"):
        check_precision("tf33", "cuda")


# -- the library floor -------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["prior", "random"])
def test_a_program_measures_the_library_route_right_after_its_untuned_default(strategy):
    """A convolution chain (a program of stages): its second measurement is cuDNN for the
    convolution with the other stages at the model's picks, so that no search ends without
    the "library + fused epilogue" route, whichever strategy searches."""
    from cuda_agent.tuner import tune

    r = tune(PROBLEMS / "fused_conv2d_groupnorm_tanh.py", device="sim", budget=6, batch=2,
             baselines=False, strategy=strategy)
    from cuda_agent.ir.partition import ProgramPlan

    assert isinstance(r.plan, ProgramPlan), "a program of stages"
    assert not r.trials[0].library  # the untuned default
    assert r.trials[1].library  # the library floor next
    # then the same floor in cuDNN's other layout, which no model ranks
    assert r.trials[2].library and r.trials[1].config != r.trials[2].config
    layouts = {t.config["memory.layout"] for t in r.trials[1:3]}
    assert layouts == {"as_given", "channels_last"}
    assert sum(t.library for t in r.trials[:4]) == 2 or strategy == "random"


def test_a_single_kernel_measures_its_library_route_first_among_the_template_picks():
    from cuda_agent.tuner import tune

    r = tune(PROBLEMS / "fused_conv2d_relu_scale.py", device="sim", budget=4, batch=4,
             baselines=False, strategy="prior")
    from cuda_agent.ir.partition import ProgramPlan

    assert not isinstance(r.plan, ProgramPlan)
    assert not r.trials[0].library and r.trials[1].library and r.trials[2].library
    assert {t.config["memory.layout"] for t in r.trials[1:3]} == {"as_given", "channels_last"}


def test_the_report_leads_with_the_verdict_against_torch_compile(tmp_path):
    from types import SimpleNamespace

    from cuda_agent.emit import headline, route_bests
    from cuda_agent.runner.baselines import Baselines

    gpu = SimpleNamespace(simulated=False, baselines=Baselines())
    assert headline(gpu, 1.0, 1.5).startswith("1.50x faster than your default torch.compile")
    assert headline(gpu, 2.0, 1.0).startswith("2.00x slower than your default torch.compile")
    gpu.baselines.notes["compile"] = "not measured: no answer within 300 s"
    assert "torch.compile not measured (not measured: no answer" in headline(gpu, 1.0, None)
    assert headline(gpu, None, 1.0) == "no kernel passed verification"
    assert headline(SimpleNamespace(simulated=True), 1.0, 2.0).startswith("simulated")

    def trial(ms, library, ok=True):
        return SimpleNamespace(library=library, measurement=SimpleNamespace(ok=ok, time_ms=ms))

    assert route_bests([trial(3.0, True), trial(2.0, True), trial(1.0, False, ok=False),
                        trial(2.5, False)]) == (2.0, 2.5)
    assert route_bests([trial(1.0, False)]) == (None, 1.0)


def test_the_model_prices_a_tf32_library_call_at_cudnns_measured_tf32_gain():
    """Under `--precision auto` a convolution's library step runs cuDNN on TF32: the model
    prices its product at the measured gain over strict fp32 (else it ranked the library floor
    behind the kernels it beats)."""
    from cuda_agent.costmodel.gemm import LIBRARY_TF32_SPEEDUP, simulate_library

    plan = _conv_plan()
    times = {}
    for contract in ("fp32", "tf32:conv"):
        target = Target(precision=contract)
        space = Space.for_plan(plan, target)
        cfg = space.configs_of("lib")[0]
        times[contract] = simulate_library(plan, space.render(cfg), target)[0]
    assert times["tf32:conv"] < times["fp32"] / 1.5
    assert LIBRARY_TF32_SPEEDUP["conv"] > 1


def test_a_time_limited_program_measures_the_floor_while_the_picks_are_still_modelled(
        monkeypatch):
    """The model's picks of a whole stage can take seconds (the agents list a large stage's
    space); the floor does not wait past half the time left for them: it runs the other
    stages at their defaults rather than not at all."""
    import time

    from cuda_agent.search.prior_rank import PriorRanked, model_pick
    from cuda_agent.tuner import tune

    def slow_stage_pick(self, space):
        if not getattr(space, "subset", False):  # a whole stage, not the library's few
            time.sleep(30.0)
        return model_pick(space, self.constants)

    monkeypatch.setattr(PriorRanked, "stage_pick", slow_stage_pick)
    r = tune(PROBLEMS / "fused_conv2d_groupnorm_tanh.py", device="sim", budget=8, batch=2,
             baselines=False, strategy="prior", time_limit_s=12.0, store=":memory:")
    assert r.stopped == "time_limit"
    assert len(r.trials) >= 2 and not r.trials[0].library and r.trials[1].library
