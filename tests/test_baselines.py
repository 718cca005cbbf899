"""Baselines at PyTorch's defaults and accuracy-matched (issue 33), checked without a GPU: the TF32
flag context (set, restore, nest), the library step's numerics, what each setting is per problem,
a CUDA device asking a (recorded) worker for each setting, the record fields and headline of the
report, the bench and old files, and the offer of --precision tf32."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from cuda_agent.runner import launcher
from cuda_agent.runner.baselines import (CUDNN_BENCHMARK, UNKNOWN_SETTINGS, Baselines, headline_ms,
                                         matched, matched_ms, read_record, settings_record,
                                         split_setting, tf32_reads, with_matched)

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "benchmarks" / "problems"


# -- the flag context ----------------------------------------------------------------------------

def _legacy() -> tuple[bool, str]:
    return torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()


def test_tf32_mode_sets_restores_and_nests():
    before = launcher.tf32_flags()
    outer_legacy = _legacy()
    with launcher.tf32_mode(conv=False, matmul=True):
        assert launcher.tf32_state() == (False, True)
        assert _legacy() == (False, "high") and torch.backends.cuda.matmul.allow_tf32
        with launcher.tf32_mode(conv=True, matmul=False):
            assert launcher.tf32_state() == (True, False)
            assert _legacy() == (True, "highest")
        assert launcher.tf32_state() == (False, True), "the inner context restores the outer's"
        with pytest.raises(RuntimeError, match="boom"):
            with launcher.tf32_mode(conv=True, matmul=True):
                raise RuntimeError("boom")
        assert launcher.tf32_state() == (False, True), "restored on the way out of an error"
    assert launcher.tf32_flags() == before and _legacy() == outer_legacy


def test_tf32_mode_puts_a_whole_snapshot_in_place():
    with launcher.tf32_mode(conv=False, matmul=True):
        strictish = launcher.tf32_flags()
    fresh = launcher.tf32_flags()
    with launcher.tf32_mode(flags=strictish):
        assert launcher.tf32_flags() == strictish
        assert (launcher.conv_tf32(strictish), launcher.matmul_tf32(strictish)) == (False, True)
    assert launcher.tf32_flags() == fresh


STATES = textwrap.dedent('''
    import itertools, json, torch
    from cuda_agent.runner import launcher as L
    s = torch._C._set_fp32_precision_setter if hasattr(torch._C, "_set_fp32_precision_setter") \\
        else None

    def legacy():
        out = []
        for read in (torch.get_float32_matmul_precision, torch._C._get_cudnn_allow_tf32):
            try:
                out.append(read())
            except RuntimeError:
                out.append("unreadable")
        return out

    # a fresh process: importing the worker module reads the defaults and sets nothing
    fresh, fresh_legacy = L.tf32_flags(), legacy()
    import cuda_agent.runner.worker as W
    report = {"import_sets_nothing": L.tf32_flags() == fresh,
              "defaults_read": W.TORCH_DEFAULTS == fresh,
              "fresh": [L.conv_tf32(fresh), L.matmul_tf32(fresh)], "states": {}}
    states = {"fresh": [], "cudnn off": [("legacy_cudnn", False)],
              "matmul high": [("mm", "high")], "matmul medium": [("mm", "medium")]}
    if s is not None:  # the fp32_precision API (torch 2.9+); the mixed states it allows too
        states.update({"generic tf32": [("slot", "generic", "all", "tf32")],
                       "cuda ieee": [("slot", "cuda", "all", "ieee")],
                       "conv ieee only": [("slot", "cuda", "conv", "ieee")]})
    for name, steps in states.items():
        for step in steps:
            if step[0] == "legacy_cudnn":
                torch.backends.cudnn.allow_tf32 = step[1]
            elif step[0] == "mm":
                torch.set_float32_matmul_precision(step[1])
            else:
                s(*step[1:])
        before, before_legacy = L.tf32_flags(), legacy()
        ok = True
        for conv, mm in itertools.product([False, True], repeat=2):
            with L.tf32_mode(conv, mm):
                ok &= L.tf32_state() == (conv, mm) and "unreadable" not in legacy()
            after = L.tf32_flags()
            # the slots always; the legacy values where torch itself could read them
            ok &= after["slots"] == before["slots"]
            ok &= all(a == b for a, b in zip(legacy(), before_legacy) if b != "unreadable")
        report["states"][name] = ok
        with L.tf32_mode(flags=fresh):
            pass
        L.restore_tf32_flags(fresh)
        report["states"][name] &= L.tf32_flags() == fresh and legacy() == fresh_legacy
    print(json.dumps(report))
''')


def test_tf32_mode_round_trips_from_every_state_in_a_fresh_process():
    """From torch's defaults, states the legacy API sets, and mixed states of the new
    fp32_precision API: inside, exactly what was asked and readable by the legacy API (torch
    and inductor read it); after, the state before (the legacy values where they were
    readable); and importing the worker module reads the defaults without setting anything."""
    out = subprocess.run([sys.executable, "-c", STATES], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["import_sets_nothing"] and report["defaults_read"]
    # torch's own defaults, read at run time: cuDNN may use TF32, matmuls strict (torch 2.x)
    assert report["fresh"] == [torch.backends.cudnn.allow_tf32,
                               torch.get_float32_matmul_precision() != "highest"]
    assert all(report["states"].values()), report["states"]


# -- the library step ----------------------------------------------------------------------------

def test_a_library_convolution_runs_strict_unless_the_user_opted_into_tf32(monkeypatch):
    """The library template's call says tf32 only under --precision tf32, and the launcher runs
    the call under that, whatever the process's own flags (torch's default lets cuDNN use
    TF32: a strict kernel's convolution must not), restoring them after."""
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.space.slots import Target
    from cuda_agent.space.templates.library import LibraryTemplate

    plan = make_plan(load_problem(PROBLEMS / "fused_conv2d_relu_scale.py").graph())
    lib = LibraryTemplate()
    assert lib.applies(plan)
    calls = {}
    for precision in ("fp32", "tf32", "bf16"):
        target = Target(precision=precision)
        rendered = lib.render(plan, lib.default(plan, target), target)
        calls[precision] = next(l.library for l in rendered.launches if l.library)
    assert calls["tf32"].get("tf32") is True
    assert "tf32" not in calls["fp32"] and "tf32" not in calls["bf16"]

    seen = []

    def conv(*args, **kwargs):
        seen.append(launcher.tf32_state())
        return torch.zeros(2, 3)

    monkeypatch.setattr(torch.nn.functional, f"conv{calls['fp32']['dims']}d", conv)
    inputs = [torch.zeros(4)] * 8
    with launcher.tf32_mode(conv=True, matmul=False):  # a user's process at torch's defaults
        launcher.run_library(calls["fp32"], inputs)
        launcher.run_library(calls["tf32"], inputs)
        assert launcher.tf32_state() == (True, False), "the process's flags are restored"
    with launcher.tf32_mode(conv=False, matmul=False):  # the worker under the strict contract
        launcher.run_library(calls["fp32"], inputs)
    assert seen == [(False, False), (True, True), (False, False)]


