"""The capture's own tracer (`ir/pretrace.py`) against torch.export.

`capture` records a module's graph with its own tracer and asks torch.export only where the
tracer leaves the module to it (or fails): the graph must be torch.export's, node for node, for
each family of ops, and the tracer must not import Dynamo (the second it saves at `tune`'s start).
`benchmarks/capture_equality.py` runs the same comparison over every problem file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Fn
from cuda_agent.ir import capture as capture_mod
from cuda_agent.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]

# a BatchNorm2d in training mode with running statistics, a convolution, a linear layer, a
# softmax, a loss with int64 targets, sdpa attention, cumsum (and an exclusive one: zeros_like,
# slices and cat)
SAMPLE = ["realistic/norm_batchnorm2d_train", "problems/conv2d_standard",
          "problems/fused_linear_relu", "problems/softmax_short_rows",
          "problems/loss_cross_entropy", "problems/attention_sdpa",
          "problems/scan_cumsum_lastdim", "problems/scan_cumsum_exclusive"]


def outcome(make_model, make_inputs, export_only: bool, monkeypatch) -> tuple[dict, bool]:
    """capture's result (graph JSON and modes, or the error) and whether it fell back."""
    tracer = capture_mod._pretraced
    fell_back = []

    def traced(model, inputs):
        graph = None if export_only else tracer(model, inputs)
        fell_back.append(graph is None)
        return graph

    with monkeypatch.context() as mp:
        mp.setattr(capture_mod, "_pretraced", traced)
        try:
            graph = capture_mod.capture(make_model, [], make_inputs)
        except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
            return {"error": f"{type(exc).__name__}: {exc}"}, fell_back[-1]
    return {"graph": graph.to_json(), "modes": graph.modes}, fell_back[-1]


def assert_traced_as_export(make_model, make_inputs, monkeypatch) -> dict:
    traced, fell_back = outcome(make_model, make_inputs, False, monkeypatch)
    exported, _ = outcome(make_model, make_inputs, True, monkeypatch)
    assert not fell_back, "the tracer left this module to torch.export"
    assert traced == exported
    return traced


@pytest.mark.parametrize("name", SAMPLE)
def test_problem_graph_is_torch_exports(name, monkeypatch):
    problem = load_problem(ROOT / "benchmarks" / f"{name}.py", check=False)
    out = assert_traced_as_export(lambda: problem.model_cls(*problem.init_inputs()),
                                  problem.get_inputs, monkeypatch)
    if "batchnorm" in name:  # the running statistics' update and the batch counter
        assert {u["kind"] for u in out["graph"]["updates"]} == {"RunningStats", "Increment"}
        assert out["modes"] is not None


class ReadsTraining(nn.Module):
    def forward(self, x):
        return torch.relu(x) * (2.0 if self.training else 3.0)


class Named(nn.Module):
    """Names export renames: a forward() argument named like a builtin, upper case, a
    submodule whose name starts with "self_"."""

    def __init__(self):
        super().__init__()
        self.self_proj = nn.Linear(8, 8)

    def forward(self, input, Other):
        return self.self_proj(input) + Other


@pytest.mark.parametrize("make, shapes", [
    (ReadsTraining, [(4, 8)]),
    (lambda: ReadsTraining().eval(), [(4, 8)]),
    (Named, [(4, 8), (4, 8)]),
    (lambda: Fn(lambda a, b: torch.cumsum(a, 1) * b), [(4, 8), (4, 8)]),  # forward(*args)
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval(),
     [(2, 3, 8, 8)]),
    (lambda: Fn(lambda x: F.layer_norm(x, (8,)).max(dim=-1).values), [(4, 8)]),  # tuple result
    (lambda: Fn(lambda x: F.max_pool2d(x, 2, return_indices=True)[0]), [(2, 3, 8, 8)]),
])
def test_module_graph_is_torch_exports(make, shapes, monkeypatch):
    out = assert_traced_as_export(make, lambda: [torch.randn(*s) for s in shapes], monkeypatch)
    if make is ReadsTraining:
        assert out["modes"] == (True,)  # its forward() branches on self.training


class AssignsAttribute(nn.Module):
    def forward(self, x):
        self.last = x * 2
        return torch.relu(x)


class NoGrad(nn.Module):
    def forward(self, x):
        with torch.no_grad():
            return torch.relu(x)


@pytest.mark.parametrize("make", [
    lambda: Fn(lambda x: x * torch.tensor(2.0)),  # a constant tensor
    lambda: Fn(lambda x: torch.cat([torch.zeros(4, 1), x], 1)),  # a factory off the meta device
    AssignsAttribute,
    NoGrad,
    lambda: Fn(lambda x: (x, x)),  # two outputs: the lowering refuses, export says why
])
def test_what_the_tracer_leaves_to_torch_export_gets_export_s_outcome(make, monkeypatch):
    traced, fell_back = outcome(make, lambda: [torch.randn(4, 8)], False, monkeypatch)
    exported, _ = outcome(make, lambda: [torch.randn(4, 8)], True, monkeypatch)
    assert fell_back
    assert traced == exported


NO_DYNAMO = textwrap.dedent("""
    import sys
    from cuda_agent.problem import load_problem
    for name in sys.argv[1:]:
        problem = load_problem(name)
        problem.graph()
        assert "torch._dynamo" not in sys.modules, f"{name} imported torch._dynamo"
    print("ok")
""")


def test_capture_does_not_import_dynamo(tmp_path):
    """In a fresh interpreter (other tests' imports don't count), loading and capturing
    problems whose ops torch runs on meta tensors in C++ must leave Dynamo unimported. (Ops
    whose meta kernels torch writes in Python, batch norm or most elementwise ops, import it
    anyway, when the problem is loaded.)"""
    names = [str(ROOT / "benchmarks" / "problems" / f"{n}.py") for n in
             ("softmax_short_rows", "gemm_square", "conv2d_standard", "pool_max2d",
              "reduce_sum_lastdim")]
    env = {"PYTHONPATH": str(ROOT), "CUDA_AGENT_CAPTURE_CACHE": "0", "PATH": "/usr/bin:/bin",
           "CUDA_AGENT_HOME": str(tmp_path), "CUDA_AGENT_CACHE": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", NO_DYNAMO, *names], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_an_unverified_torch_version_is_traced_by_torch_export(monkeypatch):
    from cuda_agent.ir import pretrace

    monkeypatch.setattr(pretrace, "VERIFIED_TORCH", set())
    _, fell_back = outcome(ReadsTraining, lambda: [torch.randn(4, 8)], False, monkeypatch)
    assert fell_back


def test_capture_without_the_tracer_is_torch_exports_alone(monkeypatch):
    """The public switches benchmarks/capture_equality.py uses: `tracer=False` never consults
    the tracer and gives the same graph; `tracer_covers` says the tracer took the module."""
    problem = load_problem(ROOT / "benchmarks" / "problems" / "softmax_short_rows.py",
                           check=False)
    args = (problem.model_cls, problem.init_inputs(), problem.get_inputs)
    traced = capture_mod.capture(*args)
    assert capture_mod.tracer_covers(*args)
    monkeypatch.setattr(capture_mod, "_pretraced", lambda *a: pytest.fail("tracer consulted"))
    exported = capture_mod.capture(*args, tracer=False)
    assert (exported.to_json(), exported.modes) == (traced.to_json(), traced.modes)
