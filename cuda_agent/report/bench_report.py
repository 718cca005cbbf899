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

from ..bench import (PEERS, BenchResult, best_of_run, start_of, summarize, versus_all,
                     versus_peers)
from ..metrics import P
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
                     *[_fmt(m["fast_p_vs_compile"][str(p)], 2) for p in P],
                     _fmt(m.get("geomean_speedup_vs_compile_max_autotune"), 2, "x"),
                     _fmt(m.get("geomean_speedup_vs_compile_max_autotune_no_cudagraphs"), 2,
                          "x"),
                     _fmt(m["median_fraction_of_copy_bw"] and
                          100 * m["median_fraction_of_copy_bw"], 0, "%"),
                     _fmt(m.get("median_search_seconds"), 1, " s"),
                     *([_fmt(m.get("median_wall_seconds"), 1, " s"),
                        _fmt(m.get("median_strategy_seconds"), 1, " s")] if result.live else [])])
    header = ["strategy", "start", "problems", "median measurements to 95%",
              "same, on the problems the policy never trained on", "geomean vs eager",
              "geomean vs compile", *[f"fast_{p:g} vs compile" for p in P],
              "geomean vs compile max-autotune",
              "geomean vs max-autotune without CUDA graphs", "of copy bw",
              "median search time" + (" (GPU evaluation)" if result.live else ""),
              *([_wall_header(result.settings.parallel), "of which in the strategy itself"]
                if result.live else [])]
    problems = sorted(result.problems)
    per = [[p, result.problems[p]["family"],
            *[_fmt(summary[s]["evals_to_95"].get(p), 1) for s in strategies]]
           for p in problems]
    best_of = "found in this run" if result.live else "recorded"
    # convolutions benched live since commit f2c2c30: eager with cuDNN's benchmark mode too
    cudnn = any(result.problems[p].get("eager_cudnn_benchmark_ms") for p in problems)
    base = []
    for p in problems:
        f = result.problems[p]
        found = {s: min((t for r in result.runs if r.strategy == s and r.problem == p
                         for t in r.times if t is not None), default=None) for s in strategies}
        base.append([p, _fmt(f.get("eager_ms"), 4),
                     *([_fmt(f.get("eager_cudnn_benchmark_ms"), 4)] if cudnn else []),
                     _fmt(f.get("compile_ms"), 4),
                     _fmt(f.get("compile_max_ms"), 4), _fmt(f.get("compile_max_nocg_ms"), 4),
                     _fmt(f["best_ms"], 4),
                     _fmt(f.get("sweep_best_recorded_ms"), 4),
                     *[_fmt(found[s], 4) for s in strategies]])
    out = [("Strategies at equal budgets", header, main),
           (f"Measurements to 95 % of the best {best_of}, per problem (median over seeds)",
            ["problem", "family", *strategies], per),
           ("Times per problem (ms): baselines, the optimum, each strategy's best",
            ["problem", "eager", *(["eager, cudnn.benchmark on"] if cudnn else []),
             "torch.compile", "compile max-autotune",
             "max-autotune without CUDA graphs", f"best {best_of}",
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


def convergence_plot(result: BenchResult, path: Path) -> Path:
    """Best so far (as a fraction of the best recorded) against measurements, per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = result.settings.budget
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

    fams: dict[str, list[float]] = {}
    for p, facts in result.problems.items():
        runs = [r for r in result.runs if r.strategy == strategy and r.problem == p]
        found = [min((t for t in r.times if t is not None), default=math.inf) for r in runs]
        if found and facts.get("compile_ms") and math.isfinite(min(found)):
            fams.setdefault(facts["family"], []).append(facts["compile_ms"] / min(found))
    fig, ax = plt.subplots(figsize=(7, 4))
    names = sorted(fams)
    geo = [math.exp(sum(math.log(v) for v in fams[f]) / len(fams[f])) for f in names]
    ax.bar(names, geo)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(ylabel="speedup over torch.compile (geomean)", title=f"{strategy}: speedup per family")
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
                + f"; {len(result.problems)} problems, budget {result.settings.budget} "
                f"measurements, {_seeds(result)}, run {result.date}"
                + (f", precision {PRECISION_NOTES[result.settings.precision]}"
                   if result.settings.precision in PRECISION_NOTES else "")
                + "".join(f", {k} {v}" for k, v in result.provenance.items()) + ". The optimum "
                "is the best time measured in this run (with the recorded sweep's best "
                "configurations measured again where a sweep exists)."
                + _trained_note(result))
    return (f"Replay of sweeps recorded on {', '.join(gpus)}"
            + (" (SIMULATED sweeps: model estimates, not measurements)" if sim else "")
            + f"; {len(result.problems)} problems, budget {result.settings.budget} "
            f"measurements, {_seeds(result)}, run {result.date}."
            + _trained_note(result))


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
    if not best["problems"] or best["geomean_speedup_vs_compile"] is None:
        return ""
    n, slow = best["problems"], best["not_faster_than_compile"]
    return (f" The fastest kernel measured in the run is faster than torch.compile on "
            f"{n - len(slow)} of {n} problems (fast_1 {best['fast_p_vs_compile']['1.0']:.2f}, "
            f"geomean {best['geomean_speedup_vs_compile']:.2f}x)"
            + (f"; not on {', '.join(slow)}." if slow else "."))


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
    head = _provenance(result) + _peers_line(summary) + _best_line(best_found)
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
    from ..bench import problem_files
    from ..errors import CudaAgentError

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
    from ..bench import merge

    return write_report(merge([load_run(d) for d in run_dirs]), out)
