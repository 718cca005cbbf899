"""An independent check of an emitted model_new.py, as a user's harness runs one (issue 33, item 5).
It does not import cuda-agent nor read its report: only torch, the problem file and model_new.py,
under PyTorch's default settings (no flag changed), in a process of its own.

    python -m benchmarks.realistic_harness PROBLEM.py MODEL_NEW.py --out row.json

1. `Model(*get_init_inputs())` and `ModelNew(*get_init_inputs())`, each built after
   `torch.manual_seed(0)` (KernelBench's way to give both the same state), moved to the GPU as
   constructed: no `.eval()`, so a BatchNorm module stays in training mode.
2. Correctness, under `torch.no_grad()` as KernelBench runs it: for each seed, fresh inputs from
   `get_inputs()` drawn on the GPU after `torch.manual_seed(seed)`; ModelNew's output against the
   reference's with atol = rtol = 1e-2 (KernelBench's tolerance) over the whole shape; after the
   checks, the modules' buffers (BatchNorm's running statistics, updated by every forward) the same
   way. On the first seed, both outputs also against a float64 copy of the reference, where the
   GPU has room for it: ModelNew's error and torch's own fp32 error side by side.
3. Timing, only of a module that passed: torch eager, `torch.compile(model)` in its default mode,
   and ModelNew, each: warm-up, then runs timed with CUDA events, L2 flushed before each (outside
   the events), median and interquartile range. The events hold what a user's call costs (the
   forward's Python and launches too); at these sizes (milliseconds) the GPU's work dominates.
4. With --max-autotune, then `torch.compile(model, mode="max-autotune")` as well, timed the same
   way (`compile_max_ms`, its spread `compile_max_iqr_ms`). Its first call benchmarks every
   choice of kernel and can take minutes: the row without it is written first, marked
   `"compile_max": "running"`, so that a harness killed there still leaves its verdict and the
   other timings.

Writes one JSON row (`status`: ok, wrong, oom or error, with a one-line `message`) and exits 0
whatever the verdict; 2 when a file cannot be loaded.
"""

from __future__ import annotations

import time as _time

STARTED = _time.time()  # before torch's import: the row says what the process's start cost

import argparse
import copy
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

ATOL = RTOL = 1e-2  # KernelBench's tolerance
L2_FLUSH_BYTES = 256 << 20  # over four times the H200's 60 MiB L2
CHUNK = 1 << 26  # elements compared at a time: a float64 chunk is 512 MiB


