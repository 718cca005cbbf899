"""The convolution-chains suite (issue 48, item 4): its problem files load on meta tensors (nothing
allocated) and stay within 8 GiB for one eager forward, it holds the chains the issue names, its
manifest matches the files (as `realistic_suite.py --check` judges), and the GPU runner takes the
suite's folder (stand-in tune and harness processes): its own manifest, problem paths and results
file, resumed from."""

from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from benchmarks import gpu_suite
from benchmarks import realistic_run as rr
from benchmarks import realistic_suite
from cuda_agent.errors import UnsupportedError
from cuda_agent.problem import load_problem

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`modules`) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_conv_chains_suite")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_realistic_run import FAKE_HARNESS, FAKE_TUNE, write_manifest  # noqa: E402

SUITE = ROOT / "benchmarks" / "conv_chains"
FILES = realistic_suite.problems(SUITE)
CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
         nn.ConvTranspose3d)
#: the chains issue 48 names, by the file that holds each
NAMED = ("conv_transpose2d_bn_tanh_maxpool_groupnorm", "conv_transpose2d_min_sum_gelu_add",
         "conv_transpose3d_k3_cube", "conv_transpose2d_gelu_groupnorm",
         "conv3d_divide_maxpool_gap_bias_sum", "conv2d_relu_hardswish",
         "conv1d_dilation4_stride3")


def _meta(path: Path) -> tuple[nn.Module, list]:
    prob = load_problem(path, check=False)
    with torch.device("meta"):
        return prob.model_cls(*prob.init_inputs()), list(prob.get_inputs())


@pytest.fixture(scope="module")
def modules() -> dict[str, tuple[nn.Module, list]]:
    return {p.stem: _meta(p) for p in FILES}


def test_every_problem_loads_and_runs_on_meta_tensors(modules):
    assert len(FILES) >= 24
    for name, (model, inputs) in modules.items():
        with torch.no_grad():
            out = model(*inputs)
        assert isinstance(out, torch.Tensor) and out.is_meta, name
        assert any(isinstance(m, CONVS) for m in model.modules()), name
        # held as the field's harness holds it: training mode, never switched in the file
        assert model.training, name


def test_every_file_says_its_chain_in_a_one_line_docstring():
    assert FILES
    for p in FILES:
        doc = ast.get_docstring(ast.parse(p.read_text()))
        assert doc and "\n" not in doc.strip(), p.name
        assert {"Model", "get_inputs", "get_init_inputs"} <= {
            n.name for n in ast.parse(p.read_text()).body if hasattr(n, "name")}, p.name


def test_one_eager_forward_stays_within_8_gib():
    assert FILES
    for p in FILES:
        peak = realistic_suite.eager_peak_bytes(p)
        assert 64 << 20 < peak <= realistic_suite.FOOTPRINT_LIMIT, (p.name, peak / 2**30)


def test_eager_peak_counts_what_is_alive_at_once(tmp_path):
    """Input 1 MiB, two 2 MiB results in turn (the first freed once the second is made), a
    view and an in-place op that add nothing: 1 + 2 + 2 MiB at the peak."""
    p = tmp_path / "chain.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                 "    def forward(self, x):\n        y = torch.cat([x, x])\n"
                 "        y = torch.sigmoid(y)\n        y.relu_()\n"
                 "        return y.view(-1)\n\n\n"
                 "def get_inputs():\n    return [torch.rand(256, 1024)]\n\n\n"
                 "def get_init_inputs():\n    return []\n")
    assert realistic_suite.eager_peak_bytes(p) == 5 << 20


