"""The realistic suite's runner and harness on the CPU: a tune's outcome read as a status, the
harness's comparison judged as torch.allclose judges it, and a whole suite call with stand-in
tune and harness processes (statuses, the results file, resuming, a deadline's cut)."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from benchmarks import realistic_harness as harness
from benchmarks import realistic_run as rr
from benchmarks import realistic_suite

ROOT = Path(__file__).resolve().parents[1]


def test_a_tune_outcome_becomes_a_status():
    assert rr.classify_tune(0, "wrote runs/x/model_new.py", {}, True) == ("ok", "")
    status, msg = rr.classify_tune(2, "loading\nerror: unsupported: aten.foo (op 3)\n", None,
                                   False)
    assert (status, msg) == ("unsupported", "unsupported: aten.foo (op 3)")
    out = "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6 GiB\n"
    assert rr.classify_tune(1, out, None, False)[0] == "oom"
    report = {"candidates": [{"ok": False, "error_msg": "CUDA out of memory in verify"}]}
    assert rr.classify_tune(1, "error: no candidate passed verification", report,
                            False)[0] == "oom"
    assert rr.classify_tune(1, "error: no candidate passed verification", {"candidates": [
        {"ok": False, "error_msg": "mismatch"}]}, False) == (
        "error", "no candidate passed verification")
    assert rr.classify_tune(0, "done", None, False)[0] == "error"  # no kernel written
    assert rr.classify_tune(1, "error: the time limit (45 s) passed before any candidate was "
                            "verified", None, False)[0] == "timeout"


def test_report_fields_keep_the_memory_section_and_its_peak():
    r = rr.report_fields({"best_ms": 1.5, "evals": 9, "evals_to_95": 3, "best": {
        "verified": True}, "memory": {"device": {"peak_bytes": 7 << 30, "budget": 1},
                                      "host_peak_bytes": 2}, "gpu": "Fake GPU"})
    assert r["best_ms"] == 1.5 and r["tune_verified"] and r["evals_to_95"] == 3
    assert r["gpu"] == "Fake GPU"  # an error row, which the harness never ran, names its GPU
    assert r["tune_reported_peak_bytes"] == 7 << 30
    assert rr.report_fields(None) == {}


@pytest.mark.parametrize("chunk", [7, 1 << 26])
def test_compare_judges_as_allclose_does(monkeypatch, chunk):
    monkeypatch.setattr(harness, "CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(50, 9, generator=g)
    for out in (ref.clone(), ref + 0.009, ref * 1.02 + 0.005, ref + 0.5 * (ref > 2)):
        c = harness.compare(out, ref)
        assert c["ok"] == torch.allclose(out, ref, atol=1e-2, rtol=1e-2), out
        assert c["mismatches"] == int((~torch.isclose(out, ref, 1e-2, 1e-2)).sum())
    scaled = harness.compare(ref * (1 + 1e-3), ref)
    assert scaled["rel_norm_err"] == pytest.approx(1e-3, rel=1e-3)
    assert scaled["max_rel_err"] == pytest.approx(1e-3, rel=1e-3)
    nan = ref.clone()
    nan[3, 3] = float("nan")
    assert not harness.compare(nan, ref)["ok"]  # a NaN is never close (equal_nan off)
    inf = ref.clone()
    inf[0, 0] = float("inf")
    assert harness.compare(inf, inf.clone())["ok"]  # equal infinities are
    assert harness.compare(ref.reshape(9, 50), ref)["why"] == "shape (9, 50), expected (50, 9)"
    assert not harness.compare(ref.reshape(-1), ref)["ok"]  # same count, other shape
    assert harness.compare(torch.tensor(2), torch.tensor(2))["ok"]  # int64 (argmax)


def test_buffers_are_compared_after_the_checks():
    ref, new = torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    x = torch.randn(8, 4, 5, 5)
    ref(x)
    new(x)  # both in training mode: the same running statistics
    assert harness.compare_buffers(ref, new) is None
    frozen = torch.nn.BatchNorm2d(4)  # a module that never updated them
    msg = harness.compare_buffers(ref, frozen)
    assert msg.startswith("buffer running_mean differs") or msg.startswith(
        "buffer running_var differs"), msg


# ---- a suite call with stand-in processes ---------------------------------------------------

FAKE_TUNE = textwrap.dedent("""\
    import json, sys, time
    from pathlib import Path
    name, out = sys.argv[1], Path(sys.argv[2])
    if name == "a":
        (out / "model_new.py").write_text("class ModelNew: pass")
        (out / "report.json").write_text(json.dumps({
            "best_ms": 1.0, "evals": 5, "evals_to_95": 2, "strategy": "marl",
            "family": "softmax", "best": {"verified": True}, "memory": {"peak_bytes": 123}}))
    elif name == "b":
        print("error: unsupported: aten.foo"); sys.exit(2)
    elif name == "c":
        time.sleep(60)
    elif name == "d":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        print("error: could not set up the verification cases"); sys.exit(2)