# -- the two settings ----------------------------------------------------------------------------

def _ops(name: str) -> set[str]:
    from cuda_agent.problem import load_problem

    return {n.op for n in load_problem(PROBLEMS / f"{name}.py").graph().live()}


def test_which_flags_a_problem_reads_and_whether_the_settings_coincide():
    torch_defaults = {"conv": True, "matmul": False}
    conv, gemm, softmax = (tf32_reads(_ops(n)) for n in
                           ("conv2d_standard", "gemm_square", "softmax_short_rows"))
    assert (conv, gemm, softmax) == ({"conv"}, {"matmul"}, set())
    # strict fp32 against the defaults: a convolution differs (cuDNN's TF32), the rest do not
    assert settings_record(torch_defaults, "fp32", conv)["same"] is False
    assert settings_record(torch_defaults, "fp32", gemm)["same"] is True
    assert settings_record(torch_defaults, "fp32", softmax)["same"] is True
    # --precision tf32: the convolution coincides, the product (strict by default) does not
    assert settings_record(torch_defaults, "tf32", conv)["same"] is True
    assert settings_record(torch_defaults, "tf32", gemm)["same"] is False
    # autocast is never a user's default
    rec = settings_record(torch_defaults, "bf16", softmax)
    assert rec["same"] is False and rec["matched"]["autocast"] == "bfloat16"
    assert rec["defaults"]["conv_tf32"] is True and rec["matched"]["conv_tf32"] is False


