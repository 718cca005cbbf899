"""Whole models on the GPU, end to end (issue 50, items 3 and 4): each model of
benchmarks/models/ tuned by `cuda_agent.tune_model` under a time limit in a process of its own,
then checked and timed by the independent harness (`models_harness.py`, another process) on the
`model_new.py` it wrote.

    python -m benchmarks.whole_models [--models vit,mlp3] [--time-limit 120] [--deadline 560]
        [--results earlier/models.json,...] [--work /tmp/whole-models] [--out DIR]

One row per model in DESIGN.md's result-file format, written after every model to
`DIR/models.json` (default $OUT, else the work folder) and the work folder's, so a suite spreads
over several calls: models already in the results files given (`--results`) or in the work
folder's file (a warm machine's earlier call) are skipped, and a model the deadline would cut
is left for the next call. A rich table of the rows closes each call;
`python -m cuda_agent.experiments.benchmarks_md` shows the committed rows
(benchmarks/results/*/models*.json) in BENCHMARKS.md.

Statuses: ok (the harness verified ModelNew and timed it), wrong (its output, buffers or
state_dict off), timeout (the tune ran past its limit plus a grace, or the harness past its
own), oom, error (anything else, with its one line).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmarks.realistic_run import (HARNESS_OWNS, TARBALL_LIMIT, GpuMemorySampler, _read_json,
                                      run_facts, run_limited)

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "benchmarks" / "models"
NAME = "models"
"""the results file's stem: models.json (BENCHMARKS.md reads benchmarks/results/*/models*.json)"""
TIME_LIMIT_S = 120.0
HARNESS_EST_S = 90.0
"""a guess at the harness's seconds (start, checks, torch.compile's first call, graphs, the
regions' times): what a model needs left before the deadline, besides its tune's limit"""
# the Python API, in a process of its own: `tune_model` has no CLI flag of its own (the CLI
# tunes a model as a whole only where one capture does not cover it)
TUNE = """\
import sys
import cuda_agent
path, out, limit, store, device, budget = sys.argv[1:7]
opts = {"budget": int(budget)} if budget else {}
r = cuda_agent.tune_model(path, out, device=device, time_limit_s=float(limit), store=store,
                          notify=print, **opts)
print(f"{len(r.generated())} of {len(r.split.kernels())} kernel regions generated, "
      f"{len(r.split.regions)} regions, {r.wall_s:.1f} s")
"""


@dataclass
class Settings:
    """One call's share of the suite."""

    work: Path
    """working folder: per-model outputs and logs"""
    final: Path
    """where models.json is rewritten after every model ($OUT in a device call)"""
    deadline: float
    """epoch seconds by which every subprocess of this call has ended"""
    models: list[str] = field(default_factory=list)
    """model names (default: every file of benchmarks/models/)"""
    time_limit_s: float = TIME_LIMIT_S
    """`tune_model(time_limit_s=)` per model"""
    budget: int | None = None
    """`tune_model(budget=)`; None: its default"""
    device: str = "cuda"
    tune_grace_s: float = 60.0
    """past 1.05 x the time limit, seconds a tune may take before it is killed (a time-out)"""
    harness_limit_s: float = 300.0
    seeds: str = "1,2,3"
    previous: list[Path] = field(default_factory=list)
    """results files of earlier calls: their models are not run again"""


def all_models() -> list[str]:
    return sorted(p.stem for p in MODELS.glob("*.py") if not p.name.startswith("_"))


def tune_command(path: Path, out: Path, s: Settings) -> list[str]:
    store = str(out.parent / "store.sqlite")  # fresh per model: nothing reused from before
    return [sys.executable, "-c", TUNE, str(path), str(out), str(s.time_limit_s), store,
            s.device, str(s.budget or "")]


def harness_command(path: Path, model_new: Path, out: Path, seeds: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.models_harness", str(path), str(model_new),
            "--out", str(out), "--seeds", seeds]


