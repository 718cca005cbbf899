"""The correctness half of the evaluation protocol (DESIGN.md): the reward must not be hackable.

Pure torch, device-agnostic: on the GPU the candidate is a real kernel launch, on the CPU tests it
is a Python stand-in, and the same checks run. For each of several trials:

* fresh random inputs *and parameters*: signed, non-uniform and heavy-tailed draws, respecting
  the sign domain of the problem's own example inputs (log or sqrt problems get positive draws);
* the output is pre-filled with a NaN of a distinctive payload, so an element the kernel never
  wrote is told apart from a NaN it computed;
* inputs are compared bit for bit before and after (no mutation);
* relative-norm error and an elementwise check against a float64 reference; where the problem
  is ill-conditioned in fp32 (a long fp32 sum followed by a saturating clamp or tanh, say), the
  bounds widen to a small multiple of the error of torch's own fp32 answer on the same case
  (the "fp32 witness"), never below the dtype's tolerance;
* one extra trial perturbs a single input element: a kernel that replays an earlier result fails;
* if zeros, a constant or an input would pass every trial, the check is called inconclusive.

Conformance mode (`VerifySettings.tolerance`, `tune --tolerance kernelbench`) replaces the
comparison only: a trial passes when torch.allclose(out, ref, atol, rtol) holds (NaN where the
reference has NaN counts as equal), as the field's common harness (KernelBench) checks, and the
reference is the user's module run in fp32 with PyTorch's default settings (the GPU worker's
`ProblemState`). Every other protection above stays: fresh and perturbed cases, poisoned
outputs, the mutation check, the inconclusive verdict on trivial outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import torch

from ..errors import SettingsError

POISON_BITS = 0x7FC0DEAD  # a quiet NaN no arithmetic produces
INT_POISON = -0x5A5A5A5A5A5A5A5A

# float64 reference against fp32 kernels: relative-norm tolerance per output dtype
TOLERANCE = {torch.float32: 1e-4}


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


def describe_verification(settings: "VerifySettings") -> dict[str, str]:
    """How candidates were checked, for reports: the mode, the reference, the tolerance."""
    tol = settings.tolerance
    if tol is not None:
        return {"mode": "conformance", "tolerance": tol.describe(),
                "reference": "the module as the user holds it (its train/eval mode), in fp32 "
                             "with PyTorch's default settings"}
    rtol = settings.rtol if settings.rtol is not None else TOLERANCE[torch.float32]
    return {"mode": STRICT,
            "tolerance": f"relative-norm error <= {rtol:g}, elementwise <= "
                         f"{settings.elem_factor * rtol:g} x (|ref| + rms(ref)); no tighter "
                         f"than {settings.witness_factor:g}x torch's own error at the chosen "
                         "precision",
            "reference": "the module as the user holds it (its train/eval mode), in float64"}


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

DISTRIBUTIONS = ("normal", "heavy", "uniform_offset", "lognormal_signed", "quantized")


def draw_like(example: torch.Tensor, trial: int, gen: torch.Generator,
              signed: bool = False, value_range: ValueRange | None = None) -> torch.Tensor:
    """A fresh tensor shaped like `example`, from distribution number `trial`, in its sign domain
    (`signed` ignores the domain: parameters initialised to ones must still get negative draws,
    or a kernel using |w| for w would pass); inside `value_range` where an op requires one."""
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
    elif kind == "quantized":  # few distinct values: exact ties (argmax must pick the first)
        x = torch.round(torch.randn(shape, generator=gen, device=device, dtype=torch.float64) * 4)
        x = x / 4.0
    else:  # magnitudes over several decades, random signs
        mag = torch.exp(torch.randn(shape, generator=gen, device=device, dtype=torch.float64))
        sign = torch.randint(0, 2, shape, generator=gen, device=device).to(torch.float64) * 2 - 1
        x = mag * sign
    if value_range is not None:  # squashed into the range: the distribution's shape still varies
        lo, hi = value_range.lo, value_range.hi
        return (lo + (hi - lo) * torch.sigmoid(x)).clamp(lo, hi).to(example.dtype)
    if example.numel() and not signed:
        lo = float(example.min())
        if lo > 0:  # strictly positive domain (log, division, sqrt...)
            x = x.abs() + 1e-2
        elif lo >= 0:
            x = x.abs()
    return x.to(example.dtype)


@dataclass(frozen=True)
class ValueRange:
    """Valid values of a float input that an op only accepts inside [lo, hi] (binary
    cross-entropy's probabilities: torch asserts on anything else)."""

    lo: float
    hi: float


@dataclass(frozen=True)
class IndexDomain:
    """Valid values of an int64 input of class indices: [0, bound), and `ignore` (a row the
    loss skips), which some trials draw so that the skipping is checked too."""

    bound: int
    ignore: int | None = None


Domain = Union[IndexDomain, ValueRange, None]


def draw_indices(example: torch.Tensor, domain: IndexDomain, trial: int,
                 gen: torch.Generator) -> torch.Tensor:
    """Class indices shaped like `example`; odd trials mark about one in eight rows ignored."""
    x = torch.randint(0, domain.bound, example.shape, generator=gen, device=example.device)
    if domain.ignore is not None and trial % 2 == 1:
        skip = torch.randint(0, 8, example.shape, generator=gen, device=example.device) == 0
        x = torch.where(skip, torch.full_like(x, domain.ignore), x)
    return x


@dataclass
class Case:
    """One trial: the graph inputs (forward args and parameters, in graph order)."""

    tensors: list[torch.Tensor]


def make_case(examples: Sequence[torch.Tensor], trial: int, seed: int,
              signed: Sequence[bool] | None = None,
              domains: Sequence[Domain] | None = None) -> Case:
    """Fresh inputs like `examples`; an input with an `IndexDomain` gets valid class indices,
    one with a `ValueRange` values inside it."""
    device = examples[0].device if examples else torch.device("cpu")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 7919 + trial * 104729 + 17)
    signed = signed or [False] * len(examples)
    domains = domains or [None] * len(examples)
    return Case([draw_indices(e, dom, trial, gen) if isinstance(dom, IndexDomain) else
                 draw_like(e, trial, gen, sg, dom)
                 for e, sg, dom in zip(examples, signed, domains)])


