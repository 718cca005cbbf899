"""The correctness half of the evaluation protocol (DESIGN.md): the reward must not be hackable.

Pure torch, device-agnostic: on the GPU the candidate is a real kernel launch, on the CPU tests it
is a Python stand-in, and the same checks run. For each of several trials:

* fresh random inputs *and parameters*: signed, non-uniform and heavy-tailed draws, respecting
  the sign domain of the problem's own example inputs (log or sqrt problems get positive draws);
* the output is pre-filled with a NaN of a distinctive payload, so an element the kernel never
  wrote is told apart from a NaN it computed;
* inputs are compared bit for bit before and after (no mutation);
* relative-norm error and an elementwise check against a float64 reference;
* one extra trial perturbs a single input element: a kernel that replays an earlier result fails;
* if zeros, a constant or an input would pass every trial, the check is called inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

POISON_BITS = 0x7FC0DEAD  # a quiet NaN no arithmetic produces
INT_POISON = -0x5A5A5A5A5A5A5A5A

# float64 reference against fp32 kernels: relative-norm tolerance per output dtype
TOLERANCE = {torch.float32: 1e-4}


@dataclass
class VerifySettings:
    """How hard the verifier looks."""

    trials: int = 3
    """fresh random draws (each a different distribution), plus one perturbation trial"""
    rtol: float | None = None
    """relative-norm tolerance; None picks the output dtype's (fp32: 1e-4)"""
    elem_factor: float = 10.0
    """elementwise bound: |out - ref| <= elem_factor * rtol * (|ref| + rms(ref))"""
    seed: int = 0


@dataclass
class VerifyResult:
    ok: bool
    kind: str | None = None  # an ERROR_KINDS key when not ok
    msg: str = ""
    max_rel_err: float = 0.0


class CandidateError(Exception):
    """Raised by a candidate runner for a launch/runtime failure, carrying the error kind."""

    def __init__(self, kind: str, msg: str, sticky: bool = False) -> None:
        super().__init__(msg)
        self.kind = kind
        self.sticky = sticky


# -- inputs --------------------------------------------------------------------------------------

DISTRIBUTIONS = ("normal", "heavy", "uniform_offset", "lognormal_signed", "normal")


def draw_like(example: torch.Tensor, trial: int, gen: torch.Generator) -> torch.Tensor:
    """A fresh tensor shaped like `example`, from distribution number `trial`, in its sign domain."""
    shape, device = example.shape, example.device
    kind = DISTRIBUTIONS[trial % len(DISTRIBUTIONS)]
    if kind == "normal":
        x = torch.randn(shape, generator=gen, device=device, dtype=torch.float64)
    elif kind == "heavy":  # Student-t with 3 degrees of freedom: rare values far out
        z = torch.randn(shape, generator=gen, device=device, dtype=torch.float64)
        chi = sum(torch.randn(shape, generator=gen, device=device, dtype=torch.float64) ** 2
                  for _ in range(3))
        x = z / torch.sqrt(chi / 3.0 + 1e-12)
    elif kind == "uniform_offset":
        x = torch.rand(shape, generator=gen, device=device, dtype=torch.float64) * 6.0 - 2.0
    else:  # magnitudes over several decades, random signs
        mag = torch.exp(torch.randn(shape, generator=gen, device=device, dtype=torch.float64))
        sign = torch.randint(0, 2, shape, generator=gen, device=device).to(torch.float64) * 2 - 1
        x = mag * sign
    if example.numel():
        lo = float(example.min())
        if lo > 0:  # strictly positive domain (log, division, sqrt...)
            x = x.abs() + 1e-2
        elif lo >= 0:
            x = x.abs()
    return x.to(example.dtype)


@dataclass
class Case:
    """One trial: the graph inputs (forward args and parameters, in graph order)."""

    tensors: list[torch.Tensor]


def make_case(examples: Sequence[torch.Tensor], trial: int, seed: int) -> Case:
    device = examples[0].device if examples else torch.device("cpu")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 7919 + trial * 104729 + 17)
    return Case([draw_like(e, trial, gen) for e in examples])


def perturbed(case: Case, seed: int) -> Case:
    """Copy of `case` with one element of its largest input moved far from where it was."""
    tensors = [t.clone() for t in case.tensors]
    big = max(range(len(tensors)), key=lambda k: tensors[k].numel())
    t = tensors[big].view(-1)
    gen = torch.Generator().manual_seed(seed + 99991)
    pos = int(torch.randint(0, t.numel(), (1,), generator=gen))
    old = float(t[pos])
    t[pos] = (abs(old) * 4.0 + 3.0) if old >= 0 or float(case.tensors[big].min()) >= 0 else \
        (-abs(old) * 4.0 - 3.0)
    return Case(tensors)


# -- comparison ----------------------------------------------------------------------------------