def test_names_of_the_settings():
    assert with_matched(("eager", CUDNN_BENCHMARK)) == (
        "eager", "eager@matched", CUDNN_BENCHMARK, f"{CUDNN_BENCHMARK}@matched")
    assert split_setting("compile:max-autotune@matched") == ("compile:max-autotune", "matched")
    assert split_setting("compile") == ("compile", "defaults")


# -- a CUDA device and its worker, recorded -------------------------------------------------------

class RecordingWorker:
    """Answers a CUDA device's messages as a worker would, remembering each baseline asked."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.mode: bool | None = None
        self.asked: list[tuple[str, str, bool | None]] = []

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        if msg["op"] == "facts":
            return {"ok": True, "gpu": "fake"}
        if msg["op"] == "setup":
            self.mode = bool(msg.get("cudnn_benchmark"))
            return {"ok": True, "cudnn_benchmark": self.mode, "baseline_settings": self.settings}
        assert msg["op"] == "baseline"
        self.asked.append((msg["which"], msg["settings"], self.mode))
        tf32 = msg["settings"] == "defaults"
        return {"ok": True, "time_ms": 1.0 if tf32 else 2.0, "setup_s": 0.1,
                "flags": {"conv_tf32": tf32, "matmul_tf32": False, "autocast": None},
                "rel_diff": 3e-4 if tf32 else 0.0}


def _device(monkeypatch, problem: str, precision: str = "fp32"):
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.runner.devices import CudaDevice

    prob = load_problem(PROBLEMS / f"{problem}.py")
    plan = make_plan(prob.graph())
    worker = RecordingWorker(settings_record({"conv": True, "matmul": False}, precision,
                                             tf32_reads({n.op for n in plan.graph.live()})))
    monkeypatch.setattr(CudaDevice, "_start", lambda self: None)
    monkeypatch.setattr(CudaDevice, "_kill", lambda self: None)
    monkeypatch.setattr(CudaDevice, "_call", lambda self, msg, t: worker.call(msg))
    dev = CudaDevice()
    dev.setup(prob, plan)
    return dev, plan, worker


def test_a_convolution_is_timed_under_each_setting(monkeypatch):
    from cuda_agent.runner.devices import cudnn_baselines

    dev, plan, worker = _device(monkeypatch, "conv2d_standard")
    base = dev.baselines(with_matched(("eager", "compile") + cudnn_baselines(plan)))
    # each at the defaults then matched, cuDNN's benchmark mode in a worker of its own
    assert worker.asked == [("eager", "defaults", False), ("eager", "matched", False),
                            ("compile", "defaults", False), ("compile", "matched", False),
                            (CUDNN_BENCHMARK, "defaults", True),
                            (CUDNN_BENCHMARK, "matched", True)]
    assert (base.eager_ms, base.compile_ms, base.extra_ms[CUDNN_BENCHMARK]) == (1.0, 1.0, 1.0)
    assert (base.eager_matched_ms, base.compile_matched_ms) == (2.0, 2.0)
    assert base.extra_ms[matched(CUDNN_BENCHMARK)] == 2.0
    seen = base.settings["observed"]
    assert seen["compile"]["conv_tf32"] is True and seen["compile@matched"]["conv_tf32"] is False
    assert seen["eager"]["rel_diff"] == 3e-4
    f = base.fields()
    assert (f["compile_ms"], f["compile_matched_ms"]) == (1.0, 2.0)
    assert f["eager_cudnn_benchmark_matched_ms"] == 2.0
    assert f["baseline_settings"]["same"] is False


def test_where_the_settings_coincide_one_measurement_serves_both(monkeypatch):
    dev, _, worker = _device(monkeypatch, "softmax_short_rows")
    base = dev.baselines(with_matched(("eager", "compile")))
    assert worker.asked == [("eager", "defaults", False), ("compile", "defaults", False)]
    assert base.compile_matched_ms == base.compile_ms == 1.0
    assert "same settings" in base.notes["compile@matched"]


# -- records: fields, old files ------------------------------------------------------------------

def test_an_old_record_reads_as_matched_only():
    old = {"eager_ms": 2.0, "compile_ms": 1.5, "notes": {"eager": "setup 1 s"}}
    b = read_record(old)
    assert b.eager_ms is None and b.compile_ms is None and b.settings is None
    assert (b.eager_matched_ms, b.compile_matched_ms) == (2.0, 1.5)
    assert headline_ms(old) is None and matched_ms(old) == 1.5
    # written again, it says so: a later reader does not take it for an old record
    f = b.fields()
    assert f["compile_ms"] is None and f["compile_matched_ms"] == 1.5
    assert f["baseline_settings"] == UNKNOWN_SETTINGS
    assert headline_ms(f) is None and matched_ms(f) == 1.5
    new = Baselines(eager_ms=1.0, compile_ms=0.5, extra_ms={"compile@matched": 1.5},
                    settings={"headline": "defaults", "same": False}).fields()
    assert read_record(new).fields() == new
    assert headline_ms(new) == 0.5 and matched_ms(new) == 1.5


def test_replay_of_a_sweep_recorded_before_the_defaults(tmp_path):
    from cuda_agent.runner.replay import ReplayDevice

    dev = ReplayDevice(tmp_path)
    dev.data = {"baselines": {"eager_ms": 2.0, "compile_ms": 1.5}}
    b = dev.baselines()
    assert b.compile_ms is None and b.compile_matched_ms == 1.5


# -- the report and the offer ----------------------------------------------------------------------

SETTINGS = settings_record({"conv": True, "matmul": False}, "fp32", {"conv"})


def _fields(compile_ms, compile_matched_ms, eager_ms=5.0, eager_matched_ms=6.0,
            settings=SETTINGS):
    return Baselines(eager_ms=eager_ms, compile_ms=compile_ms,
                     extra_ms={"compile@matched": compile_matched_ms,
                               "eager@matched": eager_matched_ms},
                     settings={**settings, "observed": {"compile": {"rel_diff": 2.5e-4}}}
                     ).fields()


def test_the_offer_of_tf32_where_torch_wins_through_it():
    from cuda_agent.report.tf32 import tf32_advice

    a = tf32_advice(_fields(0.4, 1.2), 1.0, "fp32")
    assert a and a["baseline"] == "compile" and a["suggest"] == "--precision tf32"
    text = a["text"]
    assert "0.4000 ms against this kernel's 1.0000 ms" in text and "1.2000 ms without TF32" in text
    assert "which this kernel beats" in text and "2.5e-04" in text
    # the tolerance, from the verifier's settings
    assert "4x the error of torch's own TF32 answer" in text and "max(0.0001, 4 x torch's)" in text
    # no offer: the kernel is faster; TF32 is not what made torch faster; the user opted in
    # already; the settings coincide; nothing the problem reads has TF32 at the defaults
    assert tf32_advice(_fields(1.2, 1.5), 1.0, "fp32") is None
    assert tf32_advice(_fields(0.4, 0.4), 1.0, "fp32") is None
    assert tf32_advice(_fields(0.4, 1.2), 1.0, "tf32") is None
    assert tf32_advice(_fields(0.4, 1.2, settings={**SETTINGS, "same": True}), 1.0,
                       "fp32") is None
    gemm = settings_record({"conv": True, "matmul": False}, "fp16", {"matmul"})
    assert tf32_advice(_fields(0.4, 1.2, settings=gemm), 1.0, "fp32") is None
    # an old record: no defaults figure, no offer
    assert tf32_advice(read_record({"compile_ms": 0.4}).fields(), 1.0, "fp32") is None


def test_report_headline_is_at_the_defaults_with_the_matched_beside(tmp_path):
    """report.json: eager_ms and compile_ms at PyTorch's defaults (the headline speedups), the
    matched figures and their speedups beside them, what each setting was; the CLI's table
    shows both."""
    from cuda_agent.cli import _row
    from cuda_agent.emit import report_dict
    from cuda_agent.tuner import tune

    res = tune(PROBLEMS / "conv2d_standard.py", device="sim", budget=2,
               store=str(tmp_path / "s.db"), strategy="random")
    best = res.best.measurement.time_ms
    res.baselines = read_record(_fields(best / 2, best * 2))
    d = report_dict(res)
    assert d["compile_ms"] == best / 2 and d["compile_matched_ms"] == best * 2
    assert d["speedup_vs_compile"] == pytest.approx(0.5)
    assert d["speedup_vs_compile_matched"] == pytest.approx(2.0)
    assert d["baseline_settings"]["same"] is False
    assert d["tf32_advice"] is None  # simulated: nothing to compare with torch
    row = _row(res)
    assert row["vs compile"] == "0.50x" and row["vs compile, matched"] == "2.00x"
    # --precision auto (the default): the convolution as a fresh process runs it, on TF32
    assert row["matched settings"] == ("TF32 on in convolutions, off in matrix products "
                                       "(--precision auto)")


def test_a_bench_report_over_old_and_new_runs_keeps_each_figure_in_its_setting():
    """Merged: a run from before the defaults were timed and one after. The old run's figures
    land in the matched columns only, and the headline names the problem without a defaults
    figure apart from those not faster."""
    from cuda_agent.bench import BenchResult, BenchSettings, Run, best_of_run, merge, summarize
    from cuda_agent.report.bench_report import _best_line, tables

    def run(problem, facts):
        base = {"family": "conv", "best_ms": 1.0, "recorded": 5, "bytes": 1e9,
                "copy_bw": 4e12, "gpu": "x", "simulated": False}
        return BenchResult(BenchSettings.of(budget=10, seeds=1, strategies=("random",)),
                           [Run(problem, "random", 0, [2.0, 1.0], 0.1)],
                           {problem: {**base, **facts}}, live="cuda")

    new = run("a", _fields(0.8, 1.5, eager_ms=0.9, eager_matched_ms=2.0))
    old = run("b", {"eager_ms": 2.0, "compile_ms": 1.5})
    m = merge([new, old])
    found = {t: (h, rows) for t, h, rows in tables(m, summarize(m))}
    header, rows = next(v for k, v in found.items() if k.startswith("Times per problem"))
    cells = {r[0]: dict(zip(header, r)) for r in rows}
    assert (cells["a"]["torch.compile"], cells["a"]["torch.compile, matched"]) == \
        ("0.8000", "1.5000")
    assert (cells["b"]["torch.compile"], cells["b"]["torch.compile, matched"]) == \
        ("-", "1.5000")
    line = _best_line(best_of_run(m))
    assert "(PyTorch's defaults) on 0 of 2 problems" in line and "not on a;" in line
    assert "no such figure for b" in line and "(matched) on 2 of 2 problems" in line
