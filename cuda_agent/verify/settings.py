"""How candidates are checked, as the host sets it: `VerifySettings`, conformance mode's
tolerance (`--tolerance`, parsed here) and how a report describes the check. No torch, so that
the CLI checks its flags before any work (`flags.py`); the GPU worker applies them
(`verify/cases.py`: the case pool, the comparison)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SettingsError


@dataclass(frozen=True)
class Tolerance:
    """Conformance mode's acceptance test: |out - ref| <= atol + rtol * |ref| elementwise
    (torch.allclose) against the user's module in fp32 at PyTorch's default settings."""

    atol: float
    rtol: float

    def describe(self) -> str:
        return f"allclose(atol={self.atol:g}, rtol={self.rtol:g})"


#: what KernelBench accepts: torch.allclose(out, ref, atol=1e-2, rtol=1e-2)
KERNELBENCH = Tolerance(1e-2, 1e-2)
STRICT = "strict"


def parse_tolerance(text: str) -> Tolerance | None:
    """`--tolerance`: "strict" (None: the strict protocol), "kernelbench" (atol=rtol=1e-2), or
    "atol=A,rtol=R"; anything else is a one-line SettingsError."""
    text = text.strip().lower()
    if text == STRICT:
        return None
    if text == "kernelbench":
        return KERNELBENCH
    values: dict[str, float] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not eq or key.strip() not in ("atol", "rtol") or not math.isfinite(number) \
                or number < 0 or key.strip() in values:
            raise SettingsError(f"--tolerance {text!r}: expected strict, kernelbench, or "
                                "atol=A,rtol=R with A, R >= 0")
        values[key.strip()] = number
    if set(values) != {"atol", "rtol"}:
        raise SettingsError(f"--tolerance {text!r}: give both atol and rtol (atol=A,rtol=R)")
    return Tolerance(values["atol"], values["rtol"])


# float64 reference against fp32 kernels: the relative-norm tolerance (`cases.TOLERANCE` per dtype)
FP32_RTOL = 1e-4


@dataclass
class VerifySettings:
    """How hard the verifier looks."""

    trials: int = 3
    """random cases per candidate (each a different distribution), plus one perturbed case"""
    pool: int = 5
    """cases drawn per problem; candidates rotate through them"""
    rtol: float | None = None
    """relative-norm tolerance; None picks the output dtype's (fp32: 1e-4)"""
    elem_factor: float = 10.0
    """elementwise bound: |out - ref| <= elem_factor * rtol * (|ref| + rms(ref))"""
    witness_factor: float = 4.0
    """with an fp32 witness: errors up to this multiple of the witness's own pass (its largest
    elementwise error, its relative-norm error), so a kernel as accurate as torch's fp32 is
    not failed where fp32 itself cannot meet the fixed bounds"""
    seed: int = 0
    precision: str = "fp32"
    """the contract the kernels are held to: "fp32", or "tf32", "fp16", "bf16" where the user
    opted into tensor-core products on operands of that type; the GPU worker then computes the
    witness (and times the baselines) with torch's TF32 on or under autocast in that dtype, so
    the bounds widen to a small multiple of torch's own error at that precision"""
    tolerance: Tolerance | None = None
    """conformance mode: accept a trial when torch.allclose(out, ref, atol, rtol) holds against
    the module in fp32 at PyTorch's default settings (KernelBench's check), instead of the
    strict bounds against a float64 reference; None: the strict protocol"""


def describe_verification(settings: VerifySettings) -> dict[str, str]:
    """How candidates were checked, for reports: the mode, the reference, the tolerance."""
    tol = settings.tolerance
    if tol is not None:
        return {"mode": "conformance", "tolerance": tol.describe(),
                "reference": "the module as the user holds it (its train/eval mode), in fp32 "
                             "with PyTorch's default settings"}
    rtol = settings.rtol if settings.rtol is not None else FP32_RTOL
    return {"mode": STRICT,
            "tolerance": f"relative-norm error <= {rtol:g}, elementwise <= "
                         f"{settings.elem_factor * rtol:g} x (|ref| + rms(ref)); no tighter "
                         f"than {settings.witness_factor:g}x torch's own error at the chosen "
                         "precision",
            "reference": "the module as the user holds it (its train/eval mode), in float64"}


def for_run(precision: str, tolerance: str) -> VerifySettings:
    """The verifier's settings for a run: its precision contract and its `--tolerance`."""
    return VerifySettings(precision=precision, tolerance=parse_tolerance(tolerance))