def perturbed(case: Case, seed: int, attempt: int = 0,
              domains: Sequence[Domain] | None = None) -> Case:
    """Copy of `case` with one element of its largest input moved beyond the tensor's extremes:
    above its maximum on even attempts, below its minimum on odd ones (where the sign domain
    allows), at another position each attempt. Outside the range, the element changes maxima,
    minima, their indices and normalizers alike; the caller keeps the first variant whose
    reference differs from the base's by more than the tolerance. An input limited to a
    `ValueRange` is perturbed only where no other float input exists, to an end of its range."""
    tensors = [t.clone() for t in case.tensors]
    domains = list(domains or [None] * len(tensors))
    # class indices have no "beyond the extremes": perturb the largest float input
    floats = [k for k in range(len(tensors)) if tensors[k].is_floating_point()]
    free = [k for k in floats if not isinstance(domains[k], ValueRange)]
    big = max(free or floats, key=lambda k: tensors[k].numel())
    t = tensors[big].view(-1)
    gen = torch.Generator().manual_seed(seed * 31 + attempt + 99991)
    pos = int(torch.randint(0, t.numel(), (1,), generator=gen))
    if isinstance(domains[big], ValueRange):
        rng = domains[big]
        t[pos] = rng.lo if attempt % 2 else rng.hi
        return Case(tensors)
    hi, lo = float(t.max()), float(t.min())
    if attempt % 2 == 1 and lo < 0:
        t[pos] = lo - 4.0 * abs(lo) - 3.0
    else:
        t[pos] = hi + 4.0 * abs(hi) + 3.0
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


@dataclass(frozen=True)
class Slack:
    """How far torch's own fp32 answer to one case is from the float64 reference: the floor
    under the bounds for that case (zero without a witness)."""

    rel: float = 0.0
    """relative-norm error of the witness, times the witness factor"""
    abs: float = 0.0
    """largest elementwise error of the witness, times the witness factor"""


