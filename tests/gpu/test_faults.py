"""Fault injection with real kernels: each broken kernel is recorded with the right kind, and the
run goes on (the worker is replaced after a fault that poisons its CUDA context)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.devices import Candidate, CudaDevice
from cuda_agent.space.codegen import PRELUDE
from cuda_agent.space.slots import Config, Launch, Rendered
from cuda_agent.runner.timing import TimingSettings

pytestmark = pytest.mark.gpu

RELU = Path(__file__).parents[1] / "data" / "good" / "relu_small.py"  # (37, 129)
N = 37 * 129
SIG = 'extern "C" __global__ void k(const float* __restrict__ in0, float* __restrict__ out, void* ws)'

BODIES = {
    "correct": f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < {N}) "
               "out[i] = in0[i] < 0.f ? 0.f : in0[i];",
    "out_of_bounds_write": f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < {N}) "
                           "out[i + (1LL << 38)] = in0[i];",
    "illegal_address": "int i = blockIdx.x * blockDim.x + threadIdx.x; "
                       "const float* p = (const float*)0x10; out[i % 7] = p[i];",
    # spins on a value read from memory each iteration, so the compiler cannot remove it
    "infinite_loop": "volatile const float* p = in0; while (p[0] == p[0]) { }",
    "wrong_result": f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < {N}) "
                    "out[i] = 2.f * in0[i];",
    "nan": f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < {N}) "
           "out[i] = (i == 5) ? __int_as_float(0x7fffffff) : (in0[i] < 0.f ? 0.f : in0[i]);",
    "partial_write": f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < {N} - 3) "
                     "out[i] = in0[i] < 0.f ? 0.f : in0[i];",
    "too_much_shared_memory": f"extern __shared__ float s[]; int i = blockIdx.x * blockDim.x + "
                              f"threadIdx.x; if (i < {N}) {{ s[threadIdx.x] = in0[i]; "
                              "out[i] = s[threadIdx.x] < 0.f ? 0.f : s[threadIdx.x]; }",
}
EXPECTED = {
    "correct": None, "out_of_bounds_write": "illegal_address", "illegal_address":
    "illegal_address", "infinite_loop": "timeout", "wrong_result": "wrong", "nan": "nan",
    "partial_write": "unwritten", "too_much_shared_memory": "resources",
}


@pytest.fixture(scope="module")
def device():
    dev = CudaDevice(timing=TimingSettings(reps=5, warmup=1), eval_timeout_s=20)
    prob = load_problem(RELU)
    dev.setup(prob, make_plan(prob.graph()))
    yield dev
    dev.close()


def _candidate(name: str, tmp_cache: Path) -> Candidate:
    src = PRELUDE + SIG + " { " + BODIES[name] + " }\n"
    smem = 400 * 1024 if name == "too_much_shared_memory" else 0
    rendered = Rendered(src, (Launch("k", ((N + 255) // 256, 1, 1), (256, 1, 1), smem),))
    with Builder(workers=1, cache_dir=tmp_cache) as b:
        built = b.build([BuildInput(src, "sm_90")])[0]
    assert built.ok, built.error_msg
    return Candidate(f"fault-{name}", Config.of({"fault": name}), rendered, built.cubin_path)


def test_each_fault_is_recorded_with_its_kind_and_the_run_goes_on(device, tmp_path):
    outcomes = {}
    # order matters: a correct kernel after every fault proves the device still works
    for name in ("correct", "wrong_result", "nan", "partial_write", "too_much_shared_memory",
                 "out_of_bounds_write", "correct", "illegal_address", "infinite_loop", "correct"):
        m = device.evaluate(_candidate(name, tmp_path))
        outcomes.setdefault(name, []).append(m.error_kind)
        expected = EXPECTED[name]
        assert m.error_kind == expected, f"{name}: got {m.error_kind} ({m.error_msg})"
        assert m.ok == (expected is None)
    assert device.restarts >= 2  # illegal address and the hang each cost a worker
    print("fault outcomes:", outcomes, "worker restarts:", device.restarts)