""")
FAKE_HARNESS = textwrap.dedent("""\
    import json, sys
    json.dump({"problem": "a", "status": "ok", "message": "", "new_ms": 1.0,
               "compile_ms": 2.0, "eager_ms": 3.0, "speedup_vs_compile": 2.0,
               "gpu": "Fake GPU", "torch": "0.0", "copy_tbps": 4.0, "input_bytes": 999},
              open(sys.argv[1], "w"))
""")


def write_manifest(folder: Path, names: str | list[str]) -> None:
    """A suite folder's suite.json listing `names` (the stand-in tune needs no problem file)."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = [{"problem": n, "family": "softmax", "input_bytes": 1 << 30, "bytes": 2 << 30,
                 "flops": 10**9, "stages": 1, "est_s": 1.0} for n in names]
    (folder / "suite.json").write_text(json.dumps({"problems": manifest}))


@pytest.fixture
def fake_suite(tmp_path, monkeypatch):
    write_manifest(tmp_path / "realistic", "abcd")
    monkeypatch.setattr(realistic_suite, "SUITE", tmp_path / "realistic")
    monkeypatch.setattr(realistic_suite, "estimate_s", lambda e, *a: 0.0)
    monkeypatch.setattr(rr, "tune_has_time_limit", lambda: True)
    monkeypatch.setattr(rr, "tune_command", lambda problem, out, s, cli: [
        sys.executable, "-c", FAKE_TUNE, problem.stem, str(out)])
    monkeypatch.setattr(rr, "harness_command", lambda problem, model_new, out, seeds, *a: [
        sys.executable, "-c", FAKE_HARNESS, str(out)])

    def settings(**kw) -> rr.RunSettings:
        base = dict(work=tmp_path / "work", final=tmp_path / "out", deadline=time.time() + 60,
                    time_limit_s=0.5, tune_grace_s=1.0, policy=None)
        return rr.RunSettings(**{**base, **kw})
    return settings


def test_a_suite_call_records_every_status_and_resumes(fake_suite, tmp_path, monkeypatch):
    logs: list[str] = []
    rows = rr.run_suite(fake_suite(), log=logs.append)
    assert {n: r["status"] for n, r in rows.items()} == {
        "a": "ok", "b": "unsupported", "c": "timeout", "d": "oom"}
    doc = json.loads((tmp_path / "out" / "realistic.json").read_text())
    assert {"gpu", "date", "commit", "torch", "copy_tbps", "rows"} <= set(doc)
    assert doc["gpu"] == "Fake GPU" and doc["copy_tbps"] == 4.0
    assert [r["problem"] for r in doc["rows"]] == list("abcd")  # the manifest's order
    a = doc["rows"][0]
    assert a["verified"] and (a["best_ms"], a["eager_ms"], a["compile_ms"]) == (1.0, 3.0, 2.0)
    assert a["input_bytes"] == 1 << 30 and a["harness_input_bytes"] == 999
    assert a["tune_reported_peak_bytes"] == 123 and a["evals_to_95"] == 2
    assert not doc["rows"][2]["verified"] and "tune ran past" in doc["rows"][2]["message"]
    assert (tmp_path / "out" / "realistic-logs.tgz").exists()
    # a later call given these results runs nothing
    monkeypatch.setattr(rr, "tune_command", lambda *a: pytest.fail("ran a finished problem"))
    again = rr.run_suite(fake_suite(previous=[tmp_path / "out" / "realistic.json"],
                                    work=tmp_path / "work2"), log=logs.append)
    assert again == rows


SLOW_MAX_AUTOTUNE_HARNESS = textwrap.dedent("""\
    import json, sys, time
    row = {"problem": "a", "status": "ok", "message": "", "new_ms": 1.0, "compile_ms": 2.0,
           "eager_ms": 3.0, "eager_iqr_ms": 0.1, "compile_max": "running"}
    json.dump(row, open(sys.argv[1], "w"))
    time.sleep(60)
""")