def report_fields(report: dict | None) -> dict:
    """What a row keeps of tune_model's report.json: the regions, one line each, and the tune's
    own figures (simulated or not)."""
    if not report:
        return {}
    regions = report.get("regions") or []
    kernels = [r for r in regions if r.get("kind") == "kernel"]
    tunes = [r.get("tune") or {} for r in kernels]
    return {"device": report.get("device"), "simulated": report.get("simulated"),
            "regions": len(regions), "kernel_regions": len(kernels),
            "generated_regions": sum(bool(r.get("generated")) for r in kernels),
            "evals": sum(t.get("evals") or 0 for t in tunes),
            "region_lines": report.get("lines"), "shapes_tuned": report.get("shapes_tuned"),
            "tune_report_wall_s": report.get("wall_s")}


def run_model(name: str, s: Settings) -> dict | None:
    """Tune then check one model; its row, or None when the deadline cut it."""
    path = MODELS / f"{name}.py"
    d = s.work / NAME / name
    shutil.rmtree(d, ignore_errors=True)  # a warm machine's earlier, unfinished attempt
    (d / "out").mkdir(parents=True)
    row: dict = {"problem": name, "family": "whole model", "time_limit_s": s.time_limit_s,
                 "budget": s.budget, "verified": False, "best_ms": None, "eager_ms": None,
                 "compile_ms": None, "strategy": "default", "evals": None,
                 "evals_to_95": None, "bytes": None, "flops": None}
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    with GpuMemorySampler(gpu) as mem:
        rc, wall = run_limited(tune_command(path, d / "out", s), d / "tune.log",
                               1.05 * s.time_limit_s + s.tune_grace_s, s.deadline, dict(os.environ))
    if rc == "cut":
        return None
    row.update(tune_rc=rc, tune_wall_s=round(wall, 1), tune_peak_gpu_bytes=mem.peak)
    row.update(report_fields(_read_json(d / "out" / "report.json")))
    if rc == "timeout":
        row.update(status="timeout", message=f"tune ran past {1.05 * s.time_limit_s:.0f} s "
                   f"+ {s.tune_grace_s:.0f} s grace")
        return row
    if rc != 0 or not (d / "out" / "model_new.py").exists():
        lines = [x for x in (d / "tune.log").read_text(errors="replace").splitlines()
                 if x.strip()]
        text = " ".join(lines).lower()
        status = "oom" if "out of memory" in text else "error"
        row.update(status=status, message=f"tune exit {rc}: {lines[-1] if lines else ''}"[:300])
        return row
    hrc, hwall = run_limited(harness_command(path, d / "out" / "model_new.py",
                                             d / "harness.json", s.seeds),
                             d / "harness.log", s.harness_limit_s, s.deadline, dict(os.environ))
    if hrc == "cut":
        return None
    row["harness_wall_s"] = round(hwall, 1)
    h = _read_json(d / "harness.json")
    if hrc == "timeout" or h is None:
        tail = (d / "harness.log").read_text(errors="replace").strip().splitlines()[-1:]
        row.update(status="timeout" if hrc == "timeout" else "error",
                   message=(f"harness ran past {s.harness_limit_s:.0f} s" if hrc == "timeout"
                            else f"harness exit {hrc}: {' '.join(tail)}")[:300])
        return row
    h.pop("problem", None)
    h.pop("traceback", None)  # kept in harness.json, in the logs' tarball
    for k, v in h.items():  # the harness's own count of a field the report gave is kept apart
        row[k if k not in row or k in HARNESS_OWNS else f"harness_{k}"] = v
    row["verified"] = h["status"] == "ok"
    row["best_ms"] = h.get("new_ms")
    return row


def load_rows(files: list[Path]) -> dict[str, dict]:
    """Rows of earlier calls by model (a later file's row wins)."""
    rows: dict[str, dict] = {}
    for f in files:
        for r in json.loads(f.read_text())["rows"]:
            rows[r["problem"]] = r
    return rows


