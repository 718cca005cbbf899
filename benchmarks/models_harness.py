"""An independent check of a whole model's emitted model_new.py (issue 50, items 3 and 4), as
`realistic_harness.py` checks one kernel's: it does not import cuda-agent nor read its report:
torch, the problem file and model_new.py alone, under PyTorch's default settings, in a process
of its own.

    python -m benchmarks.models_harness MODEL.py OUT/model_new.py --out row.json

1. `realistic_harness.run`: ModelNew against Model on fresh inputs (atol = rtol = 1e-2, the
   buffers after), then eager, default `torch.compile(model)` and ModelNew timed (CUDA events,
   warm-up, L2 flushed, median and interquartile range).
2. The state_dict loads both ways: the original's into ModelNew and ModelNew's into the
   original, strictly (the same names, shapes and dtypes).
3. Where the eager time goes: each kernel region's call (the emitted module's custom ops,
   `<namespace>::rK`) recorded with its real inputs by a dispatch mode over one ModelNew
   forward, then the region's torch reference (the module's `_rK_ref`: the aten ops eager runs
   for it) timed on those inputs, and the region's generated kernels too. The fraction of eager
   time in tuned regions is the sum of the references' times of the regions that run generated
   code (`REGION_SOURCES`), over the whole eager forward's time; in generated kernels alone,
   the same over the regions whose kernels call no vendor library (their `LAUNCHES` have no
   `library` step). The parts are timed apart, each with a cold L2 and its own launch, so their
   sum can pass the whole by a few percent: the fraction is reported as measured.
4. CUDA graphs (item 3): ModelNew captured in one `torch.cuda.CUDAGraph` (warm-up on a side
   stream, as torch's docs ask) and the eager model captured in another; each replay's output
   checked against the eager model's, each replay timed as above. What a graph saves, the
   module's time less its replay's, is the launch overhead.
Steps 3 and 4 measure a module already verified: a failure there is the row's `regions_error`,
`graph_error` or `<eager|new>_graph_error`, never its status.

Writes one JSON row (`status`: ok, wrong, oom or error, with a one-line `message`) and exits 0
whatever the verdict; 2 when a file cannot be loaded. On a CPU device (the CPU tests) the
checks and the region record run, timed by the host's clock where a timer is asked for.
"""

from __future__ import annotations

import ast
import os
import re
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.realistic_harness import (L2_FLUSH_BYTES, build, compare, first_line,
                                          harness_parser, is_cuda, make_inputs, run,
                                          start_harness, time_gpu, write_row)

Timer = Callable[..., dict]


def time_host(fn: Callable[[], Any], flush: torch.Tensor | None = None, warmup: int = 1,
              budget_s: float = 0.2, min_reps: int = 3, max_reps: int = 10) -> dict:
    """`time_gpu`'s result from the host's clock: where there is no GPU (the CPU tests)."""
    for _ in range(warmup):
        fn()
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_reps or (len(times) < max_reps and time.perf_counter() < t_end):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return {"ms": statistics.median(times), "iqr_ms": q[2] - q[0], "reps": len(times)}


def state_dict_both_ways(ref: torch.nn.Module, new: torch.nn.Module) -> str | None:
    """None when the original's state_dict loads strictly into ModelNew and ModelNew's into the
    original, else the first failure's line."""
    for what, src, dst in (("Model's into ModelNew", ref, new), ("ModelNew's into Model", new,
                                                                  ref)):
        try:
            dst.load_state_dict(src.state_dict(), strict=True)
        except Exception as exc:  # noqa: BLE001 - the verdict carries it
            return f"state_dict {what}: {first_line(exc)}"
    return None


# ---- CUDA graphs --------------------------------------------------------------------------------

