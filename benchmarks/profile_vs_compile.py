"""Nsight Compute reports of a generated kernel and of torch.compile's kernels for the same
problem, side by side, plus torch.compile's generated source: where a generated kernel trails
torch.compile by a few percent, the reports say why (occupancy, bytes in flight, DRAM
throughput, stalls) without guessing. Runs on the GPU machine:

    python3 -m benchmarks.profile_vs_compile benchmarks/problems/norm_rms.py \
        "algo=passes fastmath=1 unroll=1 block=1024 ..." --out $OUT/norm_rms

Writes <out>/ours.txt, <out>/compile.txt (ncu section reports) and <out>/compile_code.txt.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats",
            "WarpStateStats", "SchedulerStats", "ComputeWorkloadAnalysis", "InstructionStats")

COMPILED_RUN = r"""
import sys, torch
from torch._inductor.utils import run_and_get_code
from cuda_agent.problem import load_problem
p = load_problem({problem!r})
dev = torch.device("cuda", 0)
model = p.make_model(dev)
args = p.make_inputs(dev)
fn = torch.compile(model)
with torch.no_grad():
    _, code = run_and_get_code(fn, *args)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn(*args)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
open({code_out!r}, "w").write("\n\n# ----\n\n".join(code))
"""


def ncu(args: list[str], out: Path, extra: list[str]) -> None:
    from cuda_agent.runner.counters import ncu_path

    found = ncu_path()
    if found is None:
        raise SystemExit("error: Nsight Compute (ncu) not found: run this on the GPU machine")
    cmd = [found, "--clock-control", "none", "--print-units", "base"]
    for s in SECTIONS:
        cmd += ["--section", s]
    proc = subprocess.run(cmd + extra + args, capture_output=True, text=True, timeout=300)
    out.write_text(proc.stdout + "\n" + proc.stderr[-3000:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("config", help="the generated candidate's slots, as the tables print them")
    ap.add_argument("--out", required=True)
    ap.add_argument("--compiler", default="nvrtc", choices=("nvrtc", "nvcc"))
    a = ap.parse_args()
    from cuda_agent.build.builder import Builder, BuildInput
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.space.slots import Config, Target, expand_short
    from cuda_agent.space.space import Space

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    problem = str(Path(a.problem).resolve())
    plan = make_plan(load_problem(problem).graph())
    space = Space.for_plan(plan, Target())
    cfg = space.upgrade(expand_short(a.config, [s.name for s in space.slots]))
    if cfg is None:
        raise SystemExit(f"error: {a.config!r} is not a configuration of this space")
    rendered = space.render(cfg)
    (out / "ours.cu").write_text(rendered.source)
    with tempfile.TemporaryDirectory() as tmp:
        (build,) = Builder(a.compiler, 1, cache_dir=tmp).build(
            [BuildInput(rendered.source, Target().arch)])
        if not build.ok:
            raise SystemExit(f"error: the candidate does not compile: {build.error_msg}")
        spec = Path(tmp) / "candidate.json"
        spec.write_text(json.dumps({
            "problem": problem, "cubin": build.cubin_path,
            "launches": [L.__dict__ for L in rendered.launches],
            "workspace_bytes": rendered.workspace_bytes,
            "zero_workspace": rendered.zero_workspace}))
        ncu([sys.executable, "-m", "cuda_agent.runner.profile_one", str(spec)], out / "ours.txt",
            ["--kernel-name", "regex:^(s[0-9]+_)?ca_"])
        script = Path(tmp) / "compiled.py"
        script.write_text(COMPILED_RUN.format(problem=problem,
                                              code_out=str(out / "compile_code.txt")))
        ncu([sys.executable, str(script)], out / "compile.txt", ["--profile-from-start", "off"])
    print(f"wrote {out}/ours.txt, compile.txt, compile_code.txt")


if __name__ == "__main__":
    main()
