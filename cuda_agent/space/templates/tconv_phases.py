"""Transposed convolutions as strided sub-convolutions: the part both GEMM templates share
(slot `memory.tconv` = "phase"; "gather" is the gathered GEMM of `ir/conv.py`).

Phase ph (row-major over the output's residues r modulo the stride, `ir/conv.
transposed_phases`) is a GEMM of its own: C_ph (OC/G x Q) = W_ph (OC/G x K_ph) @ X_ph (K_ph x Q)
with

* Q = prod(ceil(out / stride)) columns, laid out alike for every phase: column q is output
  pixel q * stride + r; a q past the output (where the stride does not divide it) is computed
  and not stored, so every phase has the same tiles;
* K_ph = taps_ph x C/G, tap-major (k = t * C/G + c): the channel is k % (C/G), a division by a
  constant, and the tap's input shift and weight position come from `__constant__` tables as
  long as the kernel (the phases' taps partition it), the same entry for neighbouring k. A
  phase without taps has K_ph = 0: its outputs are the epilogue of zero.

The phase is the fastest index of the tile grid (blockIdx.x = tile * phases + phase): the
phases of one tile run side by side, so they read the same input rows from L2 and fill the
same output sectors before they leave L2. Split-K keeps blockIdx.z, its K per part sized for
the largest phase (a smaller phase's later parts add zeros).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from ...ir.conv import ConvGather, TransposedPhase, phase_grid, transposed_phases
from ...ir.gemm import GemmInfo
from ...ir.plan import KernelPlan

SLOT = "memory.tconv"
# the sub-convolutions first: where a template's own default does not fit a problem, its first
# configuration stands for it among the configurations measured first (`Space.
# template_defaults`), and that should not multiply the zeros
CHOICES = ("phase", "gather")
DOC = ("a strided transposed convolution: one GEMM over every output pixel with B gathered "
       "(zeros where the stride skips a tap), or one sub-convolution per output phase "
       "modulo the stride (its own taps only: no multiply-adds on zeros)")
#: spread of a phase's input shifts per dim that the packed tap table holds (10 bits a dim)
SHIFT_BITS = 10


def offers_phases(plan: KernelPlan) -> bool:
    """Whether the GEMM templates offer the slot here: a strided transposed convolution."""
    g: GemmInfo = plan.info
    return plan.kind == "conv" and g.b_gather is not None and g.b_gather.phased


def is_phased(cfg: dict) -> bool:
    return cfg.get(SLOT) == "phase"


@dataclass(frozen=True)
class PhaseLayout:
    """The phases of one transposed convolution as the kernels index them."""

    gather: ConvGather
    out_channels: int  # OC/G: rows of one group's weight matrix (the weight's dim 1)

    @cached_property
    def phases(self) -> tuple[TransposedPhase, ...]:
        return transposed_phases(self.gather)

    @property
    def count(self) -> int:
        return len(self.phases)

    @property
    def kernel_size(self) -> int:
        """Taps of the whole kernel: a weight row (one output channel of one input channel)
        is this long, the weight being (C, OC/G, *kernel)."""
        return math.prod(self.gather.kernel)

    @cached_property
    def grid(self) -> tuple[int, ...]:
        """q extent per dim (ceil(out / stride)): every phase's columns."""
        return phase_grid(self.gather)

    @property
    def columns(self) -> int:
        return math.prod(self.grid)

    @property
    def phase_k(self) -> tuple[int, ...]:
        """K of each phase: its taps times the group's input channels."""
        return tuple(p.tap_count * self.gather.channels for p in self.phases)

    @property
    def k_max(self) -> int:
        return max(self.phase_k)

    @cached_property
    def shift_floor(self) -> tuple[int, ...]:
        """Smallest input shift per dim over all phases: a column's window origin is q + it,
        and the tables hold each tap's shift above it."""
        dims = len(self.gather.kernel)
        return tuple(min((s for p in self.phases for s in p.shifts[d]), default=0)
                     for d in range(dims))

    @cached_property
    def shift_span(self) -> tuple[int, ...]:
        dims = len(self.gather.kernel)
        return tuple(max((s for p in self.phases for s in p.shifts[d]), default=0) -
                     self.shift_floor[d] for d in range(dims))

    def problem(self) -> str | None:
        """Why the phase tables cannot describe this convolution, or None."""
        cv = self.gather
        if len(cv.kernel) > 3:
            return "more than three spatial dims"
        if any(s >= 1 << SHIFT_BITS for s in self.shift_span):
            return "a phase's input shifts span more than the packed table holds"
        if cv.image_elems >= 2**31 - 2**20 or cv.weight_elems >= 2**31 - 2**20:
            return "an image or the weight beyond 32-bit offsets"
        return None

    def tables(self) -> list[str]:
        """The `__constant__` tables: ca_ptap (first tap of each phase, and the end), and per
        tap (phase after phase) ca_tin (its input offset from the column's window origin),
        ca_tpos (its shift above the floor per dim, 10 bits each) and ca_tw (its position in
        the weight's kernel). One spare entry: a tapless last phase indexes one past."""
        cv = self.gather
        in_strides = _row_major_strides(cv.in_shape)
        k_strides = _row_major_strides(cv.kernel)
        first, tin, tpos, tw = [0], [], [], []
        for ph in self.phases:
            for ks, shifts in ph.kernel_positions():
                above = [s - lo for s, lo in zip(shifts, self.shift_floor)]
                tin.append(sum(a * st for a, st in zip(above, in_strides)))
                tpos.append(sum(a << (SHIFT_BITS * d) for d, a in enumerate(above)))
                tw.append(sum(k * st for k, st in zip(ks, k_strides)))
            first.append(len(tin))
        tin, tpos, tw = tin + [0], tpos + [0], tw + [0]
        return [_table("ca_ptap", first), _table("ca_tin", tin), _table("ca_tpos", tpos),
                _table("ca_tw", tw)]

    # -- C lines ----------------------------------------------------------------------------
    def block_lines(self) -> list[str]:
        """This block's phase ph_ (and tile_, its tile index) from blockIdx.x, the residues
        r<d>_ of a strided dim, pt0_ (its first tap) and pkn_ (its K)."""
        cv, n = self.gather, self.count
        lines = [f"const int ph_ = blockIdx.x % {n}, tile_ = blockIdx.x / {n};"]
        inner = 1
        for d in reversed(range(len(cv.stride))):
            if cv.stride[d] > 1:
                lines.append(f"const int r{d}_ = (ph_ / {inner}) % {cv.stride[d]};")
            inner *= cv.stride[d]
        lines.append("const int pt0_ = ca_ptap[ph_];")
        lines.append(f"const int pkn_ = (ca_ptap[ph_ + 1] - pt0_) * {cv.channels};")
        return lines

    def residue(self, d: int) -> str:
        return f"r{d}_" if self.gather.stride[d] > 1 else "0"

    def column_lines(self, col: str, tag: str, origin: bool) -> list[str]:
        """Lines that decode phase column `col` (an int expression): valid<tag> (it is an
        output pixel of this phase) and, with `origin`, ib<tag>_<d> (its window origin per
        dim, the taps' shifts added on by the tables) else pix<tag> (its flat output pixel)."""
        cv = self.gather
        dims = range(len(cv.kernel))
        lines = [f"int q{tag}_[{len(cv.kernel)}];",
                 f"bool valid{tag} = ({col}) < {self.columns};",
                 "{", f"  int o_ = valid{tag} ? ({col}) : 0;"]
        for d in reversed(dims):
            lines.append(f"  q{tag}_[{d}] = o_ % {self.grid[d]}; o_ /= {self.grid[d]};")
            if cv.out_shape[d] % cv.stride[d]:  # the last q of a later residue is outside
                lines.append(f"  valid{tag} = valid{tag} && q{tag}_[{d}] * {cv.stride[d]} + "
                             f"{self.residue(d)} < {cv.out_shape[d]};")
        lines.append("}")
        if origin:
            lines += [f"const int ib{tag}_{d} = q{tag}_[{d}] + {self.shift_floor[d]};"
                      for d in dims]
        else:
            out_strides = _row_major_strides(cv.out_shape)
            lines.append(f"const int pix{tag} = " + " + ".join(
                f"(q{tag}_[{d}] * {cv.stride[d]} + {self.residue(d)}) * {out_strides[d]}"
                for d in dims) + ";")
        return lines

    def tap_lines(self, k: str) -> list[str]:
        """Lines that turn k (this phase's K index, inside it) into c_ (its channel) and tt_
        (its entry of the tap tables)."""
        cg = self.gather.channels
        return [f"const int c_ = ({k}) % {cg}, tt_ = pt0_ + ({k}) / {cg};"]

    def in_bounds(self, tag: str) -> str:
        """The window-origin-plus-shift test of every dim, for the tap whose packed shifts
        are kp_: one unsigned compare per dim."""
        cv = self.gather
        return " && ".join(
            f"(unsigned)(ib{tag}_{d} + ((kp_ >> {SHIFT_BITS * d}) & {(1 << SHIFT_BITS) - 1})) "
            f"< {cv.in_shape[d]}u" for d in range(len(cv.kernel)))

    def input_offset(self, tag: str) -> str:
        """The input element of the tap tt_, channel c_, column `tag` from the image's start
        (the column's origin pb<tag>_ set with `origin_offset`)."""
        return f"pb{tag}_ + c_ * {math.prod(self.gather.in_shape)} + ca_tin[tt_]"

    def origin_offset(self, tag: str) -> str:
        strides = _row_major_strides(self.gather.in_shape)
        return " + ".join(f"ib{tag}_{d} * {strides[d]}" for d in range(len(self.gather.kernel)))

    def weight_offset(self) -> str:
        """A[m, k]'s offset beyond row m's start, for tap tt_ and channel c_: the weight is
        (C, OC/G, *kernel), a channel's rows OC/G kernels apart."""
        return f"c_ * {self.out_channels * self.kernel_size} + ca_tw[tt_]"


def phase_layout(plan: KernelPlan) -> PhaseLayout:
    """The plan's phases (computed once per plan)."""
    g: GemmInfo = plan.info
    return plan.cached("tconv_phases", lambda: PhaseLayout(g.b_gather, g.M))


def phase_gemm(plan: KernelPlan) -> GemmInfo:
    """The GEMM one block of the phased form works in: Q columns, the largest phase's K."""
    lay = phase_layout(plan)
    return replace(plan.info, N=lay.columns, K=lay.k_max)


def _row_major_strides(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def _table(name: str, values: list[int]) -> str:
    return f"__constant__ int {name}[{len(values)}] = {{{', '.join(map(str, values))}}};"
