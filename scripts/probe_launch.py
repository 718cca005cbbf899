"""Probe: which kernelParams form does this machine's cuda-bindings accept? (GPU only)"""
import ctypes

import torch
from cuda.bindings import driver

from cuda_agent.build.compiler import compile_source

src = 'extern "C" __global__ void k(const float* x, float* y, void* ws) ' \
      '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 1000) y[i] = 2.f * x[i]; }'
out = compile_source(src, "sm_90")
x = torch.randn(1000, device="cuda")
torch.cuda.synchronize()
err, mod = driver.cuModuleLoadData(out.cubin)
print("load", err)
err, fn = driver.cuModuleGetFunction(mod, b"k")
print("getfunction", err)
stream = torch.cuda.current_stream().cuda_stream
for variant in ("address", "tuple"):
    y = torch.zeros(1000, device="cuda")
    ws = torch.zeros(16, dtype=torch.uint8, device="cuda")
    try:
        if variant == "address":
            holders = [ctypes.c_void_p(t.data_ptr()) for t in (x, y, ws)]
            params = (ctypes.c_void_p * 3)(*[ctypes.addressof(h) for h in holders])
            r = driver.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, stream, ctypes.addressof(params), 0)
        else:
            r = driver.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, stream,
                                      ((x.data_ptr(), y.data_ptr(), ws.data_ptr()),
                                       (ctypes.c_void_p,) * 3), 0)
        print(variant, "launch", r, "sync", driver.cuStreamSynchronize(stream),
              "correct", bool(torch.equal(y, 2 * x)))
    except Exception as exc:  # noqa: BLE001
        print(variant, "failed:", type(exc).__name__, exc)
