"""Prototype measurement: 3xTF32 tensor-core GEMM vs cuBLAS strict fp32 (TF32 off), H200.

Times each configuration on the issue-4 sizes (median of CUDA-event timings, L2 flushed) and
measures its error against a float64 reference next to cuBLAS fp32's own error.
"""
import json
import os
from pathlib import Path

import cupy as cp
import torch
from timing import timed

torch.backends.cuda.matmul.allow_tf32 = False
HERE = Path(__file__).parent
SRC = (HERE / "tf32x3_gemm.cu").read_text()
CONFIGS = [(128, 256, 32, 64, 64, 3, 0), (128, 128, 32, 64, 64, 3, 0),
           (128, 256, 32, 64, 64, 3, 1), (256, 128, 32, 64, 64, 3, 1), (128, 128, 32, 64, 64, 3, 1),
           (128, 128, 32, 64, 32, 3, 1), (128, 128, 16, 64, 64, 4, 1), (128, 128, 32, 64, 64, 2, 1),
           (64, 128, 32, 32, 64, 3, 1), (64, 64, 32, 32, 32, 4, 1), (128, 64, 32, 64, 32, 3, 1)]
SIZES = {"square": (4096, 4096, 4096), "rect": (2048, 4096, 8192), "odd": (1000, 1036, 2052), "deepk": (1024, 1024, 32768)}
names = [f"gemm_tf32x3<{','.join(map(str, c))}>" for c in CONFIGS]
mod = cp.RawModule(code=SRC, options=("--std=c++17", "-arch=sm_90"), name_expressions=names)


rows = []
for size, (M, N, K) in SIZES.items():
    a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda")
    ref = (a.double() @ b.double())
    scale = ref.abs().max().item()
    c_torch = a @ b
    err_torch = ((c_torch.double() - ref).abs().max().item() / scale,
                 ((c_torch.double() - ref).norm() / ref.norm()).item())
    t_torch = timed(lambda: torch.mm(a, b))
    print(f"{size} M={M} N={N} K={K}: cuBLAS {t_torch:.4f} ms err {err_torch}", flush=True)
    rows.append({"size": size, "kernel": "cublas_fp32", "ms": t_torch, "max_err": err_torch[0],
                 "rel_norm_err": err_torch[1]})
    for cfg, name in zip(CONFIGS, names):
        BM, BN, BK, WM, WN, S, _ = cfg
        threads = (BM // WM) * (BN // WN) * 32
        smem = S * (BM * (BK + 4) + BK * (BN + 8)) * 4
        fn = mod.get_function(name)
        fn.max_dynamic_shared_size_bytes = smem
        c = torch.full((M, N), float("nan"), device="cuda")
        grid = ((N + BN - 1) // BN, (M + BM - 1) // BM)
        args = (a.data_ptr(), b.data_ptr(), c.data_ptr(), cp.int32(M), cp.int32(N), cp.int32(K))
        launch = lambda: fn(grid, (threads,), args, shared_mem=smem)
        try:
            launch(); torch.cuda.synchronize()
            err = ((c.double() - ref).abs().max().item() / scale,
                   ((c.double() - ref).norm() / ref.norm()).item())
            ms = timed(launch)
        except Exception as exc:  # a prototype: record and go on
            print(f"  {cfg}: failed {exc}", flush=True)
            continue
        tflops = 2 * M * N * K / ms / 1e9
        print(f"  {cfg} thr={threads} smem={smem}: {ms:.4f} ms {tflops:.1f} TFLOP/s "
              f"{t_torch / ms:.2f}x cuBLAS err {err}", flush=True)
        rows.append({"size": size, "kernel": "tf32x3", "config": cfg, "ms": ms,
                     "max_err": err[0], "rel_norm_err": err[1], "vs_cublas": t_torch / ms})
out = os.environ.get("OUT", ".")
Path(out, "tf32x3.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(),
                                                "torch": torch.__version__, "rows": rows},
                                               indent=1))