def capture(module: torch.nn.Module, inputs: list, warmup: int = 3
            ) -> tuple["torch.cuda.CUDAGraph", Any]:
    """`module(*inputs)` captured in a CUDA graph; (graph, its static output). Warm-up on a
    side stream first (lazy loading, cuDNN's and cuBLAS's workspaces), as torch's docs ask."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(warmup):
            module(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = module(*inputs)
    return graph, out


def graph_timings(prob: ModuleType, ref: torch.nn.Module, new: torch.nn.Module, device: str,
                  seed: int, budget_s: float, timer: Timer = time_gpu) -> dict:
    """ModelNew and the eager model each captured in a CUDA graph: the replay checked against
    the eager model's output and timed. A capture that fails is the row's `<name>_graph_error`
    (never its verdict, which is ModelNew's forward)."""
    out: dict[str, Any] = {}
    flush = torch.empty(L2_FLUSH_BYTES // 4, device=device)
    inputs = make_inputs(prob.get_inputs, seed, device)
    with torch.no_grad():
        want = ref(*inputs)
    for name, module in (("eager", ref), ("new", new)):
        try:
            graph, static = capture(module, inputs)
            graph.replay()
            torch.cuda.synchronize()
            c = compare(static, want)
            out[f"{name}_graph_ok"] = c["ok"]
            if not c["ok"]:
                out[f"{name}_graph_error"] = "replay differs from eager: " + (c.get("why") or (
                    f"{c['mismatches']} of {c['numel']} elements, max abs err "
                    f"{c['max_abs_err']:.3g}"))
                continue
            t = timer(graph.replay, flush, budget_s=budget_s)
            out[f"{name}_graph_ms"], out[f"{name}_graph_iqr_ms"] = t["ms"], t["iqr_ms"]
            del graph, static
        except Exception as exc:  # noqa: BLE001 - a module that cannot be captured
            out[f"{name}_graph_ok"] = False
            out[f"{name}_graph_error"] = first_line(exc)[:300]
        torch.cuda.empty_cache()
    return out


# ---- where the eager time goes ------------------------------------------------------------------

class RegionCalls(TorchDispatchMode):
    """Records each call of the emitted module's kernel-region ops (`<ns>::rK`) with its
    inputs, and runs it."""

    def __init__(self, namespace: str):
        super().__init__()
        self.ns = namespace
        self.calls: list[tuple[int, Any, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func._schema.name
        m = re.fullmatch(re.escape(self.ns) + r"::r(\d+)", name)
        if m:
            self.calls.append((int(m.group(1)), func, tuple(args)))
        return func(*args, **(kwargs or {}))


def library_steps(region_source: str) -> bool:
    """Whether a region's generated module calls a vendor library (cuBLAS, cuDNN): a `library`
    step in its LAUNCHES."""
    m = re.search(r"^LAUNCHES = (.*)$", region_source, flags=re.M)
    if not m:
        return False
    return any(launch.get("library") for launch in ast.literal_eval(m.group(1)))


def region_times(new_mod: ModuleType, new: torch.nn.Module, inputs: list, device: str,
                 eager_ms: float | None, budget_s: float, timer: Timer | None) -> dict:
    """Each kernel region's torch reference and generated code timed on its real inputs
    (module header); the fractions of `eager_ms` in tuned regions and in generated kernels
    alone. Without `timer` (a CPU check), the record alone."""
    mode = RegionCalls(new_mod._NS)
    with torch.no_grad(), mode:
        new(*inputs)
    sources = getattr(new_mod, "REGION_SOURCES", {})
    flush = torch.empty(L2_FLUSH_BYTES // 4, device=device) if timer is not None and \
        is_cuda(device) else None
    regions = []
    with torch.no_grad():
        for k, func, args in mode.calls:
            r: dict[str, Any] = {"region": k, "tuned": k in sources,
                                 "library": k in sources and library_steps(sources[k])}
            if timer is not None:
                ref = getattr(new_mod, f"_r{k}_ref")
                dev = args[0].device
                r["ref_ms"] = timer(lambda: ref(dev, *args), flush, budget_s=budget_s)["ms"]
                r["new_ms"] = timer(lambda: func(*args), flush, budget_s=budget_s)["ms"]
            regions.append(r)
    out: dict[str, Any] = {"regions_timed": regions, "kernel_regions": len(regions),
                           "tuned_regions": sum(r["tuned"] for r in regions)}
    if timer is not None and eager_ms:
        tuned = sum(r["ref_ms"] for r in regions if r["tuned"])
        alone = sum(r["ref_ms"] for r in regions if r["tuned"] and not r["library"])
        out.update(eager_in_tuned=tuned / eager_ms, eager_in_generated=alone / eager_ms,
                   regions_ref_ms=sum(r["ref_ms"] for r in regions),
                   regions_new_ms=sum(r["new_ms"] for r in regions))
    return out


# ---- the row ------------------------------------------------------------------------------------

def run_model(problem_path: Path, model_new_path: Path, seeds: list[int], device: str = "cuda",
              time_budget_s: float = 1.0, timer: Timer | None = None) -> dict:
    """The row of one whole model: `realistic_harness.run`'s checks and timings, then the
    state_dict both ways, the CUDA graphs and the regions' times (on CUDA; on a CPU device the
    checks and the region record, with `timer` the regions timed by it)."""
    row = run(problem_path, model_new_path, seeds, device, time_budget_s)
    if row["status"] != "ok":
        return row
    phase = "loading the files again"
    try:
        prob = sys.modules[f"realistic_problem_{problem_path.stem}"]
        new_mod = sys.modules[f"realistic_model_new_{problem_path.stem}"]
        init = list(prob.get_init_inputs())
        phase = "building the modules"
        ref, new = build(prob.Model, init, device), build(new_mod.ModelNew, init, device)
        phase = "loading the state_dict both ways"
        why = state_dict_both_ways(ref, new)
        row["state_dict_both_ways"] = why is None
        if why:
            row.update(status="wrong", message=why)
            return row
    except torch.cuda.OutOfMemoryError as exc:
        row.update(status="oom", message=f"out of memory in {phase}: {first_line(exc)}")
        return row
    except Exception as exc:  # noqa: BLE001 - the row carries every failure
        row.update(status="error", message=f"{phase}: {first_line(exc)}")
        return row
    # measurements of a verified module: a failure is its part's `*_error`, not the verdict.
    # The regions first: a failed graph capture can leave the stream unusable for a while
    timer = timer or (time_gpu if is_cuda(device) else None)
    try:
        inputs = make_inputs(prob.get_inputs, max(seeds) + 1, device)
        row.update(region_times(new_mod, new, inputs, device, row.get("eager_ms"),
                                time_budget_s, timer))
        del inputs
    except Exception as exc:  # noqa: BLE001 - out of memory included
        row["regions_error"] = first_line(exc)[:300]
    if is_cuda(device):
        try:
            row.update(graph_timings(prob, ref, new, device, max(seeds) + 2, time_budget_s))
        except Exception as exc:  # noqa: BLE001
            row["graph_error"] = first_line(exc)[:300]
        if row.get("new_graph_ms") and row.get("eager_graph_ms"):
            row["graph_speedup_vs_eager_graph"] = row["eager_graph_ms"] / row["new_graph_ms"]
            row["new_launch_overhead_ms"] = row["new_ms"] - row["new_graph_ms"]
            row["eager_launch_overhead_ms"] = row["eager_ms"] - row["eager_graph_ms"]
    return row


def main() -> None:
    args = harness_parser(__doc__.splitlines()[0]).parse_args()
    start_harness(args)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    row = run_model(args.problem, args.model_new, seeds, time_budget_s=args.time_budget)
    write_row(row, args.out)
    speed = (f", {row['new_ms']:.3f} ms against eager {row['eager_ms']:.3f} ms and "
             f"torch.compile {row['compile_ms']:.3f} ms" if row.get("new_ms") else "")
    print(f"{row['problem']}: {row['status']}{': ' + row['message'] if row['message'] else ''}"
          f"{speed}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the row is on disk: the interpreter's teardown measures nothing


if __name__ == "__main__":
    main()