def test_a_harness_killed_in_max_autotune_keeps_its_verdict(fake_suite, tmp_path, monkeypatch):
    """max-autotune's first call can outlast the harness's limit: the row the harness wrote
    before it (verdict, eager and default torch.compile) stands, max-autotune marked timed out."""
    monkeypatch.setattr(rr, "INTERRUPT_GRACE_S", 1.0)
    monkeypatch.setattr(rr, "harness_command", lambda problem, model_new, out, seeds, *a: [
        sys.executable, "-c", SLOW_MAX_AUTOTUNE_HARNESS, str(out)])
    rows = rr.run_suite(fake_suite(only=["a"], harness_limit_s=1.5, max_autotune=True),
                        log=lambda line: None)
    a = rows["a"]
    assert a["status"] == "ok" and a["verified"] and a["compile_ms"] == 2.0
    assert a["compile_max"] == "timeout" and "ran past the harness's 2 s" in a[
        "compile_max_error"]
    doc = json.loads((tmp_path / "out" / "realistic.json").read_text())
    assert doc["settings"]["max_autotune"]


def test_tune_flags_as_the_runner_passes_them(tmp_path):
    s = rr.RunSettings(work=tmp_path, final=tmp_path, deadline=0.0, policy="p.pt",
                       tune_args=["--precision", "tf32"])
    cmd = rr.tune_command(tmp_path / "x.py", tmp_path / "o", s, True)
    assert {"--budget", "--no-baselines", "--policy", "--precision"} <= set(cmd)
    user = rr.as_user(s, tune_grace_s=300.0)
    cmd = rr.tune_command(tmp_path / "x.py", tmp_path / "o", user, True)
    assert [a for a in cmd if a.startswith("--")] == ["--device", "--time-limit", "--out",
                                                      "--store"]
    assert user.tune_grace_s == 300.0 and rr.precision_of(user.tune_args) == "auto"
    assert rr.harness_command(tmp_path / "x.py", tmp_path / "m.py", tmp_path / "h.json", "1",
                              True)[-1] == "--max-autotune"
    # the guess of a call's seconds counts the tune's baselines and max-autotune
    e = {"family": "conv", "bytes": 1 << 30, "flops": 10**12, "stages": 1}
    plain = realistic_suite.estimate_s(e, 120)
    assert plain < realistic_suite.estimate_s(e, 120, True) < realistic_suite.estimate_s(
        e, 120, True, True)


def test_a_tf32_call_runs_the_problems_its_fp32_rows_do_not_cover(fake_suite, tmp_path,
                                                                    monkeypatch):
    """A call with `--precision tf32` counts as done only the rows tuned at TF32: the suite's
    fp32 rows (every problem) leave all its problems to run, and its own rows say so."""
    rr.run_suite(fake_suite(only=["a", "b"]))
    fp32 = tmp_path / "out" / "realistic.json"
    ran: list[str] = []
    real = rr.tune_command
    monkeypatch.setattr(rr, "tune_command", lambda problem, out, s, cli: ran.append(
        problem.stem) or real(problem, out, s, cli))
    rows = rr.run_suite(fake_suite(previous=[fp32], tune_args=["--precision", "tf32"],
                                   work=tmp_path / "w2", final=tmp_path / "o2", only=["a", "b"]))
    assert sorted(ran) == ["a", "b"]
    assert all(rr.row_precision(r) == "tf32" for r in rows.values())
    assert rr.precision_of(["--precision=bf16"]) == "bf16" and rr.precision_of(None) == "auto"
    # rows from before "auto" (no precision_asked, no flag) were tuned at the old default
    assert rr.row_precision({"tune_args": []}) == "fp32"
    assert rr.row_precision({"tune_args": [], "precision_asked": "auto"}) == "auto"


def test_problems_are_named_or_taken_by_family():
    manifest = [{"problem": "x", "family": "conv"},
                {"problem": "y", "family": "conv+reduction+reduction+elementwise"},
                {"problem": "z", "family": "gemm"}]
    assert rr.select(manifest, ["family:conv"]) == ["x", "y"]
    assert rr.select(manifest, ["z", "family:conv", "x"]) == ["z", "x", "y"]
    with pytest.raises(SystemExit, match="not in the realistic suite: family:pool, w"):
        rr.select(manifest, ["family:pool", "w"])


def test_a_call_s_results_file_holds_only_the_rows_it_ran(fake_suite, tmp_path):
    """Rows of earlier files (another GPU, another commit) decide what is left to run but are
    not written again under this machine's header (2026-12-06: a call on an H100 wrote the
    H200's rows of 2026-12-04 into its file, headed "NVIDIA H200")."""
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"gpu": "Other GPU", "rows": [
        {"problem": p, "status": "ok", "gpu": "Other GPU", "precision_asked": "auto"}
        for p in "bcd"]}))
    rows = rr.run_suite(fake_suite(previous=[earlier]), log=lambda line: None)
    assert set(rows) == set("abcd")
    doc = json.loads((tmp_path / "out" / "realistic.json").read_text())
    assert doc["gpu"] == "Fake GPU" and [r["problem"] for r in doc["rows"]] == ["a"]


