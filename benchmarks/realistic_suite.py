"""A suite's manifest (issue 33, item 5; issue 48, item 4): each problem of a suite folder
(benchmarks/realistic/ by default, or benchmarks/conv_chains/) with its size and a rough guess of
the device time a suite run spends on it, so that the GPU run (`gpu_suite.py --parts realistic
[--realistic-suite DIR]`) goes cheapest first without capturing anything on the device.

    python -m benchmarks.realistic_suite [--suite DIR]          # rewrite DIR/suite.json
    python -m benchmarks.realistic_suite [--suite DIR] --check  # exit 1 if it does not match
    python -m benchmarks.realistic_suite --suite benchmarks/conv_chains \
        --plans benchmarks/results/DAY-conv-chains-cpu.json     # each problem's plan or refusal

Sizes come from the captured graph (meta tensors, nothing allocated): `input_bytes` counts every
tensor the program reads (forward() arguments, parameters and buffers), `bytes` and `flops` are the
plan's. A problem the tool refuses (capture or planning) keeps its `input_bytes` (from torch alone),
its one-line `refused` reason and no `bytes` or `flops`: the GPU run still tunes it, and records
the refusal as its row. `est_s` is a guess for ordering and for the lead's planning, not a
measurement: the fixed start-up costs of a tune and of the harness, the tune's search (bounded by
its time limit), the first torch.compile of the problem, and about 60 forward passes at the GPU's
rates.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import weakref
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "realistic"
MANIFEST = SUITE / "suite.json"
MANIFEST_NAME = "suite.json"

#: the tune's default time limit in a suite run (`gpu_suite.py --realistic-time-limit`)
TIME_LIMIT_S = 45.0
# guesses, in seconds: a tune's start (python, torch, CUDA context, capture, compile pool, the
# verification cases), the harness's start (torch, modules, inputs), torch.compile's first call
# (inductor's imports and one Triton compile; more for a GEMM or a convolution's autotuning of
# its epilogue), a search whose kernels compile fast (row kernels) and one whose do not
TUNE_START_S = 25.0
HARNESS_START_S = 10.0
COMPILE_S = {"light": 10.0, "heavy": 25.0}
# torch.compile's max-autotune (the harness's --max-autotune): it benchmarks Triton and library
# choices for every product and convolution
MAX_AUTOTUNE_S = {"light": 30.0, "heavy": 120.0}
LIGHT_SEARCH_S = 20.0
FORWARDS = 60  # 3 checks x 2 modules, a float64 reference, timing 3 modules x ~15 runs
BANDWIDTH = 3.0e12  # bytes/s a fp32 kernel reaches on the H200 (copy: ~4.2e12)
FP32_RATE = 25.0e12  # FLOP/s, about half the H200's fp32 peak (strict fp32 products)
HEAVY = ("gemm", "conv", "attention")
REFUSED_FAMILY = "unsupported"
"""the family of a problem the tool refuses: its row is the tune's one-line refusal"""
FOOTPRINT_LIMIT = 8 << 30
"""the most device memory one eager forward of a conv-chain problem may hold (issue 48)"""


def manifest_path(folder: Path = SUITE) -> Path:
    return folder / MANIFEST_NAME


def problems(folder: Path = SUITE) -> list[Path]:
    return sorted(folder.glob("*.py"))


def graph_input_bytes(graph) -> int:  # noqa: ANN001 - a captured Graph
    """Bytes of every tensor the program reads: forward() arguments, parameters, buffers."""
    size = {"float32": 4, "int64": 8}
    return sum(math.prod(g.shape) * size.get(g.dtype, 4) for g in graph.inputs)


def _meta_model(path: Path) -> tuple:
    """(model, inputs) of a problem file built on meta tensors (nothing allocated)."""
    import torch

    from cuda_agent.problem import load_problem

    problem = load_problem(path, check=False)
    with torch.device("meta"):
        model = problem.model_cls(*problem.init_inputs())
        inputs = list(problem.get_inputs())
    return model, inputs


