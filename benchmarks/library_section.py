"""BENCHMARKS.md's section on the library template's convolution slots (issue 4): every
configuration of the template measured per problem on the H200 (`gpu_suite.py --parts
library`), the best time per (layout, cuDNN algorithm choice) pair beside the baselines.

    python benchmarks/library_section.py benchmarks/results/2026-11-30-h200-library/library.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from sections import write_section  # noqa: E402

PAIRS = (("as_given", "heuristic"), ("as_given", "benchmark"), ("channels_last", "heuristic"),
         ("channels_last", "benchmark"))


def best_per_pair(trials: list[list]) -> dict[tuple[str, str], float]:
    """The fastest verified time per (memory.layout, compute.cudnn); 1-D convolutions have no
    layout slot and count as 'as_given'."""
    best: dict[tuple[str, str], float] = {}
    for short, ms in trials:
        if not isinstance(ms, (int, float)):
            continue
        slots = dict(kv.split("=", 1) for kv in short.split())
        key = (slots.get("layout", "as_given"), slots["cudnn"])
        best[key] = min(best.get(key, float("inf")), ms)
    return best


def fmt(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.4f}"


def section(rows: list[dict], source: str) -> list[str]:
    commits = sorted({r["commit"] for r in rows})
    lines = ["<!-- library-slots:begin -->",
             "## cuDNN through the library template: layout and algorithm slots (issue 4)", "",
             f"Every configuration of the library template (cuDNN through torch, the generated "
             f"epilogue after it) measured and verified per problem on one NVIDIA H200, torch "
             f"2.11, commit {', '.join(commits)}, by `benchmarks/gpu_suite.py --parts library`, "
             f"with eager, torch.compile and max-autotune without CUDA graphs timed by the same "
             f"worker in the same run (`{source}`). Times in ms; each cell is the best over the "
             "epilogue's own slots. A multi-kernel program's other stages stay at their "
             "defaults. Problems without an epilogue have no library template (a bare library "
             "call is not a generated kernel).", "",
             "| problem | eager | torch.compile | max-autotune without CUDA graphs | "
             + " | ".join(f"{a} / {b}" for a, b in PAIRS) + " | best / compile |",
             "|" + "---|" * (5 + len(PAIRS))]
    for r in rows:
        best = best_per_pair(r["trials"])
        if not best:
            continue
        top = min(best.values())
        ratio = f"{r['compile_ms'] / top:.2f}x" if r.get("compile_ms") else "-"
        lines.append(f"| {r['problem']} | {fmt(r['eager_ms'])} | {fmt(r['compile_ms'])} | "
                     f"{fmt(r.get('compile_max_nocg_ms'))} | "
                     + " | ".join(fmt(best.get(p)) for p in PAIRS) + f" | {ratio} |")
    lines += ["", summary(rows), "<!-- library-slots:end -->"]
    return lines


def summary(rows: list[dict]) -> str:
    """What each slot is worth, read off the table: where channels-last wins and by how much,
    and how far cudnn.benchmark moves the time from cuDNN's heuristics."""
    wins, losses, algo = [], [], []
    for r in rows:
        b = best_per_pair(r["trials"])
        given = min((v for (lay, _), v in b.items() if lay == "as_given"), default=None)
        last = min((v for (lay, _), v in b.items() if lay == "channels_last"), default=None)
        if given and last:
            (wins if last < given else losses).append((r["problem"], given / last))
        for lay in ("as_given", "channels_last"):
            if (lay, "heuristic") in b and (lay, "benchmark") in b:
                algo.append((r["problem"], b[(lay, "heuristic")] / b[(lay, "benchmark")]))
    text = (f"The layout slot decides: channels-last is faster on {len(wins)} of "
            f"{len(wins) + len(losses)} convolutions with a layout choice ("
            + ", ".join(f"{p} {x:.2f}x" for p, x in wins)
            + "), slower on the others (the conversions cost more than cuDNN's NHWC kernels "
            f"save; as given is {min(1 / x for _, x in losses):.2f}x to "
            f"{max(1 / x for _, x in losses):.2f}x faster there)." if wins and losses else "")
    if algo:
        worst = max(algo, key=lambda t: abs(t[1] - 1))
        text += (f" cuDNN's algorithm choice barely moves the time: cudnn.benchmark against "
                 f"the heuristics differs by at most {abs(worst[1] - 1) * 100:.0f} % "
                 f"({worst[0]}), within 1 % on "
                 f"{sum(1 for _, x in algo if abs(x - 1) < 0.01)} of {len(algo)} pairs.")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library_json", type=Path)
    ap.add_argument("--md", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    rows = json.loads(args.library_json.read_text())
    src = args.library_json.resolve().relative_to(ROOT)
    write_section(args.md, "<!-- library-slots:begin -->", "<!-- library-slots:end -->",
                  section(rows, str(src)))
    print(f"{args.md}: library slots section, {len(rows)} problems")


if __name__ == "__main__":
    main()