def test_a_problem_the_deadline_cuts_is_left_for_the_next_call(fake_suite, tmp_path):
    logs: list[str] = []
    rows = rr.run_suite(fake_suite(only=["c"], time_limit_s=100.0,
                                   deadline=time.time() + 1.5), log=logs.append)
    assert rows == {}  # not recorded as a time-out
    assert any("cut by the deadline" in line for line in logs)


def test_bad_arguments_end_with_one_line(fake_suite, tmp_path):
    with pytest.raises(SystemExit, match="no such results file"):
        rr.run_suite(fake_suite(previous=[tmp_path / "missing.json"]), log=lambda s: None)
    with pytest.raises(SystemExit, match="not in the realistic suite: zz"):
        rr.run_suite(fake_suite(only=["zz"]), log=lambda s: None)


# ---- the harness's verdicts, on the CPU (untimed) -----------------------------------------

PROBLEM = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))


    def get_inputs():
        return [torch.randn(4, 3, 6, 6)]


    def get_init_inputs():
        return [3]
''')
MODEL_NEW = {  # each defines ModelNew after the problem's source, as model_new.py does
    "same": "class ModelNew(Model):\n    pass\n",
    "off": "class ModelNew(Model):\n    def forward(self, x):\n"
           "        return super().forward(x) + 0.1\n",
    # batch statistics, but the running statistics never updated (a module captured in eval
    # mode would instead use them and be off everywhere)
    "frozen": "import torch.nn.functional as F\n\nclass ModelNew(Model):\n"
              "    def forward(self, x):\n        y = self.conv(x)\n"
              "        return torch.relu(F.batch_norm(y, None, None, self.bn.weight, "
              "self.bn.bias, True))\n",
    "flat": "class ModelNew(Model):\n    def forward(self, x):\n"
            "        return super().forward(x).reshape(-1)\n",
    "raises": "class ModelNew(Model):\n    def forward(self, x):\n"
              "        raise RuntimeError('CUDA_ERROR_ILLEGAL_ADDRESS')\n",
}


@pytest.mark.parametrize("case,status,words", [
    ("same", "ok", ""), ("off", "wrong", "elements outside atol=rtol=0.01"),
    ("frozen", "wrong", "buffer bn.running_mean differs"),
    ("flat", "wrong", "shape (1152,), expected (4, 8, 6, 6)"),
    ("raises", "error", "ModelNew.forward raised RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS")])
def test_the_harness_verdicts(tmp_path, case, status, words):
    problem = tmp_path / "conv_bn_relu.py"
    problem.write_text(PROBLEM)
    new = tmp_path / "model_new.py"
    new.write_text(PROBLEM + "\n\n" + MODEL_NEW[case])
    row = harness.run(problem, new, [1, 2], device="cpu")
    assert row["status"] == status and words in row["message"], row
    assert row["training"]  # held as constructed: training mode
    if case == "same":
        assert row["state_equal_at_start"] and len(row["checks"]) == 2
        f64 = row["float64"]
        assert f64["new"]["rel_norm_err"] < 1e-5 and f64["torch"]["rel_norm_err"] < 1e-5


def test_a_process_past_its_limit_is_interrupted_before_it_is_killed(tmp_path, monkeypatch):
    """A tune past its limit gets Ctrl-C's signal first and writes what it kept; one that ignores
    it is killed after the grace."""
    monkeypatch.setattr(rr, "INTERRUPT_GRACE_S", 5.0)
    keeper = ("import signal, sys, time\n"
              "def done(*a):\n"
              "    print('kept the best so far', flush=True); sys.exit(130)\n"
              "signal.signal(signal.SIGINT, done)\n"
              "print('searching', flush=True); time.sleep(60)\n")
    log = tmp_path / "tune.log"
    rc, wall = rr.run_limited([sys.executable, "-c", keeper], log, 1.5, time.time() + 60, {})
    assert rc == "timeout" and wall < 10
    assert log.read_text().split() == ["searching", "kept", "the", "best", "so", "far"]
    stubborn = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "print('searching', flush=True); time.sleep(60)\n")
    rc, wall = rr.run_limited([sys.executable, "-c", stubborn], log, 1.5, time.time() + 60, {})
    assert rc == "timeout" and 6 <= wall < 15