def _state_bytes(model, inputs: list) -> int:  # noqa: ANN001 - an nn.Module
    import torch

    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    return sum(t.untyped_storage().nbytes() for t in
               tensors + list(model.parameters()) + list(model.buffers()))


def torch_input_bytes(path: Path) -> int:
    """`input_bytes` from torch alone (for a problem the capture refuses)."""
    model, inputs = _meta_model(path)
    return _state_bytes(model, inputs)


def eager_peak_bytes(path: Path) -> int:
    """The most tensor bytes alive at once in one eager forward under no_grad, counted on meta
    tensors: inputs, parameters and buffers, and each intermediate result from the op that makes
    it until its last reference goes (as the caching allocator holds them; its rounding and the
    libraries' workspaces not counted). A view shares its base's bytes and is not counted."""
    import torch
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    model, inputs = _meta_model(path)

    class LiveBytes(TorchDispatchMode):
        def __init__(self, held: int):
            super().__init__()
            self.live = self.peak = held
            self.owned: set[int] = set()

        def _free(self, key: int, n: int) -> None:
            self.live -= n
            self.owned.discard(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            for t in pytree.tree_leaves(out):
                # an in-place op hands back its argument: counted once, where it was made
                if isinstance(t, torch.Tensor) and t._base is None and id(t) not in self.owned:
                    n = t.untyped_storage().nbytes()
                    self.owned.add(id(t))
                    self.live += n
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(t, self._free, id(t), n)
            return out

    with torch.no_grad(), LiveBytes(_state_bytes(model, inputs)) as mode:
        out = model(*inputs)
        del out
    return mode.peak


def measure(path: Path) -> dict:
    """A problem's manifest entry (capture and plan on meta tensors)."""
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem

    try:
        graph = load_problem(path).graph()
        plan = make_plan(graph)
    except CudaAgentError as exc:
        entry = {"problem": path.stem, "family": REFUSED_FAMILY,
                 "input_bytes": torch_input_bytes(path), "bytes": None, "flops": None,
                 "stages": None, "refused": one_line(exc)}
        entry["est_s"] = estimate_s(entry)
        return entry
    stages = len(plan.program.stages) if isinstance(plan, ProgramPlan) else 1
    entry = {"problem": path.stem, "family": plan.family, "input_bytes": graph_input_bytes(graph),
             "bytes": plan.bytes_moved(), "flops": plan.flops(), "stages": stages}
    entry["est_s"] = estimate_s(entry)
    return entry


def one_line(exc: BaseException) -> str:
    """The refusal's first line, the checkout's path left out (the file is named relative to
    it, so the manifest reads the same in any clone)."""
    text = str(exc).strip().replace(str(ROOT) + "/", "")
    return text.splitlines()[0] if text else type(exc).__name__


def estimate_s(entry: dict, time_limit_s: float = TIME_LIMIT_S, tune_baselines: bool = False,
               max_autotune: bool = False) -> float:
    """A guess of a problem's device seconds in a suite run (tune, then harness); with
    `tune_baselines`, the tune's own torch eager and torch.compile (a run as a user's, without
    --no-baselines), with `max_autotune`, the harness's max-autotune torch.compile too. A refused
    problem costs a tune's start."""
    if entry.get("refused"):
        return TUNE_START_S
    weight = "heavy" if any(f in entry["family"] for f in HEAVY) or \
        entry.get("stages", 1) > 1 else "light"
    search = time_limit_s if weight == "heavy" else min(time_limit_s, LIGHT_SEARCH_S)
    forward = max(entry["bytes"] / BANDWIDTH, entry["flops"] / FP32_RATE)
    compiles = COMPILE_S[weight] * (3 if tune_baselines else 1)  # at defaults, matched, here
    if max_autotune:
        compiles += MAX_AUTOTUNE_S[weight]
    forwards = FORWARDS * (2 if tune_baselines else 1)
    return round(TUNE_START_S + search + HARNESS_START_S + compiles + forwards * forward, 1)


def build(folder: Path = SUITE) -> dict:
    """The manifest: entries cheapest first (by `est_s`, then name)."""
    entries = sorted((measure(p) for p in problems(folder)), key=lambda e: (e["est_s"],
                                                                           e["problem"]))
    return {"suite": suite_name(folder),
            "note": "written by benchmarks/realistic_suite.py; est_s is a guess for ordering, "
                    f"with a tune time limit of {TIME_LIMIT_S:.0f} s, not a measurement",
            "problems": entries}


def suite_name(folder: Path) -> str:
    folder = folder.resolve()
    return str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)


