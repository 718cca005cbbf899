"""Does the capture's own tracer (`ir/pretrace.py`) give every problem the graph torch.export gives?

For each problem file, `capture` runs twice: as it runs in `tune` (the tracer, torch.export where
the tracer leaves the module to it) and with torch.export alone. The two outcomes must be equal:
the same graph (its JSON, the fingerprint's input, plus its train/eval modes), or the same error.
A problem whose capture fell back to torch.export is listed; so is any difference. Run it on
a new torch version before adding the version to `pretrace.VERIFIED_TORCH`.

    python -m benchmarks.capture_equality [DIR_OR_FILE ...] [--out results.json]

Default: benchmarks/problems, benchmarks/realistic and the test suite's problem files.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from cuda_agent.ir import capture as capture_mod, pretrace
from cuda_agent.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]

DEFAULT = ["benchmarks/problems", "benchmarks/realistic", "tests/data/good", "tests/data/bad"]


def outcome(path: Path, export_only: bool) -> tuple[Any, bool]:
    """The capture's graph (or its error) and whether the tracer fell back to torch.export."""
    fell_back = False
    try:
        problem = load_problem(path, check=False)
        fell_back = not export_only and not capture_mod.tracer_covers(
            problem.model_cls, problem.init_inputs(), problem.get_inputs)
        graph = capture_mod.capture(problem.model_cls, problem.init_inputs(), problem.get_inputs,
                                    tracer=not export_only)
        result: Any = {"graph": graph.to_json(), "modes": graph.modes,
                       "fingerprint": graph.fingerprint()}
    except Exception as exc:  # noqa: BLE001 - a problem's error is an outcome to compare
        result = {"error": f"{type(exc).__name__}: {exc}"}
    return result, fell_back


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=DEFAULT)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    # the tracer runs on this torch whether or not it is verified yet: this run is the check
    pretrace.VERIFIED_TORCH.add(tuple(int(v) for v in torch.__version__.split(".")[:2]))
    files = []
    for p in map(Path, args.paths):
        p = p if p.is_absolute() else ROOT / p
        files += sorted(p.glob("*.py")) if p.is_dir() else [p]
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in files:
            traced, fell_back = outcome(f, export_only=False)
            exported, _ = outcome(f, export_only=True)
            rows.append({"problem": str(f.relative_to(ROOT)), "equal": traced == exported,
                         "fell_back": fell_back, "error": exported.get("error"),
                         "fingerprint": exported.get("fingerprint")})
            if not rows[-1]["equal"]:
                print(f"DIFFERENT {rows[-1]['problem']}\n  tracer: {traced}\n  export: {exported}")
    summary = {"problems": len(rows), "equal": sum(r["equal"] for r in rows),
               "fell_back": [r["problem"] for r in rows if r["fell_back"]],
               "errors (both paths)": sum(r["error"] is not None for r in rows),
               "torch": torch.__version__}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({**summary, "rows": rows}, indent=1) + "\n")
    sys.exit(0 if summary["equal"] == summary["problems"] else 1)


if __name__ == "__main__":
    main()
