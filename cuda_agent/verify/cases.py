"""The correctness half of the evaluation protocol (DESIGN.md): the reward must not be hackable.

Pure torch, device-agnostic: on the GPU the candidate is a real kernel launch, on the CPU tests it
is a Python stand-in, and the same checks run. For each of several trials:

* fresh random inputs *and parameters*: signed, non-uniform and heavy-tailed draws, respecting
  the sign domain of the problem's own example inputs (log or sqrt problems get positive draws);
* the output is pre-filled with a NaN of a distinctive payload, so an element the kernel never
  wrote is told apart from a NaN it computed;
* inputs are hashed bit for bit before and after (no mutation), with a key drawn per check;
* relative-norm error and an elementwise check against a float64 reference; where the problem
  is ill-conditioned in fp32 (a long fp32 sum followed by a saturating clamp or tanh, say), the
  bounds widen to a small multiple of the error of torch's own fp32 answer on the same case
  (the "fp32 witness"), never below the dtype's tolerance;
* one extra trial perturbs a single input element: a kernel that replays an earlier result fails;
* if zeros, a constant or an input would pass every trial, the check is called inconclusive.

Within a memory budget (`PoolBudget`, issue 33) the cases are not held but drawn again from
their seeds into one set of buffers, and the float64 reference is kept where there is room,
else recomputed, a chunk at a time along a separable direction (`Split`); the comparison adds
up over pieces to the verdict it gives on the whole.

Conformance mode (`VerifySettings.tolerance`, `tune --tolerance kernelbench`) replaces the
comparison only: a trial passes when torch.allclose(out, ref, atol, rtol) holds (NaN where the
reference has NaN counts as equal), as the field's common harness (KernelBench) checks, and the
reference is the user's module run in fp32 with PyTorch's default settings (the GPU worker's
`ProblemState`). Every other protection above stays: fresh and perturbed cases, poisoned
outputs, the mutation check, the inconclusive verdict on trivial outputs.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, Union

import torch

from .settings import FP32_RTOL, Tolerance, VerifySettings

POISON_BITS = 0x7FC0DEAD  # a quiet NaN no arithmetic produces
INT_POISON = -0x5A5A5A5A5A5A5A5A
# quiet NaNs of half-precision outputs with payloads no conversion writes (cvt writes 0x7FFF)
HALF_POISON = {torch.float16: 0x7EAD, torch.bfloat16: 0x7FED}
HALF = (torch.float16, torch.bfloat16)

# float64 reference against fp32 kernels: relative-norm tolerance per output dtype
TOLERANCE = {torch.float32: FP32_RTOL}


@dataclass
class VerifyResult:
    ok: bool
    kind: str | None = None  # an ERROR_KINDS key when not ok
    msg: str = ""
    max_rel_err: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    """where `check`'s time went, summed over the trials: draw (the case's inputs drawn
    again), hash (before and after the run), run, reference (the float64 reference's chunks
    computed again, where they are not held), compare (the comparison, fetching a reference
    held in host memory included)"""


class CandidateError(Exception):
    """Raised by a candidate runner for a launch/runtime failure, carrying the error kind."""

    def __init__(self, kind: str, msg: str, sticky: bool = False) -> None:
        super().__init__(msg)
        self.kind = kind
        self.sticky = sticky


# -- inputs --------------------------------------------------------------------------------------

DISTRIBUTIONS = ("normal", "heavy", "uniform_offset", "lognormal_signed", "quantized")

DRAW_CHUNK = 1 << 22
"""elements drawn at a time: a draw's float64 temporaries stay near 4 x 32 MiB whatever the
tensor's size (a 6 GiB input drawn whole needed ~40 GiB of them). Fixed, not taken from a memory
budget, so that a seed draws the same values on every machine."""


@dataclass(frozen=True)
class InputMeta:
    """What a draw needs of an example input: its shape, dtype and device, and its least value
    (its sign domain), so that the example itself need not be kept."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    low: float | None = None  # None: an empty example

    @staticmethod
    def of(example: "torch.Tensor | InputMeta") -> "InputMeta":
        if isinstance(example, InputMeta):
            return example
        low = float(example.min()) if example.numel() else None
        return InputMeta(tuple(example.shape), example.dtype, example.device, low)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty(0, dtype=self.dtype).element_size()


def draw_like(example: torch.Tensor, trial: int, gen: torch.Generator,
              signed: bool = False, value_range: ValueRange | None = None) -> torch.Tensor:
    """A fresh tensor shaped like `example`, from distribution number `trial`, in its sign domain
    (`signed` ignores the domain: parameters initialised to ones must still get negative draws,
    or a kernel using |w| for w would pass); inside `value_range` where an op requires one."""
    meta = InputMeta.of(example)
    out = torch.empty(meta.shape, dtype=meta.dtype, device=meta.device)
    draw_into(out, meta, trial, gen, signed, value_range)
    return out


def draw_into(dest: torch.Tensor, meta: InputMeta, trial: int, gen: torch.Generator,
              signed: bool = False, value_range: ValueRange | None = None) -> None:
    """`draw_like`, written into the contiguous `dest`, DRAW_CHUNK elements at a time."""
    kind = DISTRIBUTIONS[trial % len(DISTRIBUTIONS)]
    flat = dest.view(-1)
    # drawn in the input's own float type where it is float32 or narrower (float64 draws
    # cast down moved twice the bytes, each check drawing its case again: a 16 GiB input per
    # trial); float64 and integer inputs as before
    work = torch.float32 if dest.dtype in (torch.float32, torch.float16, torch.bfloat16) \
        else torch.float64
    for lo in range(0, flat.numel(), DRAW_CHUNK):
        n = min(DRAW_CHUNK, flat.numel() - lo)
        x = _draw_values(kind, (n,), gen, dest.device, work)
        if value_range is not None:  # squashed into the range: the distribution's shape varies
            a, b = value_range.lo, value_range.hi
            x = x.sigmoid_().mul_(b - a).add_(a).clamp_(a, b)
        elif meta.low is not None and not signed:
            if meta.low > 0:  # strictly positive domain (log, division, sqrt...)
                x = x.abs_().add_(1e-2)
            elif meta.low >= 0:
                x = x.abs_()
        flat[lo:lo + n].copy_(x)


