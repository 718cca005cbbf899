"""Which cuDNN mode each of a CUDA device's workers is set up in, checked without a GPU: the
worker process is replaced by a recorder of the messages the device sends it. Candidates of a
problem with a convolution run in cuDNN's benchmark mode (their library steps get the algorithm
it finds fastest); eager and torch.compile are timed on the heuristics, as a user's process runs
them; the benchmark-mode eager baseline in a worker of that mode; and after the baselines the
worker is the candidates' again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.devices import CUDNN_BENCHMARK, CudaDevice, cudnn_baselines
from cuda_agent.runner.timing import TIMING_PROTOCOL

PROBLEMS = Path(__file__).resolve().parents[1] / "benchmarks" / "problems"


class FakeWorker:
    """Answers a device's messages as a worker would, remembering the mode of each set-up."""

    def __init__(self) -> None:
        self.mode: bool | None = None  # the running worker's cuDNN mode (None: not set up)
        self.started = 0
        self.baselines: list[tuple[str, bool | None]] = []  # (which, mode of the worker)
        self.graphs: list[Any] = []  # the graph each set-up message carried

    def start(self, device: CudaDevice) -> None:
        self.started += 1
        self.mode = None

    def call(self, device: CudaDevice, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        if msg["op"] == "facts":
            return {"ok": True, "gpu": "fake"}
        if msg["op"] == "setup":
            self.mode = bool(msg.get("cudnn_benchmark", False))
            self.graphs.append(msg.get("graph"))
            return {"ok": True, "cudnn_benchmark": self.mode}
        if msg["op"] == "baseline":
            self.baselines.append((msg["which"], self.mode))
            return {"ok": True, "time_ms": 1.0}
        raise AssertionError(f"unexpected message {msg}")


@pytest.fixture
def fake(monkeypatch):
    worker = FakeWorker()
    monkeypatch.setattr(CudaDevice, "_start", lambda self: worker.start(self))
    monkeypatch.setattr(CudaDevice, "_kill", lambda self: None)
    monkeypatch.setattr(CudaDevice, "_call", lambda self, msg, t: worker.call(self, msg, t))
    return worker


def _setup(dev: CudaDevice, name: str):
    prob = load_problem(PROBLEMS / f"{name}.py")
    plan = make_plan(prob.graph())
    dev.setup(prob, plan)
    return plan


def test_convolution_candidates_run_in_benchmark_mode_and_baselines_as_users_run_them(fake):
    dev = CudaDevice()
    plan = _setup(dev, "conv_transpose2d_odd")
    assert fake.mode is True and dev.facts()["cudnn_benchmark"] is True
    assert dev.measure_protocol == f"{TIMING_PROTOCOL}+cudnn-find"
    base = dev.baselines(("eager", "compile") + cudnn_baselines(plan))
    assert fake.baselines == [("eager", False), ("compile", False), (CUDNN_BENCHMARK, True)]
    assert base.eager_ms == base.compile_ms == base.extra_ms[CUDNN_BENCHMARK] == 1.0
    assert fake.mode is True, "the candidates' worker again after the baselines"
    assert dev.restarts == 2  # one to the heuristics, one back to the benchmark mode
    dev.baselines(("eager",))
    assert fake.mode is True and fake.baselines[-1] == ("eager", False)


def test_a_crash_restarts_the_worker_in_the_candidates_mode(fake):
    dev = CudaDevice()
    _setup(dev, "fused_conv2d_relu_maxpool")
    dev._restart()  # what evaluate does after a dead or poisoned worker
    assert fake.mode is True


def test_without_a_convolution_or_when_asked_candidates_run_on_the_heuristics(fake):
    dev = CudaDevice()
    _setup(dev, "gemm_square")
    assert fake.mode is False
    dev.baselines(("eager", "compile"))
    assert dev.restarts == 0 and fake.baselines == [("eager", False), ("compile", False)]

    heuristics = CudaDevice(library_cudnn_benchmark=False)
    assert heuristics.measure_protocol == TIMING_PROTOCOL
    plan = _setup(heuristics, "conv_transpose2d_odd")
    assert fake.mode is False
    heuristics.baselines(("eager",) + cudnn_baselines(plan))
    assert fake.baselines[-2:] == [("eager", False), (CUDNN_BENCHMARK, True)]
    assert fake.mode is False and heuristics.restarts == 2


def test_model_new_runs_its_convolution_in_the_mode_it_was_measured_in(monkeypatch):
    """The drop-in module marks its library convolutions when the tuner measured them in
    benchmark mode, and the runtime switches the mode on for that call only."""
    import torch

    from cuda_agent.emit import module_launches
    from cuda_agent.runner import launcher
    from cuda_agent.space.space import Space
    from cuda_agent.space.slots import Target

    prob = load_problem(PROBLEMS / "conv_transpose2d_odd.py")
    plan = make_plan(prob.graph())
    space = Space.for_plan(plan, Target())
    cfg = next(c for c in space.iter_configs() if c.get("memory.layout") == "as_given")
    rendered = space.render(cfg)
    marked = [l["library"] for l in module_launches(rendered, True) if l["library"]]
    assert marked and all(m["cudnn_benchmark"] for m in marked)
    assert not any(l["library"] and "cudnn_benchmark" in l["library"]
                   for l in module_launches(rendered, False))

    seen = []

    def conv(*args, **kwargs):
        seen.append(torch.backends.cudnn.benchmark)
        return torch.zeros(2, 3)

    monkeypatch.setattr(torch.nn.functional, "conv_transpose2d", conv)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    inputs = [torch.zeros(36, 24, 3, 3), None, torch.zeros(8, 48, 63, 47)]
    launcher.run_library(marked[0], inputs)
    launcher.run_library({k: v for k, v in marked[0].items() if k != "cudnn_benchmark"}, inputs)
    assert seen == [True, False] and torch.backends.cudnn.benchmark is False


def test_the_emitted_module_follows_the_devices_mode():
    """A CUDA device says how its candidates' convolutions ran; a replay, its recorded run."""
    from types import SimpleNamespace

    from cuda_agent.emit import _cudnn_benchmark

    cuda = SimpleNamespace(kind="cuda", candidates_cudnn_benchmark=True)
    assert _cudnn_benchmark(cuda) is True
    assert _cudnn_benchmark(SimpleNamespace(kind="cuda", candidates_cudnn_benchmark=False)) is False
    replay = SimpleNamespace(kind="replay", facts=lambda: {"cudnn_benchmark": True})
    assert _cudnn_benchmark(replay) is True
    old = SimpleNamespace(kind="replay", facts=lambda: {})  # recorded before the mode
    assert _cudnn_benchmark(old) is False
    assert _cudnn_benchmark(SimpleNamespace(kind="sim")) is False


def test_a_baseline_is_bounded_by_its_own_timeout(fake, monkeypatch):
    """torch.compile that takes too long is not waited for as a set-up is (10 minutes): it gets
    the baseline timeout, and past it is reported as not measured, with the reason; the next
    baseline still runs."""
    waited: list[tuple[str, float]] = []
    answer = fake.call

    def call(dev, msg, timeout):
        if msg["op"] == "baseline":
            waited.append((msg["which"], timeout))
            if msg["which"] == "compile":
                return {"ok": False, "error_kind": "timeout", "dead": True,
                        "error_msg": f"no answer within {timeout:.0f} s; worker killed"}
        return answer(dev, msg, timeout)

    monkeypatch.setattr(CudaDevice, "_call", call)
    dev = CudaDevice(baseline_timeout_s=42.0)
    _setup(dev, "elementwise_scalar_relu")
    b = dev.baselines(("compile", "eager"))
    assert waited == [("compile", 42.0), ("eager", 42.0)]
    assert b.compile_ms is None and b.eager_ms == 1.0
    assert b.notes["compile"] == ("not measured: no answer within 42 s (timeout); its worker "
                                  "was stopped")


def test_every_set_up_carries_the_captured_graph(fake):
    """The worker is sent the graph this process captured, on a restart as well (it would
    otherwise trace the file again, importing Dynamo)."""
    dev = CudaDevice()
    prob = load_problem(PROBLEMS / "conv_transpose2d_odd.py")
    dev.setup(prob, make_plan(prob.graph()))
    dev._restart()
    assert len(fake.graphs) == 2 and all(g is prob.graph() for g in fake.graphs)


def test_torch_s_baselines_peak_is_reported_apart_from_the_tuning_run_s(fake, monkeypatch):
    """The bound holds the tuning run's own memory; a baseline (torch.compile's layout copies
    and autotuning) is torch's own run: its peak is kept apart and stated, not folded into
    the run's peak (the 1-D convolution GPU test passed the bound only while torch.compile
    ran, 2026-12-06)."""
    from cuda_agent.runner.memory import describe
    G = 1 << 30
    answers = iter([{"ok": True, "memory": {"peak_bytes": 20 * G, "bound_bytes": 29 * G,
                                            "eager_peak_bytes": 12 * G}},
                    {"ok": True, "time_ms": 1.0, "peak_bytes": 22 * G,
                     "baseline_peak_bytes": 32 * G}])
    monkeypatch.setattr(CudaDevice, "_call", lambda self, msg, t: (
        {"ok": True, "gpu": "fake"} if msg["op"] == "facts" else next(answers)))
    dev = CudaDevice()
    _setup(dev, "softmax_short_rows")
    dev.baselines(("compile",))
    mem = dev.facts()["memory"]
    assert mem["peak_bytes"] == 20 * G and mem["within_bound"] is True
    assert mem["baselines_peak_bytes"] == 32 * G
    assert mem["peak_by_phase"] == {"setup": 20 * G, "baselines": 32 * G}
    assert "torch's baselines peaked at 32.00 GiB" in describe(mem)
