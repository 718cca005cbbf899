"""The realistic suite's manifest (issue 33, item 5): each problem of benchmarks/realistic/ with its
size and a rough guess of the device time a suite run spends on it, so that the GPU run
(`gpu_suite.py --parts realistic`) goes cheapest first without capturing anything on the device.

    python benchmarks/realistic_suite.py            # rewrite benchmarks/realistic/suite.json
    python benchmarks/realistic_suite.py --check    # exit 1 if it does not match the files

Sizes come from the captured graph (meta tensors, nothing allocated): `input_bytes` counts every
tensor the program reads (forward() arguments, parameters and buffers), `bytes` and `flops` are the
plan's. `est_s` is a guess for ordering and for the lead's planning, not a measurement: the fixed
start-up costs of a tune and of the harness, the tune's search (bounded by its time limit), the
first torch.compile of the problem, and about 60 forward passes at the GPU's rates.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "realistic"
MANIFEST = SUITE / "suite.json"

#: the tune's default time limit in a suite run (`gpu_suite.py --realistic-time-limit`)
TIME_LIMIT_S = 45.0
# guesses, in seconds: a tune's start (python, torch, CUDA context, capture, compile pool, the
# verification cases), the harness's start (torch, modules, inputs), torch.compile's first call
# (inductor's imports and one Triton compile; more for a GEMM or a convolution's autotuning of
# its epilogue), a search whose kernels compile fast (row kernels) and one whose do not
TUNE_START_S = 25.0
HARNESS_START_S = 10.0
COMPILE_S = {"light": 10.0, "heavy": 25.0}
LIGHT_SEARCH_S = 20.0
FORWARDS = 60  # 3 checks x 2 modules, a float64 reference, timing 3 modules x ~15 runs
BANDWIDTH = 3.0e12  # bytes/s a fp32 kernel reaches on the H200 (copy: ~4.2e12)
FP32_RATE = 25.0e12  # FLOP/s, about half the H200's fp32 peak (strict fp32 products)
HEAVY = ("gemm", "conv", "attention")


def problems(folder: Path = SUITE) -> list[Path]:
    return sorted(folder.glob("*.py"))


def graph_input_bytes(graph) -> int:  # noqa: ANN001 - a captured Graph
    """Bytes of every tensor the program reads: forward() arguments, parameters, buffers."""
    size = {"float32": 4, "int64": 8}
    return sum(math.prod(g.shape) * size.get(g.dtype, 4) for g in graph.inputs)


def measure(path: Path) -> dict:
    """A problem's manifest entry (capture and plan on meta tensors)."""
    sys.path.insert(0, str(ROOT))
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.ir.plan import make_plan
    from cuda_agent.problem import load_problem

    problem = load_problem(path)
    graph = problem.graph()
    plan = make_plan(graph)
    stages = len(plan.program.stages) if isinstance(plan, ProgramPlan) else 1
    entry = {"problem": path.stem, "family": plan.family, "input_bytes": graph_input_bytes(graph),
             "bytes": plan.bytes_moved(), "flops": plan.flops(), "stages": stages}
    entry["est_s"] = estimate_s(entry)
    return entry


def estimate_s(entry: dict, time_limit_s: float = TIME_LIMIT_S) -> float:
    """A guess of a problem's device seconds in a suite run (tune, then harness)."""
    heavy = any(f in entry["family"] for f in HEAVY) or entry.get("stages", 1) > 1
    search = time_limit_s if heavy else min(time_limit_s, LIGHT_SEARCH_S)
    forward = max(entry["bytes"] / BANDWIDTH, entry["flops"] / FP32_RATE)
    return round(TUNE_START_S + search + HARNESS_START_S +
                 COMPILE_S["heavy" if heavy else "light"] + FORWARDS * forward, 1)


def build(folder: Path = SUITE) -> dict:
    """The manifest: entries cheapest first (by `est_s`, then name)."""
    entries = sorted((measure(p) for p in problems(folder)), key=lambda e: (e["est_s"],
                                                                           e["problem"]))
    return {"suite": str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder),
            "note": "written by benchmarks/realistic_suite.py; est_s is a guess for ordering, "
                    f"with a tune time limit of {TIME_LIMIT_S:.0f} s, not a measurement",
            "problems": entries}


def read(path: Path = MANIFEST) -> list[dict]:
    """The manifest's entries in run order (no torch needed)."""
    return json.loads(path.read_text())["problems"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if suite.json is stale")
    args = ap.parse_args()
    manifest = build()
    text = json.dumps(manifest, indent=1) + "\n"
    if args.check:
        if not MANIFEST.exists() or MANIFEST.read_text() != text:
            print(f"{MANIFEST} is stale: run python benchmarks/realistic_suite.py")
            sys.exit(1)
        print(f"{MANIFEST}: up to date ({len(manifest['problems'])} problems)")
        return
    MANIFEST.write_text(text)
    total = sum(e["est_s"] for e in manifest["problems"])
    print(f"wrote {MANIFEST}: {len(manifest['problems'])} problems, about {total / 60:.0f} min "
          "of device time by the guess")


if __name__ == "__main__":
    main()