NO_SLACK = Slack()


def witness_slack(witness: torch.Tensor, ref: torch.Tensor, factor: float) -> Slack:
    """The slack an fp32 witness earns: `factor` times its own errors against `ref`."""
    if not ref.dtype.is_floating_point or tuple(witness.shape) != tuple(ref.shape):
        return NO_SLACK
    finite = torch.isfinite(ref) & torch.isfinite(witness)
    if not bool(finite.any()):
        return NO_SLACK
    w, r = witness[finite].double(), ref[finite].double()
    diff = (w - r).abs()
    rel = float(torch.linalg.vector_norm(diff)) / max(float(torch.linalg.vector_norm(r)), 1e-300)
    return Slack(rel=factor * rel, abs=factor * float(diff.max()))


def compare(out: torch.Tensor, ref: torch.Tensor, rtol: float, elem_factor: float,
            slack: Slack = NO_SLACK, tolerance: Tolerance | None = None
            ) -> tuple[str | None, str, float]:
    """(error kind or None, message, relative error) of `out` against the float64 `ref`;
    `slack` (from an fp32 witness) is a floor under both bounds. With `tolerance` (conformance
    mode) the bounds are torch.allclose's instead."""
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
    # fp32 differences are exact enough at these tolerances; norms accumulate in float64.
    o, r = out, ref.to(out.dtype)
    r_finite = torch.isfinite(r)
    all_finite = bool(r_finite.all())
    o_bad = ~torch.isfinite(o)
    if not all_finite:
        o_bad &= r_finite
    if bool(o_bad.any()):
        return "nan", f"{int(o_bad.sum())} non-finite outputs where the reference is finite", \
            math.inf
    if not all_finite:
        special = ~r_finite
        same = (torch.isnan(o) & torch.isnan(r)) | (o == r)
        if bool((special & ~same).any()):
            return "wrong", "infinities or NaNs differ from the reference", math.inf
        o, r = o[r_finite], r[r_finite]
    if r.numel() == 0:
        return None, "", 0.0
    diff = o - r
    r_norm = float(torch.linalg.vector_norm(r, dtype=torch.float64))
    rel = float(torch.linalg.vector_norm(diff, dtype=torch.float64)) / max(r_norm, 1e-300)
    if tolerance is not None:
        bad = diff.abs_() > tolerance.atol + tolerance.rtol * r.abs()
        if bool(bad.any()):
            return "wrong", f"{int(bad.sum())} of {r.numel()} elements fail " \
                f"{tolerance.describe()}", rel
        return None, "", rel
    if rel > max(rtol, slack.rel):
        return "wrong", f"relative error {rel:.3g} > {max(rtol, slack.rel):.1g}", rel
    rms = r_norm / math.sqrt(r.numel())
    bound = (elem_factor * rtol) * (r.abs() + rms)
    if slack.abs > 0:
        bound = torch.clamp(bound, min=slack.abs)
    bad = diff.abs_() > bound
    if bool(bad.any()):
        floor = f" (or {slack.abs:.2g}, the fp32 witness's)" if slack.abs > 0 else ""
        return "wrong", f"{int(bad.sum())} elements off by more than {elem_factor * rtol:.1g} " \
            f"x (|ref| + rms(ref)){floor}", rel
    return None, "", rel




# -- the protocol --------------------------------------------------------------------------------

@dataclass
class Trial:
    """Inputs of one check and the reference's answer to them (in the output dtype)."""

    inputs: list[torch.Tensor]
    ref: torch.Tensor
    label: str
    slack: Slack = NO_SLACK