def results_doc(rows: dict[str, dict], order: list[str], s: Settings) -> dict:
    ordered = [rows[n] for n in order if n in rows]
    return {**run_facts(ordered),
            "suite": "whole models (benchmarks/models)", "problems": len(order),
            "settings": {"time_limit_s": s.time_limit_s, "budget": s.budget,
                         "device": s.device, "tune_grace_s": s.tune_grace_s,
                         "harness_limit_s": s.harness_limit_s, "seeds": s.seeds},
            "rows": ordered}


def write_results(s: Settings, rows: dict[str, dict], order: list[str]) -> None:
    """models.json in the work folder and in `final`, each replaced whole."""
    text = json.dumps(results_doc(rows, order, s), indent=1, default=str) + "\n"
    for folder in dict.fromkeys((s.work, s.final)):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{NAME}.json.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / f"{NAME}.json")
    pack_logs(s)


def pack_logs(s: Settings) -> None:
    """`final`/models-logs.tgz: each model's tune log, report, harness row and log, and its
    module where the tarball stays under the device tool's file limit."""
    tmp = s.final / f"{NAME}-logs.tgz.tmp"
    for modules in (True, False):
        with tarfile.open(tmp, "w:gz") as tar:
            for f in sorted((s.work / NAME).rglob("*")):
                if f.is_file() and "store.sqlite" not in f.name and (
                        modules or f.name not in ("model_new.py", "kernel.cu")):
                    tar.add(f, arcname=str(f.relative_to(s.work / NAME)))
        if tmp.stat().st_size < TARBALL_LIMIT:
            break
    os.replace(tmp, s.final / f"{NAME}-logs.tgz")


# ---- figures and the table (also BENCHMARKS.md's: cuda_agent/experiments) ---------------------

def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list[dict]) -> dict:
    """The suite's headline figures from its rows."""
    ok = [r for r in rows if r.get("status") == "ok"]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    eager = sum(r["eager_ms"] for r in ok if r.get("eager_in_tuned") is not None)
    return {"run": len(rows), "ok": len(ok), "wrong": counts.get("wrong", 0), "counts": counts,
            "geomean_vs_eager": geomean([r.get("speedup_vs_eager") for r in ok]),
            "geomean_vs_compile": geomean([r.get("speedup_vs_compile") for r in ok]),
            "geomean_graph_vs_eager_graph": geomean(
                [r.get("graph_speedup_vs_eager_graph") for r in ok]),
            # eager-time-weighted over the suite: each model's fraction times its eager time
            "eager_in_tuned": sum(r["eager_in_tuned"] * r["eager_ms"] for r in ok
                                  if r.get("eager_in_tuned") is not None) / eager
            if eager else None,
            "eager_in_generated": sum(r["eager_in_generated"] * r["eager_ms"] for r in ok
                                      if r.get("eager_in_generated") is not None) / eager
            if eager else None}


def _ms(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def _x(v: object) -> str:
    return f"{v:.2f}x" if isinstance(v, (int, float)) else "-"


def _pct(v: object) -> str:
    return f"{100 * v:.0f} %" if isinstance(v, (int, float)) else "-"


COLUMNS = ("model", "status", "regions (generated/kernel/all)", "eager ms", "compile ms",
           "ModelNew ms", "vs eager", "vs compile", "graph: eager / ModelNew ms",
           "eager in tuned", "in generated alone")


def table_cells(r: dict) -> list[str]:
    """One row's cells, in COLUMNS' order."""
    regions = (f"{r.get('generated_regions', '-')}/{r.get('kernel_regions', '-')}/"
               f"{r.get('regions', '-')}")
    graph = (f"{_ms(r.get('eager_graph_ms'))} / {_ms(r.get('new_graph_ms'))}"
             if r.get("eager_graph_ms") or r.get("new_graph_ms") else
             ("capture failed" if r.get("new_graph_error") else "-"))
    status = r.get("status", "?")
    if status != "ok" and r.get("message"):
        status += f": {r['message'][:60]}"
    return [r["problem"], status, regions, _ms(r.get("eager_ms")), _ms(r.get("compile_ms")),
            _ms(r.get("new_ms")), _x(r.get("speedup_vs_eager")), _x(r.get("speedup_vs_compile")),
            graph, _pct(r.get("eager_in_tuned")), _pct(r.get("eager_in_generated"))]


def print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for c in COLUMNS:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*table_cells(r))
    Console(width=200).print(t)


