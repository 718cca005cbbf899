"""BENCHMARKS.md's sections on the realistic suite (issue 33, item 5): `realistic-summary`, the
headline kept after the page's opening paragraph, and `realistic`, the per-problem table.

    python -m benchmarks.realistic_section benchmarks/results/DAY-h200-realistic/realistic.json \
        [MORE.json ...]

Reads the results files of `gpu_suite.py --parts realistic` (where several hold a problem, the
later file's row wins) and the suite's manifest (benchmarks/realistic/suite.json): a problem
without a row is listed as not run and never counted as a pass. fast_1 is KernelBench's: the
share of problems whose kernel is correct (the independent harness's check) and faster than the
baseline, here the user's default torch.compile as the harness timed it, counted over the
problems run and over the whole suite (a problem not run counts as not faster).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from benchmarks import realistic_suite
from benchmarks.sections import write_section, write_summary_section

ROOT = Path(__file__).resolve().parents[1]

NAME = "realistic"
FAILURES = ("oom", "timeout", "wrong", "unsupported", "error")


def merge(docs: list[dict], precision: str = "fp32") -> dict[str, dict]:
    """Rows by problem tuned at `precision` (fp32: the strict contract, the headline's; auto
    and tf32: columns beside it), a later document's row replacing an
    earlier one's."""
    from benchmarks.realistic_run import row_precision

    rows: dict[str, dict] = {}
    for d in docs:
        for r in d["rows"]:
            if row_precision(r) == precision:
                rows[r["problem"]] = r
    return rows


def vs_compile(r: dict | None) -> float | None:
    """The row's speedup against the user's default torch.compile, where verified and timed."""
    if r and r.get("status") == "ok" and r.get("new_ms") and r.get("compile_ms"):
        return r["compile_ms"] / r["new_ms"]
    return None


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows: dict[str, dict], manifest: list[dict]) -> dict:
    """Counts, fast_1 and geomeans over the suite's problems (rows of other names ignored)."""
    names = [e["problem"] for e in manifest]
    run = [rows[n] for n in names if n in rows]
    timed = [r for r in run if vs_compile(r) is not None]
    faster = [r for r in timed if vs_compile(r) > 1.0]
    gib = [e["input_bytes"] / 2**30 for e in manifest]
    return {
        "suite": len(names), "run": len(run),
        "sizes": f"{min(gib):.0f}-{max(gib):.0f} GiB" if gib else "-",
        "over_10": sum(1 for g in gib if g > 10),
        "not_run": [n for n in names if n not in rows],
        "counts": {s: sum(1 for r in run if r.get("status") == s) for s in ("ok",) + FAILURES},
        "timed": len(timed), "faster": [r["problem"] for r in faster],
        # the tool's own record of its footprint against the bound it states (issue 33, item 1)
        "bounded": [r["problem"] for r in run if (r.get("tune_memory") or {}).get("bound_bytes")],
        "over_bound": [r["problem"] for r in run
                       if (r.get("tune_memory") or {}).get("within_bound") is False],
        "fast_1_run": len(faster) / len(run) if run else None,
        "fast_1_suite": len(faster) / len(names) if names else None,
        "geomean_vs_compile": geomean([vs_compile(r) for r in timed]),
        "geomean_vs_eager": geomean([r["eager_ms"] / r["new_ms"] for r in timed
                                     if r.get("eager_ms")]),
    }


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def _pct(v: float | None) -> str:
    return f"{100 * v:.0f} %" if v is not None else "-"


def runs_text(docs: list[dict]) -> str:
    gpus = sorted({d.get("gpu") or "?" for d in docs})
    dates = sorted({d.get("date") or "?" for d in docs})
    commits = list(dict.fromkeys(d.get("commit") or "unknown" for d in docs))
    torch = sorted({d.get("torch") or "?" for d in docs})
    settings = docs[-1].get("settings", {}) if docs else {}
    policy = settings.get("policy") or "the CLI's default strategy"
    extra = " ".join(settings.get("tune_args") or [])
    return (f"on {', '.join(gpus)} on {', '.join(dates)} (commits {', '.join(commits)}, torch "
            f"{', '.join(torch)}), `cuda-agent tune --budget {settings.get('budget', '?')} "
            f"--time-limit {settings.get('time_limit_s', '?')}` with {policy}"
            + (f" and `{extra}`" if extra else ""))


