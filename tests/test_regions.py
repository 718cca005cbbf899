"""Whole models (issue 50): the region split, in-place ops taken out of place, masks as
operands, half-precision regions in their type, and the emitted module (state_dict names, custom ops
under torch.compile and torch.export, gradients, other shapes) checked against the model on
CPU, where each kernel region runs its torch reference: these check the split and the wiring,
not the generated kernels (which need a GPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from cuda_agent.problem import load_problem
from cuda_agent.regions.split import KERNEL, TORCH, split_model
from cuda_agent.regions.trace import instantiate, out_of_place, trace
from cuda_agent.regions.tune import ModelResult, emit_model

MODELS = Path(__file__).resolve().parents[1] / "benchmarks" / "models"
NAMES = ("vit", "densenet_transition", "lstm_head", "mlp3", "masked_cumsum")


def _split(name: str):
    p = load_problem(MODELS / f"{name}.py", check=False)
    model, inputs = instantiate(p.model_cls, p.init_inputs(), p.get_inputs)
    return split_model(model, inputs)


def _ops(split, kind: str) -> set[str]:
    return {op for r in split.regions if r.kind == kind for op in r.ops}


def test_split_of_the_issue_models():
    vit = _split("vit")
    # what no template covers stays torch's, one region each run; the rest is generated
    assert {"unfold", "cat", "unbind", "select"} <= _ops(vit, TORCH)
    assert {"linear", "layer_norm", "scaled_dot_product_attention", "gelu"} <= _ops(vit, KERNEL)
    assert not {"linear", "layer_norm", "gelu"} & _ops(vit, TORCH)
    lines = vit.lines()
    assert len(lines) == len(vit.regions)
    assert any("unfold" in line and "no template covers aten.unfold" in line for line in lines)

    dense = _split("densenet_transition")
    assert dense.inplace == ["relu_"]  # taken as relu: the graph means a value
    # training-mode batch norm in a kernel region: it returns the new running statistics
    (bn,) = dense.kernels()
    assert bn.ops == ["batch_norm", "relu", "conv2d", "avg_pool2d"]
    assert bn.updates == ["b_norm_running_mean", "b_norm_running_var"]
    assert _ops(dense, TORCH) == {"add_"}  # the batch counter: torch counts

    lstm = _split("lstm_head")
    assert "lstm" in _ops(lstm, TORCH) and {"linear", "log_softmax"} <= _ops(lstm, KERNEL)

    mlp = _split("mlp3")
    assert [r.kind for r in mlp.regions] == [KERNEL] and mlp.regions[0].family == "gemm+gemm+gemm"

    masked = _split("masked_cumsum")
    (region,) = masked.regions
    assert region.kind == KERNEL and region.family == "scan"
    assert [o.dtype for o in region.reads] == ["float32", "bool"]  # the mask is an operand


def test_integer_arithmetic_goes_to_torch_with_the_reason():
    """An int64 input (refused by one capture before: `cuda-agent tune` exited 2) is an
    operand; integer arithmetic has no template, so its region is torch's, saying why."""
    class Twice(nn.Module):
        def forward(self, x):
            return x * 2

    with torch.device("meta"):
        split = split_model(Twice(), [torch.empty(4, 8, dtype=torch.int64)])
    (region,) = split.regions
    assert region.kind == TORCH and "int64 input x used other than" in region.reason


