"""The figures BENCHMARKS.md shows, read from the committed results files of a checkout
(benchmarks/results/, benchmarks/data/), one function per family of results; each returns
plain data, or None where the family has no results file yet. The tables' own computations are
the section scripts' (benchmarks/realistic_section.py, live_section.py, learning_live.py),
imported from this package's checkout. Rendering is `benchmarks_md.py`'s."""

from __future__ import annotations

import gzip
import importlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import CudaAgentError, SettingsError
from ..runner.baselines import matched_ms

RESULTS = "benchmarks/results"
DATA = "benchmarks/data"
PROBLEMS = "benchmarks/problems"
MANIFEST = "benchmarks/realistic/suite.json"
RATE_PROBLEMS = ("gemm_square", "gemm_rect")
"""the large products whose rates the GPU facts quote (4096-sized: rates mean something there)"""


class ResultsError(CudaAgentError):
    """A results file the page is built from is missing or malformed."""


def repo_root() -> Path:
    """The checkout this package sits in: the section scripts are imported from it."""
    return Path(__file__).resolve().parents[2]


def scripts(code_root: Path | None = None) -> dict[str, ModuleType]:
    """The section scripts whose functions compute the tables, from the checkout `code_root`.
    They are scripts, not part of the package, so they are imported with the checkout on the
    path (as `python -m` from it has it)."""
    code_root = (code_root or repo_root()).resolve()
    if not (code_root / "benchmarks" / "sections.py").is_file():
        raise SettingsError(f"{code_root}: not a cuda-agent checkout (no benchmarks/"
                            "sections.py); the page is generated from a checkout")
    if str(code_root) not in sys.path:
        sys.path.insert(0, str(code_root))
    names = ("realistic_section", "realistic_suite", "live_section", "learning_live",
             "search_order", "whole_models")
    mods = {n: importlib.import_module(f"benchmarks.{n}") for n in names}
    for n, m in mods.items():
        if not Path(m.__file__ or "").resolve().is_relative_to(code_root):
            raise SettingsError(f"benchmarks.{n} was imported from {m.__file__}, not from "
                                f"{code_root}: run from the checkout")
    return mods


@dataclass(frozen=True)
class LiveSets:
    """Which merged live-bench reports the peers' figures read (folder names under
    benchmarks/results/): the union in run order, the reruns chosen for the agents' counts,
    and the draws by rule. Defaults: live_section.py's."""

    union: tuple[str, ...]
    reruns: tuple[str, ...]
    samples: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# reading


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: not a readable JSON results file ({exc})") from None


def latest(results: Path, suffix: str) -> Path | None:
    """The newest `<date>-<suffix>` file of `results` (the names start with their date)."""
    found = sorted(p for p in results.glob(f"*-{suffix}")
                   if re.match(r"\d{4}-\d{2}-\d{2}-", p.name))
    return found[-1] if found else None


def run_order(doc: dict, path: Path) -> tuple[str, str]:
    """When a results file's run ended: its rows' latest `finished` time (every row since the
    realistic runs began carries one), else its date; the path breaks ties. Folder names alone
    would put a day's tenth run before its second."""
    done = [str(r["finished"]) for r in doc.get("rows", []) if r.get("finished")]
    return (max(done) if done else str(doc.get("date")), str(path))


def results_files(root: Path, pattern: str, what: str) -> list[tuple[Path, dict]]:
    """The results files of the run folders matching `pattern` (e.g. "realistic*.json"),
    each with its document, in the order their runs ended (`run_order`): a later file's row
    wins. A file without rows is a `ResultsError` naming it as `what`."""
    found = []
    for f in root.glob(f"{RESULTS}/*/{pattern}"):
        d = read_json(f)
        if not isinstance(d, dict) or not isinstance(d.get("rows"), list):
            raise ResultsError(f"{f}: not a {what} results file (no rows)")
        found.append((run_order(d, f), f, d))
    return [(f, d) for _, f, d in sorted(found, key=lambda t: t[0])]


def latest_rows(found: list[tuple[Path, dict]]) -> dict[str, dict]:
    """Each problem's row from the last file that has one."""
    rows: dict[str, dict] = {}
    for _, d in found:
        rows.update({r["problem"]: r for r in d["rows"]})
    return rows


def rel(path: Path, root: Path) -> str:
    return str(path.resolve().relative_to(root.resolve()))


def short_gpu(name: str | None) -> str:
    """'NVIDIA H200' -> 'H200', 'NVIDIA H100 80GB HBM3' -> 'H100'."""
    words = (name or "?").replace("NVIDIA", "").split()
    return words[0] if words else "?"


def gpu_of_folder(name: str) -> str | None:
    """The GPU a run folder names (`<date>-h200-<what>`): search rows carry no GPU of their
    own."""
    m = re.match(r"\d{4}-\d{2}-\d{2}-(h\d+)", name)
    return m.group(1).upper() if m else None


def joined(values: list[str]) -> str:
    return ", ".join(dict.fromkeys(values)) or "?"


# ---------------------------------------------------------------------------------------------
# the families of results: each returns its figures, or None where no results file exists