def summary_lines(s: dict, docs: list[dict], columns: dict[str, dict] | None = None
                  ) -> list[str]:
    c = s["counts"]
    if not s["run"]:
        head = (f"**Realistic suite (issue 33)**: none of its {s['suite']} problems run yet; "
                "nothing is counted.")
    else:
        head = (
            f"**Realistic suite (issue 33)**: {s['run']} of {s['suite']} problems of "
            f"{s['sizes']} "
            f"run ({runs_text(docs)}), each checked and timed by an independent harness under "
            f"PyTorch's defaults: **{c['oom']} OOM, {c['timeout']} time-outs, {c['wrong']} "
            f"wrong answers**, {c['unsupported']} unsupported, {c['error']} errors; "
            f"{c['ok']} verified. fast_1 against the user's default torch.compile: "
            f"**{len(s['faster'])} of {s['run']} run ({_pct(s['fast_1_run'])})**, "
            f"{len(s['faster'])} of the suite's {s['suite']} ({_pct(s['fast_1_suite'])}; "
            "a problem not run counts as not faster); geomean speedup against it over the "
            f"{s['timed']} verified and timed: **{_x(s['geomean_vs_compile'])}** "
            f"(against eager {_x(s['geomean_vs_eager'])})."
            + (f" The tune's own GPU peak passed the bound it states (eager's peak + 2 x "
               f"output + allowance) on **{len(s['over_bound'])} of {len(s['bounded'])}** "
               f"({', '.join(s['over_bound'])})." if s["over_bound"] else
               f" The tune's own GPU peak stayed within the bound it states on all "
               f"{len(s['bounded'])} recorded." if s["bounded"] else "")
            + (f" Not run yet: {len(s['not_run'])} problems." if s["not_run"] else "")
            + "".join(column_sentence(p, t) for p, t in (columns or {}).items()))
    return [f"<!-- {NAME}-summary:begin -->", head, f"<!-- {NAME}-summary:end -->"]


COLUMNS = ("auto", "tf32")
"""precisions whose rows are columns beside the strict (fp32) headline: `tune`'s default since
2026-12-07 (each product as the user's torch runs it) and `--precision tf32`"""

COLUMN_WORDS = {
    "auto": ("`--precision auto` (tune's default since 2026-12-07: each product at the precision "
             "the user's torch gives it, TF32 convolutions and strict matrix products at "
             "PyTorch's defaults, verified against torch's answer under those flags)"),
    "tf32": ("`--precision tf32` (TF32 tensor cores in products and convolutions, as PyTorch's "
             "defaults give torch's convolutions; the tolerance widened to torch's own TF32 "
             "error)"),
}


def column_summary(rows: dict[str, dict], column: dict[str, dict]) -> dict:
    """A precision column's counts: of the problems tuned at it, how many the harness verified,
    how many are faster than default torch.compile (which uses TF32 in convolutions by
    PyTorch's defaults), and the geomean; and the same problems' strict rows."""
    speed = {n: vs_compile(r) for n, r in column.items()}
    timed = [v for v in speed.values() if v is not None]
    strict = [vs_compile(rows.get(n)) for n, v in speed.items() if v is not None]
    return {"run": len(column), "verified": sum(1 for r in column.values() if r.get("verified")),
            "timed": len(timed), "faster": sorted(n for n, v in speed.items() if v and v > 1.0),
            "geomean": geomean(timed),
            "geomean_strict": geomean([v for v in strict if v is not None])
            if all(v is not None for v in strict) else None,
            "bad": sorted(f"{n} ({r.get('status')})" for n, r in column.items()
                          if r.get("status") != "ok")}


def column_sentence(precision: str, t: dict) -> str:
    if not t.get("run"):
        return ""
    return (f" With {COLUMN_WORDS[precision]}: {t['run']} problems tuned, {t['verified']} "
            f"verified, faster than default torch.compile on **{len(t['faster'])} of "
            f"{t['run']}**, geomean **{_x(t['geomean'])}** over the {t['timed']} timed (the same "
            f"problems strict: {_x(t['geomean_strict'])}); a column of the table, not in the "
            "counts above" + (f"; not verified: {', '.join(t['bad'])}" if t["bad"] else "") + ".")


def _gib(v: float | None) -> str:
    return f"{v / 2**30:.1f}" if isinstance(v, (int, float)) else "-"


def _ms(v: float | None) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def _secs(v: float | None) -> str:
    return f"{v:.0f}" if isinstance(v, (int, float)) else "-"


def _err(f64: dict) -> str:
    """ModelNew's norm-wise error against float64, and torch's own in brackets."""
    if f64.get("skipped"):
        return "skipped"
    new, ref = (f64.get("new") or {}).get("rel_norm_err"), (f64.get("torch") or {}).get(
        "rel_norm_err")
    return "-" if new is None else f"{new:.1e}" + (f" ({ref:.1e})" if ref is not None else "")