def test_the_suite_holds_what_issue_48_asks_for(modules):
    names = set(modules)
    assert set(NAMED) <= names
    subs = [(n, m) for n, (mod, _) in modules.items() for m in mod.modules()]

    def has(kind, cond=lambda m: True) -> set[str]:
        return {n for n, m in subs if isinstance(m, kind) and cond(m)}

    bn = has(nn.modules.batchnorm._BatchNorm)
    assert len(bn & has(nn.ConvTranspose2d)) >= 1 and len(bn & has(nn.ConvTranspose3d)) >= 2
    assert len(bn & has((nn.Conv2d, nn.Conv3d))) >= 1
    assert len(has(nn.GroupNorm) & has((nn.ConvTranspose2d, nn.ConvTranspose3d))) >= 3
    assert len(has(nn.GroupNorm) & has((nn.Conv2d, nn.Conv3d))) >= 2
    pools = (nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool3d)
    assert len(has(pools) & has((nn.ConvTranspose2d, nn.ConvTranspose3d))) >= 4
    assert len(has(nn.ConvTranspose3d)) >= 6 and len(has(nn.ConvTranspose2d)) >= 6
    assert len(has(nn.Conv3d)) >= 3 and len(has(nn.Conv2d)) >= 6
    assert has(CONVS, lambda m: 1 < m.groups < m.in_channels)  # grouped
    assert has(nn.Conv2d, lambda m: m.groups == m.in_channels > 1)  # depthwise
    assert has(nn.Conv1d, lambda m: max(m.dilation) > 1)
    assert has(nn.Conv2d, lambda m: max(m.dilation) > 1)
    # reductions over a dim, activations and the rest, as the sources write them
    text = " ".join(p.read_text() for p in FILES)
    for word in ("torch.min(", "amax(", ".sum(", ".mean(", "F.gelu", "torch.tanh", "hardswish",
                 "F.mish", "torch.sigmoid", "LeakyReLU", "torch.clamp", "self.bias", "skip"):
        assert word in text, word


def test_names_differ_from_the_other_suites():
    others = {p.stem for d in ("problems", "realistic") for p in (ROOT / "benchmarks" / d)
              .glob("*.py")}
    assert FILES and not others & {p.stem for p in FILES}


def test_the_manifest_matches_the_files():
    manifest = realistic_suite.manifest_path(SUITE)
    assert manifest.read_text() == json.dumps(realistic_suite.build(SUITE), indent=1) + "\n", \
        "stale: run python -m benchmarks.realistic_suite --suite benchmarks/conv_chains"
    assert [e["problem"] for e in realistic_suite.read(manifest)] != []


def test_a_refused_problem_keeps_its_line_and_its_size(tmp_path, monkeypatch):
    """A problem the tool refuses is listed all the same (its row will be the refusal), with
    its reason, torch's own count of its input bytes, and a tune's start as its cost."""
    import cuda_agent.ir.planning as plan_module

    folder = tmp_path / "suite"
    folder.mkdir()
    src = (SUITE / "conv2d_relu_hardswish.py").read_text()
    (folder / "kept.py").write_text(src)
    (folder / "refused.py").write_text(src.replace("torch.rand(128, 8,", "torch.rand(64, 8,"))
    real = plan_module.make_plan

    def refuse(graph):  # noqa: ANN001, ANN202 - the batch of 64 is refused
        if any(g.shape == (64, 8, 128, 128) for g in graph.inputs):
            raise UnsupportedError("unsupported: a pattern\nand more lines")
        return real(graph)
    monkeypatch.setattr(plan_module, "make_plan", refuse)
    entries = {e["problem"]: e for e in realistic_suite.build(folder)["problems"]}
    kept, refused = entries["kept"], entries["refused"]
    assert refused["refused"] == "unsupported: a pattern"
    assert refused["family"] == realistic_suite.REFUSED_FAMILY and refused["bytes"] is None
    weights = kept["input_bytes"] - 128 * 8 * 128 * 128 * 4
    assert refused["input_bytes"] == weights + 64 * 8 * 128 * 128 * 4
    assert refused["est_s"] == realistic_suite.TUNE_START_S < kept["est_s"]
    doc = realistic_suite.plans_doc(folder)
    assert doc["refused"] == 1 and doc["refusals"] == [
        {"reason": "unsupported: a pattern", "count": 1, "problems": ["refused"]}]
    row = next(r for r in doc["rows"] if r["problem"] == "kept")
    assert row["plan_kind"] == "conv" and row["stages"][0]["templates"]


# ---- the GPU runner, given the suite's folder ----------------------------------------------