def _graph_of(fn, *shapes):
    class M(nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    with torch.device("meta"):
        return trace(M(), [torch.empty(s) for s in shapes])


def test_in_place_ops_taken_out_of_place_only_where_the_graph_means_a_value():
    def value(x):
        y = x * 2
        y.relu_()
        return y + 1  # reads y after the write: the relu's result

    g = _graph_of(value, (4, 4)).graph
    ops = [str(n.target) for n in g.nodes if n.op == "call_function"]
    assert "aten.relu.default" in ops and "aten.relu_.default" not in ops
    add = next(n for n in g.nodes if str(n.target) == "aten.add.Tensor")
    assert str(add.args[0].target) == "aten.relu.default"

    def on_input(x):
        x.mul_(2)  # the caller's tensor changes: torch must do it
        return x + 1

    g = _graph_of(on_input, (4,)).graph
    assert "aten.mul_.Tensor" in [str(n.target) for n in g.nodes]

    def on_view(x):
        y = x * 2
        v = y.view(16)
        v.relu_()  # writes y through the view
        return y + 1

    g = _graph_of(on_view, (4, 4)).graph
    assert "aten.relu_.default" in [str(n.target) for n in g.nodes]


def test_out_of_place_fails_without_the_rewrite(monkeypatch):
    """The DenseNet transition's relu_ is refused as a kernel op without the rewrite (the
    check above is not vacuous)."""
    import cuda_agent.regions.trace as tr

    monkeypatch.setattr(tr, "out_of_place", lambda graph, placeholders: [])
    split = _split("densenet_transition")
    relu = next(r for r in split.regions if "relu_" in r.ops)
    assert relu.kind == TORCH
    assert [r.ops for r in split.kernels()] == [["batch_norm"], ["conv2d", "avg_pool2d"]]


def test_half_precision_regions_tuned_in_their_type():
    """A bf16 model: the linear layer and its relu are a kernel region in bf16 (cuBLAS in bf16,
    the bias and relu generated: the library route); a bare product (no bias, nothing after
    it), which no template takes in half precision, goes to torch, saying why
    (tests/test_half_precision.py and tests/test_half_library.py check the kernels)."""
    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64)
            self.head = nn.Linear(64, 8, bias=False)

        def forward(self, x):
            return self.head(torch.relu(self.fc(x)))

    with torch.device("meta"):
        model = Half().to(torch.bfloat16)
        split = split_model(model, [torch.empty(8, 64, dtype=torch.bfloat16)])
    assert [(r.kind, r.ops) for r in split.regions] == [(KERNEL, ["linear", "relu"]),
                                                        (TORCH, ["linear"])]
    assert "half precision" in split.regions[1].reason and "bfloat16" in split.regions[1].reason
    assert split.regions[0].dtype == "bfloat16"


def _emitted(name: str, tmp_path: Path, emit: bool = True):
    """The emitted module of model `name` in `tmp_path` (emitted there first, without tuning,
    unless `emit` is False: a tuning run wrote it)."""
    if emit:
        emit_model(ModelResult(MODELS / f"{name}.py", _split(name)), tmp_path)
    spec = importlib.util.spec_from_file_location(f"emitted_{name}_{tmp_path.name}",
                                                  tmp_path / "model_new.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_module(mod, name: str, compile_ok: bool = True) -> None:
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs())
    new = mod.ModelNew(*mod.get_init_inputs())
    new.load_state_dict(ref.state_dict())  # the original's names
    ref.load_state_dict(new.state_dict())  # and back
    inputs = mod.get_inputs()
    with torch.no_grad():
        expect = ref(*inputs)
        got = new(*inputs)
    torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-5)
    for (n, b), (_, c) in zip(ref.named_buffers(), new.named_buffers()):
        torch.testing.assert_close(c, b, rtol=1e-5, atol=1e-6, msg=n)  # state updated alike
    # gradients: through each region's torch reference, to the parameters and the inputs
    grads = []
    for m in (ref, new):
        m.zero_grad()
        xs = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
        m(*xs).float().square().sum().backward()
        grads.append([x.grad for x in xs if x.requires_grad]
                     + [p.grad for p in m.parameters()])
    assert grads[0] and all(g is not None for g in grads[1])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # torch.export keeps one custom op per kernel region
    with torch.no_grad():
        exported = torch.export.export(new, tuple(inputs))
    ops = [n for n in exported.graph.nodes if mod._NS in str(n.target)]
    assert len(ops) == len([k for k in mod.__dict__ if k.startswith("_r") and k[2:].isdigit()])
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(*inputs), ref(*inputs), rtol=1e-5,
                                   atol=1e-5)
    if compile_ok:
        compiled = torch.compile(new, fullgraph=True, backend="aot_eager")
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)
    # another batch size runs (the original forward: nothing was tuned for it)
    other = [torch.cat([t, t]) for t in inputs]
    with torch.no_grad():
        torch.testing.assert_close(new(*other), ref(*other), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["vit", "densenet_transition", "mlp3", "masked_cumsum"])
