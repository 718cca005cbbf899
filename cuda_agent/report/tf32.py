"""Where torch at its defaults beats the strict-fp32 kernel through TF32: the offer of
`--precision tf32`, with the tolerance it is verified to.

A user's process lets cuDNN run fp32 convolutions on TF32 tensor cores (torch's default), so its
eager or torch.compile may be faster than any kernel held to strict fp32. The kernels may then
use TF32 too, on request: `--precision tf32` verifies them against torch's own TF32 answer.
"""

from __future__ import annotations

from typing import Any

from ..runner.baselines import CUDNN_BENCHMARK, DEFAULTS, FIELDS, matched_field
from ..verify.cases import TOLERANCE
from ..verify.settings import VerifySettings

LABELS = {"eager": "torch eager", "compile": "torch.compile",
          "compile:max-autotune": "torch.compile max-autotune",
          "compile:max-autotune-no-cudagraphs": "torch.compile max-autotune without CUDA graphs",
          CUDNN_BENCHMARK: "torch eager with cudnn.benchmark"}


def tolerance_text(verify: VerifySettings | None = None) -> str:
    """The bounds a kernel meets under `--precision tf32`, from the verifier's settings."""
    v = verify or VerifySettings()
    rtol = v.rtol if v.rtol is not None else TOLERANCE[next(iter(TOLERANCE))]
    return (f"verified against a float64 reference on random inputs, accepted up to "
            f"{v.witness_factor:g}x the error of torch's own TF32 answer on the same inputs: "
            f"relative-norm error at most max({rtol:g}, {v.witness_factor:g} x torch's), each "
            f"element within max({v.elem_factor * rtol:g} x (|ref| + rms(ref)), "
            f"{v.witness_factor:g} x torch's largest elementwise error)")


def tf32_advice(rec: dict[str, Any], best_ms: float | None, precision: str,
                verify: VerifySettings | None = None) -> dict[str, Any] | None:
    """The offer, or None: when the kernels are strict fp32, the problem reads a TF32 flag that
    PyTorch's defaults turn on, and a baseline at the defaults is faster than the best kernel
    and than its own accuracy-matched twin (TF32 is what made it faster). `rec` holds a run's
    baseline fields (`Baselines.fields()`)."""
    settings = rec.get("baseline_settings") or {}
    defaults = settings.get(DEFAULTS) or {}
    reads = set(settings.get("tf32_flags_read") or ())
    if precision != "fp32" or not best_ms or settings.get("same") is not False:
        return None
    if not any(defaults.get(f"{flag}_tf32") for flag in reads):
        return None
    wins = [(rec[key], name, strict) for name, key in FIELDS.items()
            if rec.get(key) and rec[key] < best_ms
            and (strict := rec.get(matched_field(key))) and rec[key] < strict]
    if not wins:
        return None
    ms, name, strict_ms = min(wins)
    observed = (settings.get("observed") or {}).get(name) or {}
    diff = observed.get("rel_diff")
    what = " and ".join(w for w, flag in (("cuDNN's convolutions", "conv"),
                                          ("cuBLAS's matrix products", "matmul"))
                        if flag in reads and defaults.get(f"{flag}_tf32"))
    text = (f"{LABELS[name]} at PyTorch's defaults takes {ms:.4f} ms against this kernel's "
            f"{best_ms:.4f} ms: there {what} run on TF32 tensor cores ({strict_ms:.4f} ms "
            f"without TF32, under the kernels' strict fp32 contract"
            + (", which this kernel beats)." if best_ms <= strict_ms else ").")
            + (f" torch's TF32 answer differs from its strict fp32 one by {diff:.1e} "
               "(relative norm)." if diff is not None else "")
            + " For TF32 numerics in the kernels too, tune again with --precision tf32: "
            + tolerance_text(verify) + ".")
    return {"baseline": name, "baseline_ms": ms, "strict_ms": strict_ms, "best_ms": best_ms,
            "rel_diff": diff, "suggest": "--precision tf32", "text": text}
