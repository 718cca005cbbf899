"""How much the layout cuDNN computes in is worth, per realistic convolution, as a user's
process runs torch (PyTorch's defaults: cuDNN may use TF32) and in strict fp32: the first
convolution module of each problem in benchmarks/realistic/ whose name says conv, timed as
given (NCHW), converted to channels-last around the call (what the library template's
`memory.layout=channels_last` does: input and weight converted, the product converted back),
and the channels-last call alone (what a chain kept in channels-last would pay).

    python -m benchmarks.conv_layout_probe --out probe.json

Decides whether a channels-last library step that hands its product on without converting
it back is worth building (issue 33: the TF32 column's convolutions trail torch.compile,
whose layout optimisation computes convolutions in channels-last)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import torch

from benchmarks.realistic_harness import L2_FLUSH_BYTES, time_gpu

CONVS = (torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)


def first_conv(model: torch.nn.Module) -> torch.nn.Module | None:
    return next((m for m in model.modules() if isinstance(m, CONVS)), None)


def probe(path: Path, flush: torch.Tensor) -> dict:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    conv = first_conv(mod.Model(*mod.get_init_inputs()))
    if conv is None:
        return {"problem": path.stem, "skipped": "no 2-D or 3-D convolution module"}
    conv = conv.cuda()
    x = mod.get_inputs()[0].cuda()
    fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    row = {"problem": path.stem, "module": repr(conv), "input": list(x.shape)}
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        tag = "tf32" if tf32 else "fp32"
        with torch.no_grad():
            row[f"{tag}_as_given_ms"] = time_gpu(lambda: conv(x), flush, budget_s=0.5)["ms"]
            conv_cl = conv.to(memory_format=fmt)
            row[f"{tag}_converted_ms"] = time_gpu(
                lambda: conv_cl(x.contiguous(memory_format=fmt)).contiguous(), flush,
                budget_s=0.5)["ms"]
            x_cl = x.contiguous(memory_format=fmt)
            row[f"{tag}_channels_last_alone_ms"] = time_gpu(lambda: conv_cl(x_cl), flush,
                                                            budget_s=0.5)["ms"]
            del x_cl, conv_cl
        torch.cuda.empty_cache()
    torch.backends.cudnn.allow_tf32 = True
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=str(Path(__file__).parent / "realistic"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    rows = []
    for path in sorted(Path(args.problems).glob("*conv*.py")):
        try:
            rows.append(probe(path, flush))
        except torch.OutOfMemoryError as e:
            rows.append({"problem": path.stem, "skipped": f"out of memory: {str(e)[:80]}"})
        torch.cuda.empty_cache()
        r = rows[-1]
        print(r["problem"], {k: round(v, 3) for k, v in r.items() if k.endswith("_ms")}
              or r.get("skipped"), flush=True)
    Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(),
                                          "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