def read(path: Path = MANIFEST) -> list[dict]:
    """The manifest's entries in run order (no torch needed)."""
    return json.loads(path.read_text())["problems"]


def plan_of(path: Path) -> dict:
    """How the tool takes a problem on the CPU: its plan's kind (`program` for several kernels)
    and family, each stage's kind, family and the templates that cover it (for an H200-class
    target at strict fp32), or the one-line refusal and where it came."""
    from cuda_agent.errors import CudaAgentError
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.space.slots import Target
    from cuda_agent.space.space import Space

    row: dict = {"problem": path.stem, "input_bytes": torch_input_bytes(path),
                 "eager_peak_bytes": eager_peak_bytes(path), "plan_kind": None, "family": None,
                 "stages": [], "refused": None, "refused_at": None}
    step = "capture"
    try:
        graph = load_problem(path).graph()
        step = "plan"
        plan = make_plan(graph)
        row["plan_kind"], row["family"] = plan.kind, plan.family
        plans = [s.plan for s in plan.program.stages] if isinstance(plan, ProgramPlan) \
            else [plan]
        step = "space"
        for p in plans:
            row["stages"].append({"kind": p.kind, "family": p.family, "templates": [
                t.name for t in Space.for_plan(p, Target()).templates]})
    except CudaAgentError as exc:
        row["refused"], row["refused_at"] = one_line(exc), step
    return row


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def plans_doc(folder: Path) -> dict:
    """The CPU results file of a suite's plans: every problem's `plan_of`, and the refusals
    grouped by reason, most common first."""
    import torch

    rows = [plan_of(p) for p in problems(folder)]
    reasons = Counter(r["refused"] for r in rows if r["refused"])
    refusals = [{"reason": why, "count": n,
                 "problems": [r["problem"] for r in rows if r["refused"] == why]}
                for why, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"gpu": None, "device": "cpu", "date": time.strftime("%Y-%m-%d"),
            "commit": commit(), "torch": torch.__version__, "suite": suite_name(folder),
            "note": "capture, plan and each stage's templates on the CPU (meta tensors); "
                    "eager_peak_bytes: the most tensor bytes one eager forward holds at once",
            "problems": len(rows), "refused": sum(reasons.values()), "refusals": refusals,
            "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=SUITE,
                    help="the suite's folder of problem files (default: benchmarks/realistic)")
    ap.add_argument("--check", action="store_true", help="exit 1 if suite.json is stale")
    ap.add_argument("--plans", type=Path, default=None,
                    help="write each problem's plan (or refusal) to this JSON file instead")
    args = ap.parse_args()
    folder = args.suite
    if not folder.is_dir() or not problems(folder):
        print(f"error: {folder}: not a folder of problem files", file=sys.stderr)
        sys.exit(2)
    if args.plans is not None:
        doc = plans_doc(folder)
        tmp = args.plans.with_name(args.plans.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(args.plans)
        print(f"wrote {args.plans}: {doc['problems']} problems, {doc['refused']} refused")
        for r in doc["refusals"]:
            print(f"  {r['count']} x {r['reason']}: {', '.join(r['problems'])}")
        return
    manifest = build(folder)
    path = manifest_path(folder)
    text = json.dumps(manifest, indent=1) + "\n"
    if args.check:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is stale: run python -m benchmarks.realistic_suite --suite {folder}")
            sys.exit(1)
        print(f"{path}: up to date ({len(manifest['problems'])} problems)")
        return
    path.write_text(text)
    total = sum(e["est_s"] for e in manifest["problems"])
    print(f"wrote {path}: {len(manifest['problems'])} problems, about {total / 60:.0f} min "
          "of device time by the guess")


if __name__ == "__main__":
    main()
