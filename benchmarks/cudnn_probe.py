"""What cudnn.benchmark would find, each mode in a fresh process (GPU only).

torch keeps one cuDNN algorithm per convolution shape and layout for the life of a process,
found by whichever mode met the shape first, so the two modes cannot be compared inside one
worker (the library template's docstring). Here each (problem, layout, mode) runs the problem's
eager model in its own process: if benchmark mode is much faster somewhere, an algorithm slot is
worth measuring in a process of its own.

    python -m benchmarks.cudnn_probe benchmarks/problems/conv*.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


CHILD = """
import json, sys, torch
from cuda_agent.problem import load_problem
torch.backends.cudnn.allow_tf32 = False  # strict fp32, as the worker and the baselines
torch.backends.cudnn.benchmark = {benchmark}
p = load_problem({path!r})
model = p.model_cls(*p.init_inputs()).cuda().eval()
xs = [x.cuda() if torch.is_tensor(x) else x for x in p.get_inputs()]
if {channels_last}:
    model = model.to(memory_format=torch.channels_last if xs[0].dim() == 4
                     else torch.channels_last_3d)
    xs = [x.contiguous(memory_format=torch.channels_last if x.dim() == 4
                       else torch.channels_last_3d) if torch.is_tensor(x) and x.dim() in (4, 5)
          else x for x in xs]
flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
times = []
with torch.no_grad():
    for i in range(40):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); model(*xs); b.record(); torch.cuda.synchronize()
        if i >= 10:  # the first calls find the algorithm (benchmark mode times them all)
            times.append(a.elapsed_time(b))
print(json.dumps(times))
"""


def probe(path: Path, channels_last: bool, benchmark: bool) -> float | None:
    code = CHILD.format(path=str(path), benchmark=benchmark,
                        channels_last=channels_last)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        print(f"{path.stem}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return statistics.median(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    for path in args.problems:
        row = {"problem": path.stem}
        for layout in ("as_given", "channels_last"):
            for mode in ("heuristic", "benchmark"):
                row[f"{layout}/{mode}"] = probe(path, layout == "channels_last",
                                                mode == "benchmark")
        rows.append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
