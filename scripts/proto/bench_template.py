"""Time gemm_tc configurations rendered by the template against the 3xTF32 prototype kernel
and cuBLAS at 4096^3 (same method as bench_tf32x3.py): which slot values matter, and whether
the generated kernel keeps the prototype's speed. Writes $OUT/template.json."""
import json
import os
import sys
from pathlib import Path

import cupy as cp
import torch
from timing import timed
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cuda_agent.ir.capture import capture  # noqa: E402
from cuda_agent.ir.plan import make_plan  # noqa: E402
from cuda_agent.runner import launcher  # noqa: E402
from cuda_agent.space.slots import Target  # noqa: E402
from cuda_agent.space.space import Space  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
M = N = K = 4096


class Fn(nn.Module):
    def forward(self, a, b):
        return a @ b




a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda")
rows = [{"kernel": "cublas", "ms": timed(lambda: torch.mm(a, b))}]
print(rows[-1], flush=True)
src = (Path(__file__).parent / "tf32x3_gemm.cu").read_text()
name = "gemm_tf32x3<128,128,32,64,64,3,1>"
mod = cp.RawModule(code=src, options=("--std=c++17", "-arch=sm_90"), name_expressions=[name])
fn = mod.get_function(name)
smem = 3 * (128 * 36 + 32 * 136) * 4
fn.max_dynamic_shared_size_bytes = smem
c = torch.empty(M, N, device="cuda")
args = (a.data_ptr(), b.data_ptr(), c.data_ptr(), cp.int32(M), cp.int32(N), cp.int32(K))
rows.append({"kernel": "prototype " + name, "ms": timed(
    lambda: fn((N // 128, M // 128), (128,), args, shared_mem=smem))})
print(rows[-1], flush=True)
sp = Space.for_plan(make_plan(capture(Fn, [], lambda: [torch.randn(M, K), torch.randn(K, N)])),
                    Target())
want = [dict(bm=bm, bn=bn, unroll=u, stages=st, bk=bk, raster=r)
        for bm, bn in ((128, 128), (256, 128), (128, 256)) for u in ("none", "full", 2)
        for st in (3, 4) for bk in (32,) for r in (8,)] + \
    [dict(bm=128, bn=128, unroll="none", stages=3, bk=32, raster=1),
     dict(bm=256, bn=128, unroll="none", stages=4, bk=16, raster=8)]
ref = a.double() @ b.double()
for w in want:
    cfg = next((x for x in sp.configs if sp.template_of(x).name == "gemm_tc" and
                x["config.warp"] == "64x64" and x["reduction.split"] == 1 and
                all(x[k] == v for k, v in (("config.bm", w["bm"]), ("config.bn", w["bn"]),
                                          ("compute.unroll", w["unroll"]),
                                          ("memory.stages", w["stages"]),
                                          ("memory.bk", w["bk"]),
                                          ("config.raster", w["raster"])))), None)
    if cfg is None:
        continue
    r = sp.render(cfg)
    image = launcher.compile_for_device(r.source, a.device)
    k = launcher.LoadedKernels(image, [l.__dict__ for l in r.launches], r.workspace_bytes)
    rows.append({"kernel": cfg.short(), "ms": timed(lambda: k([a, b], c))})
    err = float((c.double() - ref).norm() / ref.norm())
    rows[-1]["rel_err"] = err
    print(rows[-1], flush=True)
    k.close()
Path(os.environ.get("OUT", "."), "template.json").write_text(json.dumps(rows, indent=1))