def _draw_values(kind: str, shape: tuple[int, ...], gen: torch.Generator,
                 device: torch.device, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`shape` values of distribution `kind`, in `dtype`, with as few temporaries as it takes
    (in place where it can be)."""
    def normal() -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=device, dtype=dtype)

    if kind == "normal":
        return normal()
    if kind == "heavy":  # Student-t with 3 degrees of freedom: rare values far out
        z = normal()
        chi = normal().square_()
        for _ in range(2):
            g = normal()
            chi.addcmul_(g, g)
        return z.div_(chi.div_(3.0).add_(1e-12).sqrt_())
    if kind == "uniform_offset":
        return torch.rand(shape, generator=gen, device=device, dtype=dtype).mul_(6.0).sub_(2.0)
    if kind == "quantized":  # few distinct values: exact ties (argmax must pick the first)
        return normal().mul_(4).round_().div_(4.0)
    # magnitudes over several decades, random signs
    mag = normal().exp_()
    sign = torch.randint(0, 2, shape, generator=gen, device=device, dtype=dtype)
    return mag.mul_(sign.mul_(2).sub_(1))


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
    out = torch.empty(tuple(example.shape), dtype=torch.int64, device=example.device)
    draw_indices_into(out, domain, trial, gen)
    return out


def draw_indices_into(dest: torch.Tensor, domain: IndexDomain, trial: int,
                      gen: torch.Generator) -> None:
    flat = dest.view(-1)
    for lo in range(0, flat.numel(), DRAW_CHUNK):
        n = min(DRAW_CHUNK, flat.numel() - lo)
        x = torch.randint(0, domain.bound, (n,), generator=gen, device=dest.device)
        if domain.ignore is not None and trial % 2 == 1:
            skip = torch.randint(0, 8, (n,), generator=gen, device=dest.device) == 0
            x = torch.where(skip, torch.full_like(x, domain.ignore), x)
        flat[lo:lo + n].copy_(x)


@dataclass
class Case:
    """One trial: the graph inputs (forward args and parameters, in graph order)."""

    tensors: list[torch.Tensor]


def make_case(examples: Sequence[torch.Tensor], trial: int, seed: int,
              signed: Sequence[bool] | None = None,
              domains: Sequence[Domain] | None = None) -> Case:
    """Fresh inputs like `examples`; an input with an `IndexDomain` gets valid class indices,
    one with a `ValueRange` values inside it."""
    metas = [InputMeta.of(e) for e in examples]
    tensors = [torch.empty(m.shape, dtype=m.dtype, device=m.device) for m in metas]
    draw_case_into(tensors, metas, trial, seed, signed, domains)
    return Case(tensors)


def draw_case_into(tensors: Sequence[torch.Tensor], metas: Sequence[InputMeta], trial: int,
                   seed: int, signed: Sequence[bool] | None = None,
                   domains: Sequence[Domain] | None = None) -> None:
    """`make_case`, drawn into existing tensors: a case is regenerated from its seed, into the
    same buffers, whenever it is needed again, rather than held."""
    device = metas[0].device if metas else torch.device("cpu")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 7919 + trial * 104729 + 17)
    signed = signed or [False] * len(metas)
    domains = domains or [None] * len(metas)
    for t, m, sg, dom in zip(tensors, metas, signed, domains):
        if isinstance(dom, IndexDomain):
            draw_indices_into(t, dom, trial, gen)
        else:
            draw_into(t, m, trial, gen, sg, dom)


@dataclass(frozen=True)
class Perturbation:
    """One element of a case moved: a perturbed twin is its base case plus this."""

    input: int
    position: int  # flat index
    value: float

    def apply(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """Write the element; returns its old value (a 0-d tensor) for `undo`."""
        flat = tensors[self.input].view(-1)
        old = flat[self.position].clone()
        flat[self.position] = self.value
        return old

    def undo(self, tensors: Sequence[torch.Tensor], old: torch.Tensor) -> None:
        tensors[self.input].view(-1)[self.position] = old


def perturbation(tensors: Sequence[torch.Tensor], seed: int, attempt: int = 0,
                 domains: Sequence[Domain] | None = None) -> Perturbation:
    """One element of the largest input moved beyond the tensor's extremes: above its maximum
    on even attempts, below its minimum on odd ones (where the sign domain allows), at another
    position each attempt. Outside the range, the element changes maxima, minima, their indices
    and normalizers alike; the caller keeps the first variant whose reference differs from the
    base's by more than the tolerance. An input limited to a `ValueRange` is perturbed only
    where no other float input exists, to an end of its range."""
    domains = list(domains or [None] * len(tensors))
    # class indices have no "beyond the extremes": perturb the largest float input
    floats = [k for k in range(len(tensors)) if tensors[k].is_floating_point()]
    free = [k for k in floats if not isinstance(domains[k], ValueRange)]
    big = max(free or floats, key=lambda k: tensors[k].numel())
    t = tensors[big].reshape(-1)
    gen = torch.Generator().manual_seed(seed * 31 + attempt + 99991)
    pos = int(torch.randint(0, t.numel(), (1,), generator=gen))
    rng = domains[big]
    if isinstance(rng, ValueRange):
        return Perturbation(big, pos, rng.lo if attempt % 2 else rng.hi)
    hi, lo = float(t.max()), float(t.min())
    if attempt % 2 == 1 and lo < 0:
        return Perturbation(big, pos, lo - 4.0 * abs(lo) - 3.0)
    return Perturbation(big, pos, hi + 4.0 * abs(hi) + 3.0)


def perturbed(case: Case, seed: int, attempt: int = 0,
              domains: Sequence[Domain] | None = None) -> Case:
    """Copy of `case` with `perturbation(case.tensors, seed, attempt, domains)` applied."""
    tensors = [t.clone() for t in case.tensors]
    perturbation(case.tensors, seed, attempt, domains).apply(tensors)
    return Case(tensors)


_MASK64 = (1 << 64) - 1


HASH_ROW = 1 << 12
"""a fingerprint's multipliers are products of a row's and a column's, rows of this many
elements: one pass multiplies each row by the columns' multipliers and sums it"""


def _odd_mix(v: torch.Tensor, k1: int, k2: int) -> torch.Tensor:
    """Odd 64-bit multipliers mixed from positions `v` (int64) and two keys, in place."""
    v.mul_(k1).add_(k2)  # int64 products wrap
    v.bitwise_xor_(v >> 29).mul_(0x5851F42D4C957F2D)
    return v.bitwise_xor_(v >> 32).bitwise_or_(1)


def fingerprint(x: torch.Tensor, key: int, chunk: int | None = None) -> int:
    """A keyed hash of `x`'s bit pattern, computed where `x` lives, `chunk` elements at a time:
    what the mutation check compares before and after a candidate runs, instead of holding a
    copy of every input.

    The hash is sum_i bits_i * m_i (mod 2^64), element i at row r and column c of rows of
    HASH_ROW, with m_i = a_r * b_c, a and b odd multipliers mixed from the position and the
    key. A change of one element always changes it (an odd multiplier is invertible mod 2^64),
    swapped elements too (their multipliers differ), and a candidate cannot aim at a collision
    because the key is drawn afresh for every check. Factored so, a row's share is one
    multiply-and-sum over it: about 20 bytes of memory traffic an element, where a multiplier
    mixed per element took about 200 (counted from the operations, not measured on a GPU: at
    3 TB/s, about 0.3 s a hash of a 16 GiB input, two per trial; docs/journal.md,
    verify/cases.py)."""
    flat = x.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    size = flat.element_size()
    if flat.is_floating_point() or size < 8:
        flat = flat.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size])
    keys = [(key * 0x9E3779B97F4A7C15 + j * 0xBF58476D1CE4E5B9) & ((1 << 62) - 1)
            for j in range(1, 5)]
    rows_key, cols_key = (keys[0] | 1, keys[1]), (keys[2] | 1, keys[3])
    device, n = flat.device, flat.numel()
    # rows no longer than a chunk (the column multipliers are a row's worth of int64): the
    # hash is the same whole and in chunks of HASH_ROW elements or more, and the same from
    # one call to the next with the same chunk
    row = HASH_ROW if not chunk else min(HASH_ROW, 1 << (max(1, chunk).bit_length() - 1))
    cols = _odd_mix(torch.arange(row, dtype=torch.int64, device=device), *cols_key)
    step = chunk - chunk % row if chunk else max(row, -(-n // row) * row)  # whole rows
    total = 0
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        r0, whole = lo // row, hi // row  # the tensor's last row may be cut short
        if whole > r0:
            block = flat[r0 * row:whole * row].view(whole - r0, row)
            rows = _odd_mix(torch.arange(r0, whole, dtype=torch.int64, device=device),
                            *rows_key)
            # the int64 product of each element and its column's multiplier (the narrower
            # bit pattern sign-extended on the fly), summed per row, weighted by the row's
            total += int(torch.mul(block, cols).sum(dim=1).mul_(rows).sum())
        if hi > whole * row:
            total += _hash_elements(flat, whole * row, hi, cols, rows_key)
    return total & _MASK64


def _hash_elements(flat: torch.Tensor, lo: int, hi: int, cols: torch.Tensor,
                   rows_key: tuple[int, int]) -> int:
    """`fingerprint`'s sum over the elements lo..hi of a row cut short by the tensor's end."""
    row = cols.numel()
    m = cols[:hi - lo] * _odd_mix(torch.tensor([lo // row], dtype=torch.int64,
                                               device=flat.device), *rows_key)
    return int(flat[lo:hi].to(torch.int64, copy=True).mul_(m).sum())  # never in place


# -- comparison ----------------------------------------------------------------------------------

def poisoned_output(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    poison(out)
    return out


def poison(out: torch.Tensor) -> None:
    """Fill `out` with the distinctive NaN (or integer) that no computation writes."""
    if out.dtype == torch.float32:
        out.view(torch.int32).fill_(POISON_BITS)
    elif out.dtype in HALF_POISON:
        out.view(torch.int16).fill_(HALF_POISON[out.dtype])
    elif out.dtype.is_floating_point:
        out.copy_(torch.tensor(POISON_BITS, dtype=torch.int32).view(torch.float32))
    else:
        out.fill_(INT_POISON)


def _unwritten(out: torch.Tensor) -> torch.Tensor:
    if out.dtype == torch.float32:
        return out.view(torch.int32) == POISON_BITS
    if out.dtype in HALF_POISON:
        return out.view(torch.int16) == HALF_POISON[out.dtype]
    if out.dtype.is_floating_point:
        return torch.zeros_like(out, dtype=torch.bool)
    return out == INT_POISON


def pieces(a: torch.Tensor, b: torch.Tensor, limit: int | None
           ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Matching views of two same-shaped tensors, about `limit` elements each at most (None:
    the whole): comparisons of a large output make temporaries of one piece at a time."""
    if limit is None or a.numel() <= limit or a.dim() == 0 or a.shape[0] == 0:
        yield a, b
        return
    per_row = a.numel() // a.shape[0]
    if per_row <= limit:
        step = max(1, limit // per_row)
        for i in range(0, a.shape[0], step):
            yield a[i:i + step], b[i:i + step]
    else:
        for i in range(a.shape[0]):
            yield from pieces(a[i], b[i], limit)


@dataclass(frozen=True)
class Slack:
    """How far torch's own fp32 answer to one case is from the float64 reference: the floor
    under the bounds for that case (zero without a witness)."""

    rel: float = 0.0
    """relative-norm error of the witness, times the witness factor"""
    abs: float = 0.0
    """largest elementwise error of the witness, times the witness factor"""


NO_SLACK = Slack()


class SlackSum:
    """`witness_slack` accumulated over pieces of the witness's answer and the reference."""

    def __init__(self) -> None:
        self.sq_diff = self.sq_ref = self.max_diff = 0.0
        self.any = False

    def add(self, witness: torch.Tensor, ref: torch.Tensor, limit: int | None = None) -> None:
        """The sums of the pieces of `witness` against `ref`, kept on their device and read
        back once (each piece's own reads were seven synchronisations a piece of about 5 M
        elements on a GPU); where an element of either is not finite, the pieces are summed
        again over their finite elements."""
        sums: torch.Tensor | None = None  # finite elements, squared difference, squared ref
        peak: torch.Tensor | None = None  # the largest difference
        numel = 0
        for w, r in pieces(witness, ref, limit):
            if r.numel() == 0:
                continue
            diff = (w.double() - r.double()).abs_()
            part = torch.stack([(torch.isfinite(r) & torch.isfinite(w)).sum(dtype=torch.float64),
                                torch.linalg.vector_norm(diff) ** 2,
                                torch.linalg.vector_norm(r, dtype=torch.float64) ** 2])
            sums = part if sums is None else sums.add_(part)
            peak = diff.max() if peak is None else torch.maximum(peak, diff.max())
            numel += r.numel()
        if sums is None or peak is None:
            return
        finite, sq_diff, sq_ref, max_diff = torch.cat([sums, peak.reshape(1)]).tolist()
        if int(finite) != numel:
            self._add_finite(witness, ref, limit)
            return
        self.any = True
        self.sq_diff += sq_diff
        self.sq_ref += sq_ref
        self.max_diff = max(self.max_diff, max_diff)

    def _add_finite(self, witness: torch.Tensor, ref: torch.Tensor, limit: int | None) -> None:
        """`add` over the elements finite in both, piece by piece."""
        for w, r in pieces(witness, ref, limit):
            finite = torch.isfinite(r) & torch.isfinite(w)
            if not bool(finite.any()):
                continue
            self.any = True
            w, r = w[finite].double(), r[finite].double()
            diff = (w - r).abs_()
            self.sq_diff += float(torch.linalg.vector_norm(diff)) ** 2
            self.sq_ref += float(torch.linalg.vector_norm(r)) ** 2
            self.max_diff = max(self.max_diff, float(diff.max()))

    def merge(self, other: "SlackSum") -> None:
        """Add another piece's sums (the pieces of one answer, in any order)."""
        self.sq_diff += other.sq_diff
        self.sq_ref += other.sq_ref
        self.max_diff = max(self.max_diff, other.max_diff)
        self.any |= other.any

    def slack(self, factor: float) -> Slack:
        if not self.any:
            return NO_SLACK
        rel = math.sqrt(self.sq_diff) / max(math.sqrt(self.sq_ref), 1e-300)
        return Slack(rel=factor * rel, abs=factor * self.max_diff)


def witness_slack(witness: torch.Tensor, ref: torch.Tensor, factor: float) -> Slack:
    """The slack an fp32 witness earns: `factor` times its own errors against `ref`."""
    if not ref.dtype.is_floating_point or tuple(witness.shape) != tuple(ref.shape):
        return NO_SLACK
    acc = SlackSum()
    acc.add(witness, ref)
    return acc.slack(factor)


@dataclass
class RefStats:
    """What the elementwise bound needs of a whole reference before any piece is compared: its
    norm over the finite elements (and their count), and their sum (the constant that the
    degenerate-output check tries)."""

    finite: int = 0
    sum_sq: float = 0.0
    total: float = 0.0
    first: int | float | None = None  # the first element (an index output's constant)

    def add(self, ref: torch.Tensor, limit: int | None = None) -> None:
        """The stats of `ref`'s pieces, summed on its device and read back once (as
        `SlackSum.add`); a reference holding a non-finite element is summed again over its
        finite ones."""
        if self.first is None and ref.numel():
            self.first = ref.reshape(-1)[0].item()
        if not ref.is_floating_point():
            self.finite += ref.numel()
            return
        acc: torch.Tensor | None = None
        for _, r in pieces(ref, ref, limit):
            part = torch.stack([torch.isfinite(r).sum(dtype=torch.float64),
                                torch.linalg.vector_norm(r, dtype=torch.float64) ** 2,
                                r.sum(dtype=torch.float64)])
            acc = part if acc is None else acc.add_(part)
        if acc is None:
            return
        finite, sum_sq, total = acc.tolist()
        if int(finite) != ref.numel():
            self._add_finite(ref, limit)
            return
        self.finite += ref.numel()
        self.sum_sq += sum_sq
        self.total += total

    def _add_finite(self, ref: torch.Tensor, limit: int | None) -> None:
        """`add` over the finite elements, piece by piece."""
        for _, r in pieces(ref, ref, limit):
            f = torch.isfinite(r)
            n = int(f.sum())
            r = r if n == r.numel() else r[f]
            self.finite += n
            self.sum_sq += float(torch.linalg.vector_norm(r, dtype=torch.float64)) ** 2
            self.total += float(r.sum(dtype=torch.float64))

    def merge(self, other: "RefStats") -> None:
        """Add the next piece's stats (pieces in order: the first element is the first's)."""
        if self.first is None:
            self.first = other.first
        self.finite += other.finite
        self.sum_sq += other.sum_sq
        self.total += other.total

    @property
    def norm(self) -> float:
        return math.sqrt(self.sum_sq)

    @property
    def mean(self) -> float:
        return self.total / self.finite if self.finite else 0.0

    @staticmethod
    def of(ref: torch.Tensor, dtype: torch.dtype, limit: int | None = None) -> "RefStats":
        stats = RefStats()
        for _, r in pieces(ref, ref, limit):
            stats.add(r.to(dtype))
        return stats


class Comparison:
    """`compare` accumulated over pieces of the output: the counts, norms and elementwise
    bound add up over pieces to the same verdict as on the whole, so an output larger than
    the memory for one comparison (or a reference computed a chunk at a time) is checked in
    full, with the same bounds."""

    def __init__(self, rtol: float, elem_factor: float, slack: Slack, stats: RefStats,
                 limit: int | None = None, tolerance: Tolerance | None = None) -> None:
        self.rtol, self.elem_factor, self.slack, self.stats = rtol, elem_factor, slack, stats
        # conformance mode's allclose (an object with atol, rtol and describe()), in place of
        # the relative-norm and elementwise bounds
        self.tolerance = tolerance
        self.rms = stats.norm / math.sqrt(stats.finite) if stats.finite else 0.0
        self.limit = limit
        self.numel = self.unwritten = self.int_bad = self.nan_bad = self.bad = 0
        self.special = False
        self.sq_diff = 0.0
        self.floating = True

    def add(self, out: torch.Tensor, ref: torch.Tensor) -> None:
        """Each piece's squared difference and elementwise-bound count, summed on the device
        and read back once for all of `out` (two reads a piece of about 5 M elements were two
        synchronisations each on a GPU); a piece whose squared difference is not finite
        holds a NaN or an infinity, and its special values are counted then."""
        if not out.dtype.is_floating_point:
            for o, r in pieces(out, ref, self.limit):
                self.numel += o.numel()
                self.unwritten += int(_unwritten(o).sum())
                self.floating = False
                self.int_bad += int((o != r.to(o.dtype)).sum())
            return
        views, sqs, bad = [], [], None
        for o, given in pieces(out, ref, self.limit):
            self.numel += o.numel()
            views.append((o, given))  # views: nothing of a piece is held past its turn
            # fp32 differences are exact enough at these tolerances; norms accumulate in
            # float64. A half-precision output is compared in float32 against the float32
            # reference: its rounding where it was stored is part of its error
            if o.dtype in HALF:
                o = o.float()
            r = given.to(o.dtype)
            diff = o - r
            sqs.append(torch.linalg.vector_norm(diff, dtype=torch.float64) ** 2)
            # a NaN difference never passes the bound and an infinite reference's bound is
            # infinite: the count is the one over the finite elements alone
            n = self._count_bad(diff, r)
            bad = n if bad is None else bad.add_(n)
            del r, diff
        if bad is None:
            return
        read = torch.stack([bad.to(torch.float64), *sqs]).tolist()
        self.bad += int(read[0])
        for (o, r), sq in zip(views, read[1:]):
            if math.isfinite(sq):
                # every difference finite: no NaN or infinity in the output or the reference
                # (an unwritten element holds the poison NaN), so none to count one by one
                self.sq_diff += sq
            else:
                self._add_non_finite(o, r.to(torch.float32 if o.dtype in HALF else o.dtype))

    def _add_non_finite(self, o: torch.Tensor, r: torch.Tensor) -> None:
        """`add`'s counts for a floating piece holding a NaN or an infinity: what is
        unwritten, what is non-finite where the reference is finite, special values that
        differ, and the squared difference over the finite rest (its bound count is
        `add`'s)."""
        self.unwritten += int(_unwritten(o).sum())
        if o.dtype in HALF:
            o = o.float()
        r_finite = torch.isfinite(r)
        all_finite = bool(r_finite.all())
        o_bad = ~torch.isfinite(o)
        if not all_finite:
            o_bad &= r_finite
        self.nan_bad += int(o_bad.sum())
        if not all_finite:
            special = ~r_finite
            same = (torch.isnan(o) & torch.isnan(r)) | (o == r)
            self.special |= bool((special & ~same).any())
            o, r = o[r_finite], r[r_finite]
        if r.numel() == 0:
            return
        diff = o - r
        self.sq_diff += float(torch.linalg.vector_norm(diff, dtype=torch.float64)) ** 2

    def _count_bad(self, diff: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """How many elements' difference (`diff`, made absolute in place) passes the
        elementwise bound, on the device."""
        if self.tolerance is not None:
            bound = self.tolerance.atol + self.tolerance.rtol * r.abs()
        else:
            bound = (self.elem_factor * self.rtol) * (r.abs() + self.rms)
            if self.slack.abs > 0:
                bound = torch.clamp(bound, min=self.slack.abs)
        return (diff.abs_() > bound).sum()

    def result(self) -> tuple[str | None, str, float]:
        """(error kind or None, message, relative error), in `compare`'s order of precedence."""
        if self.unwritten:
            return "unwritten", f"{self.unwritten} of {self.numel} output elements never " \
                "written", math.inf
        if not self.floating:
            if self.int_bad:
                return "wrong", f"{self.int_bad} of {self.numel} indices differ", math.inf
            return None, "", 0.0
        if self.nan_bad:
            return "nan", f"{self.nan_bad} non-finite outputs where the reference is finite", \
                math.inf
        if self.special:
            return "wrong", "infinities or NaNs differ from the reference", math.inf
        if self.stats.finite == 0:
            return None, "", 0.0
        rel = math.sqrt(self.sq_diff) / max(self.stats.norm, 1e-300)
        if self.tolerance is not None:
            if self.bad:
                return "wrong", f"{self.bad} of {self.stats.finite} elements fail " \
                    f"{self.tolerance.describe()}", rel
            return None, "", rel
        tol = max(self.rtol, self.slack.rel)
        if rel > tol:
            return "wrong", f"relative error {rel:.3g} > {tol:.1g}", rel
        if self.bad:
            ef = self.elem_factor * self.rtol
            floor = f" (or {self.slack.abs:.2g}, the fp32 witness's)" if self.slack.abs > 0 \
                else ""
            return "wrong", f"{self.bad} elements off by more than {ef:.1g} x (|ref| + " \
                f"rms(ref)){floor}", rel
        return None, "", rel


def compare(out: torch.Tensor, ref: torch.Tensor, rtol: float, elem_factor: float,
            slack: Slack = NO_SLACK, tolerance: Tolerance | None = None,
            limit: int | None = None) -> tuple[str | None, str, float]:
    """(error kind or None, message, relative error) of `out` against the float64 `ref`;
    `slack` (from an fp32 witness) is a floor under both bounds; with `tolerance`
    (conformance mode) the bounds are torch.allclose's instead; temporaries of `limit`
    elements at a time (None: the whole)."""
    if tuple(out.shape) != tuple(ref.shape):
        return "wrong", f"shape {tuple(out.shape)} != {tuple(ref.shape)}", math.inf
    comparison = Comparison(rtol, elem_factor, slack, RefStats.of(ref, reference_dtype(out.dtype),
                                                                  limit), limit,
                            tolerance)
    comparison.add(out, ref)
    return comparison.result()


def reference_dtype(out_dtype: torch.dtype) -> torch.dtype:
    """The dtype references to an output of `out_dtype` are held in: float32 for a
    half-precision output (the float64 reference rounded to fp16 or bf16 would carry the
    error the output is checked for), else the output's own."""
    return torch.float32 if out_dtype in HALF else out_dtype


# -- the protocol --------------------------------------------------------------------------------

class Buffers(list):
    """A pool's input tensors (a list, as candidates take them), and which trial's values they
    hold now (None: not known, drawn again before use)."""

    holds: "Trial | None" = None
    moved: torch.Tensor | None = None  # the old value of a perturbed twin's moved element


@dataclass(eq=False)
class Trial:
    """Inputs of one check and the reference's answer to them (in the output dtype).

    A pool's trial knows how to draw itself again (`draw`: its distribution, seed and whether
    parameters are drawn signed; or `base` and `change` for a perturbed twin), so its inputs
    may be a buffer it shares with other trials, and its reference may be kept on the device
    (`ref`), in host memory (`stored`), or recomputed whenever it is compared."""

    inputs: list[torch.Tensor]
    ref: torch.Tensor | None
    label: str
    slack: Slack = NO_SLACK
    stats: RefStats | None = None
    draw: tuple[int, int, bool] | None = None  # (distribution, seed, signed parameters)
    base: "Trial | None" = None
    change: Perturbation | None = None
    stored: torch.Tensor | None = None  # the reference, in host memory
    parts: "list[tuple[RefStats, SlackSum]] | None" = None
    """each reference chunk's stats and witness sums, where the reference is chunked and not
    kept: a perturbed twin takes its base's for the chunks without the moved element"""

    def twin_change(self) -> Perturbation:
        """A perturbed twin's change from its base."""
        assert self.change is not None, f"{self.label} is not a perturbed twin"
        return self.change


@dataclass(frozen=True)
class Split:
    """A direction along which the problem is separable: rows [a, b) of the output along
    `out_dim` are the reference's answer to every input narrowed to [a, b) along its entry
    of `in_dims` (None: that input whole). Found empirically (`run.separable`).

    With `inner`, two directions: each row along `out_dim` taken apart, and chunked along
    `inner` (attention's batch, then its heads: one batch row of float64 scores is 4.5 GB at
    16 heads of 4096 queries, one head of one batch row 0.3 GB). Chunk sizes count rows of
    `rows_dim`."""

    out_dim: int
    in_dims: tuple[int | None, ...]
    inner: "Split | None" = None

    @property
    def levels(self) -> tuple["Split", ...]:
        return (self,) if self.inner is None else (self, self.inner)

    @property
    def rows_dim(self) -> int:
        """The output dim a chunk's rows are counted along."""
        return self.levels[-1].out_dim

    def blocks(self, out_shape: Sequence[int], rows: int) -> list["Block"]:
        """The chunks of rows `rows` at most covering the output, in order."""
        n = out_shape[self.rows_dim]
        chunks = [(self.rows_dim, lo, min(rows, n - lo)) for lo in range(0, n, rows)]
        if self.inner is None:
            return [(c,) for c in chunks]
        return [((self.out_dim, i, 1), c) for i in range(out_shape[self.out_dim])
                for c in chunks]


Block = tuple[tuple[int, int, int], ...]
"""one chunk of the output: (output dim, first row, rows) along each of a `Split`'s levels"""


def narrow_inputs(tensors: Sequence[torch.Tensor], dims: Sequence[int | None], lo: int,
                  rows: int) -> list[torch.Tensor]:
    """Rows [lo, lo + rows) of each tensor along its entry of `dims` (a contiguous copy; None:
    the tensor whole): one chunk of a problem's inputs along a `Split` or an accumulation."""
    return [t if d is None else t.narrow(d, lo, rows).contiguous() for t, d in zip(tensors, dims)]


def block_inputs(tensors: Sequence[torch.Tensor], split: Split, block: Block
                 ) -> list[torch.Tensor]:
    """The inputs of one chunk of the output (`Split.blocks`): narrowed level by level."""
    out = list(tensors)
    for level, (_, lo, rows) in zip(split.levels, block):
        out = narrow_inputs(out, level.in_dims, lo, rows)
    return out


def block_shape(shape: Sequence[int], block: Block) -> tuple[int, ...]:
    want = list(shape)
    for d, _, rows in block:
        want[d] = rows
    return tuple(want)


@dataclass
class PoolBudget:
    """What a case pool may keep, in bytes (None: no limit, every case and reference held)."""

    device_bytes: int | None = None
    """on the pool's device, beyond the one set of inputs it draws into and the one output:
    case inputs (all of them or none, else cases share one set of buffers) and references"""
    host_bytes: int = 0
    """references that did not fit on the device, in host memory"""
    scratch_bytes: int | None = None
    """working memory of one piece of a comparison, a hash or a reference chunk's bookkeeping
    (None: whole tensors at once)"""


class CasePool:
    """Random cases and their float64 reference answers, drawn once per problem.

    Drawing heavy-tailed inputs and running a float64 reference costs far more than running a
    candidate, so a tuning run draws a pool once and gives each candidate a rotating selection
    of distinct cases plus a perturbed one. The pool also decides, once, whether trivial outputs
    (zeros, a constant, an input) could pass: if one passes every case, checks are inconclusive.

    `witness`, when given, computes the same answer the way torch eager does (fp32, TF32 off);
    its error on each case sets that case's slack (VerifySettings.witness_factor).

    Memory (`budget`): what does not fit is not held but regenerated. Cases then share one set
    of input buffers (`buffers`, which timing set 0 uses too) and are drawn again from their
    seeds when used; a perturbed twin is its base case with one element moved. References are
    kept on the device while they fit, then in host memory, else recomputed per use; with a
    `split` the reference is computed `chunk_rows` rows at a time and compared chunk by chunk.
    Whatever is kept, every check is the same: the norms and bounds add up over pieces
    (`Comparison`).
    """

    def __init__(self, reference: Callable[[list[torch.Tensor]], torch.Tensor],
                 examples: Sequence[torch.Tensor | InputMeta], out_shape: Sequence[int],
                 out_dtype: torch.dtype, settings: VerifySettings | None = None,
                 signed: Sequence[bool] | None = None,
                 witness: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
                 domains: Sequence[Domain] | None = None, *, budget: PoolBudget | None = None,
                 buffers: Sequence[torch.Tensor] | None = None, split: Split | None = None,
                 chunk_rows: int | None = None) -> None:
        self.settings = s = settings or VerifySettings()
        self.reference = reference  # kept: a reference not held is recomputed when compared
        self.metas = [InputMeta.of(e) for e in examples]
        self.signed = list(signed) if signed is not None else None
        self.domains = list(domains) if domains is not None else None
        self.out_shape, self.out_dtype = tuple(out_shape), out_dtype
        self.ref_dtype = reference_dtype(out_dtype)
        self.device = self.metas[0].device
        self.rtol = s.rtol if s.rtol is not None else TOLERANCE.get(out_dtype, 1e-4)
        self.tolerance = getattr(s, "tolerance", None)  # conformance mode's allclose
        self.budget = budget or PoolBudget()
        self.limit = None if self.budget.scratch_bytes is None else max(
            1024, self.budget.scratch_bytes // 48)  # ~48 bytes of temporaries per element
        self.split, self.chunk_rows = split, chunk_rows
        # seconds of the set-up's steps (drawing cases, the witness, the reference's chunks,
        # counted with how many reference chunks ran): a large problem's cases take tens of
        # seconds of its set-up (docs/journal.md: verify/cases.py)
        self._clock = _StepClock(self.device)
        self.reference_runs = 0
        self._out: torch.Tensor | None = None
        self._timing: dict[int, Trial] = {}
        n = max(s.trials, s.pool)
        in_bytes = sum(m.nbytes for m in self.metas)
        self.out_bytes = math.prod(self.out_shape) * torch.empty(
            0, dtype=self.ref_dtype).element_size()  # a reference's (held per case)
        room = self.budget.device_bytes
        # every case's inputs held (2n sets: cases and twins), or one set of buffers shared
        self.holds_inputs = room is None or 2 * n * in_bytes <= room
        self._device_left = None if room is None else room - (
            2 * n * in_bytes if self.holds_inputs else 0)
        self._host_left = self.budget.host_bytes
        self.buffers = Buffers(buffers) if buffers is not None else (
            None if self.holds_inputs else self._alloc())
        self.cases: list[Trial] = []
        self.perturbed: list[Trial] = []
        alive = {"zeros", "constant"} | ({"identity"} if out_dtype.is_floating_point else set())
        for t in range(n):
            case = Trial(self._alloc() if self.holds_inputs else self._shared(), None,
                         f"trial {t} ({DISTRIBUTIONS[t % len(DISTRIBUTIONS)]} inputs)",
                         draw=(t, s.seed, True))
            self._measure(case, witness)
            self.cases.append(case)
            alive = self._clock("trivial", self._weak, case, alive)
            # a perturbed twin of every case, whose reference really differs from the case's
            twin = None
            for attempt in range(6):
                if twin is not None:
                    self._release(twin)
                base_inputs = self.materialize(case)
                change = perturbation(base_inputs, s.seed + t, attempt, self.domains)
                if self.holds_inputs:  # its own copy: the base with the element moved
                    inputs = Buffers(x.clone() for x in base_inputs)
                    inputs.moved = change.apply(inputs)
                else:
                    inputs = self._shared()
                twin = Trial(inputs, None, f"perturbed-input trial (from trial {t})",
                             base=case, change=change)
                if self.holds_inputs:
                    inputs.holds = twin
                self._measure(twin, witness)
                # a replay of the base's answer must fail on the twin
                if self._clock("replay", self._replay_fails, case, twin):
                    break
            assert twin is not None  # range(6) made one
            self.perturbed.append(twin)
            alive = self._clock("trivial", self._weak, twin, alive)
        self.weak = sorted(alive, key=["zeros", "constant", "identity"].index)
        self.setup_seconds = {**self._clock.seconds, "reference_runs": self.reference_runs}

    # -- inputs ----------------------------------------------------------------------------------
    def _shared(self) -> Buffers:
        """The input buffers the cases share, where the pool does not hold each case's own."""
        assert self.buffers is not None, "the pool holds every case's inputs"
        return self.buffers

    def _alloc(self) -> Buffers:
        return Buffers(torch.empty(m.shape, dtype=m.dtype, device=m.device) for m in self.metas)

    def materialize(self, trial: Trial) -> list[torch.Tensor]:
        """`trial.inputs`, holding the trial's values: drawn again from its seed unless they
        already do (a twin and its base differ by one element, moved or put back)."""
        bufs = trial.inputs
        if not isinstance(bufs, Buffers):
            return bufs  # a caller's own trial is taken as it is
        now = bufs.holds
        if now is trial:
            return bufs
        bufs.holds = None  # until drawn: an exception here leaves them unknown
        if trial.base is not None:
            if now is not trial.base:
                self._draw(trial.base, bufs)
            bufs.moved = trial.twin_change().apply(bufs)
        elif now is not None and now.base is trial and bufs.moved is not None:
            now.twin_change().undo(bufs, bufs.moved)
        else:
            self._draw(trial, bufs)
        bufs.holds = trial
        return bufs

    def _draw(self, trial: Trial, bufs: list[torch.Tensor]) -> None:
        assert trial.draw is not None, f"{trial.label} is drawn from its base"
        dist, seed, signed = trial.draw
        self._clock("draw", draw_case_into, bufs, self.metas, dist, seed,
                    self.signed if signed else None, self.domains)

    @staticmethod
    def forget(bufs: list[torch.Tensor]) -> None:
        """Something may have written into `bufs`: they are drawn again before their next use."""
        if isinstance(bufs, Buffers):
            bufs.holds = bufs.moved = None

    def restore(self, trial: Trial) -> None:
        """Put a trial's inputs back after a candidate may have written into them, so that a
        misbehaving candidate cannot poison later checks (at once where the trial owns them)."""
        if not isinstance(trial.inputs, Buffers):
            return
        self.forget(trial.inputs)
        if trial.inputs is not self.buffers:
            self.materialize(trial)

    @contextmanager
    def timed_by(self, clock: "_StepClock") -> Iterator[None]:
        """Within: the pool's own steps (draws, reference chunks) are timed by `clock`, a
        check's (set-up's stay in `setup_seconds`)."""
        own, self._clock = self._clock, clock
        try:
            yield
        finally:
            self._clock = own

    def timing_set(self, k: int) -> Trial:
        """Input set `k` of the timing rotation: drawn from its own seed (1234), in the shared
        buffers for set 0 where cases share them, so that timing needs no inputs of its own."""
        if k not in self._timing:
            inputs = self.buffers if k == 0 and self.buffers is not None else self._alloc()
            self._timing[k] = Trial(inputs, None,
                                    f"timing set {k}", draw=(k, 1234, False))
        return self._timing[k]

    def fingerprints(self, tensors: Sequence[torch.Tensor], key: int) -> list[int]:
        return [fingerprint(x, key, self.limit) for x in tensors]

    def output(self) -> torch.Tensor:
        """The one output buffer every check (and the timing) writes into."""
        if self._out is None:
            self._out = torch.empty(self.out_shape, dtype=self.out_dtype, device=self.device)
        return self._out

    def release_output(self) -> None:
        """Give the output buffer back (drawn again when next asked for): the baselines, timed
        after the search, need the room for torch's own outputs."""
        self._out = None

    # -- references ------------------------------------------------------------------------------
    def _blocks(self) -> list[Block | None]:
        """The reference's chunks (`Split.blocks`), or [None] for the whole."""
        if self.split is None or not self.chunk_rows:
            return [None]
        if self.split.inner is None and self.chunk_rows >= self.out_shape[self.split.out_dim]:
            return [None]
        return list(self.split.blocks(self.out_shape, self.chunk_rows))

    @staticmethod
    def _part(t: torch.Tensor, block: Block | None) -> torch.Tensor:
        for d, lo, rows in block or ():
            t = t.narrow(d, lo, rows)
        return t

    def _compute(self, trial: Trial, block: Block | None) -> torch.Tensor:
        tensors = self.materialize(trial)
        if block is not None:
            assert self.split is not None
            tensors = block_inputs(tensors, self.split, block)
        with torch.no_grad():
            out = self._clock("reference", self.reference, list(tensors))
        self.reference_runs += 1
        out = out.to(device=self.device, dtype=self.ref_dtype)
        want = self.out_shape if block is None else block_shape(self.out_shape, block)
        if tuple(out.shape) != tuple(want):
            raise ValueError(f"the reference's answer has shape {tuple(out.shape)}, "
                             f"not {tuple(want)}")
        return out

    def _ref_block(self, trial: Trial, block: Block | None) -> torch.Tensor:
        if trial.ref is not None:
            return self._part(trial.ref, block)
        if trial.stored is not None:
            return self._part(trial.stored, block).to(self.device, non_blocking=True)
        return self._compute(trial, block)

    def _keep(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Room for one reference: (on the device, in host memory), at most one of them."""
        if self._device_left is None or self._device_left >= self.out_bytes:
            if self._device_left is not None:
                self._device_left -= self.out_bytes
            return torch.empty(self.out_shape, dtype=self.ref_dtype, device=self.device), None
        if self._host_left >= self.out_bytes:
            self._host_left -= self.out_bytes
            pin = self.device.type == "cuda"
            return None, torch.empty(self.out_shape, dtype=self.ref_dtype, pin_memory=pin)
        return None, None

    def _release(self, trial: Trial) -> None:
        if trial.ref is not None and self._device_left is not None:
            self._device_left += self.out_bytes
        if trial.stored is not None:
            self._host_left += self.out_bytes
        trial.ref = trial.stored = None

    def _measure(self, trial: Trial,
                 witness: Callable[[list[torch.Tensor]], torch.Tensor] | None) -> None:
        """Draw the trial, run the witness, then the reference chunk by chunk: the reference's
        norms, the witness's slack, and the reference itself where there is room for it."""
        answer = None
        if witness is not None and self.out_dtype.is_floating_point:
            with torch.no_grad():
                answer = self._clock("witness", witness, self.materialize(trial))
            if tuple(answer.shape) != self.out_shape:
                answer = None
            # the witness is torch's eager module: it may write into what it was given
            # (a training-mode norm's running statistics), so the case is drawn again
            self.forget(trial.inputs)
        stats, slack = RefStats(), SlackSum()
        device_ref, host_ref = self._keep()
        blocks = self._blocks()
        # a twin whose reference is not kept takes its base's sums for the chunks without the
        # moved element: along a separable split their references (and the witness's rows)
        # are the base's. One chunk's reference run then, not every chunk's
        change = trial.change
        base = trial.base.parts if trial.base is not None and change is not None \
            and device_ref is None and host_ref is None else None
        parts: list[tuple[RefStats, SlackSum]] = []
        for i, block in enumerate(blocks):
            if base is not None and change is not None and block is not None and \
                    not self._holds_element(block, change):
                part = base[i]
            else:
                r = self._compute(trial, block)
                part = (RefStats(), SlackSum())
                self._clock("stats", part[0].add, r, self.limit)
                if answer is not None:
                    self._clock("slack", part[1].add, self._part(answer, block), r, self.limit)
                if device_ref is not None:
                    self._part(device_ref, block).copy_(r)
                elif host_ref is not None:
                    self._part(host_ref, block).copy_(r)
                del r
            parts.append(part)
            stats.merge(part[0])
            slack.merge(part[1])
        del answer
        trial.stats, trial.ref, trial.stored = stats, device_ref, host_ref
        trial.parts = parts if blocks != [None] and device_ref is None and host_ref is None \
            else None
        trial.slack = slack.slack(self.settings.witness_factor) if witness is not None \
            else NO_SLACK

    def _comparison(self, trial: Trial) -> Comparison:
        """A comparison against `trial`'s reference, by this pool's criterion."""
        assert trial.stats is not None, f"{trial.label} is compared before it is measured"
        return Comparison(self.rtol, self.settings.elem_factor, trial.slack, trial.stats,
                          self.limit, self.tolerance)

    def _replay_fails(self, base: Trial, twin: Trial) -> bool:
        """Whether the base case's answer fails on its perturbed twin. A chunk whose inputs
        do not hold the moved element has the same reference in both (the split is one the
        problem is separable along): it adds nothing to the comparison and is not computed
        (two float64 reference runs a chunk saved, where the references are not held)."""
        comparison = self._comparison(twin)
        for block in self._blocks():
            if block is not None and twin.change is not None and \
                    not self._holds_element(block, twin.change):
                continue
            b = self._ref_block(base, block)
            comparison.add(b, self._ref_block(twin, block))
        return comparison.result()[0] is not None

    def _holds_element(self, block: Block, change: Perturbation) -> bool:
        """Whether the chunk's inputs hold the element `change` moves."""
        assert self.split is not None
        index = _unravel(change.position, self.metas[change.input].shape)
        for level, (_, lo, rows) in zip(self.split.levels, block):
            d = level.in_dims[change.input]
            if d is not None and not lo <= index[d] < lo + rows:
                return False
        return True

    def _weak(self, trial: Trial, alive: set[str]) -> set[str]:
        """The trivial outputs still passing every trial so far that also pass this one."""
        if not alive:
            return alive
        # the constant is fixed before seeing the other trials: a kernel cannot know each
        # trial's answer, so a single-element output is not trivially "constant"
        first = self.cases[0].stats
        assert first is not None, "the first case is measured first"
        floating = self.out_dtype.is_floating_point
        const = first.mean if floating else int(first.first or 0)
        comps = {k: self._comparison(trial) for k in alive if floating}
        same = [k for k, m in enumerate(self.metas) if m.shape == self.out_shape]
        passed = dict.fromkeys(alive, True)
        if "identity" in alive and not same:
            passed["identity"] = False
        for block in self._blocks():
            r = self._ref_block(trial, block)
            if not floating:
                for kind, value in (("zeros", 0), ("constant", const)):
                    if kind in passed:
                        passed[kind] &= bool((r == value).all())
                continue
            for kind, comparison in comps.items():
                if kind == "identity":
                    if not passed[kind]:
                        continue
                    inputs = self.materialize(trial)
                    cand = self._part(inputs[same[0]], block).to(r.dtype)
                else:
                    value = 0.0 if kind == "zeros" else const
                    cand = torch.full((), value, dtype=r.dtype, device=r.device).expand(r.shape)
                comparison.add(cand, r)
        for kind, comparison in comps.items():
            passed[kind] = passed[kind] and comparison.result()[0] is None
        return {k for k, v in passed.items() if v}

    def compare(self, out: torch.Tensor, trial: Trial) -> tuple[str | None, str, float]:
        """`compare` of `out` against a trial's reference, by this pool's criterion, chunk by
        chunk."""
        if tuple(out.shape) != self.out_shape:
            return "wrong", f"shape {tuple(out.shape)} != {self.out_shape}", math.inf
        if trial.stats is None:  # a caller's own trial
            assert trial.ref is not None, f"{trial.label} has no reference"
            return compare(out, trial.ref, self.rtol, self.settings.elem_factor, trial.slack,
                           self.tolerance, self.limit)
        comparison = self._comparison(trial)
        for block in self._blocks():
            comparison.add(self._part(out, block), self._ref_block(trial, block))
        return comparison.result()

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
    """Run the candidate on each trial; the first failure decides the result's kind.

    Each trial's inputs are drawn (again, where the pool does not hold them), hashed before
    and after the run (a keyed hash, `fingerprint`, drawn afresh per check), and the candidate
    writes into the pool's one output buffer, poisoned before every run."""
    if pool.weak:
        return VerifyResult(False, "degenerate",
                            f"inconclusive: a trivial output ({', '.join(pool.weak)}) passes "
                            "every trial, so passing proves nothing", 0.0)
    key = secrets.randbits(63)
    out = pool.output()
    clock = _StepClock(out.device)
    with pool.timed_by(clock):  # the pool's draws and reference chunks in their own steps
        return _check_trials(run, pool, trials, key, out, clock)


def _check_trials(run: Callable[[list[torch.Tensor], torch.Tensor], None], pool: CasePool,
                  trials: list[Trial], key: int, out: torch.Tensor, clock: "_StepClock"
                  ) -> VerifyResult:
    """`check`'s loop over the trials."""
    worst = 0.0
    for trial in trials:
        inputs = clock("draw", pool.materialize, trial)
        before = clock("hash", pool.fingerprints, inputs, key)
        poison(out)
        try:
            clock("run", run, inputs, out)
        except CandidateError as exc:
            pool.restore(trial)
            return VerifyResult(False, exc.kind, str(exc), worst, clock.seconds)
        after = clock("hash", pool.fingerprints, inputs, key)
        for k, (h0, h1) in enumerate(zip(before, after)):
            if h0 != h1:
                pool.restore(trial)
                return VerifyResult(False, "mutated_input", f"input {k} was modified", worst,
                                    clock.seconds)
        kind, msg, rel = clock("compare", pool.compare, out, trial)
        worst = max(worst, rel)
        if kind:
            return VerifyResult(False, kind, f"{trial.label}: {msg}", worst, clock.seconds)
    return VerifyResult(True, None, "", worst, clock.seconds)


@functools.lru_cache(maxsize=64)
def _unravel(position: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A flat index's position in `shape` (asked once per chunk of a twin: computed once)."""
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(position), shape))


class _StepClock:
    """Seconds per step of `check` (a large problem's checks take most of each candidate's
    seconds: docs/journal.md, verify/cases.py): on a GPU each step ends with a synchronisation,
    so its kernels are counted in it, not in the next."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = {}
        self._inner = 0.0  # seconds of the steps timed inside the step now running

    def __call__(self, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), its seconds added to `step`'s: a step timed inside another counts in
        its own, not in the outer one's as well (the steps add up to the time they took)."""
        t0, outer = time.perf_counter(), self._inner
        self._inner = 0.0
        try:
            result = fn(*args)
            if self.cuda:  # not after a failure: a faulted context would raise here instead
                torch.cuda.synchronize()
            return result
        finally:
            took = time.perf_counter() - t0
            self.seconds[step] = self.seconds.get(step, 0.0) + took - self._inner
            self._inner = outer + took


def check_state(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], pool: CasePool,
                slack: dict[str, Slack] | None = None) -> VerifyResult:
    """The module state a candidate updated (BatchNorm's running statistics, from the batch
    statistics its kernels left in memory) against the reference's own update on the same
    case, by the pool's criterion; `slack`: each state's floor from torch's own update under
    the kernels' contract (`witness_slack`), as an output's case has its witness's."""
    worst = 0.0
    for name in sorted(want):
        # where the candidate's update is: a host reference's stays on the CPU, and compared
        # across devices every candidate verified in host memory would fail
        # (docs/journal.md: verify/cases.py)
        ref = want[name].to(device=got[name].device, dtype=got[name].dtype)
        kind, msg, rel = compare(got[name], ref, pool.rtol, pool.settings.elem_factor,
                                 (slack or {}).get(name, NO_SLACK), pool.tolerance)
        worst = max(worst, rel)
        if kind:
            return VerifyResult(False, "wrong", f"updated state {name}: {msg}", worst)
    return VerifyResult(True, None, "", worst)


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