def test_emitted_module_matches_the_model_on_cpu(name, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_module(_emitted(name, tmp_path), name)


def test_emitted_lstm_module(tmp_path):
    """As the others, but torch.compile: Dynamo refuses LSTM modules (`allow_rnn`), the
    original model's as well."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_module(_emitted("lstm_head", tmp_path), "lstm_head", compile_ok=False)


def test_modes_checked_only_where_the_graph_depends_on_them(tmp_path):
    """An MLP's graph is the same in eval mode: its kernels still run after .eval(); a batch
    norm's is not: after .eval() the original forward() runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp = _emitted("mlp3", tmp_path / "mlp")
        dense = _emitted("densenet_transition", tmp_path / "dense")
    assert mlp.MODES is None and dense.MODES is not None
    for mod, runs_ops in ((mlp, True), (dense, False)):
        model = mod.ModelNew(*mod.get_init_inputs()).eval()
        with torch.no_grad():
            exported = torch.export.export(model, tuple(mod.get_inputs()))
        assert any(mod._NS in str(n.target) for n in exported.graph.nodes) == runs_ops


def test_region_without_gradient_names_it(tmp_path):
    """A region torch cannot differentiate: its backward raises one line naming it."""
    mod = _emitted("mlp3", tmp_path)
    x = torch.randn(4)

    def ref(_device, a):
        return torch.special.zeta(a, torch.ones_like(a))  # torch has no derivative for it

    with pytest.raises(RuntimeError) as err:
        mod._ref_grad(3, "zeta", ref, torch.ones(4), [x])
    assert str(err.value).startswith("region 3 (zeta) has no gradient: ")
    assert "\n" not in str(err.value)


def test_cli_tunes_a_bool_mask_model_end_to_end(tmp_path):
    """`cuda-agent tune` on the masked cumsum with a bool mask: refused as one capture
    before, now tuned as a model on the simulated device, the module checked on CPU."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "tune",
                           str(MODELS / "masked_cumsum.py"), "--device", "sim", "--budget", "2",
                           "--store", str(tmp_path / "s.sqlite"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "region 1 (kernel): mul, cumsum -> generated" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["whole_model"] and report["regions"][0]["generated"]
    assert report["shapes_tuned"] == [[64, 4096], [64, 4096]]
    assert (out / "regions" / "r1" / "kernel.cu").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_module(_emitted("masked_cumsum", out, emit=False), "masked_cumsum")


@pytest.mark.parametrize("name, line", [
    ("unsupported_op", "region 1 (torch): roll -> torch (roll: no template covers aten.roll)"),
    ("fp64_input", "-> torch (relu: the templates take float32, float16 and bfloat16 tensors, "
                   "this region's are float64)")])
def test_cli_tunes_what_one_capture_refused_as_a_model(name, line, tmp_path):
    """`cuda-agent tune` refused these files (exit 2) before: an op no template covers, a
    float64 model. Now each is a module whose regions run in torch, and says why."""
    bad = Path(__file__).resolve().parent / "data" / "bad" / f"{name}.py"
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "tune", str(bad),
                           "--device", "sim", "--budget", "2", "--store",
                           str(tmp_path / "s.sqlite"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert line in " ".join(proc.stdout.split())
    assert "0 of 1 regions generated" in proc.stdout
    spec = importlib.util.spec_from_file_location(f"whole_{name}", out / "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = mod.get_inputs()
    torch.testing.assert_close(mod.ModelNew()(*x), mod.Model()(*x))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_tune_model_end_to_end_on_the_simulator(name, tmp_path):
    from cuda_agent.regions.tune import tune_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(MODELS / f"{name}.py", tmp_path, device="sim", budget=8,
                            store=":memory:", time_limit_s=None)
        assert sorted(result.generated()) == [r.index for r in result.split.kernels()]
        assert len(result.lines()) == len(result.split.regions)
        _check_module(_emitted(name, tmp_path, emit=False), name,
                      compile_ok=name != "lstm_head")


TWO_REGIONS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(1024, 1024)
        self.b = nn.Linear(2048, 64)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return self.b(torch.cat([y, x], dim=1))


def get_inputs():
    return [torch.randn(4096, 1024)]
"""


def test_time_limit_holds_across_regions(tmp_path):
    """`time_limit_s` bounds the whole model's run (the split in its child, every region's
    loading, search and outputs, the module's emission) within 5 %; the budget and the
    seconds are split by expected time, the larger region first."""
    import time

    from cuda_agent.regions.tune import tune_model

    path = tmp_path / "two_regions.py"
    path.write_text(TWO_REGIONS)
    limit = 20.0
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(path, tmp_path / "out", device="sim", budget=100000,
                            store=":memory:", time_limit_s=limit)
    wall = time.monotonic() - t0
    assert wall <= limit * 1.05, wall
    assert [r.kind for r in result.split.regions] == [KERNEL, TORCH, KERNEL]
    first, second = (result.outcomes[r.index] for r in result.split.kernels())
    # 4096 x 1024 x 1024 against 4096 x 2048 x 64: the first region is 8x the work
    assert first.budget > second.budget >= 1 and first.budget + second.budget == 100000
    assert first.time_limit_s > second.time_limit_s
    assert (tmp_path / "out" / "model_new.py").exists()


def test_one_device_serves_every_region(tmp_path, monkeypatch):
    """The regions are measured on one device (on a GPU, one worker: a worker each cost
    seconds per region of the limit they share)."""
    import cuda_agent.tuner as tuner
    from cuda_agent.regions.tune import tune_model

    opened, open_device = [], tuner.open_device

    def counted(*args, **kwargs):
        opened.append(open_device(*args, **kwargs))
        return opened[-1]
    monkeypatch.setattr(tuner, "open_device", counted)
    path = tmp_path / "two_regions.py"
    path.write_text(TWO_REGIONS.replace("1024", "32").replace("2048", "64").replace(
        "4096", "16"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_model(path, tmp_path / "out", device="sim", budget=2, store=":memory:",
                            time_limit_s=None)
    devices = [result.outcomes[r.index].result.device for r in result.split.kernels()]
    assert len(devices) == 2 and len(opened) == 1
    assert all(d is opened[0] for d in devices)


def test_budget_shares_by_expected_gain():
    from cuda_agent.regions import budget
    from cuda_agent.regions.split import Region

    big = Region(1, KERNEL, ["linear"], [], [], [], "", flops=2 * 4096 ** 3)
    small = Region(2, KERNEL, ["relu"], [], [], [], "", bytes=4 * 1024)
    # nothing measured (the simulated device): the roofline is the weight
    g = budget.gains([big, small])
    assert {x.source for x in g.values()} == {"roofline"}
    w = [g[1].weight_s, g[2].weight_s]
    assert budget.shares(40, w) == [39, 1]
    assert budget.shares(1, w) == [1, 1]  # at least one each
    assert budget.time_share(10.0, w[1], [w[0]]) < 0.02 < 9.9 < budget.time_share(10.0, w[0], [w[1]])
    # measured: eager time x headroom. The product already runs at its floor in eager (10 %
    # headroom is the least), the elementwise op at 1000x its floor: most of the gain is there
    fb, fs = budget.floor_s(big), budget.floor_s(small)
    g = budget.gains([big, small], {1: fb, 2: 1000 * fs})
    assert g[1].source == g[2].source == "measured eager"
    assert g[1].weight_s == pytest.approx(0.1 * fb)
    assert g[2].weight_s == pytest.approx(1000 * fs * (1 - 1 / 1000))
    # one measured: the other's eager is estimated at the measured one's ratio to its floor
    g = budget.gains([big, small], {2: 5 * fs})
    assert g[1].source == "estimated eager" and g[1].estimated_eager_s == pytest.approx(5 * fb)
    assert g[1].weight_s == pytest.approx(5 * fb * 0.8)
    # a failed or zero measurement is no measurement
    assert budget.gains([big], {1: 0.0})[1].source == "roofline"


class _EagerOnly:
    """A GPU as `measure_eager` sees it: set up per problem, each eager time by file name."""

    kind, simulated = "cuda", False

    def __init__(self, ms: dict[str, float]):
        self.ms, self.current, self.setups = ms, None, 0

    def ensure(self, problem, plan):
        self.current, self.setups = problem.path.name, self.setups + 1

    def baselines(self, which):
        from cuda_agent.runner.baselines import Baselines

        assert which == ("eager",)
        b = Baselines()
        b.set("eager", self.ms[self.current])
        return b


def test_eager_times_measured_on_a_gpu_reorder_the_regions(tmp_path, monkeypatch):
    """On a GPU each kernel region's eager time is measured first and the budget follows the
    expected gain: here the roofline's smaller region is the one eager runs 40x off its floor,
    so it is tuned first and gets most of the budget; the loaded problems are reused."""
    import cuda_agent.regions.tune as rt
    from cuda_agent.regions import budget

    path = tmp_path / "two_regions.py"
    # TWO_REGIONS at a quarter of each size but the second product's 64 outputs, a sixteenth:
    # the first region still 8x the work, its roofline floor the larger (the agents' prior
    # modelling the full-size search spaces was half of this test's 37 CPU-s)
    path.write_text(TWO_REGIONS.replace("64", "16").replace("1024", "256").replace(
        "2048", "512").replace("4096", "1024"))
    split = rt.shared_loader().split(path)
    first, second = split.kernels()
    assert budget.floor_s(first) > budget.floor_s(second)  # the roofline alone: first first
    fake = _EagerOnly({f"r{first.index}.py": 1e3 * budget.floor_s(first),
                       f"r{second.index}.py": 40e3 * budget.floor_s(second)})
    measured: dict = {}
    real = rt.measure_eager

    def on_fake(kernels, device, region_dir, settings, limit):
        measured.update(zip(("eager", "problems"), real(kernels, fake, region_dir, settings,
                                                        limit)))
        return measured["eager"], measured["problems"]
    monkeypatch.setattr(rt, "measure_eager", on_fake)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = rt.tune_model(path, tmp_path / "out", device="sim", budget=40,
                               store=":memory:", time_limit_s=None, split=split)
    assert fake.setups == 2 and set(measured["problems"]) == {first.index, second.index}
    a, b = result.outcomes[first.index], result.outcomes[second.index]
    assert b.budget > a.budget >= 1 and a.budget + b.budget == 40
    assert result.report()["budget_split"].startswith("budget across 2 kernel regions by "
                                                      "expected gain")
    gains = {r["index"]: r["gain"] for r in result.report()["regions"] if "gain" in r}
    assert gains[second.index]["weight_from"] == "measured eager"
    assert gains[second.index]["weight_s"] > gains[first.index]["weight_s"]


def test_eager_measurement_stays_within_its_share_of_the_time_limit(tmp_path):
    """`measure_eager` stops asking once its share of the time limit is spent, and measures
    nothing on a device that does not run torch (the simulated device)."""
    import cuda_agent.regions.tune as rt
    from cuda_agent.regions import budget
    from cuda_agent.settings import RunSettings

    path = tmp_path / "two_regions.py"
    path.write_text(TWO_REGIONS)
    split = rt.shared_loader().split(path)
    kernels = split.kernels()
    region_dir = tmp_path / "regions"
    region_dir.mkdir()
    for r in kernels:
        (region_dir / f"r{r.index}.py").write_text(rt.problem_source(r, path.stem))
    fake = _EagerOnly({f"r{r.index}.py": 1.0 for r in kernels})
    settings = RunSettings(device="sim", store=":memory:")
    eager, _ = rt.measure_eager(kernels, fake, region_dir, settings, None)
    assert len(eager) == 2
    fake.setups = 0
    eager, _ = rt.measure_eager(kernels, fake, region_dir, settings, 1e-9)  # no time for more
    assert fake.setups == 1 and len(eager) == 1
    sim = type("Sim", (), {"kind": "sim", "simulated": True})()
    assert rt.measure_eager(kernels, sim, region_dir, settings, None) == ({}, {})
    assert budget.EAGER_SHARE <= 0.1


def test_autocast_model_runs_its_own_forward(tmp_path):
    """torch.autocast in forward(): a higher-order op on CUDA, invisible on meta tensors on
    the CPU; either way the split does not take it apart, and the module runs the original
    forward() (one torch region, saying why), not a float32 graph the user never ran."""
    src = tmp_path / "autocast_mlp.py"
    src.write_text('''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.relu(self.fc(x)).float()


def get_inputs():
    return [torch.randn(8, 64)]
''')
    p = load_problem(src, check=False)
    model, inputs = instantiate(p.model_cls, p.init_inputs(), p.get_inputs)
    split = split_model(model, inputs)
    assert split.opaque and "autocast" in split.regions[0].reason
    emit_model(ModelResult(src, split), tmp_path / "out")
    spec = importlib.util.spec_from_file_location("whole_autocast", tmp_path / "out" /
                                                  "model_new.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref, new = mod.Model(), mod.ModelNew()
    new.load_state_dict(ref.state_dict())
    x = mod.get_inputs()
    torch.testing.assert_close(new(*x), ref(*x), rtol=0, atol=0)