def realistic(root: Path, mods: dict[str, ModuleType]) -> dict | None:
    """The realistic suite: every `realistic*.json` of the run folders, oldest first (a later
    file's row wins), against the suite's manifest."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        return None
    entries = mods["realistic_suite"].read(manifest)
    found = results_files(root, "realistic*.json", "realistic")
    files, docs = [f for f, _ in found], [d for _, d in found]
    st = mods["realistic_section"].state(docs, entries)
    names = [rel(f, root) for f in files]
    strict = [n for n, d in zip(names, docs) if any(d is s for s in st["strict_docs"])]
    return {**st, "manifest": entries, "docs": docs, "files": names, "strict_files": strict,
            "column_files": {p: [n for n, d in zip(names, docs)
                                 if any(d is c for c in cd)]
                             for p, cd in st["column_docs"].items()}}


def models(root: Path, mods: dict[str, ModuleType]) -> dict:
    """The whole-model suite (benchmarks/models/, `whole_models.py`): every `models*.json` of
    the run folders, oldest first (a later file's row of a model wins); no rows where none was
    committed yet."""
    wm = mods["whole_models"]
    found = results_files(root, "models*.json", "whole-model")
    rows = latest_rows(found)
    ordered = [rows[m] for m in wm.all_models() if m in rows]
    docs = [d for _, d in found]
    return {"models": wm.all_models(), "rows": ordered, "summary": wm.summary(ordered),
            "files": [rel(f, root) for f, _ in found],
            "gpus": joined(sorted({short_gpu(d.get("gpu")) for d in docs})),
            "dates": joined(sorted({str(d.get("date")) for d in docs})),
            "columns": wm.COLUMNS, "cells": [wm.table_cells(r) for r in ordered]}


def conv_chains(root: Path) -> dict | None:
    """The convolution chains (benchmarks/conv_chains/, issue 48 item 4), tuned as a user
    runs `tune`: every `conv_chains*.json` of the run folders, oldest first (a later file's
    row of a problem wins); None where none was committed."""
    found = results_files(root, "conv_chains*.json", "convolution-chain")
    if not found:
        return None
    rows = latest_rows(found)
    docs = [d for _, d in found]
    return {"rows": sorted(rows.values(), key=lambda r: r["problem"]),
            "suite": max(int(d.get("problems") or 0) for d in docs),
            "files": [rel(f, root) for f, _ in found],
            "settings": docs[-1].get("settings", {}),
            "gpus": joined(sorted({short_gpu(d.get("gpu")) for d in docs})),
            "dates": joined(sorted({str(d.get("date")) for d in docs}))}


def counters(root: Path) -> dict | None:
    """The hardware counters Nsight Compute recorded during a short training run
    (`benchmarks/counters_gpu.py`): the latest `*-counters/counters.json`, or None."""
    found = sorted(p for p in (root / RESULTS).glob("*-counters/counters.json")
                   if re.match(r"\d{4}-\d{2}-\d{2}-", p.parent.name))
    if not found:
        return None
    path = found[-1]
    d = read_json(path)
    if not isinstance(d, dict) or not isinstance(d.get("records"), list):
        raise ResultsError(f"{path}: not a counters file (no records)")
    return {**d, "file": rel(path, root)}


def _run_settings(doc: dict) -> dict:
    """A bench.json's run settings (`BenchSettings.run`), or the bench's settings where it was
    written before they had their own (they sat beside the bench's then)."""
    return doc["settings"].get("run") or doc["settings"]


def live(root: Path, mods: dict[str, ModuleType], sets: LiveSets) -> dict | None:
    """The live bench against the peers: the union of the merged reports (a problem by its
    latest run) and the draws by rule."""
    if not sets.union:
        return None
    ls = mods["live_section"]
    results = root / RESULTS

    def load(name: str) -> dict:
        doc = read_json(results / name / "bench.json")
        if doc.get("live") != "cuda":
            raise ResultsError(f"{results / name / 'bench.json'}: not a live GPU run "
                               f"(device {doc.get('live') or 'replay'})")
        return doc

    merged = {n: load(n) for n in dict.fromkeys(sets.union + sets.samples)}
    suite = sorted((root / PROBLEMS).glob("*.py"))
    facts = ls.union_facts([merged[n] for n in sets.union], len(suite), suite,
                           rebench=tuple(merged[n] for n in sets.reruns))
    draws = [ls.sample_rows(merged[n]) for n in sets.samples]
    pooled = [r for rows in draws for r in rows]
    docs = [merged[n] for n in sets.union]
    return {
        "union": facts,
        "draws": [ls.sample_stats(rows) for rows in draws if rows],
        "pooled": ls.sample_stats(pooled) if pooled else None,
        "gpus": sorted({short_gpu(f.get("gpu")) for d in docs for f in d["problems"].values()}),
        # a merge of runs of several days or commits names them all, comma-separated
        "dates": sorted({day for d in merged.values() for day in str(d.get("date")).split(", ")}),
        "commits": list(dict.fromkeys(c for d in merged.values() for c in str(
            (d.get("provenance") or {}).get("commit", "?")).split(", "))),
        "budgets": sorted({_run_settings(d).get("budget") for d in merged.values()}),
        "seeds": sorted({d["settings"].get("seeds") for d in merged.values()}),
        "files": [f"{RESULTS}/{n}/bench.json" for n in merged],
        "sample_files": [f"{RESULTS}/{n}/bench.json" for n in sets.samples],
        "peers": ls.peers(),
    }


def learning(root: Path, mods: dict[str, ModuleType]) -> dict | None:
    """The latest live sign test (learning_live.py), the latest replay evaluation
    (learning_replay.py) and the latest best-after-k metrics (learning_metric.py)."""
    results = root / RESULTS
    found = {k: latest(results, f"{suffix}.json") for k, suffix in (
        ("live", "learning-live"), ("replay", "learning-replay"),
        # the best time after k measurements (learning_metric.py): run for it, and from the
        # runs of the latest learning-replay result
        ("metric", "learning-metric"), ("metric_from_replay", "learning-metric-from-replay"))}
    if not any(found.values()):
        return None
    out: dict[str, Any] = {"verdict": mods["learning_live"].verdict}
    for k, f in found.items():
        if f:
            out[k] = read_json(f) | {"file": rel(f, root)}
    return out


def simulator(root: Path) -> dict | None:
    """The analytic model's rank correlation with recorded GPU times: over the sweeps, over the
    live runs' configurations, on held-out shapes, and fitted per fold."""
    results = root / RESULTS
    found = {k: latest(results, f"{k}.json") for k in
             ("sim-correlation", "sim-live-correlation", "sim-validation", "sim-fold-fit")}
    if not any(found.values()):
        return None
    return {k: read_json(p) | {"file": rel(p, root)} for k, p in found.items() if p}


def gpu_facts(root: Path, mods: dict[str, ModuleType], realistic_docs: list[dict],
              realistic_files: list[str]) -> dict:
    """Copy bandwidth per GPU (the recorded sweeps' and the realistic runs' own measurements),
    the sweeps' device facts, and matrix-product rates from the latest searches."""
    bw: dict[str, list[tuple[float, str, str]]] = {}  # gpu -> (TB/s, date, source)
    device: dict[str, dict] = {}
    for path in sorted(root.glob(f"{DATA}/*/*.json.gz")):
        try:
            with gzip.open(path, "rt") as fh:
                sweep = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ResultsError(f"{path}: not a readable sweep ({exc})") from None
        if sweep.get("simulated") or sweep.get("device") != "cuda" or not sweep.get("copy_bw"):
            continue
        gpu = short_gpu(sweep.get("gpu"))
        bw.setdefault(gpu, []).append((sweep["copy_bw"] / 1e12, str(sweep.get("date")),
                                       rel(path.parent, root) + "/"))
        device[gpu] = {k: (sweep.get("facts") or {}).get(k) for k in
                       ("sm_count", "l2_bytes", "memory_bytes", "sm_clock_mhz", "torch", "cuda")}
    for doc, name in zip(realistic_docs, realistic_files):
        if doc.get("copy_tbps"):
            bw.setdefault(short_gpu(doc.get("gpu")), []).append(
                (doc["copy_tbps"], str(doc.get("date")), name))
    return {"copy": bw, "device": device, "rates": product_rates(root, mods)}


def product_rates(root: Path, mods: dict[str, ModuleType]) -> list[dict]:
    """TFLOP/s of the large products (`RATE_PROBLEMS`) in their latest search at each
    precision: torch eager (cuBLAS: strict fp32, or under autocast for fp16/bf16) and the
    fastest kernel cuda-agent found, timed in the same run."""
    results = root / RESULTS
    runs: list[tuple[str, Path]] = []  # (precision, file) in run order
    if (results / "search-order.txt").is_file():
        try:
            runs += [("fp32", f) for f in mods["search_order"].search_files(results)]
        except ValueError as exc:
            raise ResultsError(str(exc)) from None
    for half in ("fp16", "bf16"):
        runs += [(half, f) for f in sorted(results.glob(f"*/search-{half}.json"))]
    last: dict[tuple[str, str], dict] = {}
    for precision, f in runs:
        for r in read_json(f):
            if (r.get("problem") in RATE_PROBLEMS and r.get("best_ms") and r.get("flops")
                    and r.get("precision", "fp32") == precision):
                last[(r["problem"], precision)] = r | {"file": rel(f, root),
                                                       "gpu": gpu_of_folder(f.parent.name)}

    out = []
    for (problem, precision), r in sorted(last.items(), key=lambda kv: (
            kv[0][0], ("fp32", "fp16", "bf16").index(kv[0][1]))):
        eager = matched_ms(r, "eager_ms")
        out.append({"problem": problem, "precision": precision, "gpu": r["gpu"],
                    "commit": r.get("commit"), "file": r["file"], "flops": r["flops"],
                    "eager_tflops": r["flops"] / eager / 1e9 if eager else None,
                    "best_tflops": r["flops"] / r["best_ms"] / 1e9,
                    "date": (re.match(r"\d{4}-\d{2}-\d{2}", Path(r["file"]).parent.name)
                             or [None])[0]})
    return out
