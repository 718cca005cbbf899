"""BENCHMARKS.md's section on the library template's convolution layout slot (issue 4): every
configuration of the template measured per problem on the H200 (`gpu_suite.py --parts
library`), the best time per layout beside the baselines.

    python -m benchmarks.library_section benchmarks/results/2026-11-30-h200-library/library.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuda_agent.runner.baselines import headline_ms, matched_ms
from benchmarks.sections import write_section

ROOT = Path(__file__).resolve().parents[1]

LAYOUTS = ("as_given", "channels_last")
BASELINES = (("eager", "eager_ms"), ("torch.compile", "compile_ms"),
             ("max-autotune without CUDA graphs", "compile_max_nocg_ms"))


def best_per_layout(trials: list[list]) -> dict[str, float]:
    """The fastest verified time per memory.layout; 1-D convolutions have no layout slot and
    count as 'as_given'."""
    best: dict[str, float] = {}
    for short, ms in trials:
        if not isinstance(ms, (int, float)):
            continue
        layout = dict(kv.split("=", 1) for kv in short.split()).get("layout", "as_given")
        best[layout] = min(best.get(layout, float("inf")), ms)
    return best


def algorithm_pairs(trials: list[list]) -> list[float]:
    """Heuristic over benchmark time of configurations identical but for compute.cudnn (a slot
    when these were measured, since removed: see the section's text)."""
    times = {}
    for short, ms in trials:
        if isinstance(ms, (int, float)):
            times[short] = ms
    return [ms / times[short.replace("cudnn=heuristic", "cudnn=benchmark")]
            for short, ms in times.items()
            if "cudnn=heuristic" in short
            and short.replace("cudnn=heuristic", "cudnn=benchmark") in times]


def fmt(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.4f}"


def ratio(base: float | None, best: float) -> str:
    return f"{base / best:.2f}x" if base else "-"


def section(rows: list[dict], source: str, probe: list[dict] | None = None,
            probe_src: str = "", best_ms: dict[str, float] | None = None) -> list[str]:
    commits = sorted({r["commit"] for r in rows})
    lines = ["<!-- library-slots:begin -->",
             "## cuDNN through the library template: the layout slot (issue 4)", "",
             f"Every configuration of the library template (cuDNN through torch, the generated "
             f"epilogue after it) measured and verified per problem on one NVIDIA H200, torch "
             f"2.11, commit {', '.join(commits)}, by `benchmarks/gpu_suite.py --parts library`, "
             f"with eager, torch.compile and max-autotune without CUDA graphs timed by the same "
             f"worker in the same run (`{source}`), each at PyTorch's defaults (as a user's "
             "process runs them: cuDNN's TF32 on) and matched to the kernels' strict fp32 "
             "contract (cuDNN's TF32 off; rows measured before issue 33 have only these). Times "
             "in ms; each cell is the best over the epilogue's own slots. A multi-kernel "
             "program's other stages stay at their defaults. Problems without an epilogue have "
             "no library template (a bare library call is not a generated kernel).", "",
             "| problem | " + " | ".join(f"{name}, defaults | {name}, matched"
                                         for name, _ in BASELINES) + " | "
             + " | ".join(LAYOUTS) + " | best / compile, defaults | best / compile, matched |",
             "|" + "---|" * (3 + 2 * len(BASELINES) + len(LAYOUTS))]
    for r in rows:
        best = best_per_layout(r["trials"])
        if not best:
            continue
        top = min(best.values())
        comp, comp_m = headline_ms(r, "compile_ms"), matched_ms(r, "compile_ms")
        lines.append(f"| {r['problem']} | "
                     + " | ".join(f"{fmt(headline_ms(r, key))} | {fmt(matched_ms(r, key))}"
                                  for _, key in BASELINES) + " | "
                     + " | ".join(fmt(best.get(p)) for p in LAYOUTS)
                     + f" | {ratio(comp, top)} | {ratio(comp_m, top)} |")
    lines += ["", summary(rows)]
    if probe:
        lines += probe_lines(probe, probe_src, best_ms)
    return lines + ["<!-- library-slots:end -->"]


def summary(rows: list[dict]) -> str:
    """What the layout is worth, read off the table, and what became of the algorithm slot."""
    wins, losses, algo = [], [], []
    for r in rows:
        b = best_per_layout(r["trials"])
        if "as_given" in b and "channels_last" in b:
            ratio = b["as_given"] / b["channels_last"]
            (wins if ratio > 1 else losses).append((r["problem"], ratio))
        algo += algorithm_pairs(r["trials"])
    text = ""
    if wins and losses:
        text = (f"Channels-last is faster on {len(wins)} of {len(wins) + len(losses)} "
                "convolutions with a layout choice ("
                + ", ".join(f"{p} {x:.2f}x" for p, x in wins)
                + "), slower on the others (the conversions cost more than cuDNN's NHWC "
                f"kernels save; as given is {min(1 / x for _, x in losses):.2f}x to "
                f"{max(1 / x for _, x in losses):.2f}x faster there): a slot the agents must "
                "learn per shape.")
    if algo:
        near = sum(1 for x in algo if abs(x - 1) < 0.01)
        text += (f" These runs also timed cuDNN's algorithm choice as a slot (heuristics, or "
                 f"cudnn.benchmark timing every algorithm): {near} of {len(algo)} benchmark "
                 "configurations measured within 1 % of their heuristic twins, measured just "
                 "before them in the same worker. torch keeps one algorithm per convolution "
                 "shape and layout for the life of the process, found by whichever mode met "
                 "the shape first, so the flag changed nothing and a candidate's time would have "
                 "depended on the candidates before it: the slot was removed (cuDNN's heuristics "
                 "it is, as for eager and torch.compile).")
    return text


def probe_lines(probe: list[dict], src: str, best: dict[str, float] | None = None
                ) -> list[str]:
    """What cudnn.benchmark finds where it meets each shape first: `cudnn_probe.py`'s rows
    (each problem's eager model, each layout and mode in a fresh process); with `best` (the
    fastest kernel cuda-agent measured per problem), eager in that mode against it."""
    modes = ("as_given/heuristic", "as_given/benchmark", "channels_last/heuristic",
             "channels_last/benchmark")
    lines = ["", f"What cudnn.benchmark finds in a fresh process (`benchmarks/cudnn_probe.py`, "
             f"`{src}`: each problem's eager model, per layout and mode in a process of its own, "
             "so each mode meets the shape first; median ms of 30 calls):", "",
             "| problem | " + " | ".join(m.replace("/", ", ") for m in modes)
             + " | heuristic / benchmark, as given |", "|" + "---|" * (len(modes) + 2)]
    gains = []
    for r in probe:
        h, b = r.get(modes[0]), r.get(modes[1])
        gain = h / b if h and b else None
        if gain:
            gains.append((r["problem"], gain))
        lines.append(f"| {r['problem']} | " + " | ".join(fmt(r.get(m)) for m in modes)
                     + f" | {f'{gain:.2f}x' if gain else '-'} |")
    big = [(p, g) for p, g in gains if g > 1.1]
    if big:
        lines += ["", "Where cuDNN's heuristics pick a slow algorithm for a shape ("
                  + ", ".join(f"{p} {g:.1f}x" for p, g in big) + "), timing every algorithm "
                  "finds one as fast as channels-last or faster; on the others the two modes are "
                  "within " + f"{max(abs(g - 1) for p, g in gains if (p, g) not in big):.0%}. "
                  "These are the shapes where channels-last won above, and where the "
                  "simulator's library model, which knows nothing of cuDNN's choice, ranks "
                  "worst (its sections below). Using the benchmark mode needs each candidate "
                  "process to meet the shape in that mode first; the baselines (eager, "
                  "torch.compile) run the heuristics, the users' default."]
    vs = [(r["problem"], best[r["problem"]], r[modes[1]]) for r in probe
          if best and r["problem"] in best and r.get(modes[1])]
    if vs:
        lines += ["", "Eager with cudnn.benchmark on (as given) against the fastest kernel "
                  "cuda-agent measured for the problem (the main table's *best*): " + ", ".join(
                      f"{p} {b:.4f} ms against {e:.4f} ({e / b:.2f}x)" for p, b, e in vs)
                  + ". Where that ratio is below 1, a user who turns the benchmark mode on "
                  "gets a faster convolution from torch than from cuda-agent; the main "
                  "table's eager column is the default mode."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library_json", type=Path)
    ap.add_argument("--md", type=Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument("--probe", type=Path, default=None,
                    help="cudnn_probe.py's result (cudnn.benchmark in fresh processes)")
    ap.add_argument("--results", type=Path, default=None,
                    help="collect.py's results file: each problem's best kernel, to compare")
    args = ap.parse_args()
    rows = json.loads(args.library_json.read_text())
    src = args.library_json.resolve().relative_to(ROOT)
    probe = json.loads(args.probe.read_text()) if args.probe else None
    write_section(args.md, "<!-- library-slots:begin -->", "<!-- library-slots:end -->",
                  section(rows, str(src), probe,
                          str(args.probe.resolve().relative_to(ROOT)) if args.probe else "",
                          {r["problem"]: r["best_ms"] for r in json.loads(
                              args.results.read_text())["rows"] if r.get("best_ms")}
                          if args.results else None))
    print(f"{args.md}: library slots section, {len(rows)} problems")


if __name__ == "__main__":
    main()