class Verdict(Exception):
    """Ends the harness early with a status and its one-line message."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(cls: type, init: list, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls(*init).to(device)


def make_inputs(get_inputs: Callable[[], list], seed: int, device: str) -> list:
    """Fresh inputs from the problem's own get_inputs(), drawn directly on the device (a 24 GiB
    input drawn on the host and copied over takes a minute)."""
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = list(get_inputs())
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]


def tensor_bytes(ts: list) -> int:
    return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))


def compare(out: Any, ref: torch.Tensor, atol: float = ATOL, rtol: float = RTOL) -> dict:
    """`out` against `ref` as `torch.allclose(out, ref, atol, rtol)` judges it (NaN never close,
    equal infinities close), a chunk at a time so that a 16 GiB output needs no full-size
    temporaries; with the largest absolute error, the largest relative error (|out - ref| over
    |ref|, |ref| floored at 1e-6 of max |ref| so that zeros of the reference do not make it
    infinite) and the norm-wise relative error ||out - ref|| / ||ref||."""
    if not isinstance(out, torch.Tensor):
        return {"ok": False, "why": f"output is a {type(out).__name__}, not a tensor"}
    if tuple(out.shape) != tuple(ref.shape):
        return {"ok": False, "why": f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"}
    if out.dtype != ref.dtype and not (out.is_floating_point() and ref.is_floating_point()):
        return {"ok": False, "why": f"dtype {out.dtype}, expected {ref.dtype}"}
    a, b = out.detach().reshape(-1), ref.detach().reshape(-1)
    n = b.numel()
    ref_max, ref_sq = 0.0, 0.0
    for i in range(0, n, CHUNK):
        y = b[i:i + CHUNK].double()
        finite = y[torch.isfinite(y)]
        if finite.numel():
            ref_max = max(ref_max, finite.abs().max().item())
            ref_sq += finite.square().sum().item()
    floor = max(ref_max * 1e-6, 1e-30)
    bad, max_abs, max_rel, diff_sq = 0, 0.0, 0.0, 0.0
    for i in range(0, n, CHUNK):
        x, y = a[i:i + CHUNK].double(), b[i:i + CHUNK].double()
        d = (x - y).abs()
        close = (d <= atol + rtol * y.abs()) | (x == y)  # equal infinities are close
        bad += int((~close).sum().item())
        dd = torch.where(x == y, torch.zeros_like(d), d)
        if torch.isnan(dd).any() or torch.isinf(dd).any():
            max_abs = max_rel = diff_sq = math.inf
            continue
        if dd.numel():
            max_abs = max(max_abs, dd.max().item())
            max_rel = max(max_rel, (dd / y.abs().clamp_min(floor)).max().item())
            diff_sq += dd.square().sum().item()
    rel_norm = math.sqrt(diff_sq) / math.sqrt(ref_sq) if ref_sq > 0 else (
        0.0 if diff_sq == 0 else math.inf)
    return {"ok": bad == 0, "mismatches": bad, "numel": n, "max_abs_err": max_abs,
            "max_rel_err": max_rel, "rel_norm_err": rel_norm}


def compare_buffers(ref: torch.nn.Module, new: torch.nn.Module) -> str | None:
    """None when every buffer of `new` matches the reference's (allclose at the tolerance), else
    a one-line description of the first that does not (BatchNorm's running statistics)."""
    theirs = dict(new.named_buffers())
    for name, buf in ref.named_buffers():
        if name not in theirs:
            return f"buffer {name} missing from ModelNew"
        c = compare(theirs[name], buf)
        if not c["ok"]:
            what = c.get("why") or (f"{c['mismatches']} of {c['numel']} elements, max abs err "
                                    f"{c['max_abs_err']:.3g}")
            return f"buffer {name} differs from the reference's after the checks ({what})"
    return None


def time_gpu(fn: Callable[[], Any], flush: torch.Tensor, warmup: int = 3,
             budget_s: float = 1.0, min_reps: int = 5, max_reps: int = 30) -> dict:
    """Median of CUDA-event times of `fn`, L2 flushed before each run (outside the events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.zero_()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    reps = int(min(max_reps, max(min_reps, budget_s * 1e3 / once)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for s, e in events:
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return {"ms": statistics.median(times), "iqr_ms": q[2] - q[0], "reps": reps}


def copy_bandwidth(device: str, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in TB/s, read and write counted."""
    src = torch.empty(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    flush = torch.empty(L2_FLUSH_BYTES // 4, device=device)
    t = time_gpu(lambda: dst.copy_(src), flush, budget_s=0.2)
    return 2 * nbytes / (t["ms"] * 1e-3) / 1e12


def flags() -> dict:
    """The process's numeric settings, to show they are PyTorch's defaults (and stay so)."""
    return {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn.benchmark": torch.backends.cudnn.benchmark}


def float64_fits(inputs: list, peak_extra: int, device: str) -> str | None:
    """None when a float64 copy of the reference's forward should fit on the device, else why
    not: its inputs twice the size, its working memory about twice eager's, 1 GiB of slack."""
    if not is_cuda(device):
        return None
    need = 2 * tensor_bytes(inputs) + 2 * peak_extra + (1 << 30)
    free = torch.cuda.mem_get_info(device)[0]
    return None if free > need else (f"needs about {need / 2**30:.1f} GiB, "
                                     f"{free / 2**30:.1f} GiB free")


def float64_check(model_cls: type, init: list, state: dict, inputs: list, outputs: dict,
                  device: str) -> dict:
    """Each of `outputs` (name -> fp32 output) against a float64 copy of the reference holding
    `state` (the reference's state before these inputs' forward)."""
    m64 = build(model_cls, init, device)
    m64.load_state_dict(state)
    m64.double()
    x64 = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
           for t in inputs]
    with torch.no_grad():
        ref64 = m64(*x64)
    del x64, m64
    out = {}
    for name, o in outputs.items():
        c = compare(o, ref64)
        out[name] = {k: c.get(k) for k in ("max_abs_err", "max_rel_err", "rel_norm_err", "why")
                     if c.get(k) is not None}
    return out


def peak_of(fn: Callable[[], Any], device: str) -> tuple[Any, int]:
    """fn()'s result and the device memory it allocated at its peak beyond what was held."""
    if not is_cuda(device):
        return fn(), 0
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated(device) - before


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def run(problem_path: Path, model_new_path: Path, seeds: list[int], device: str = "cuda",
        time_budget_s: float = 1.0, max_autotune: bool = False,
        checkpoint: Callable[[dict], None] | None = None) -> dict:
    """The row for one problem; on a CPU `device` (the CPU tests) the checks alone, untimed.
    With `max_autotune`, torch.compile's max-autotune mode is timed last, after `checkpoint` was
    handed the row so far (its verdict and the other timings)."""
    gpu = torch.cuda.get_device_name(device) if is_cuda(device) else "cpu"
    row: dict[str, Any] = {"problem": problem_path.stem, "status": "error", "message": "",
                           "gpu": gpu, "torch": torch.__version__,
                           "cuda": torch.version.cuda, "flags": flags(), "seeds": seeds,
                           "atol": ATOL, "rtol": RTOL}
    t0 = time.time()
    marks: dict[str, float] = {}  # when each stage ended: the row's `phases`
    phase = "loading the files"
    try:
        try:
            prob = load_module(problem_path, f"realistic_problem_{problem_path.stem}")
            new_mod = load_module(model_new_path, f"realistic_model_new_{problem_path.stem}")
        except Exception as exc:  # noqa: BLE001 - a broken file is the row's verdict
            raise Verdict("error", f"loading: {first_line(exc)}")
        if not hasattr(new_mod, "ModelNew"):
            raise Verdict("error", f"{model_new_path.name} defines no ModelNew")
        if is_cuda(device):
            row["copy_tbps"] = copy_bandwidth(device)
        init = list(prob.get_init_inputs())
        phase = "building the modules"
        ref = build(prob.Model, init, device)
        try:
            new = build(new_mod.ModelNew, init, device)
        except Exception as exc:  # noqa: BLE001
            raise Verdict("error", f"ModelNew(*get_init_inputs()) raised {first_line(exc)}")
        marks["setup"] = time.time()
        row["training"] = ref.training
        row["state_equal_at_start"] = all(
            torch.equal(a, b) for a, b in zip(ref.state_dict().values(),
                                              new.state_dict().values()))
        checks = []
        with torch.no_grad():
            for k, seed in enumerate(seeds):
                phase = f"check with seed {seed}"
                inputs = make_inputs(prob.get_inputs, seed, device)
                state = copy.deepcopy(ref.state_dict()) if k == 0 else None
                phase = f"the reference's forward (seed {seed})"
                want, eager_peak = peak_of(lambda: ref(*inputs), device)
                phase = f"ModelNew's forward (seed {seed})"
                try:
                    got, new_peak = peak_of(lambda: new(*inputs), device)
                except torch.cuda.OutOfMemoryError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the generated module failing
                    raise Verdict("error", f"ModelNew.forward raised {first_line(exc)}")
                if k == 0:
                    row["input_bytes"] = tensor_bytes(inputs)
                    row["eager_peak_bytes"], row["new_peak_bytes"] = eager_peak, new_peak
                c = compare(got, want)
                checks.append({"seed": seed, **c})
                if k == 0 and isinstance(got, torch.Tensor):
                    phase = "the float64 reference"
                    why = float64_fits(inputs, eager_peak, device)
                    if why:
                        row["float64"] = {"skipped": why}
                    else:
                        try:
                            row["float64"] = float64_check(prob.Model, init, state, inputs,
                                                           {"new": got, "torch": want}, device)
                        except torch.cuda.OutOfMemoryError as exc:
                            row["float64"] = {"skipped": f"out of memory: {first_line(exc)}"}
                del inputs, want, got, state
                torch.cuda.empty_cache()
        row["checks"] = checks
        marks["checks"] = time.time()
        bad = [c for c in checks if not c["ok"]]
        if bad:
            c = bad[0]
            raise Verdict("wrong", f"seed {c['seed']}: " + (c.get("why") or (
                f"{c['mismatches']} of {c['numel']} elements outside atol=rtol={ATOL} "
                f"(max abs err {c['max_abs_err']:.3g}, norm-wise rel err "
                f"{c['rel_norm_err']:.3g})")))
        phase = "comparing buffers"
        msg = compare_buffers(ref, new)
        if msg:
            raise Verdict("wrong", msg)
        phase = "timing"
        if is_cuda(device):
            row.update(timings(prob, ref, new, device, seeds, time_budget_s))
        marks["timing"] = time.time()
        if max_autotune and is_cuda(device):
            if checkpoint is not None:
                checkpoint({**row, "status": "ok", "compile_max": "running",
                            "wall_s": time.time() - t0})
            phase = "max-autotune torch.compile"
            row.update(max_autotune_timing(prob, ref, device, seeds, time_budget_s,
                                           row["new_ms"]))
            marks["max_autotune"] = time.time()
        row["flags_after"] = flags()
        if row["flags_after"] != row["flags"]:
            row["message"] = "numeric settings changed during the run"
        row["status"] = "ok"
    except Verdict as v:
        row["status"], row["message"] = v.status, v.message
    except torch.cuda.OutOfMemoryError as exc:
        row["status"], row["message"] = "oom", f"out of memory in {phase}: {first_line(exc)}"
    except Exception as exc:  # noqa: BLE001 - the row carries every failure
        row["status"], row["message"] = "error", f"{phase}: {first_line(exc)}"
        row["traceback"] = traceback.format_exc()[-3000:]
    row["wall_s"] = time.time() - t0
    last, row["phases"] = t0, {}
    for name, at in marks.items():
        row["phases"][name], last = round(at - last, 2), at
    return row


def timings(prob: ModuleType, ref: torch.nn.Module, new: torch.nn.Module, device: str,
            seeds: list[int], budget_s: float) -> dict:
    """Eager, torch.compile (default mode; its first call, which compiles, timed apart) and
    ModelNew on one fresh input set, one after the other."""
    flush = torch.empty(L2_FLUSH_BYTES // 4, device=device)
    inputs = make_inputs(prob.get_inputs, max(seeds) + 1, device)
    out: dict[str, Any] = {}
    with torch.no_grad():
        eager = time_gpu(lambda: ref(*inputs), flush, budget_s=budget_s)
        compiled = torch.compile(ref)
        t = time.time()
        compiled(*inputs)
        torch.cuda.synchronize()
        out["compile_first_call_s"] = time.time() - t
        comp = time_gpu(lambda: compiled(*inputs), flush, budget_s=budget_s)
        mine = time_gpu(lambda: new(*inputs), flush, budget_s=budget_s)
    for name, t in (("eager", eager), ("compile", comp), ("new", mine)):
        out[f"{name}_ms"], out[f"{name}_iqr_ms"], out[f"{name}_reps"] = (
            t["ms"], t["iqr_ms"], t["reps"])
    out["speedup_vs_eager"] = eager["ms"] / mine["ms"]
    out["speedup_vs_compile"] = comp["ms"] / mine["ms"]
    return out


def max_autotune_timing(prob: ModuleType, ref: torch.nn.Module, device: str, seeds: list[int],
                        budget_s: float, new_ms: float) -> dict:
    """`torch.compile(model, mode="max-autotune")` on the timing's input set, as `timings` times
    the others; a failure (an autotuning error, out of memory) is the row's `compile_max_error`,
    never its verdict, which is ModelNew's."""
    # a fresh compile: dynamo would otherwise serve the default mode's graph for this module
    torch._dynamo.reset()
    out: dict[str, Any] = {"compile_max": "done"}
    try:
        flush = torch.empty(L2_FLUSH_BYTES // 4, device=device)
        inputs = make_inputs(prob.get_inputs, max(seeds) + 1, device)
        with torch.no_grad():
            compiled = torch.compile(ref, mode="max-autotune")
            t = time.time()
            compiled(*inputs)
            torch.cuda.synchronize()
            out["compile_max_first_call_s"] = time.time() - t
            timed = time_gpu(lambda: compiled(*inputs), flush, budget_s=budget_s)
    except Exception as exc:  # noqa: BLE001 - out of memory included: the baseline failed
        return {"compile_max": "failed", "compile_max_error": first_line(exc)[:300]}
    finally:
        torch._dynamo.reset()
    out["compile_max_ms"], out["compile_max_iqr_ms"], out["compile_max_reps"] = (
        timed["ms"], timed["iqr_ms"], timed["reps"])
    out["speedup_vs_compile_max"] = timed["ms"] / new_ms
    return out


def write_row(row: dict, path: Path) -> None:
    """The row as JSON at `path`, replaced whole (a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, indent=1, default=str))
    os.replace(tmp, path)


def harness_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every harness takes: the problem, its model_new.py, the row's file, the
    checks' seeds and the seconds of timed runs."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("problem", type=Path)
    ap.add_argument("model_new", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="the row, as JSON")
    ap.add_argument("--seeds", default="1,2,3", help="input seeds of the checks")
    ap.add_argument("--time-budget", type=float, default=1.0,
                    help="seconds of timed runs per module (5 to 30 runs)")
    return ap


def start_harness(args: argparse.Namespace) -> None:
    """Exit 2 with one line where a file is missing or there is no CUDA GPU; else start
    CUDA."""
    for p in (args.problem, args.model_new):
        if not p.is_file():
            print(f"error: {p}: no such file", file=sys.stderr)
            sys.exit(2)
    if not torch.cuda.is_available():
        print("error: the harness needs a CUDA GPU", file=sys.stderr)
        sys.exit(2)
    torch.cuda.init()


def main() -> None:
    ap = harness_parser(__doc__.splitlines()[0])
    ap.add_argument("--max-autotune", action="store_true",
                    help="time torch.compile(mode='max-autotune') too (its first call can take "
                         "minutes)")
    args = ap.parse_args()
    start_harness(args)
    started_s = time.time() - STARTED  # imports and the CUDA context
    seeds = [int(s) for s in args.seeds.split(",") if s]
    row = run(args.problem, args.model_new, seeds, time_budget_s=args.time_budget,
              max_autotune=args.max_autotune,
              checkpoint=lambda partial: write_row({**partial, "start_s": round(started_s, 2)},
                                                   args.out))
    row["start_s"] = round(started_s, 2)
    write_row(row, args.out)
    speed = (f", {row['new_ms']:.3f} ms against torch.compile {row['compile_ms']:.3f} ms "
             f"({row['speedup_vs_compile']:.2f}x)" if row.get("new_ms") else "")
    if row.get("compile_max_ms"):
        speed += (f", max-autotune {row['compile_max_ms']:.3f} ms "
                  f"({row['speedup_vs_compile_max']:.2f}x)")
    elif row.get("compile_max_error"):
        speed += f", max-autotune failed: {row['compile_max_error']}"
    print(f"{row['problem']}: {row['status']}{': ' + row['message'] if row['message'] else ''}"
          f"{speed}")
    # the row is on disk: the interpreter's teardown (torch.compile's worker pool, the CUDA
    # context) took ~7 s of every problem's harness (H100 rows of 2026-12-06: 18 s wall, 2.8 s
    # start, 8.5 s of stages) and measures nothing
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
