"""Tables, plots and a self-contained HTML page for a `bench` run (rebuilt by `cuda-agent report`).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from pathlib import Path
from typing import Any

from ..bench import (PEERS, BenchResult, best_of_run, merge, problem_files, start_of, summarize,
                     versus_all, versus_peers)
from ..errors import CudaAgentError
from ..metrics import P
from ..runner.baselines import headline_ms, matched_field, matched_ms
from ..search.base import is_agents
from ..space.slots import PRECISION_NOTES


def _fmt(v: Any, digits: int = 2, suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}{suffix}"
    return f"{v}{suffix}"


def _wall_header(parallel: int) -> str:
    return "median wall time per search" + (
        f" (up to {parallel} runs at once: includes waiting for the others' measurements)"
        if parallel > 1 else "")


def tables(result: BenchResult, summary: dict[str, Any]) -> list[tuple[str, list[str],
                                                                       list[list[str]]]]:
    """(title, header, rows) for every table of the report."""
    strategies = list(summary)
    main = []
    for s in strategies:
        m = summary[s]
        main.append([s, start_of(s), str(m["problems"]), _fmt(m["median_evals_to_95"], 1),
                     _fmt(m.get("median_evals_to_95_unseen"), 1),
                     _fmt(m["geomean_speedup_vs_eager"], 2, "x"),
                     _fmt(m["geomean_speedup_vs_compile"], 2, "x"),
                     *[_fmt((m["fast_p_vs_compile"] or {}).get(str(p)), 2) for p in P],
                     _fmt(m.get("geomean_speedup_vs_compile_max_autotune"), 2, "x"),
                     _fmt(m.get("geomean_speedup_vs_compile_max_autotune_no_cudagraphs"), 2,
                          "x"),
                     _fmt(m.get("geomean_speedup_vs_compile_matched"), 2, "x"),
                     _fmt((m.get("fast_p_vs_compile_matched") or {}).get("1.0"), 2),
                     _fmt(m["median_fraction_of_copy_bw"] and
                          100 * m["median_fraction_of_copy_bw"], 0, "%"),
                     _fmt(m.get("median_search_seconds"), 1, " s"),
                     *([_fmt(m.get("median_wall_seconds"), 1, " s"),
                        _fmt(m.get("median_strategy_seconds"), 1, " s")] if result.live else [])])
    header = ["strategy", "start", "problems", "median measurements to 95%",
              "same, on the problems the policy never trained on", "geomean vs eager",
              "geomean vs compile", *[f"fast_{p:g} vs compile" for p in P],
              "geomean vs compile max-autotune",
              "geomean vs max-autotune without CUDA graphs",
              "geomean vs compile, matched", "fast_1 vs compile, matched", "of copy bw",
              "median search time" + (" (GPU evaluation)" if result.live else ""),
              *([_wall_header(result.settings.parallel), "of which in the strategy itself"]
                if result.live else [])]
    problems = sorted(result.problems)
    per = [[p, result.problems[p]["family"],
            *[_fmt(summary[s]["evals_to_95"].get(p), 1) for s in strategies]]
           for p in problems]
    best_of = "found in this run" if result.live else "recorded"
    # each baseline at PyTorch's defaults, then matched (columns no problem has are left out:
    # eager in cuDNN's benchmark mode is timed for convolutions only, since commit f2c2c30)
    cols = [(label, key) for label, key in BASELINE_COLUMNS
            if any(_baseline(f, key) for f in result.problems.values())]
    base = []
    for p in problems:
        f = result.problems[p]
        found = {s: min((t for r in result.runs if r.strategy == s and r.problem == p
                         for t in r.times if t is not None), default=None) for s in strategies}
        base.append([p, *[_fmt(_baseline(f, key), 4) for _, key in cols],
                     _fmt(f["best_ms"], 4),
                     _fmt(f.get("sweep_best_recorded_ms"), 4),
                     *[_fmt(found[s], 4) for s in strategies]])
    out = [("Strategies at equal budgets", header, main),
           (f"Measurements to 95 % of the best {best_of}, per problem (median over seeds)",
            ["problem", "family", *strategies], per),
           ("Times per problem (ms): baselines at PyTorch's defaults and matched to the "
            "kernels' contract, the optimum, each strategy's best",
            ["problem", *[label for label, _ in cols], f"best {best_of}",
             "sweep's best (recorded run)", *strategies], base)]
    stopped = [[r.problem, r.strategy, str(r.seed), str(len(r.times)), r.error]
               for r in result.runs if r.error]
    if stopped:  # a peer that stopped early is counted as it is, and says why
        out.append(("Strategy runs that stopped with an error",
                    ["problem", "strategy", "seed", "measurements", "error"], sorted(stopped)))
    if result.skipped:
        out.append(("Problems not compared", ["problem", "why"],
                    [[p, why] for p, why in sorted(result.skipped.items())]))
    return out


def _baseline_columns() -> list[tuple[str, str]]:
    labels = {"eager_ms": "eager", "eager_cudnn_benchmark_ms": "eager, cudnn.benchmark on",
              "compile_ms": "torch.compile", "compile_max_ms": "compile max-autotune",
              "compile_max_nocg_ms": "max-autotune without CUDA graphs"}
    order = ("eager_ms", "eager_cudnn_benchmark_ms", "compile_ms", "compile_max_ms",
             "compile_max_nocg_ms")
    return ([(labels[k], k) for k in order]
            + [(f"{labels[k]}, matched", matched_field(k)) for k in order])


def _baseline(facts: dict[str, Any], key: str) -> float | None:
    """A problem's figure for column `key`: at the defaults, or matched ("..._matched_ms"),
    read so that an old run's figures land in the matched columns."""
    if key.endswith("_matched_ms"):
        return matched_ms(facts, key.replace("_matched_ms", "_ms"))
    return headline_ms(facts, key)