def eager_peak(r: dict) -> int | None:
    """Eager's device memory at its peak in the harness: the inputs, and what its forward
    allocated beyond them (the bound of issue 33 item 1 starts from it)."""
    if r.get("eager_peak_bytes") is None or r.get("harness_input_bytes") is None:
        return None
    return r["harness_input_bytes"] + r["eager_peak_bytes"]


def bound_text(r: dict) -> str:
    """The tune's own peak against the bound it states, marked where it passed it, and where
    its float64 reference ran (whole, chunked, accumulated, in host memory)."""
    m = r.get("tune_memory") or {}
    if not m.get("peak_bytes") or not m.get("bound_bytes"):
        return "-"
    over = " **over**" if m.get("within_bound") is False else ""
    where = f" ({m['verification']})" if m.get("verification") else ""
    return f"{_gib(m['peak_bytes'])} / {_gib(m['bound_bytes'])}{over}{where}"


def short_gpu(name: str | None) -> str:
    """'NVIDIA H200' -> 'H200', 'NVIDIA H100 80GB HBM3' -> 'H100'."""
    words = (name or "?").replace("NVIDIA", "").split()
    return words[0] if words else "?"


def column_cell(r: dict | None) -> str:
    """A precision column: the kernel tuned at that precision, its time and speedup against
    default torch.compile as the harness measured them, or its status where not verified."""
    if r is None:
        return "-"
    v = vs_compile(r)
    return f"{_ms(r.get('new_ms'))} ({_x(v)})" if v is not None else r.get("status", "?")


def table_lines(rows: dict[str, dict], manifest: list[dict],
                columns: dict[str, dict[str, dict]] | None = None) -> list[str]:
    # rows measured on more than one kind of GPU name theirs (each row's times are its own
    # GPU's: the kernel, eager and torch.compile timed there by the harness)
    mixed = len({short_gpu(r.get("gpu")) for r in rows.values() if r.get("gpu")}) > 1
    columns = {p: c for p, c in (columns or {}).items() if c}
    heads = "".join(f" {p.upper() if p == 'tf32' else p} kernel ms (vs compile) |"
                    for p in columns)
    lines = ["| problem | input GiB | family | status | tune s | tune peak GiB | tool peak / "
             "bound GiB | eager peak GiB | kernel ms (harness) | eager ms | compile ms | vs "
             "compile | rel err vs fp64 (torch's) | message |"
             + heads + (" GPU |" if mixed else ""),
             "|---" * (14 + len(columns) + mixed) + "|"]
    for e in manifest:
        r = rows.get(e["problem"])
        extra = "".join(f" {column_cell(c.get(e['problem']))} |" for c in columns.values())
        if r is None:
            lines.append(f"| {e['problem']} | {_gib(e['input_bytes'])} | {e['family']} | "
                         "not run | - | - | - | - | - | - | - | - | - | |" + extra
                         + (" |" if mixed else ""))
            continue
        err = _err(r.get("float64") or {})
        msg = (r.get("message") or "").replace("|", "/")
        lines.append(
            f"| {e['problem']} | {_gib(e['input_bytes'])} | {r.get('family') or e['family']} | "
            f"{r.get('status', '?')} | {_secs(r.get('tune_wall_s'))} | "
            f"{_gib(r.get('tune_peak_gpu_bytes'))} | {bound_text(r)} | "
            f"{_gib(eager_peak(r))} | "
            f"{_ms(r.get('new_ms'))} | "
            f"{_ms(r.get('eager_ms'))} | {_ms(r.get('compile_ms'))} | {_x(vs_compile(r))} | "
            f"{err} | {msg[:120]} |" + extra
            + (f" {short_gpu(r.get('gpu'))} |" if mixed else ""))
    return lines


