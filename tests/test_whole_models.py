"""The whole-model suite (issue 50, items 3 and 4) on the CPU: each model of benchmarks/models/
at a tiny size split, tuned on the simulated device without refusal and its module checked
against the model; the emitted forward free of host synchronisation and the kernels launched on
torch's current stream (what a CUDA graph needs); the harness's logic, the suite's driver
(resuming, the deadline) and gpu_suite's `models` part. The GPU run is
`python -m benchmarks.gpu_suite --parts models`; tests/gpu/test_whole_model_graphs.py captures a
multi-kernel module in a CUDA graph."""

from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import gpu_suite
from benchmarks import models_harness as mh
from benchmarks import whole_models as wm
from cuda_agent.problem import load_problem
from cuda_agent.regions.split import KERNEL, TORCH, split_model
from cuda_agent.regions.trace import instantiate
from cuda_agent.regions.tune import ModelResult, emit_model

MODELS = Path(__file__).resolve().parents[1] / "benchmarks" / "models"

# each new model at a tiny size: (get_init_inputs, get_inputs) appended to its file (the later
# definitions win), so that a tune on the simulator takes seconds
TINY = {
    "resnet_basic": ("[8]", "[torch.randn(2, 8, 6, 6)]"),
    "resnet_bottleneck": ("[16, 4]", "[torch.randn(2, 16, 6, 6)]"),
    "transformer_encoder": ("[32, 2, 64]", "[torch.randn(2, 8, 32)]"),
    "densenet_block": ("[8, 4, 2]", "[torch.randn(2, 8, 6, 6)]"),
    "mobilenetv2_block": ("[8, 2]", "[torch.randn(2, 8, 6, 6)]"),
    "unet_block": ("[4]", "[torch.randn(2, 4, 8, 8)]"),
    "gru_head": ("[8, 16, 4]", "[torch.randn(2, 5, 8)]"),
    "lm_block": ("[50, 32, 2, 16]", "[torch.randint(0, 50, (2, 8))]"),
    "convnext_block": ("[8]", "[torch.randn(2, 8, 7, 7)]"),
}
# what no template covers, left to torch in each (the rest is generated)
TORCH_OPS = {"densenet_block": {"cat"}, "unet_block": {"cat"}, "gru_head": {"gru"},
             "lm_block": {"embedding", "unbind"}, "transformer_encoder": {"unbind"}}


def tiny(name: str, folder: Path) -> Path:
    init, inputs = TINY[name]
    path = folder / f"{name}.py"
    path.write_text((MODELS / f"{name}.py").read_text() + textwrap.dedent(f"""

        def get_inputs():
            return {inputs}


        def get_init_inputs():
            return {init}
        """))
    return path