BASELINE_COLUMNS = _baseline_columns()
"""(column, record field) of the per-problem table: each baseline as a user's process runs it
(PyTorch's defaults), then under the kernels' contract ("matched"; a run recorded before the
defaults were timed has these alone, `bench.baseline_column`)"""


def convergence_plot(result: BenchResult, path: Path) -> Path:
    """Best so far (as a fraction of the best recorded) against measurements, per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = result.settings.run.budget
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in dict.fromkeys(r.strategy for r in result.runs):
        curves = []
        for r in result.runs:
            if r.strategy != s or (is_agents(s) and r.problem in result.trained_on):
                continue
            best = result.problems[r.problem]["best_ms"]
            run, curve = math.inf, []
            for k in range(budget):
                t = r.times[k] if k < len(r.times) else None
                if t is not None:
                    run = min(run, t)
                curve.append(best / run if math.isfinite(run) else 0.0)
            curves.append(curve)
        if curves:
            mean = [sum(c[k] for c in curves) / len(curves) for k in range(budget)]
            ax.plot(range(1, budget + 1), mean, label=s)
    ax.set(xlabel="measurements", ylabel="best so far / optimum (mean over problems)",
           title="convergence", ylim=(0, 1.02))
    ax.axhline(0.95, color="gray", lw=0.8, ls="--")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def speedup_plot(result: BenchResult, summary: dict[str, Any], path: Path,
                 strategy: str) -> Path:
    """Speedup over torch.compile per family, for one strategy's best kernels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # against torch.compile at PyTorch's defaults; a run from before they were timed, matched
    defaults = any(headline_ms(f) for f in result.problems.values())
    read = headline_ms if defaults else matched_ms
    fams: dict[str, list[float]] = {}
    for p, facts in result.problems.items():
        runs = [r for r in result.runs if r.strategy == strategy and r.problem == p]
        found = [min((t for t in r.times if t is not None), default=math.inf) for r in runs]
        comp = read(facts, "compile_ms")
        if found and comp and math.isfinite(min(found)):
            fams.setdefault(facts["family"], []).append(comp / min(found))
    fig, ax = plt.subplots(figsize=(7, 4))
    names = sorted(fams)
    geo = [math.exp(sum(math.log(v) for v in fams[f]) / len(fams[f])) for f in names]
    ax.bar(names, geo)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(ylabel="speedup over torch.compile (geomean)" + (
        "" if defaults else ", matched"), title=f"{strategy}: speedup per family against "
        + ("torch.compile at PyTorch's defaults" if defaults else "the matched torch.compile"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _md_table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _seeds(result: BenchResult) -> str:
    n = result.settings.seeds
    return f"{n} seed" + ("" if n == 1 else "s")


def _provenance(result: BenchResult) -> str:
    gpus = sorted({str(f.get("gpu")) for f in result.problems.values()})
    sim = any(f.get("simulated") for f in result.problems.values())
    if result.live:
        return (f"Live run on {', '.join(gpus)}"
                + (" (SIMULATED device: model estimates, not measurements; correctness not "
                   "checked)" if sim else ": every strategy and baseline measured in this run")
                + f"; {len(result.problems)} problems, budget {result.settings.run.budget} "
                f"measurements, {_seeds(result)}, run {result.date}"
                + (f", precision {PRECISION_NOTES[result.settings.run.precision]}"
                   if result.settings.run.precision in PRECISION_NOTES else
                   ", precision auto (each product as torch's flags run it)"
                   if result.settings.run.precision == "auto" else "")
                + "".join(f", {k} {v}" for k, v in result.provenance.items()) + ". The optimum "
                "is the best time measured in this run (with the recorded sweep's best "
                "configurations measured again where a sweep exists)."
                + _trained_note(result))
    return (f"Replay of sweeps recorded on {', '.join(gpus)}"
            + (" (SIMULATED sweeps: model estimates, not measurements)" if sim else "")
            + f"; {len(result.problems)} problems, budget {result.settings.run.budget} "
            f"measurements, {_seeds(result)}, run {result.date}."
            + _trained_note(result))


def _baselines_line(result: BenchResult) -> str:
    """What the baselines' two settings were: PyTorch's defaults (the headline), matched."""
    known = [f["baseline_settings"]["defaults"] for f in result.problems.values()
             if (f.get("baseline_settings") or {}).get("defaults")]
    if not known:
        return (" Baselines: none at PyTorch's defaults in this run (recorded before they were "
                "timed so, or not measured): the 'matched' columns are torch under the kernels' "
                "contract, strict fp32.")
    flags = sorted({(d.get("conv_tf32"), d.get("matmul_tf32")) for d in known})
    said = "; ".join(f"cuDNN TF32 {'on' if c else 'off'}, matmul TF32 {'on' if m else 'off'}"
                     for c, m in flags)
    return (" Baselines: torch eager and torch.compile as a user's process runs them, at "
            f"PyTorch's defaults ({said}; the headline, 'vs compile'), and beside them under "
            "the kernels' contract ('matched': strict fp32 unless --precision says otherwise).")


def _peers_line(summary: dict[str, Any]) -> str:
    """The headline: the agents against the cold peers, the warm peers and the model alone,
    each named with its start."""
    v = versus_peers(summary)
    both = versus_all(summary)
    if v is None and both["warm"] is None and both["prior"] is None:
        return ""
    out = ""
    if v is not None:
        ran = [s for s in PEERS if s in summary]
        peers = ("the best of Optuna and Kernel Tuner, started cold" if len(ran) > 1
                 else "the one peer run, started cold")
        out = (f" The agents (marl: policy + the model's prior) reach 95 % of the optimum in a "
               f"median {v['ours_median']:g} measurements; {peers} ({v['best_peer']}) in "
               f"{v['best_peer_median']:g}"
               + (f": {v['ratio']:.1f}x fewer." if v["ratio"] else "."))
    w = both["warm"]
    if w is not None:
        out += (f" Warm-started with the model's top picks, the best of them ({w['best_peer']}) "
                f"needs {w['best_peer_median']:g} against the agents' {w['ours_median']:g}.")
    pr = both["prior"]
    if pr is not None:
        out += (f" The model's ranking alone (prior, no network): {pr['best_peer_median']:g}.")
    return out


def _best_line(best: dict[str, Any]) -> str:
    n = best["problems"]
    if not n:
        return ""
    parts = []
    for sfx, what in (("", "torch.compile as a user's process runs it (PyTorch's defaults)"),
                      ("_matched", "torch.compile under the kernels' contract (matched)")):
        geo, slow = best.get(f"geomean_speedup_vs_compile{sfx}"), \
            best.get(f"not_faster_than_compile{sfx}")
        if geo is None or slow is None:
            continue
        missing = best.get(f"without_compile{sfx}") or []
        slow = [p for p in slow if p not in missing]
        parts.append(f"faster than {what} on {n - len(slow) - len(missing)} of {n} problems "
                     f"(fast_1 {best[f'fast_p_vs_compile{sfx}']['1.0']:.2f}, geomean "
                     f"{geo:.2f}x)" + (f"; not on {', '.join(slow)}" if slow else "")
                     + (f"; no such figure for {', '.join(missing)}" if missing else ""))
    if not parts:
        return ""
    return (" The fastest kernel measured in the run is " + "; it is ".join(parts)
            + ("" if best.get("geomean_speedup_vs_compile") else
               " (torch.compile was not timed at PyTorch's defaults in this run)") + ".")


def _trained_note(result: BenchResult) -> str:
    n = len((result.settings.policy or "").split(","))
    if n > 1:  # cross-fitted policies
        seen = [p for p in result.problems if p in result.trained_on]
        return (f" The agents' {n} policies were each trained without a share of the suite, and "
                "each problem is tuned by one that never trained on it"
                + (f" (every one trained on {len(seen)} of these: marl's rows leave them out)."
                   if seen else "."))
    if not result.trained_on:
        return ""
    seen = [p for p in result.problems if p in result.trained_on]
    return (f" The agents' policy was trained on {len(result.trained_on)} problems, "
            f"{len(seen)} of them among these; marl's rows count only the others (the column "
            "'never trained on' gives every strategy on those same problems)."
            if seen else f" The agents' policy was trained on {len(result.trained_on)} other "
            "problems, none of these.")


def write_report(result: BenchResult, out: Path) -> dict[str, Path]:
    """bench.json, bench.md, two PNG plots and a self-contained report.html."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    best_found = best_of_run(result)
    (out / "bench.json").write_text(json.dumps({**result.to_json(), "summary": summary,
                                                "versus_peers": versus_peers(summary),
                                                "versus_warm_and_prior": versus_all(summary),
                                                "best_of_run": best_found},
                                               indent=2, default=str) + "\n")
    conv = convergence_plot(result, out / "convergence.png")
    best = min(summary, key=lambda s: summary[s]["median_evals_to_95"] or math.inf)
    spd = speedup_plot(result, summary, out / "speedup_by_family.png", best)
    tabs = tables(result, summary)
    head = (_provenance(result) + _baselines_line(result) + _peers_line(summary)
            + _best_line(best_found))
    md = f"# cuda-agent bench\n\n{head}\n\n" + "\n".join(
        _md_table(*t) for t in tabs) + "\n![convergence](convergence.png)\n" \
        "![speedup by family](speedup_by_family.png)\n"
    (out / "bench.md").write_text(md)
    img = {p.name: base64.b64encode(p.read_bytes()).decode() for p in (conv, spd)}
    parts = [f"<h1>cuda-agent bench</h1><p>{html.escape(head)}</p>"]
    for title, header, rows in tabs:
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>" +
                     "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>" +
                     "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                             for r in rows) + "</table>")
    for name, data in img.items():
        parts.append(f'<h2>{html.escape(name[:-4].replace("_", " "))}</h2>'
                     f'<img src="data:image/png;base64,{data}" alt="{name}">')
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:"
             "collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:"
             "right}th{background:#f3f3f3}img{max-width:100%}")
    (out / "report.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'>"
                                     f"<title>cuda-agent bench</title><style>{style}</style>"
                                     f"</head><body>{''.join(parts)}</body></html>\n")
    return {"json": out / "bench.json", "markdown": out / "bench.md", "html": out / "report.html",
            "convergence": conv, "speedup": spd}


PARTIAL = "bench.partial.json"
"""a live run's problems so far, rewritten after each one and removed when the report is
written: what is left of a run stopped before its end"""


def write_partial(result: BenchResult, out: Path) -> None:
    """The result so far, replaced atomically (a reader never sees half a file)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (PARTIAL + ".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1, default=str) + "\n")
    os.replace(tmp, out / PARTIAL)


def load_run(run_dir: Path) -> BenchResult:
    """A run's result: its bench.json, or what a run stopped before its end had finished (the
    suite's problems it did not reach are listed among those not compared)."""
    path, partial = run_dir / "bench.json", run_dir / PARTIAL
    # a bench.json older than the partial file is an earlier run's, in a folder used again
    if not partial.exists() or (path.exists()
                                and path.stat().st_mtime_ns > partial.stat().st_mtime_ns):
        return BenchResult.from_json(json.loads(path.read_text()))
    result = BenchResult.from_json(json.loads(partial.read_text()))
    try:
        files = problem_files(result.settings.suite)
    except CudaAgentError:  # the suite is not on this machine: what was reached is all we know
        files = []
    for f in files:
        if f.stem not in result.problems and f.stem not in result.skipped:
            result.skipped[f.stem] = ("not finished: the run was stopped before the end of "
                                      "this problem")
    return result


def rebuild(run_dir: Path) -> dict[str, Path]:
    """`cuda-agent report RUN`: the same files again from bench.json (from the problems it
    finished, for a run stopped before its end: its report replaces the partial file)."""
    files = write_report(load_run(run_dir), run_dir)
    (run_dir / PARTIAL).unlink(missing_ok=True)
    return files


def merge_runs(run_dirs: list[Path], out: Path) -> dict[str, Path]:
    """`cuda-agent report RUN... --out DIR`: one report over several runs' problems."""
    return write_report(merge([load_run(d) for d in run_dirs]), out)