# ---- a call -------------------------------------------------------------------------------------

def run_suite(s: Settings, log: Callable[[str], None] = print) -> dict[str, dict]:
    """Run what is left of the suite within the deadline, one model at a time; every row by
    model (the earlier files' and this call's)."""
    missing = [str(f) for f in s.previous if not f.is_file()]
    if missing:
        raise SystemExit(f"error: no such results file: {', '.join(missing)}")
    order = all_models()
    unknown = [m for m in s.models if m not in order]
    if unknown:
        raise SystemExit(f"error: not in benchmarks/models: {', '.join(unknown)}")
    wanted = s.models or order
    # this machine's rows: a warm machine's earlier call (its work folder's file) and this
    # call's; the files given decide what is left to run and keep their own rows
    own = s.work / f"{NAME}.json"
    mine = load_rows([own]) if own.is_file() and own not in s.previous else {}
    done = {**mine, **load_rows(s.previous)}
    left = [m for m in wanted if m not in done]
    log(f"{NAME}: {len(done)} models done before, {len(left)} to run, "
        f"{s.deadline - time.time():.0f} s left")
    for name in left:
        need = 1.05 * s.time_limit_s + HARNESS_EST_S
        if time.time() + need > s.deadline:
            log(f"{NAME}: {name} (about {need:.0f} s) left for the next call")
            break
        log(f"{NAME}: {name}")
        try:
            row = run_model(name, s)
        except Exception as exc:  # noqa: BLE001 - the suite goes on without this model
            row = {"problem": name, "family": "whole model", "status": "error",
                   "message": f"suite runner: {type(exc).__name__}: {exc}"[:300],
                   "verified": False}
        if row is None:
            log(f"{NAME}: {name} cut by the deadline; left for the next call")
            break
        row["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        mine[name] = row
        write_results(s, mine, order)
        log(f"{NAME}: {name}: {row['status']} {row.get('message') or ''}".rstrip())
    if mine:
        write_results(s, mine, order)
        print_table([mine[n] for n in order if n in mine], f"{NAME}: this machine's rows")
    rows = {**done, **mine}
    sm = summary([rows[n] for n in order if n in rows])
    log(f"{NAME}: {len(rows)} of {len(order)} models done ({sm['ok']} ok, {sm['wrong']} "
        f"wrong); geomean against eager {_x(sm['geomean_vs_eager'])}, against torch.compile "
        f"{_x(sm['geomean_vs_compile'])}; eager time in tuned regions "
        f"{_pct(sm['eager_in_tuned'])}, in generated kernels alone "
        f"{_pct(sm['eager_in_generated'])}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.whole_models",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT_S,
                    help="tune_model's time limit per model, seconds")
    ap.add_argument("--budget", type=int, default=None,
                    help="tune_model's budget (default: its own)")
    ap.add_argument("--deadline", type=float, default=3600.0,
                    help="seconds from start by which the call ends")
    ap.add_argument("--results", default="",
                    help="comma-separated results files of earlier calls (resume)")
    ap.add_argument("--seeds", default="1,2,3", help="the harness's input seeds")
    ap.add_argument("--work", type=Path, default=Path("/tmp/whole-models"))
    ap.add_argument("--out", type=Path, default=None,
                    help="folder of models.json (default: $OUT, else the work folder)")
    args = ap.parse_args(argv)
    if args.time_limit <= 0 or args.deadline <= 0:
        ap.error("--time-limit and --deadline take a positive number of seconds")
    final = args.out or Path(os.environ.get("OUT") or args.work)
    s = Settings(work=args.work, final=final, deadline=time.time() + args.deadline,
                 models=[m for m in args.models.split(",") if m],
                 time_limit_s=args.time_limit, budget=args.budget, seeds=args.seeds,
                 previous=[Path(f) for f in args.results.split(",") if f])
    run_suite(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