def section_lines(s: dict, rows: dict[str, dict], manifest: list[dict],
                  docs: list[dict], columns: dict[str, dict[str, dict]] | None = None,
                  column_docs: dict[str, list[dict]] | None = None) -> list[str]:
    columns, column_docs = columns or {}, column_docs or {}
    return [
        f"<!-- {NAME}:begin -->",
        "## Realistic suite (issue 33): tune, then an independent harness",
        "",
        f"{s['suite']} problems in the field's common format (`benchmarks/realistic/`, "
        f"{s['sizes']} of fp32 input each, {s['over_10']} over 10 GiB): elementwise chains, "
        "reductions, softmax, "
        "layer/RMS/group/instance norms, batch norm in training mode (as the module is "
        "constructed), losses, dilated 2-D and 3-D pooling, scans, matrix products (square, "
        "tall, batched, matrix-vector), linear layers with epilogues and norms, 1-D/2-D/3-D "
        "convolutions (grouped, dilated, strided, depthwise, transposed 2-D and 3-D) and fused "
        "chains (convolution -> BatchNorm(train) -> activation, gemm -> bias -> activation -> "
        "norm). One command (`benchmarks/gpu_suite.py --parts realistic`) runs, per problem, "
        "`cuda-agent tune` in a process of its own under a time limit, then "
        "`benchmarks/realistic_harness.py`, which does not import cuda-agent: it builds `Model` "
        "and the emitted `ModelNew` from the same seed, checks ModelNew on three fresh input "
        "seeds against torch at atol = rtol = 1e-2 (KernelBench's tolerance) and the running "
        "statistics after them, gives both outputs' norm-wise error against a float64 copy of "
        "the reference where memory allows, and times eager, `torch.compile(model)` (default "
        "mode) and ModelNew under PyTorch's default settings (CUDA events, L2 flushed, "
        "median). Statuses: oom, timeout (the tune past its limit plus a grace, or the "
        "harness past its own), wrong, unsupported (the tool's refusal), error. Tune peak: "
        "the GPU's memory in use during the tune, sampled by nvidia-smi, less what was in use "
        "before; tool peak / bound: the GPU worker's own peak (torch's allocator) against "
        "the bound its report states, eager's peak + 2 x output + a fixed allowance (issue "
        "33, item 1), **over** where it passed it, and in brackets where the float64 "
        "reference ran (full: whole on the GPU; chunked: along a separable dimension; "
        "accumulated: over chunks of the batch; host: in host memory, by the CPU, a slow "
        "set-up); eager peak: torch's allocator at the peak "
        "of the harness's eager forward, inputs included.",
        "",
        (f"Run {runs_text(docs)}." if docs else "No GPU run yet.")
        + "".join(f" {p if p != 'tf32' else 'TF32'} column: the same harness, the kernel tuned "
                  f"with `--precision {p}`, run {runs_text(column_docs[p])}."
                  for p in columns if columns[p] and column_docs.get(p)),
        "",
        *table_lines(rows, manifest, columns),
        f"<!-- {NAME}:end -->",
    ]


def state(docs: list[dict], manifest: list[dict]) -> dict:
    """What both sections show, from the results files: the strict (fp32) rows are the headline
    and the table; rows tuned at another precision (`COLUMNS`: `tune`'s default "auto",
    `--precision tf32`) are a column and a sentence each beside them. Keys: summary (with its
    columns' summaries), rows, columns, strict_docs, column_docs."""
    from benchmarks.realistic_run import row_precision

    rows = merge(docs)
    columns = {p: merge(docs, p) for p in COLUMNS}
    strict_docs = [d for d in docs if row_precision(d.get("settings", {})) == "fp32"]
    column_docs = {p: [d for d in docs if row_precision(d.get("settings", {})) == p]
                   for p in COLUMNS}
    s = summarize(rows, manifest)
    s["columns"] = {p: column_summary(rows, c) for p, c in columns.items()}
    s["tf32"] = s["columns"]["tf32"]
    return {"summary": s, "rows": rows, "columns": columns, "strict_docs": strict_docs,
            "column_docs": column_docs}


def write(md: Path, docs: list[dict], manifest: list[dict]) -> dict:
    """Both sections of `state`, written into `md`; the summary."""
    st = state(docs, manifest)
    s = st["summary"]
    write_summary_section(md, f"{NAME}-summary", summary_lines(s, st["strict_docs"],
                                                               s["columns"]))
    lines = section_lines(s, st["rows"], manifest, st["strict_docs"], st["columns"],
                          st["column_docs"])
    write_section(md, lines[0], lines[-1], lines)
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="realistic.json files, oldest first")
    ap.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument("--manifest", type=Path, default=realistic_suite.MANIFEST)
    args = ap.parse_args()
    for f in args.results:
        if not f.is_file():
            print(f"error: {f}: no such results file", file=sys.stderr)
            sys.exit(2)
    docs = [json.loads(f.read_text()) for f in args.results]
    s = write(args.markdown, docs, realistic_suite.read(args.manifest))
    print(f"wrote sections {NAME}-summary and {NAME} of {args.markdown}: {s['run']} of "
          f"{s['suite']} problems run, {len(s['not_run'])} not run")


if __name__ == "__main__":
    main()