class CasePool:
    """Random cases and their float64 reference answers, drawn once per problem.

    Drawing heavy-tailed inputs and running a float64 reference costs far more than running a
    candidate, so a tuning run draws a pool once and gives each candidate a rotating selection
    of distinct cases plus a perturbed one. The pool also decides, once, whether trivial outputs
    (zeros, a constant, an input) could pass: if one passes every case, checks are inconclusive.

    `witness`, when given, computes the same answer the way torch eager does (fp32, TF32 off);
    its error on each case sets that case's slack (VerifySettings.witness_factor).
    """

    def __init__(self, reference: Callable[[list[torch.Tensor]], torch.Tensor],
                 examples: Sequence[torch.Tensor], out_shape: Sequence[int],
                 out_dtype: torch.dtype, settings: VerifySettings | None = None,
                 signed: Sequence[bool] | None = None,
                 witness: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
                 domains: Sequence[Domain] | None = None) -> None:
        self.settings = s = settings or VerifySettings()
        self.out_shape, self.out_dtype = tuple(out_shape), out_dtype
        self.device = examples[0].device
        self.rtol = s.rtol if s.rtol is not None else TOLERANCE.get(out_dtype, 1e-4)
        self.tolerance = s.tolerance
        n = max(s.trials, s.pool)
        self.cases: list[Trial] = []
        for t in range(n):
            case = make_case(examples, t, s.seed, signed, domains)
            ref = self._ref(reference, case.tensors)
            self.cases.append(Trial(case.tensors, ref,
                                    f"trial {t} ({DISTRIBUTIONS[t % len(DISTRIBUTIONS)]} inputs)",
                                    self._slack(witness, case.tensors, ref)))
        # a perturbed twin of every case, whose reference really differs from the case's
        self.perturbed: list[Trial] = []
        for t, base in enumerate(self.cases):
            twin = None
            for attempt in range(6):
                case = perturbed(Case(base.inputs), s.seed + t, attempt, domains)
                ref = self._ref(reference, case.tensors)
                twin = Trial(case.tensors, ref, f"perturbed-input trial (from trial {t})",
                             self._slack(witness, case.tensors, ref))
                # a replay of the base's answer must fail on the twin
                if self.compare(base.ref, twin)[0] is not None:
                    break
            self.perturbed.append(twin)
        self.weak = self._weak_checks()

    def compare(self, out: torch.Tensor, trial: "Trial") -> tuple[str | None, str, float]:
        """`compare` of `out` against a trial's reference, by this pool's criterion."""
        return compare(out, trial.ref, self.rtol, self.settings.elem_factor, trial.slack,
                       self.tolerance)

    def _passes(self, candidate: torch.Tensor, trial: "Trial") -> bool:
        return self.compare(candidate, trial)[0] is None

    def _ref(self, reference: Callable, tensors: list[torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            out = reference(tensors)
        return out.to(self.out_dtype) if not self.out_dtype.is_floating_point else out.to(
            torch.float32 if self.out_dtype == torch.float32 else self.out_dtype)

    def _slack(self, witness: Callable[[list[torch.Tensor]], torch.Tensor] | None,
               tensors: list[torch.Tensor], ref: torch.Tensor) -> Slack:
        # the witness is not kept: a pool holding a bound method of its owner would make a
        # reference cycle that keeps a problem's GPU tensors alive after the next set-up
        if witness is None or not self.out_dtype.is_floating_point:
            return NO_SLACK
        with torch.no_grad():
            answer = witness(tensors)
        return witness_slack(answer, ref, self.settings.witness_factor)

    def _weak_checks(self) -> list[str]:
        passed = {"zeros": True, "constant": True, "identity": True}
        # the constant is fixed before seeing the other trials: a kernel cannot know each
        # trial's answer, so a single-element output is not trivially "constant"
        first = self.cases[0].ref
        if self.out_dtype.is_floating_point:
            finite = torch.isfinite(first)
            const = float(first[finite].double().mean()) if bool(finite.any()) else 0.0
        else:
            const = int(first.reshape(-1)[0])
        for trial in self.cases + self.perturbed:
            ref = trial.ref
            if self.out_dtype.is_floating_point:
                passed["zeros"] &= self._passes(torch.zeros_like(ref), trial)
                passed["constant"] &= self._passes(torch.full_like(ref, const), trial)
                same = [x for x in trial.inputs if tuple(x.shape) == tuple(ref.shape)]
                passed["identity"] &= bool(same) and self._passes(same[0].to(ref.dtype), trial)
            else:
                passed["zeros"] &= bool((ref == 0).all())
                passed["constant"] &= bool((ref == const).all())
                passed["identity"] = False
        return [k for k, v in passed.items() if v]

    def trials_for(self, index: int) -> list[Trial]:
        """The selection for candidate number `index`: distinct cases, then a perturbed one."""
        k = self.settings.trials
        n = len(self.cases)
        order = [(index + j) % n for j in range(n)]
        if not self.out_dtype.is_floating_point:
            # index outputs always meet exact ties (torch returns the first index)
            tie = DISTRIBUTIONS.index("quantized")
            if tie < n:
                order = [tie] + [i for i in order if i != tie]
        chosen = [self.cases[i] for i in order[:min(k, n)]]
        # the perturbed twin of a case this candidate also runs: replaying that answer fails
        return chosen + [self.perturbed[order[0]]]


def check(run: Callable[[list[torch.Tensor], torch.Tensor], None], pool: CasePool,
          trials: list[Trial]) -> VerifyResult:
    """Run the candidate on each trial; the first failure decides the result's kind."""
    worst = 0.0
    if pool.weak:
        return VerifyResult(False, "degenerate",
                            f"inconclusive: a trivial output ({', '.join(pool.weak)}) passes "
                            "every trial, so passing proves nothing", worst)
    for trial in trials:
        snapshot = [x.clone() for x in trial.inputs]
        out = poisoned_output(pool.out_shape, pool.out_dtype, pool.device)
        try:
            run(trial.inputs, out)
        except CandidateError as exc:
            _restore(trial.inputs, snapshot)
            return VerifyResult(False, exc.kind, str(exc), worst)
        for k, (x, x0) in enumerate(zip(trial.inputs, snapshot)):
            if not torch.equal(_bits(x), _bits(x0)):
                _restore(trial.inputs, snapshot)
                return VerifyResult(False, "mutated_input", f"input {k} was modified", worst)
        kind, msg, rel = pool.compare(out, trial)
        worst = max(worst, rel)
        if kind:
            return VerifyResult(False, kind, f"{trial.label}: {msg}", worst)
    return VerifyResult(True, None, "", worst)


def check_state(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], pool: CasePool
                ) -> VerifyResult:
    """The module state a candidate updated (BatchNorm's running statistics, from the batch
    statistics its kernels left in memory) against the reference's own update on the same
    case, by the pool's criterion."""
    worst = 0.0
    for name in sorted(want):
        ref = want[name].to(got[name].dtype)
        kind, msg, rel = compare(got[name], ref, pool.rtol, pool.settings.elem_factor,
                                 NO_SLACK, pool.tolerance)
        worst = max(worst, rel)
        if kind:
            return VerifyResult(False, "wrong", f"updated state {name}: {msg}", worst)
    return VerifyResult(True, None, "", worst)


def _restore(inputs: list[torch.Tensor], snapshot: list[torch.Tensor]) -> None:
    """Put the pool's case back, so a misbehaving candidate cannot poison later checks."""
    for y, y0 in zip(inputs, snapshot):
        y.copy_(y0)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a, b)) if not a.dtype.is_floating_point else bool(
        torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.dtype.is_floating_point else x


def verify(run: Callable[[list[torch.Tensor], torch.Tensor], None],
           reference: Callable[[list[torch.Tensor]], torch.Tensor],
           examples: Sequence[torch.Tensor], out_shape: Sequence[int], out_dtype: torch.dtype,
           settings: VerifySettings | None = None,
           signed: Sequence[bool] | None = None,
           witness: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
           domains: Sequence[Domain] | None = None) -> VerifyResult:
    """One-shot check of candidate `run(inputs, out)` against `reference(inputs)` (float64).

    `examples` are tensors shaped like the graph inputs (forward args then parameters, in the
    order `run` takes them); they set shapes, device and sign domain, not values.
    """
    pool = CasePool(reference, examples, out_shape, out_dtype, settings, signed, witness, domains)
    return check(run, pool, pool.trials_for(0))