def test_the_runner_runs_a_suite_folder_into_its_own_results_file(tmp_path, monkeypatch):
    folder = tmp_path / "conv_chains"
    write_manifest(folder, ["a", "b"])
    ran: list[Path] = []
    monkeypatch.setattr(realistic_suite, "estimate_s", lambda e, *a: 0.0)
    monkeypatch.setattr(rr, "tune_has_time_limit", lambda: True)
    monkeypatch.setattr(rr, "tune_command", lambda problem, out, s, cli: ran.append(problem) or [
        sys.executable, "-c", FAKE_TUNE, problem.stem, str(out)])
    monkeypatch.setattr(rr, "harness_command", lambda problem, model_new, out, seeds, *a: [
        sys.executable, "-c", FAKE_HARNESS, str(out)])
    settings = rr.RunSettings(work=tmp_path / "work", final=tmp_path / "out", suite=folder,
                              deadline=time.time() + 60, time_limit_s=0.5, tune_grace_s=1.0,
                              policy=None)
    rows = rr.run_suite(settings, log=lambda line: None)
    assert {n: r["status"] for n, r in rows.items()} == {"a": "ok", "b": "unsupported"}
    assert ran == [folder / "a.py", folder / "b.py"]
    out = tmp_path / "out"
    assert sorted(f.name for f in out.iterdir()) == ["conv_chains-logs.tgz", "conv_chains.json"]
    doc = json.loads((out / "conv_chains.json").read_text())
    assert doc["suite"] == str(folder) and [r["problem"] for r in doc["rows"]] == ["a", "b"]
    # a later call given these results runs nothing; a name of another suite is refused
    monkeypatch.setattr(rr, "tune_command", lambda *a: pytest.fail("ran a finished problem"))
    again = rr.run_suite(rr.RunSettings(**{**settings.__dict__, "work": tmp_path / "w2",
                                           "previous": [out / "conv_chains.json"]}),
                         log=lambda line: None)
    assert set(again) == {"a", "b"}
    with pytest.raises(SystemExit, match="not in the conv_chains suite: softmax_x"):
        rr.run_suite(rr.RunSettings(**{**settings.__dict__, "only": ["softmax_x"]}),
                     log=lambda line: None)
    with pytest.raises(SystemExit, match="no such manifest"):
        rr.run_suite(rr.RunSettings(**{**settings.__dict__, "suite": tmp_path}),
                     log=lambda line: None)


def _gpu_suite_settings(tmp_path, monkeypatch, *flags: str):
    """The RunSettings `gpu_suite.py --parts realistic FLAGS` hands the runner."""
    import benchmarks.realistic_run as runner

    got = []
    monkeypatch.setattr(runner, "run_suite", lambda s, log: got.append(s))
    monkeypatch.setattr(runner, "visible_gpus", lambda: ["0"])
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setattr(sys, "argv", ["gpu_suite.py", "--parts", "realistic", "--work",
                                      str(tmp_path / "work"), *flags])
    gpu_suite.main()
    return got[0]


def test_gpu_suite_takes_the_suite_flag(tmp_path, monkeypatch):
    s = _gpu_suite_settings(tmp_path, monkeypatch, "--realistic-suite", "benchmarks/conv_chains",
                            "--realistic-as-user", "--realistic-time-limit", "120",
                            "--realistic-max-autotune")
    assert s.suite == SUITE and s.max_autotune and s.harness_limit_s >= 600
    assert s.time_limit_s == 120 and s.budget is None and s.policy is None and s.tune_baselines
    cmd = rr.tune_command(SUITE / "conv2d_bn_scale.py", tmp_path / "o", s, True)
    flags = [a for a in cmd if a.startswith("--")]
    assert flags == ["--device", "--time-limit", "--out", "--store"], cmd
    default = _gpu_suite_settings(tmp_path, monkeypatch)
    assert default.suite == realistic_suite.SUITE and not default.max_autotune
    assert default.budget == 32 and not default.tune_baselines


def test_gpu_suite_refuses_a_folder_without_a_manifest(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        _gpu_suite_settings(tmp_path, monkeypatch, "--realistic-suite", "benchmarks/nowhere")
    assert exc.value.code == 2
    assert "--realistic-suite benchmarks/nowhere: no suite.json there" in capsys.readouterr().err
