"""Which cache-hint instructions let a row kernel stream as fast as torch.compile's? Times a row
template's configurations as rendered and with their loads rewritten to other PTX eviction
qualifiers, beside torch.compile of the same problem, all under the tuner's timing protocol
(L2 flushed before every run, medians). Runs on the GPU machine:

    python3 -m benchmarks.row_hint_probe benchmarks/problems/norm_layernorm.py \
        "algo=passes ... vec=4 combine=shfl" [...] --out $OUT/hints.json

Variants: `rendered`; `l1`: every load of a row operand L1::evict_last except its last pass's,
which is L1::evict_first, and the weights L1::evict_last, no L2 policy (the qualifiers Triton
emits for eviction_policy); `l1_last`: every load L1::evict_last.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from cuda_agent.agents.vocab import VOCAB
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner import launcher
from cuda_agent.runner.timing import L2Flusher, TimingSettings, time_runs
from cuda_agent.space.slots import ABSENT, Config, Target, expand_short
from cuda_agent.space.space import Space

LOADS = r"""
__device__ __forceinline__ float4 ca_l1last4(const float* p) {
  float4 v; asm volatile("ld.global.L1::evict_last.v4.f32 {%0, %1, %2, %3}, [%4];"
    : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ float4 ca_l1first4(const float* p) {
  float4 v; asm volatile("ld.global.L1::evict_first.v4.f32 {%0, %1, %2, %3}, [%4];"
    : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)); return v; }
"""
LOAD = re.compile(r"ca_ld4<\d>\((in\d+) \+ \(([^;]*?)\)\)")


def variant(source: str, kind: str) -> str:
    if kind == "rendered":
        return source
    loads = list(LOAD.finditer(source))
    last_row_load = {}
    for m in loads:
        if "o *" in m.group(2):
            last_row_load[m.group(1)] = m.start()
    out, pos = [], 0
    for m in loads:
        row = "o *" in m.group(2)
        fn = "ca_l1first4" if (kind == "l1" and row and last_row_load[m.group(1)] == m.start()) \
            else "ca_l1last4"
        out += [source[pos:m.start()], f"{fn}({m.group(1)} + ({m.group(2)}))"]
        pos = m.end()
    out.append(source[pos:])
    text = "".join(out)
    return text.replace('extern "C"', LOADS + '\nextern "C"', 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    problem = load_problem(args.problem)
    plan = make_plan(problem.graph())
    space = Space.for_plan(plan, Target())
    dev = torch.device("cuda", 0)
    model = problem.make_model(dev)
    inputs = problem.make_inputs(dev)
    graph = problem.graph()
    params = dict(model.named_parameters())
    tensors = []
    for k in plan.operands:
        gin = graph.inputs[k]
        t = inputs[gin.arg_index] if gin.role == "input" else params[gin.target]
        tensors.append(t.detach().contiguous().reshape(plan.operand_shapes[k]))
    with torch.no_grad():
        want = model(*inputs).reshape(plan.out_shape)
        compiled = torch.compile(model)
        compiled(*inputs)
    settings = TimingSettings(reps=30, max_seconds=4.0)
    flusher = L2Flusher(dev, Target().l2_bytes)
    rows = []

    def timed(name: str, run) -> None:
        t = time_runs(lambda k: run(), 1, settings, flusher)
        rows.append({"name": name, "median_ms": t.median_ms, "q1_ms": t.q1_ms,
                     "q3_ms": t.q3_ms})
        print(f"{t.median_ms:.4f} ms  [{t.q1_ms:.4f}, {t.q3_ms:.4f}]  {name}", flush=True)

    with torch.no_grad():
        timed("torch.compile", lambda: compiled(*inputs))
    names = [s.name for s in space.slots]
    for short in args.configs:
        cfg = Config.of({**{n: ABSENT for n in names}, **expand_short(short, VOCAB)})
        r = space.render(cfg)
        for kind in ("rendered", "l1", "l1_last"):
            image = launcher.compile_for_device(variant(r.source, kind), dev)
            kernels = launcher.LoadedKernels(image, [L.__dict__ for L in r.launches],
                                             r.workspace_bytes, r.zero_workspace)
            out = torch.empty(plan.out_shape, device=dev)
            kernels(tensors, out)
            torch.cuda.synchronize()
            err = float((out - want).abs().max())
            assert err < 1e-3, (kind, short, err)
            timed(f"{kind}: {short}", lambda: kernels(tensors, out))
            kernels.close()
    rows.sort(key=lambda r: r["median_ms"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"problem": Path(args.problem).stem,
                                          "gpu": torch.cuda.get_device_name(dev),
                                          "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
