"""Whether a problem's output can be computed a slice at a time (`verify.Split`): the float64
reference of a problem too large to run whole is then computed, and compared, in chunks.

Found empirically, with torch's own (fp32) answer on a drawn case: for a candidate direction,
rows [a, b) of the output must (1) come out the same when every split input is narrowed to
[a, b), and (2) not move when every other row of the split inputs is changed. A problem with
BatchNorm in training mode (statistics over the batch), a softmax over the batch, or a module
that hard-codes its batch size fails one of the two along the batch and is not chunked there.

A problem whose output has no such direction (a loss reduced to one number) may still add up:
its output the sum, or the row-weighted mean, of its outputs on slices of the batch
(`Accumulation`); the float64 reference is then accumulated chunk by chunk, and checked once
against torch's own answer on a whole case before it is trusted (`worker`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Container, Iterator, Sequence

import torch

from .cases import Domain, Split, ValueRange, narrow_inputs

SAME_SHAPES_TOL = 1e-5
"""relative change of the slice allowed when only other rows changed (same shapes, so the same
algorithms: any real dependence moves it by far more)"""
SLICED_TOL = 1e-2
"""relative difference allowed between the slice run alone and the same rows of the whole run
(other shapes may pick other algorithms: TF32 or half precision round differently)"""


MAX_CANDIDATES = 6
"""directions tested at most: each test runs torch eager three times on the whole problem"""


def candidate_splits(shapes: Sequence[tuple[int, ...]], roles: Sequence[str],
                     out_shape: Sequence[int]) -> list[Split]:
    """Directions worth testing, most useful first: the batch (output dim 0: forward inputs
    sliced on their dim 0, or on another dim of that size, parameters whole), then the
    channels (output dim 1: parameters sliced on their dim 0, forward inputs on their dim 1,
    another of that size, or whole). Where several inputs have the size, every one of them is
    sliced first, then each alone (of a square matrix product only the left operand's rows go
    with the output's). Then each later output dim, the forward inputs sliced on the same dim
    (attention's queries): finer directions, for a problem one row of whose batch or channels
    is too large for the GPU's reference budget."""
    out: list[Split] = []

    def add(d: int, dims: tuple[int | None, ...]) -> None:
        if any(x is not None for x in dims) and all(s.in_dims != dims or s.out_dim != d
                                                    for s in out):
            out.append(Split(d, dims))

    def variants(d: int, fixed: list[int | None], sliceable: list[int | None]) -> None:
        """`fixed` for every input, with the forward inputs of `sliceable` (a dim or None)
        sliced all together, then one at a time."""
        add(d, tuple(f if s is None else s for f, s in zip(fixed, sliceable)))
        picks = [k for k, s in enumerate(sliceable) if s is not None]
        if len(picks) > 1:
            for k in picks:
                add(d, tuple(sliceable[j] if j == k else fixed[j] for j in range(len(fixed))))

    for d in range(min(2, len(out_shape))):
        n = out_shape[d]
        if n < 2:
            continue
        fwd = [role == "input" for role in roles]
        # along the channels (d = 1), a parameter's dim 0 goes with the output's
        params = [0 if d == 1 and not f and len(s) >= 1 and s[0] == n else None
                  for s, f in zip(shapes, fwd)]
        same = [d if f and len(s) > d and s[d] == n else None for s, f in zip(shapes, fwd)]
        # or another dim of the same size (a reduction over dim 0, a transpose)
        first = [next((k for k, m in enumerate(s) if m == n), None) if f else None
                 for s, f in zip(shapes, fwd)]
        variants(d, params, same)
        if d == 1:
            # a transposed convolution keeps its output channels on its weight's dim 1: each
            # parameter on its first later dim of the size (its dim 0 where it has none), the
            # forward inputs whole (it mixes their channels). Before the other variants: a
            # training-mode BatchNorm after it is separable only so (else its float64
            # reference went to host memory: minutes of CPU for a 1 GiB volume)
            later = [next((k for k in range(1, len(s)) if s[k] == n), p) if not f else None
                     for s, f, p in zip(shapes, fwd, params)]
            if later != params:
                add(1, tuple(later))
        if first != same:
            variants(d, params, first)
        if d == 1:
            add(1, tuple(params))  # the forward inputs whole (a convolution mixes channels)
    for d in range(2, len(out_shape)):
        n = out_shape[d]
        if n >= 2:
            variants(d, [None] * len(shapes),
                     [d if role == "input" and len(s) > d and s[d] == n else None
                      for s, role in zip(shapes, roles)])
    return out


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    """Same non-finite pattern, and a relative difference of the finite rest within `tol`.
    Compared a piece at a time (`_pieces`): whole, the float64 copies, masks and
    difference take five float64 copies of the slice (20 GiB for a 2 GiB slice), beyond the
    memory bound (docs/journal.md: verify/separable.py)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    diff_sq = ref_sq = 0.0
    finite = False
    for pa, pb in _pieces(a, b):
        pa, pb = pa.double(), pb.double()
        fa, fb = torch.isfinite(pa), torch.isfinite(pb)
        if not torch.equal(fa, fb):
            return False
        if not bool(fa.any()):
            continue
        finite = True
        zero = pa.new_zeros(())
        diff_sq += float(torch.linalg.vector_norm(torch.where(fa, pa - pb, zero))) ** 2
        ref_sq += float(torch.linalg.vector_norm(torch.where(fb, pb, zero))) ** 2
    if not finite:
        return True
    return math.sqrt(diff_sq) <= tol * max(math.sqrt(ref_sq), 1e-300)


def same_answer(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two answers to one case the same within the slack of computing it another way
    (`SLICED_TOL`: other shapes, other algorithms, another precision)."""
    return _close(a, b, SLICED_TOL)


def _scramble_outside(t: torch.Tensor, dim: int, lo: int, rows: int, domain: Domain) -> bool:
    """Change every row of `t` along `dim` outside [lo, lo + rows), in its domain; False for a
    tensor that cannot be changed so (class indices)."""
    if not t.is_floating_point():
        return False
    for part in (t.narrow(dim, 0, lo), t.narrow(dim, lo + rows, t.shape[dim] - lo - rows)):
        if part.numel() == 0:
            continue
        if isinstance(domain, ValueRange):
            part.neg_().add_(domain.lo + domain.hi)  # in place: reflected within the range
            continue
        # 3x + |x| + 1: far moved, and positive where x was (log, sqrt domains). A piece at a
        # time: whole, its temporaries are 1.3x the input, beyond the memory bound
        # (docs/journal.md: verify/separable.py)
        for (piece,) in _pieces(part):
            piece.copy_(3.0 * piece + piece.abs() + 1.0)
    return True


SCRAMBLE_PIECE = 1 << 24
"""elements changed at a time by `_scramble_outside` (its temporaries: 3 x 64 MiB of fp32),
and compared at a time by `_close` (about 6 x 128 MiB of float64 and masks)"""


def _pieces(*tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """Matching views of tensors of one shape, of at most about SCRAMBLE_PIECE elements each
    (one element of the leading dims at the least) and together covering them: slices along
    their first dim, or each index of it taken apart where one index holds more."""
    first = tensors[0]
    if first.dim() == 0 or first.numel() <= SCRAMBLE_PIECE:
        yield tensors
        return
    size = first.shape[0]
    per = first.numel() // size
    if per > SCRAMBLE_PIECE:
        for i in range(size):
            yield from _pieces(*(t[i] for t in tensors))
        return
    step = max(1, SCRAMBLE_PIECE // per)
    for i in range(0, size, step):
        yield tuple(t[i:i + step] for t in tensors)


def is_separable(fn: Callable[[list[torch.Tensor]], torch.Tensor], tensors: list[torch.Tensor],
                 split: Split, out_shape: Sequence[int],
                 domains: Sequence[Domain] | None = None) -> bool:
    """The two tests above, on `tensors` (changed in place: draw them again afterwards)."""
    d = split.out_dim
    n = out_shape[d]
    rows = max(1, n // 8)
    lo = (n - rows) // 2
    domains = list(domains or [None] * len(tensors))
    with torch.no_grad():
        try:
            whole = fn(tensors)
        except Exception:  # noqa: BLE001 - user code
            return False
        if tuple(whole.shape) != tuple(out_shape):
            return False
        inside = whole.narrow(d, lo, rows).clone()
        del whole
        sliced = narrow_inputs(tensors, split.in_dims, lo, rows)
        try:
            part = fn(sliced)
        except Exception:  # noqa: BLE001 - a module that hard-codes its sizes
            return False
        del sliced
        if not _close(part, inside, SLICED_TOL):
            return False
        del part
        moved = [_scramble_outside(t, dim, lo, rows, dom)
                 for t, dim, dom in zip(tensors, split.in_dims, domains) if dim is not None]
        if not any(moved):
            return False  # nothing outside could be changed: separability not shown
        try:
            again = fn(tensors)
        except Exception:  # noqa: BLE001
            return False
        return _close(again.narrow(d, lo, rows), inside, SAME_SHAPES_TOL)


def separable_splits(fn: Callable[[list[torch.Tensor]], torch.Tensor],
                     prepare: Callable[[], list[torch.Tensor]], roles: Sequence[str],
                     out_shape: Sequence[int], domains: Sequence[Domain] | None = None,
                     skip: Container[int] = ()) -> Iterator[Split]:
    """Each candidate direction that passes both tests, in order, at most MAX_CANDIDATES of
    them tested; `prepare()` draws a case into the tensors the tests run on (they change
    them). A candidate along an output dim in `skip` is not tested: the caller adds the dims
    along which one row proved too large, so that the other variants of the same dim (as
    large) cost no test."""
    first = prepare()
    shapes = [tuple(t.shape) for t in first]
    tensors: list[torch.Tensor] | None = first  # the first test's case; drawn again after
    tested = 0
    for split in candidate_splits(shapes, roles, out_shape):
        if tested == MAX_CANDIDATES:
            return
        if split.out_dim in skip:
            continue
        tested += 1
        case, tensors = tensors or prepare(), None
        if is_separable(fn, case, split, out_shape, domains):
            yield split


def find_split(fn: Callable[[list[torch.Tensor]], torch.Tensor],
               prepare: Callable[[], list[torch.Tensor]], roles: Sequence[str],
               out_shape: Sequence[int], domains: Sequence[Domain] | None = None
               ) -> Split | None:
    """The first candidate direction that passes both tests (`separable_splits`)."""
    return next(separable_splits(fn, prepare, roles, out_shape, domains), None)


# -- accumulation: an output that is the sum or the mean of its parts' outputs -------------------

ACCUMULATE_TOL = 1e-8
"""relative difference allowed between the float64 reference run on a slice and the combination
of its runs on three parts of it (float64 summation order alone moves it by ~1e-15 per term)"""
COMBINES = ("sum", "mean")


@dataclass(frozen=True)
class Accumulation:
    """The output is the sum (`combine` "sum"), or the row-weighted mean ("mean"), of the
    problem's outputs on consecutive slices of its forward inputs along `in_dims` (None: that
    input whole): a total over every element, a loss averaged over the batch. The float64
    reference of such a problem, too large to run whole, is accumulated a chunk at a time."""

    in_dims: tuple[int | None, ...]
    combine: str
    rows: int
    """the inputs' size along `in_dims`"""

    def describe(self) -> str:
        return f"{self.combine} over chunks of the forward inputs' dim 0"


def accumulation_dims(shapes: Sequence[tuple[int, ...]], roles: Sequence[str]
                      ) -> tuple[tuple[int | None, ...], int] | None:
    """The only direction tried: dim 0 of every forward input (class indices included), all of
    one size of at least 3, parameters and buffers whole; None where the forward inputs differ
    there."""
    sizes = {s[0] if len(s) else None for s, r in zip(shapes, roles) if r == "input"}
    if len(sizes) != 1:
        return None
    n = sizes.pop()
    if n is None or n < 3:
        return None
    return tuple(0 if r == "input" else None for r in roles), n


def part_weight(combine: str, rows: int, total_rows: int) -> float:
    """A part's weight in the whole: 1 in a sum, its share of the rows in a mean."""
    return 1.0 if combine == "sum" else rows / total_rows


def combine_parts(parts: Sequence[torch.Tensor], rows: Sequence[int], combine: str
                  ) -> torch.Tensor:
    """The whole's output from its parts', in float64."""
    n = sum(rows)
    total = parts[0].double() * part_weight(combine, rows[0], n)
    for p, k in zip(parts[1:], rows[1:]):
        total += p.double() * part_weight(combine, k, n)
    return total


def accumulation_of(fn: Callable[[list[torch.Tensor]], torch.Tensor],
                    tensors: list[torch.Tensor], dims: tuple[int | None, ...], rows: int,
                    domains: Sequence[Domain] | None = None) -> str | None:
    """How the output of `fn` (the float64 reference) on the first `rows` rows of `tensors`
    combines from three unequal parts of them, "sum" or "mean", or None. The rows outside the
    middle part are moved far first (`tensors` change in place: draw them again afterwards),
    so that a statistic of the whole that only happens to match its parts' on alike rows (a
    standard deviation, a median) is not taken for a mean."""
    if rows < 3:
        return None
    domains = list(domains or [None] * len(tensors))
    sub = narrow_inputs(tensors, dims, 0, rows)
    a = max(1, rows // 4)
    b = min(rows - 1, a + max(1, rows // 3))
    moved = [_scramble_outside(t, d, a, b - a, dom)
             for t, d, dom in zip(sub, dims, domains) if d is not None]
    if not any(moved):
        return None
    spans = [(0, a), (a, b - a), (b, rows - b)]
    with torch.no_grad():
        try:
            whole = fn(sub)
            parts = [fn(narrow_inputs(sub, dims, lo, k)) for lo, k in spans]
        except Exception:  # noqa: BLE001 - user code (a module that hard-codes its sizes)
            return None
    if not whole.is_floating_point() or any(tuple(p.shape) != tuple(whole.shape)
                                            for p in parts):
        return None
    scale = sum(float(torch.linalg.vector_norm(p.double())) for p in parts)
    for combine in COMBINES:
        got = combine_parts(parts, [k for _, k in spans], combine)
        if _close(got, whole, ACCUMULATE_TOL) or (
                scale > 0 and float(torch.linalg.vector_norm(got - whole.double()))
                <= ACCUMULATE_TOL * scale):
            return combine
    return None