def load(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"whole_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class HostSyncs(TorchDispatchMode):
    """Records the ops that make the host wait for the device (a CUDA graph cannot hold one)."""

    SYNCS = {"_local_scalar_dense", "item", "nonzero", "equal", "is_nonzero", "_to_copy"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        to_host = name == "_to_copy" and (kwargs or {}).get("device") == torch.device("cpu")
        if name in self.SYNCS - {"_to_copy"} or to_host:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def check(mod) -> None:
    """ModelNew against Model on CPU tensors (each kernel region runs its torch reference): the
    output, the state_dict both ways, and no host synchronisation in ModelNew's forward."""
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs())
    new = mod.ModelNew(*mod.get_init_inputs())
    assert mh.state_dict_both_ways(ref, new) is None
    inputs = mod.get_inputs()
    syncs = HostSyncs()
    with torch.no_grad():
        want = ref(*inputs)
        with syncs:
            got = new(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert syncs.seen == [], syncs.seen


def test_the_suite_has_at_least_twelve_models():
    assert len(wm.all_models()) >= 12
    assert set(TINY) <= set(wm.all_models())


@pytest.mark.parametrize("name", sorted(TINY))
def test_each_new_model_splits_and_its_module_matches(name, tmp_path):
    """The split at the model's real size (meta tensors): what no template covers goes to
    torch, the rest to kernel regions; the emitted module (untuned) checked at a tiny size."""
    p = load_problem(MODELS / f"{name}.py", check=False)
    model, inputs = instantiate(p.model_cls, p.init_inputs(), p.get_inputs)
    split = split_model(model, inputs)
    kernel_ops = {op for r in split.regions if r.kind == KERNEL for op in r.ops}
    torch_ops = {op for r in split.regions if r.kind == TORCH for op in r.ops}
    assert TORCH_OPS.get(name, set()) <= torch_ops
    assert kernel_ops and not torch_ops & {"conv2d", "linear", "layer_norm", "batch_norm"}
    if name == "lm_block":  # positions: arange, a factory, said as such (not "no template")
        assert "arange: makes a new tensor: torch fills it" in split.lines()[0]
    path = tiny(name, tmp_path)
    p = load_problem(path, check=False)
    emit_model(ModelResult(path, split_model(*instantiate(p.model_cls, p.init_inputs(),
                                                          p.get_inputs))), tmp_path / "out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(load(tmp_path / "out" / "model_new.py", f"emit_{name}"))


@pytest.mark.parametrize("name", ["gru_head"])
def test_new_models_tune_on_the_simulator_without_refusal(name, tmp_path):
    """tune_model end to end at a tiny size on the simulated device: every kernel region
    generated, the module checked on CPU (the kernels themselves need a GPU). One model here
    (a torch region and a three-kernel program; 15 s on 2 loaded cores): every new model
    tuned so is `-m slow` (15 to 60 s each)."""
    import subprocess

    out = tmp_path / "out"
    out.mkdir()
    # the suite driver's own command (tune_model through the public API, in its own process)
    s = wm.Settings(work=tmp_path, final=tmp_path, deadline=0, device="sim", budget=1,
                    time_limit_s=300)
    proc = subprocess.run(wm.tune_command(tiny(name, tmp_path), out, s), capture_output=True,
                          text=True, timeout=600, cwd=wm.ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = wm.report_fields(json.loads((out / "report.json").read_text()))
    assert r["simulated"] and r["kernel_regions"] == r["generated_regions"] > 0
    assert len(r["region_lines"]) == r["regions"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(load(out / "model_new.py", f"tuned_{name}"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
def test_every_new_model_tunes_on_the_simulator(name, tmp_path):
    test_new_models_tune_on_the_simulator_without_refusal(name, tmp_path)


# ---- what a CUDA graph needs --------------------------------------------------------------------

def test_kernels_launch_on_the_current_stream_and_keep_their_workspace(monkeypatch):
    """Each generated kernel launches on torch.cuda.current_stream() (a graph captures that
    stream's work, and only it), and the workspace is allocated once, not per call (a graph
    replays the pointers it captured)."""
    from cuda_agent.runner import launcher

    launched = []

    class Driver:
        def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            launched.append((fn, stream))
            return (0,)

    class Stream:
        cuda_stream = 0xBEEF

    monkeypatch.setattr(launcher, "_driver", lambda: Driver())
    monkeypatch.setattr(launcher.torch.cuda, "current_stream", lambda device=None: Stream())
    k = launcher.LoadedKernels.__new__(launcher.LoadedKernels)
    k.device, k.functions = torch.device("cpu"), {"a": "fa", "b": "fb"}
    k.launches = [{"kernel": n, "grid": (1, 1, 1), "block": (32, 1, 1)} for n in "ab"]
    k.workspace_bytes, k.zero_workspace, k.workspace = 64, True, None
    k([torch.zeros(4)], torch.zeros(4))
    first = k.workspace.data_ptr()
    k([torch.zeros(4)], torch.zeros(4))
    assert launched == [("fa", 0xBEEF), ("fb", 0xBEEF)] * 2
    assert k.workspace.data_ptr() == first


def test_a_host_sync_in_forward_is_seen():
    """The check above is not vacuous: an .item() in forward() is recorded."""
    syncs = HostSyncs()
    with syncs:
        x = torch.ones(3)
        (x * float(x.sum().item())).cpu()
    assert "_local_scalar_dense" in syncs.seen


# ---- the harness --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def emitted_vit(tmp_path_factory):
    """benchmarks/models/vit.py at its own (small) size, emitted untuned."""
    d = tmp_path_factory.mktemp("vit")
    path = MODELS / "vit.py"
    p = load_problem(path, check=False)
    emit_model(ModelResult(path, split_model(*instantiate(p.model_cls, p.init_inputs(),
                                                          p.get_inputs))), d)
    return path, d / "model_new.py"


def test_the_harness_checks_a_whole_model_on_cpu(emitted_vit):
    path, new = emitted_vit
    row = mh.run_model(path, new, [1], device="cpu", timer=mh.time_host, time_budget_s=0.01)
    assert row["status"] == "ok", row["message"]
    assert row["state_dict_both_ways"] and row["checks"][0]["ok"]
    # vit's kernel regions, each recorded once with its inputs and timed by the host's clock
    assert row["kernel_regions"] == 6 and row["tuned_regions"] == 0
    assert all(r["ref_ms"] > 0 and r["new_ms"] > 0 for r in row["regions_timed"])


def test_a_failed_measurement_of_a_verified_module_is_not_its_verdict(emitted_vit,
                                                                     monkeypatch):
    def fails(*a, **k):
        raise RuntimeError("capture invalidated\nmore")

    monkeypatch.setattr(mh, "region_times", fails)
    row = mh.run_model(*emitted_vit, [1], device="cpu")
    assert row["status"] == "ok" and row["regions_error"] == "RuntimeError: capture invalidated"


def test_the_regions_share_of_eager_time(emitted_vit):
    """Tuned regions (generated code) and generated kernels alone (no vendor library step)."""
    path, new = emitted_vit
    mod = load(new, "share_vit")
    model = mod.ModelNew()
    inputs = mod.get_inputs()
    sources = {2: "LAUNCHES = [{'kernel': 'k', 'library': None}]\n",
               9: "LAUNCHES = [{'kernel': None, 'library': {'op': 'matmul'}}, "
                  "{'kernel': 'epilogue'}]\n"}
    mod.REGION_SOURCES = sources  # as if regions 2 and 9 were generated (on CPU: references)
    times = iter(range(1, 100))

    def timer(fn, flush, budget_s):
        fn()
        return {"ms": float(next(times))}

    out = mh.region_times(mod, model, inputs, "cpu", 100.0, 0.0, timer)
    ref = {r["region"]: r["ref_ms"] for r in out["regions_timed"]}
    assert [r["library"] for r in out["regions_timed"] if r["tuned"]] == [False, True]
    assert out["eager_in_tuned"] == pytest.approx((ref[2] + ref[9]) / 100)
    assert out["eager_in_generated"] == pytest.approx(ref[2] / 100)


def test_graph_timings_check_the_replay(monkeypatch):
    """A replay that differs from the eager model's output is the row's graph error, not a
    time; one that matches is timed (capture and the device stubbed: no GPU here)."""
    class Graph:
        def __init__(self, fn):
            self.fn = fn

        def replay(self):
            self.fn()

    def fake_capture(module, inputs):
        out = torch.empty(4)
        return Graph(lambda: out.copy_(module(*inputs))), out

    class Prob:
        @staticmethod
        def get_inputs():
            return [torch.arange(4.0)]

    monkeypatch.setattr(mh, "capture", fake_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    good, bad = torch.nn.Identity(), torch.nn.Hardtanh(0.0, 1.0)
    out = mh.graph_timings(Prob, good, good, "cpu", 0, 0.01, timer=mh.time_host)
    assert out["eager_graph_ok"] and out["new_graph_ok"] and out["new_graph_ms"] > 0
    out = mh.graph_timings(Prob, good, bad, "cpu", 0, 0.01, timer=mh.time_host)
    assert not out["new_graph_ok"] and "replay differs from eager" in out["new_graph_error"]
    assert "new_graph_ms" not in out


def test_time_host_has_time_gpu_s_fields():
    t = mh.time_host(lambda: None, budget_s=0.0)
    assert set(t) == {"ms", "iqr_ms", "reps"} and t["reps"] >= 3


# ---- the driver ---------------------------------------------------------------------------------

FAKE_TUNE = textwrap.dedent("""\
    import json, sys, time
    from pathlib import Path
    name, out = Path(sys.argv[1]).stem, Path(sys.argv[2])
    if name == "mlp3":
        (out / "model_new.py").write_text("class ModelNew: pass")
        (out / "report.json").write_text(json.dumps({"device": "cuda", "simulated": False,
            "regions": [{"kind": "kernel", "generated": True, "tune": {"evals": 7}},
                        {"kind": "torch"}], "lines": ["region 1 ..."], "wall_s": 3}))
    elif name == "vit":
        time.sleep(60)
    else:
        print("Traceback ...\\nValueError: boom"); sys.exit(1)
""")
FAKE_HARNESS = textwrap.dedent("""\
    import json, sys
    json.dump({"problem": "mlp3", "status": "ok", "message": "", "new_ms": 1.0,
               "compile_ms": 2.0, "eager_ms": 3.0, "speedup_vs_compile": 2.0,
               "speedup_vs_eager": 3.0, "eager_in_tuned": 0.9, "eager_in_generated": 0.5,
               "eager_graph_ms": 2.5, "new_graph_ms": 0.8, "gpu": "Fake GPU",
               "torch": "0.0"}, open(sys.argv[1], "w"))
""")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setattr(wm, "tune_command", lambda path, out, s: [
        sys.executable, "-c", FAKE_TUNE, str(path), str(out)])
    monkeypatch.setattr(wm, "harness_command", lambda path, new, out, seeds: [
        sys.executable, "-c", FAKE_HARNESS, str(out)])
    monkeypatch.setattr(wm, "HARNESS_EST_S", 0.0)

    def settings(**kw) -> wm.Settings:
        base = dict(work=tmp_path / "work", final=tmp_path / "out", deadline=time.time() + 60,
                    time_limit_s=0.5, tune_grace_s=1.0)
        return wm.Settings(**{**base, **kw})
    return settings


def test_a_suite_call_records_rows_and_resumes(fake, tmp_path, capsys):
    rows = wm.run_suite(fake(models=["mlp3", "vit", "lstm_head"]), log=lambda line: None)
    assert {n: r["status"] for n, r in rows.items()} == {
        "mlp3": "ok", "vit": "timeout", "lstm_head": "error"}
    ok = rows["mlp3"]
    assert ok["verified"] and ok["best_ms"] == 1.0 and ok["generated_regions"] == 1
    assert ok["kernel_regions"] == 1 and ok["regions"] == 2 and ok["evals"] == 7
    assert "ValueError: boom" in rows["lstm_head"]["message"]
    doc = json.loads((tmp_path / "out" / "models.json").read_text())
    assert [r["problem"] for r in doc["rows"]] == ["lstm_head", "mlp3", "vit"]  # suite order
    assert doc["gpu"] == "Fake GPU" and doc["settings"]["time_limit_s"] == 0.5
    with tarfile.open(tmp_path / "out" / "models-logs.tgz") as tar:
        assert {"mlp3/tune.log", "mlp3/harness.json", "vit/tune.log"} <= set(tar.getnames())
    assert "mlp3" in capsys.readouterr().out  # the rich table
    # resumed on another machine: the rows of the file given are not run again
    again = wm.run_suite(fake(models=["mlp3", "vit"], previous=[tmp_path / "out" / "models.json"],
                              final=tmp_path / "out2", work=tmp_path / "work2"),
                         log=lambda line: None)
    assert again["vit"]["status"] == "timeout" and not (tmp_path / "out2" / "models.json").exists()
    # on the same (warm) machine: its work folder's rows, which its new results file keeps
    said = []
    wm.run_suite(fake(models=["mlp3"], final=tmp_path / "out3"), log=said.append)
    assert "3 models done before, 0 to run" in said[0]
    doc = json.loads((tmp_path / "out3" / "models.json").read_text())
    assert len(doc["rows"]) == 3


def test_a_model_the_deadline_would_cut_is_left(fake, tmp_path):
    said = []
    rows = wm.run_suite(fake(models=["mlp3"], deadline=time.time() + 0.1, time_limit_s=10),
                        log=said.append)
    assert rows == {} and any("left for the next call" in line for line in said)


def test_summary_figures():
    s = wm.summary([{"status": "ok", "speedup_vs_eager": 2.0, "speedup_vs_compile": 0.5,
                     "eager_ms": 1.0, "eager_in_tuned": 1.0, "eager_in_generated": 0.5},
                    {"status": "ok", "speedup_vs_eager": 8.0, "speedup_vs_compile": 2.0,
                     "eager_ms": 3.0, "eager_in_tuned": 0.6, "eager_in_generated": 0.2},
                    {"status": "wrong"}])
    assert s["geomean_vs_eager"] == pytest.approx(4.0)
    assert s["geomean_vs_compile"] == pytest.approx(1.0)
    assert s["eager_in_tuned"] == pytest.approx((1.0 + 1.8) / 4)  # weighted by eager time
    assert (s["run"], s["ok"], s["wrong"]) == (3, 2, 1)


def test_bad_arguments_end_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match="not in benchmarks/models: nope"):
        wm.main(["--models", "nope", "--work", str(tmp_path)])
    with pytest.raises(SystemExit, match="no such results file"):
        wm.main(["--results", str(tmp_path / "x.json"), "--work", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        wm.main(["--time-limit", "0"])
    assert exc.value.code == 2


def test_gpu_suite_models_part(tmp_path, monkeypatch):
    got = []
    monkeypatch.setattr(wm, "run_suite", lambda s, log: got.append(s))
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setattr(sys, "argv", [
        "gpu_suite.py", "--parts", "models", "--work", str(tmp_path / "work"),
        "--deadline", "500", "--models-time-limit", "60", "--models-only", "vit,mlp3",
        "--models-results", "benchmarks/results/x/models.json"])
    gpu_suite.main()
    (s,) = got
    assert s.time_limit_s == 60 and s.models == ["vit", "mlp3"] and s.final == tmp_path / "out"
    assert s.previous == [gpu_suite.ROOT / "benchmarks/results/x/models.json"]
    assert s.deadline < time.time() + 500