def poisoned_output(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if dtype.is_floating_point:
        bits = torch.full(tuple(shape), POISON_BITS, dtype=torch.int32, device=device)
        return bits.view(torch.float32).to(dtype) if dtype != torch.float32 else bits.view(dtype)
    return torch.full(tuple(shape), INT_POISON, dtype=dtype, device=device)


def _unwritten(out: torch.Tensor) -> torch.Tensor:
    if out.dtype == torch.float32:
        return out.view(torch.int32) == POISON_BITS
    if out.dtype.is_floating_point:
        return torch.zeros_like(out, dtype=torch.bool)
    return out == INT_POISON


def compare(out: torch.Tensor, ref: torch.Tensor, rtol: float, elem_factor: float
            ) -> tuple[str | None, str, float]:
    """(error kind or None, message, relative error) of `out` against the float64 `ref`."""
    if tuple(out.shape) != tuple(ref.shape):
        return "wrong", f"shape {tuple(out.shape)} != {tuple(ref.shape)}", math.inf
    unwritten = _unwritten(out)
    if bool(unwritten.any()):
        n = int(unwritten.sum())
        return "unwritten", f"{n} of {out.numel()} output elements never written", math.inf
    if not out.dtype.is_floating_point:
        bad = out != ref.to(out.dtype)
        if bool(bad.any()):
            return "wrong", f"{int(bad.sum())} of {out.numel()} indices differ", math.inf
        return None, "", 0.0
    o, r = out.to(torch.float64), ref.to(torch.float64)
    r_finite = torch.isfinite(r)
    o_finite = torch.isfinite(o)
    if bool((r_finite & ~o_finite).any()):
        n = int((r_finite & ~o_finite).sum())
        return "nan", f"{n} non-finite outputs where the reference is finite", math.inf
    special = ~r_finite
    if bool(special.any()):
        same = (torch.isnan(o) & torch.isnan(r)) | (o == r)
        if bool((special & ~same).any()):
            return "wrong", "infinities or NaNs differ from the reference", math.inf
    o, r = o[r_finite], r[r_finite]
    if r.numel() == 0:
        return None, "", 0.0
    diff = (o - r).abs()
    rms = float(torch.sqrt((r * r).mean()))
    rel = float(torch.linalg.vector_norm(o - r) / max(float(torch.linalg.vector_norm(r)), 1e-300))
    if rel > rtol:
        return "wrong", f"relative error {rel:.3g} > {rtol:.1g}", rel
    bound = elem_factor * rtol * (r.abs() + rms)
    bad = diff > bound
    if bool(bad.any()):
        worst = float((diff / (r.abs() + rms + 1e-300)).max())
        return "wrong", f"{int(bad.sum())} elements off (worst scaled error {worst:.3g})", rel
    return None, "", rel


def _passes(candidate: torch.Tensor, ref: torch.Tensor, rtol: float, ef: float) -> bool:
    return compare(candidate, ref, rtol, ef)[0] is None


# -- the protocol --------------------------------------------------------------------------------

def verify(run: Callable[[list[torch.Tensor], torch.Tensor], None],
           reference: Callable[[list[torch.Tensor]], torch.Tensor],
           examples: Sequence[torch.Tensor], out_shape: Sequence[int], out_dtype: torch.dtype,
           settings: VerifySettings | None = None) -> VerifyResult:
    """Check candidate `run(inputs, out)` against `reference(inputs) -> float64 tensor`.

    `examples` are tensors shaped like the graph inputs (forward args then parameters, in the
    order `run` takes them); they set shapes, device and sign domain, not values.
    Raises nothing for candidate failures: a `CandidateError` from `run` becomes the result.
    """
    s = settings or VerifySettings()
    rtol = s.rtol if s.rtol is not None else TOLERANCE.get(out_dtype, 1e-4)
    device = examples[0].device
    worst = 0.0
    trivial_pass = {"zeros": True, "constant": True, "identity": True}
    cases = [make_case(examples, t, s.seed) for t in range(s.trials)]
    cases.append(perturbed(cases[0], s.seed))
    for t, case in enumerate(cases):
        ref = reference(case.tensors)
        snapshot = [x.clone() for x in case.tensors]
        out = poisoned_output(out_shape, out_dtype, device)
        try:
            run(case.tensors, out)
        except CandidateError as exc:
            return VerifyResult(False, exc.kind, str(exc), worst)
        for k, (x, x0) in enumerate(zip(case.tensors, snapshot)):
            if not torch.equal(x.view(torch.uint8) if x.dtype == torch.float32 else x,
                               x0.view(torch.uint8) if x0.dtype == torch.float32 else x0):
                return VerifyResult(False, "mutated_input", f"input {k} was modified", worst)
        kind, msg, rel = compare(out, ref, rtol, s.elem_factor)
        worst = max(worst, rel)
        if kind:
            label = "perturbed-input trial" if t == len(cases) - 1 else \
                f"trial {t} ({DISTRIBUTIONS[t % len(DISTRIBUTIONS)]} inputs)"
            return VerifyResult(False, kind, f"{label}: {msg}", worst)
        if out_dtype.is_floating_point:
            trivial_pass["zeros"] &= _passes(torch.zeros_like(out), ref, rtol, s.elem_factor)
            const = torch.full_like(out, float(ref[torch.isfinite(ref)].mean())
                                    if bool(torch.isfinite(ref).any()) else 0.0)
            trivial_pass["constant"] &= _passes(const, ref, rtol, s.elem_factor)
            same = [x for x in case.tensors if tuple(x.shape) == tuple(out.shape)]
            trivial_pass["identity"] &= bool(same) and _passes(same[0].to(out_dtype), ref, rtol,
                                                               s.elem_factor)
        else:
            trivial_pass["zeros"] &= bool((ref == 0).all())
            trivial_pass["constant"] &= bool((ref == ref.reshape(-1)[0]).all())
            trivial_pass["identity"] = False
    weak = [name for name, passed in trivial_pass.items() if passed]
    if weak:
        return VerifyResult(False, "degenerate",
                            f"inconclusive: a trivial output ({', '.join(weak)}) passes every "
                            "trial, so passing proves nothing", worst)
    return VerifyResult(True, None, "", worst)
