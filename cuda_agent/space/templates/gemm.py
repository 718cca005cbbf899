"""Matrix products in strict fp32: a tiled SIMT GEMM with the epilogue fused.

Each block computes a BM x BN tile of C, stepping through K in slices of BK that are staged in
shared memory (A stored k-major, so a thread reads its TM rows of a slice with vector loads);
each thread accumulates a TM x TN sub-tile in registers as outer products. The slots:

* config: the block tile (BM, BN), which with the thread tile fixes the threads per block; the
  block raster (groups of row tiles walked together so that neighbouring blocks share A and B
  tiles in L2);
* memory: the K slice, vector width of the global loads of A and B (16 bytes along whichever of
  their dims is contiguous, so transposed operands are read in place), single or double
  buffering (the next slice is loaded into registers while the current one is multiplied),
  or a pipeline of 3 or 4 slices in flight copied straight from global to shared memory
  (`cp.async`, no staging registers: transposed operands go element by element), padding of the transposed shared-memory stores (bank conflicts), and the thread-tile layout
  (contiguous, or split in two halves BM/2 apart, which spreads a warp's shared-memory reads
  over all banks);
* compute: the thread tile (TM, TN) and the minimum of blocks per SM the register allocation
  must allow;
* reduction: split-K. Several blocks share one output tile, each summing part of K into a
  workspace; a second kernel adds the parts in a fixed order and applies the epilogue. It pays
  when M x N has too few tiles to fill the GPU.

A strided transposed convolution may run as one sub-convolution per output phase (slot
`memory.tconv`, `tconv_phases.py`) instead of the gathered GEMM: only the taps that reach each
phase, the weight read through the tap table (scalar loads), each output pixel stored at its
phase's place.

Accumulation is fp32 FMA throughout (no TF32), so results match torch's strict fp32 matmul to
the verifier's tolerance. Outputs that a triangular mask fixes to zero (torch.triu/tril of the
product) are written without computing their tiles; inputs are never assumed triangular.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...ir.gemm import GemmInfo
from ...ir.graph import HALF_DTYPES
from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from . import tconv_phases as tconv
from .base import Code, Template

MAX_THREADS = 512
MIN_THREADS = 64
SPLIT_MAX_BLOCKS_PER_SM = 16  # split-K pays when tiles are too few to keep the SMs busy


def _info(plan: KernelPlan) -> GemmInfo:
    return plan.info


def _along(strides: tuple[int, int, int], first: str, second: str) -> str:
    """The dim an operand's global loads run along: its unit-stride one (k when neither is)."""
    _, s_first, s_second = strides
    if s_second == 1:
        return second
    if s_first == 1:
        return first
    return "k"


def _a_along(g: GemmInfo) -> str:
    return _along(g.a_strides, "m", "k")


def _b_along(g: GemmInfo) -> str:
    if g.b_gather is not None:  # an implicit-GEMM convolution: gathered along output pixels
        return "n"
    return _along(g.b_strides, "k", "n")


def _vec_ok(g: GemmInfo, operand: str, vec: int) -> bool:
    """16-byte loads need a unit-stride dim whose size and every other stride are multiples
    of the vector (each vector then lies wholly inside or outside the matrix, aligned)."""
    if vec == 1:
        return True
    if operand == "b" and g.b_gather is not None:
        return False  # gathered elements: scalar loads
    if operand == "a" and g.a_k_split is not None and any(s % vec for s in g.a_k_split):
        return False  # a vector would straddle two runs of K
    if operand == "a":
        along, strides, size = _a_along(g), g.a_strides, {"m": g.M, "k": g.K}
        unit = strides[1] if along == "m" else strides[2]
    else:
        along, strides, size = _b_along(g), g.b_strides, {"k": g.K, "n": g.N}
        unit = strides[1] if along == "k" else strides[2]
    return unit == 1 and size[along] % vec == 0 and all(s % vec == 0 for s in strides if s != 1)


def _max_offset(g: GemmInfo, plan: KernelPlan) -> int:
    a = g.batch * g.a_strides[0] + g.M * g.a_strides[1] + g.K * g.a_strides[2]
    b = g.batch * g.b_strides[0] + g.K * g.b_strides[1] + g.N * g.b_strides[2]
    if g.b_gather is not None:
        a, b = g.b_gather.weight_elems, g.batch * g.b_gather.image_elems
    return max(a, b, plan.numel)


def _tile_too_large(g: GemmInfo, bm: int, bn: int) -> bool:
    return bm > max(32, 2 * g.M) or bn > max(32, 2 * g.N)


class GemmTemplate(Template):
    name = "gemm"
    version = "5"
    # v2: the __launch_bounds__ minimum and split-K up to 32 (v1 sweeps read at minblocks=1);
    # v3: 32-bit indexing wherever it fits (no slot), split-K only where tiles are few;
    # v4: stages 3 and 4 (a cp.async pipeline); v3 configurations are unchanged; v5:
    # memory.tconv (strided transposed convolutions gathered, or as sub-convolutions per
    # phase); other kernels unchanged
    legacy = {"compute.minblocks": 1, tconv.SLOT: "gather"}

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind in ("gemm", "conv")

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.bm", (32, 64, 128, 256), "rows of C per block"),
            Slot("config.bn", (32, 64, 128, 256), "columns of C per block"),
            Slot("config.raster", (1, 8), "row tiles walked together (L2 reuse of B tiles)"),
            Slot("config.warp", ("row", "4x8"), "lanes of a warp over the block tile: along "
                                                "one row of thread tiles, or 4 x 8 of them "
                                                "(fewer distinct shared-memory reads)"),
            Slot("memory.bk", (8, 16, 32), "K slice staged in shared memory per step"),
            Slot("memory.vec_a", (1, 4), "elements per global load of A"),
            Slot("memory.vec_b", (1, 4), "elements per global load of B"),
            Slot("memory.stages", (1, 2, 3, 4),
                 "shared-memory buffers (2: load the next slice into registers while "
                 "multiplying this one; 3, 4: that many slices in flight, copied by cp.async "
                 "straight into shared memory)"),
            Slot("memory.pad", (0, 4), "padding of transposed shared-memory rows"),
            Slot("memory.frag", ("contig", "split"), "thread-tile layout in the block tile"),
            Slot("compute.tm", (4, 8), "rows of C per thread"),
            Slot("compute.tn", (4, 8), "columns of C per thread"),
            Slot("compute.minblocks", (1, 2), "blocks per SM the register allocation must "
                                              "allow (__launch_bounds__ minimum)"),
            Slot("reduction.split", (1, 2, 4, 8, 16, 32),
                 "blocks sharing one tile's K (split-K)"),
        ] + ([Slot(tconv.SLOT, tconv.CHOICES, tconv.DOC)] if tconv.offers_phases(plan) else [])

    prefix_slots = 2  # config.bm, config.bn: canonical() never changes them

    def prefix_excluded(self, plan: KernelPlan, prefix: dict[str, Any], target: Target
                        ) -> bool:
        return _tile_too_large(_info(plan), prefix["config.bm"], prefix["config.bn"])

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        g = _info(plan)
        cfg = dict(cfg)
        if cfg["compute.tm"] != 8 and cfg["compute.tn"] != 8:
            cfg["memory.frag"] = "contig"
        if _a_along(g) != "k" and _b_along(g) != "k":
            cfg["memory.pad"] = 0  # nothing is stored transposed
        if (cfg["config.bn"] // cfg["compute.tn"]) % 8 or (cfg["config.bm"] //
                                                          cfg["compute.tm"]) % 4:
            cfg["config.warp"] = "row"
        elif cfg["config.bn"] // cfg["compute.tn"] == 8:
            cfg["config.warp"] = "4x8"  # one row of thread tiles is 8 lanes: the same layout
        tiles_m = -(-g.M // cfg["config.bm"])
        tiles_n = -(-g.N // cfg["config.bn"])
        if tiles_m <= 1 or tiles_n <= 1:
            cfg["config.raster"] = 1
        if cfg["memory.stages"] > 2:  # cp.async copies 16 bytes only along a shared row
            if _a_along(g) != "m":
                cfg["memory.vec_a"] = 1
            if _b_along(g) != "n":
                cfg["memory.vec_b"] = 1
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        g = grid = _info(plan)
        bm, bn, bk = cfg["config.bm"], cfg["config.bn"], cfg["memory.bk"]
        tm, tn, split = cfg["compute.tm"], cfg["compute.tn"], cfg["reduction.split"]
        if tconv.is_phased(cfg):
            lay = tconv.phase_layout(plan)
            why = lay.problem()
            if why:
                return why
            if cfg["memory.vec_a"] != 1:
                return "the phased weight is read through its tap table: scalar loads"
            # a block's product is a phase's (its columns, the largest phase's K); the grid
            # holds every phase's tiles
            g = tconv.phase_gemm(plan)
            grid = replace(g, N=lay.columns * lay.count)
        threads = (bm // tm) * (bn // tn)
        if not MIN_THREADS <= threads <= MAX_THREADS:
            return f"{threads} threads per block"
        if _tile_too_large(g, bm, bn):
            return "block tile far larger than the matrix"
        for operand, vec, rows in (("a", cfg["memory.vec_a"], bm), ("b", cfg["memory.vec_b"], bn)):
            if not _vec_ok(g, operand, vec):
                return f"vector loads of {operand.upper()} are not aligned here"
            if (rows * bk // vec) % threads:
                return f"the {operand.upper()} tile does not split evenly over the threads"
        if cfg["memory.stages"] > 2 and (g.b_gather is not None or g.a_k_split is not None):
            return "the cp.async pipeline covers plain products (not gathered convolutions)"
        # the cp.async pipeline needs no staging registers
        prefetch = (bm + bn) * bk // threads if cfg["memory.stages"] <= 2 else 0
        if tm * tn + prefetch > 128:
            return "accumulators and prefetch registers exceed the register budget"
        if cfg["compute.minblocks"] == 2 and (2 * threads > 1024 or
                                               2 * (_smem_bytes(cfg) + 1024) > target.smem_per_sm):
            return "two blocks per SM do not fit"
        if _smem_bytes(cfg) > target.max_smem_per_block:
            return "shared memory per block exceeds the limit"
        return split_grid_check(grid, bm, bn, bk, split, target)

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        cfg = {"config.bm": 64, "config.bn": 64, "config.raster": 1, "config.warp": "row",
               "memory.bk": 8,
               "memory.vec_a": 1, "memory.vec_b": 1, "memory.stages": 1, "memory.pad": 0,
               "memory.frag": "contig", "compute.tm": 4, "compute.tn": 4,
               "compute.minblocks": 1, "reduction.split": 1}
        if tconv.offers_phases(plan):  # no multiply-adds on zeros, where the tables fit
            phased = {**cfg, tconv.SLOT: "phase"}
            cfg[tconv.SLOT] = "phase" if self.check(plan, phased, target) is None else "gather"
        return cfg

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        return _GemmWriter(plan, cfg).render()


def split_grid_check(g: GemmInfo, bm: int, bn: int, bk: int, split: int, target: Target
                     ) -> str | None:
    """What makes a tiling's split-K or grid invalid (both GEMM templates), or None."""
    k_tiles = -(-g.K // bk)
    if split > 1 and (k_tiles < 2 * split or g.batch * split > 65535):
        return "split-K with fewer than two K slices per split"
    if split > 1 and g.batch * split * g.M * g.N * 4 > 2**33:
        return "split-K workspace over 8 GB"
    tiles = -(-g.M // bm) * -(-g.N // bn) * g.batch
    if split > 1 and tiles * split > SPLIT_MAX_BLOCKS_PER_SM * target.sm_count:
        return "split-K where the tiles alone already fill the GPU several times"
    if g.batch > 65535:
        return "batch exceeds the grid"
    return None


def epilogue_value(plan: KernelPlan, c: Code, value: str, fl: str, row: str, col: str,
                   tag: str) -> str:
    """Emit the fused epilogue of a matrix product (or convolution) whose output element at
    flat index `fl` (row `row`, column `col` of C) is `value`; the C name of the result."""
    g = _info(plan)
    grp = cg.Group(fl, tuple(range(len(plan.full_shape))))
    bound: dict[int, str] = {plan.anchor_id(): value}
    for nid in cg.epilogue_reads(plan):
        off = cg.offset_expr(plan, nid, [grp])
        k = cg.read_index(plan, nid)
        # a half-precision operand (a bias, a residual) loads through the prelude's conversion
        bound[nid] = (f"ca_ld<1>(in{k} + ({off}))" if plan.graph.inputs[k].dtype in HALF_DTYPES
                      else f"__ldg(in{k} + ({off}))")
    for n in plan.live_nodes():
        if n.op == "tri_mask":
            r = row if g.rows_per_matrix == g.M else f"(({row}) % {g.rows_per_matrix})"
            d = int(n.attr("diagonal"))
            cmp = ">=" if n.attr("upper") else "<="
            bound[n.id] = f"((idx_t)({col}) - (idx_t)({r}) {cmp} {d})"
    stmts, names = cg.emit_values(plan, [plan.output], bound, False, suffix=tag)
    c(*stmts)
    return names[plan.output]


# cp.async helpers (sm_80+): a zero source size fills the destination with zeros, which is how
# elements outside the matrix (or past this split's K) become the zeros the product needs; the
# CPU emulator of the tests defines CA_EMULATED and its own synchronous versions.
CP_ASYNC = r"""
#ifndef CA_EMULATED
__device__ __forceinline__ void ca_cp16(float* dst, const float* src, bool in) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::
               "r"(s), "l"(src), "r"(in ? 16 : 0));
}
__device__ __forceinline__ void ca_cp4(float* dst, const float* src, bool in) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::
               "r"(s), "l"(src), "r"(in ? 4 : 0));
}
__device__ __forceinline__ void ca_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void ca_cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}
#endif
"""


def _transposed_coord(cv: Any, d: int) -> list[str]:
    """Input coordinate i{d}_ of a transposed convolution's output od{d}_ through kernel offset
    kd{d}_: (o + padding - k * dilation) / stride, in only where exact and inside the input."""
    t, s = f"t{d}_", cv.stride[d]
    lines = [f"    const int {t} = od{d}_ + {cv.padding[d]} - kd{d}_ * {cv.dilation[d]};",
             f"    const int i{d}_ = {t} / {s};"]
    exact = f" && {t} % {s} == 0" if s > 1 else ""
    lines.append(f"    in_ = in_ && {t} >= 0{exact} && i{d}_ < {cv.in_shape[d]};")
    return lines


def _lds(cfg: dict[str, Any]) -> tuple[int, int]:
    """Leading dims of the shared A (k-major, BM wide) and B (BN wide) slices."""
    return cfg["config.bm"] + cfg["memory.pad"], cfg["config.bn"] + cfg["memory.pad"]


def _smem_bytes(cfg: dict[str, Any]) -> int:
    lda, ldb = _lds(cfg)
    return 4 * cfg["memory.stages"] * cfg["memory.bk"] * (lda + ldb)


class _GemmWriter:
    """Renders one configuration (the slot values as attributes, then one method per part)."""

    def __init__(self, plan: KernelPlan, cfg: dict[str, Any]) -> None:
        self.plan, self.g = plan, _info(plan)
        self.BM, self.BN, self.BK = cfg["config.bm"], cfg["config.bn"], cfg["memory.bk"]
        self.TM, self.TN = cfg["compute.tm"], cfg["compute.tn"]
        self.AV, self.BV = cfg["memory.vec_a"], cfg["memory.vec_b"]
        self.ST, self.raster = cfg["memory.stages"], cfg["config.raster"]
        self.warp = cfg["config.warp"]
        self.split_frag = cfg["memory.frag"] == "split"
        self.SPLIT = cfg["reduction.split"]
        # 32-bit offsets wherever every offset fits (cheaper address arithmetic)
        self.idx_t = "int" if _max_offset(self.g, plan) * cfg["reduction.split"] < 2**31 - 2**20 \
            else "long long"
        self.minblocks = cfg["compute.minblocks"]
        self.LDA, self.LDB = _lds(cfg)
        self.A_STAGE = self.BK * self.LDA  # floats of one shared A slice
        self.NT = (self.BM // self.TM) * (self.BN // self.TN)
        self.smem = _smem_bytes(cfg)
        # a transposed convolution as strided sub-convolutions: a block's GEMM is a phase's
        self.phase = tconv.phase_layout(plan) if tconv.is_phased(cfg) else None
        g = tconv.phase_gemm(plan) if self.phase is not None else self.g
        self.tiles_m, self.tiles_n = -(-g.M // self.BM), -(-g.N // self.BN)
        k_tiles = -(-g.K // self.BK)
        self.KC = -(-k_tiles // self.SPLIT) * self.BK  # K per split, whole slices

    # -- layout of the thread tile ------------------------------------------------------------
    def row(self, i: int) -> str:
        if self.split_frag and self.TM == 8:
            return f"ty * 4 + {i}" if i < 4 else f"{self.BM // 2} + ty * 4 + {i - 4}"
        return f"ty * {self.TM} + {i}"

    def col(self, j: int) -> str:
        if self.split_frag and self.TN == 8:
            return f"tx * 4 + {j}" if j < 4 else f"{self.BN // 2} + tx * 4 + {j - 4}"
        return f"tx * {self.TN} + {j}"

    # -- global -> registers -> shared ---------------------------------------------------------
    def tile_loads(self, c: Code, k0: str) -> None:
        """Load the K slice starting at `k0` into the prefetch registers ra_/rb_."""
        g = self.g
        for name, along, vec, rows, lim_rows in (("a", _a_along(g), self.AV, self.BM, "M"),
                                                 ("b", _b_along(g), self.BV, self.BN, "N")):
            for j, (r, kk) in enumerate(self._vectors(name, along, vec, rows)):
                grow = f"{'m0' if name == 'a' else 'n0'} + {r}"
                gk = f"{k0} + {kk}"
                if name == "b" and g.b_gather is not None:
                    c(self.gathered_load(f"rb_{j}", grow, gk))
                    continue
                off = self.offset(name, grow, gk)
                guard = f"({grow}) < {getattr(g, lim_rows)} && ({gk}) < kend"
                reg = f"r{name}_{j}"
                if vec == 4:
                    c(f"{reg} = ({guard}) ? __ldg(reinterpret_cast<const float4*>("
                      f"{name.upper()}g + {off})) : make_float4(0.f, 0.f, 0.f, 0.f);")
                else:
                    c(f"{reg} = ({guard}) ? __ldg({name.upper()}g + {off}) : 0.f;")

    def a_batch_offset(self) -> str:
        cv = self.g.b_gather
        if cv is not None and cv.groups > 1:  # batch = image * groups + group
            return f"(idx_t)(blockIdx.y % {cv.groups}) * {cv.a_group_stride}"
        return f"(idx_t)blockIdx.y * {self.g.a_strides[0]}"

    def offset(self, name: str, grow: str, gk: str) -> str:
        """Offset of element (row `grow`, k `gk`) of operand `name` from its batch's start."""
        if name == "a":
            return self.a_offset(grow, gk)
        s = self.g.b_strides
        return f"(idx_t)({gk}) * {s[1]} + (idx_t)({grow}) * {s[2]}"

    def a_offset(self, gm: str, gk: str) -> str:
        """Offset of A[m, k] from the batch's A: by strides, or with K split in two runs, or
        (a phase of a transposed convolution) through the phase's tap table."""
        g = self.g
        if self.phase is not None:  # a weight row is one kernel long: (C, OC/G, *kernel)
            cg_, ph = self.phase.gather.channels, self.phase
            ksize = ph.kernel_size
            return (f"(idx_t)({gm}) * {ksize} + ((({gk}) % {cg_}) * {ph.out_channels * ksize} "
                    f"+ ca_tw[pt0_ + ({gk}) / {cg_}])")
        if g.a_k_split is None:
            return f"(idx_t)({gm}) * {g.a_strides[1]} + (idx_t)({gk}) * {g.a_strides[2]}"
        inner, outer = g.a_k_split
        return (f"(idx_t)({gm}) * {g.a_strides[1]} + (idx_t)(({gk}) / {inner}) * {outer} + "
                f"(idx_t)(({gk}) % {inner}) * {g.a_strides[2]}")

    def b_batch_offset(self) -> str:
        cv = self.g.b_gather
        if cv is not None and cv.groups > 1:
            return (f"(idx_t)(blockIdx.y / {cv.groups}) * {cv.image_elems} + "
                    f"(idx_t)(blockIdx.y % {cv.groups}) * {cv.group_elems}")
        return f"(idx_t)blockIdx.y * {self.g.b_strides[0]}"

    def gathered_load(self, reg: str, gp: str, gk: str) -> str:
        """Element (k, p) of the image's im2col matrix, read from the input: channel and
        kernel offset from k, output pixel from p, zero where the window covers padding (or,
        transposed, where no input pixel lands on the output pixel through that offset)."""
        if self.phase is not None:
            return self.phase_gathered_load(reg, gp, gk)
        lines = [f"{{ const int gk_ = {gk}, gp_ = {gp}; float v_ = 0.f;",
                 f"  if (gp_ < {self.g.N} && gk_ < kend) {{"]
        lines += self.gather_index()
        lines += ["    if (in_) v_ = __ldg(Bg + off_);", "  }", f"  {reg} = v_; }}"]
        return "\n".join(lines)

    def phase_gathered_load(self, reg: str, gp: str, gk: str) -> str:
        """Element (k, column) of this block's phase (`tconv_phases`): the column's window
        origin, the tap and channel of k, zero outside the input (or past the phase)."""
        ph = self.phased()
        lines = [f"{{ const int gk_ = {gk}; float v_ = 0.f;"]
        lines += ["  " + x for x in ph.column_lines(gp, "", origin=True)]
        lines += ["  if (valid && gk_ < kend) {"]
        lines += ["    " + x for x in ph.tap_lines("gk_")]
        lines += ["    const int kp_ = ca_tpos[tt_];",
                  f"    const int pb_ = {ph.origin_offset('')};",
                  f"    if ({ph.in_bounds('')}) v_ = __ldg(Bg + ({ph.input_offset('')}));",
                  "  }", f"  {reg} = v_; }}"]
        return "\n".join(lines)

    def gather_index(self) -> list[str]:
        """Lines that turn gk_ (channel and kernel offset) and gp_ (output pixel), both inside
        the matrix, into in_ (the window covers the input there) and off_ (its offset)."""
        cv = self.g.b_gather
        ksize = 1
        for kd in cv.kernel:
            ksize *= kd
        lines = [f"    const int c_ = gk_ / {ksize}; int q_ = gk_ % {ksize}; int o_ = gp_;",
                 "    bool in_ = true; idx_t off_ = (idx_t)c_;"]
        # innermost spatial dim last: peel kernel and output coordinates from the right
        dims = list(range(len(cv.kernel)))
        coords = []
        for d in reversed(dims):
            lines.append(f"    const int kd{d}_ = q_ % {cv.kernel[d]}; q_ /= {cv.kernel[d]};")
            lines.append(f"    const int od{d}_ = o_ % {cv.out_shape[d]}; o_ /= {cv.out_shape[d]};")
            if cv.transposed:
                lines += _transposed_coord(cv, d)
            else:
                lines.append(f"    const int i{d}_ = od{d}_ * {cv.stride[d]} - {cv.padding[d]} "
                             f"+ kd{d}_ * {cv.dilation[d]};")
                lines.append(f"    in_ = in_ && i{d}_ >= 0 && i{d}_ < {cv.in_shape[d]};")
            coords.append(d)
        for d in dims:
            lines.append(f"    off_ = off_ * {cv.in_shape[d]} + i{d}_;")
        return lines

    def _vectors(self, name: str, along: str, vec: int, rows: int) -> list[tuple[str, str]]:
        """(row-in-tile, k-in-slice) C expressions of each vector this thread loads."""
        out = []
        total = rows * self.BK // vec
        row_dim = "m" if name == "a" else "n"
        for j in range(total // self.NT):
            idx = f"(tid + {j * self.NT})"
            if along == row_dim:  # vectors run along the tile's rows
                per = rows // vec
                out.append((f"({idx} % {per}) * {vec}", f"({idx} / {per})"))
            else:  # vectors run along k
                per = self.BK // vec
                out.append((f"({idx} / {per})", f"({idx} % {per}) * {vec}"))
        return out

    def tile_stores(self, c: Code, buf: str) -> None:
        g = self.g
        for name, along, vec, rows, ld in (("a", _a_along(g), self.AV, self.BM, self.LDA),
                                           ("b", _b_along(g), self.BV, self.BN, self.LDB)):
            base = f"({name.upper()}s + ({buf}) * {self.BK * ld})"
            row_dim = "m" if name == "a" else "n"
            for j, (r, kk) in enumerate(self._vectors(name, along, vec, rows)):
                reg = f"r{name}_{j}"
                if along == row_dim and vec == 4:
                    c(f"*reinterpret_cast<float4*>({base} + ({kk}) * {ld} + {r}) = {reg};")
                elif vec == 4:
                    for q, comp in enumerate("xyzw"):
                        c(f"{base}[(({kk}) + {q}) * {ld} + {r}] = {reg}.{comp};")
                else:
                    c(f"{base}[({kk}) * {ld} + {r}] = {reg};")

    def tile_async(self, c: Code, k0: str, buf: str) -> None:
        """Copy the K slice starting at `k0` into shared buffer `buf` with cp.async: 16 bytes
        at a time where the operand's unit-stride dim is the shared row's, else element by
        element (k fastest across lanes, so each row's run of K is read coalesced)."""
        g = self.g
        for name, along, vec, rows, ld, lim in (
                ("a", _a_along(g), self.AV, self.BM, self.LDA, g.M),
                ("b", _b_along(g), self.BV, self.BN, self.LDB, g.N)):
            base = f"({name.upper()}s + ({buf}) * {self.BK * ld})"
            row_dim = "m" if name == "a" else "n"
            src = f"{name.upper()}g"
            if along == row_dim and vec == 4:
                pairs = self._vectors(name, along, 4, rows)
            else:  # one element per copy: k fastest when the operand runs along k
                total = rows * self.BK
                pairs = []
                for j in range(total // self.NT):
                    idx = f"(tid + {j * self.NT})"
                    if along == row_dim:
                        pairs.append((f"({idx} % {rows})", f"({idx} / {rows})"))
                    else:
                        pairs.append((f"({idx} / {self.BK})", f"({idx} % {self.BK})"))
            for r, kk in pairs:
                grow = f"{'m0' if name == 'a' else 'n0'} + {r}"
                gk = f"{k0} + {kk}"
                off = self.offset(name, grow, gk)
                guard = f"({grow}) < {lim} && ({gk}) < kend"
                fn = "ca_cp16" if along == row_dim and vec == 4 else "ca_cp4"
                c(f"{{ const bool in_ = {guard}; {fn}({base} + ({kk}) * {ld} + {r}, "
                  f"in_ ? {src} + {off} : {src}, in_); }}")

    def pipeline(self, c: Code) -> None:
        """The K loop with ST-1 slices in flight: wait for slice t, one barrier (everyone is
        done with the buffer slice t-1 used, which the next copy overwrites), issue slice
        t+ST-1, multiply slice t."""
        st = self.ST
        c(f"const int ntiles = (kend - kbeg + {self.BK - 1}) / {self.BK};")
        c.open(f"for (int s_ = 0; s_ < {st - 1}; ++s_)")
        c.open("if (s_ < ntiles)")
        self.tile_async(c, f"kbeg + s_ * {self.BK}", "s_")
        c.close()
        c("ca_cp_commit();")
        c.close()
        c("int rd_ = 0, wr_ = " + str(st - 1) + ";")
        c.open("for (int t = 0; t < ntiles; ++t)")
        c(f"ca_cp_wait<{st - 2}>();", "__syncthreads();")
        c.open(f"if (t + {st - 1} < ntiles)")
        self.tile_async(c, f"kbeg + (t + {st - 1}) * {self.BK}", "wr_")
        c.close()
        c("ca_cp_commit();")
        self.multiply(c, "rd_")
        c(f"rd_ = rd_ + 1 == {st} ? 0 : rd_ + 1;", f"wr_ = wr_ + 1 == {st} ? 0 : wr_ + 1;")
        c.close()

    def declare_prefetch(self, c: Code) -> None:
        g = self.g
        for name, along, vec, rows in (("a", _a_along(g), self.AV, self.BM),
                                       ("b", _b_along(g), self.BV, self.BN)):
            n = len(self._vectors(name, along, vec, rows))
            ctype = "float4" if vec == 4 else "float"
            c(f"{ctype} " + ", ".join(f"r{name}_{j}" for j in range(n)) + ";")

    # -- the multiply ---------------------------------------------------------------------------
    def fragment(self, c: Code, name: str, buf: str) -> None:
        """Read this thread's TM values of A (TN of B) at slice row kk into registers."""
        count, ld, base_idx = (self.TM, self.LDA, "ty") if name == "a" else \
            (self.TN, self.LDB, "tx")
        half = (self.BM if name == "a" else self.BN) // 2
        ptr = f"{name.upper()}s + ({buf}) * {self.BK * ld} + kk * {ld}"
        regs = f"f{name}"
        c(f"float {regs}[{count}];")
        if self.split_frag and count == 8:
            starts = [f"{base_idx} * 4", f"{half} + {base_idx} * 4"]
        else:
            starts = [f"{base_idx} * {count} + {4 * q}" for q in range(count // 4)]
        for q, start in enumerate(starts):
            c(f"{{ const float4 t_ = *reinterpret_cast<const float4*>({ptr} + {start}); "
              f"{regs}[{4 * q}] = t_.x; {regs}[{4 * q + 1}] = t_.y; {regs}[{4 * q + 2}] = t_.z; "
              f"{regs}[{4 * q + 3}] = t_.w; }}")

    def multiply(self, c: Code, buf: str) -> None:
        c("#pragma unroll")
        c.open(f"for (int kk = 0; kk < {self.BK}; ++kk)")
        self.fragment(c, "a", buf)
        self.fragment(c, "b", buf)
        c("#pragma unroll")
        c.open(f"for (int i = 0; i < {self.TM}; ++i)")
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.TN}; ++j)")
        c("acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);")
        c.close().close().close()

    # -- epilogue -------------------------------------------------------------------------------
    def epilogue_value(self, c: Code, value: str, fl: str, row: str, col: str, tag: str
                       ) -> str:
        return epilogue_value(self.plan, c, value, fl, row, col, tag)

    def store_tile(self, c: Code, partial: bool) -> None:
        """Write the accumulators: to the output through the epilogue, or raw to the split-K
        workspace."""
        if self.phase is not None:
            self.store_phase_tile(c, partial)
            return
        g = self.g
        vec_ok = g.N % 4 == 0
        groups = [list(range(q, q + 4)) for q in range(0, self.TN, 4)]
        c("#pragma unroll")
        c.open(f"for (int i = 0; i < {self.TM}; ++i)")
        # the row of accumulator row i, as `row(i)` lays it out (i is a loop variable here)
        if self.split_frag and self.TM == 8:
            c(f"const int gm = m0 + (i < 4 ? ty * 4 + i : {self.BM // 2} + ty * 4 + i - 4);")
        else:
            c(f"const int gm = m0 + ty * {self.TM} + i;")
        c.open(f"if (gm < {g.M})")
        c(f"const idx_t rowbase = ((idx_t)bat * {g.M} + gm) * {g.N};")
        for grp in groups:
            gn0 = f"n0 + {self.col(grp[0])}"
            c.open("")
            c(f"const int gn = {gn0};")
            if partial:
                dst = "(part + rowbase + gn)"
                vals = [f"acc[i][{j}]" for j in grp]
            else:
                dst = "(out + rowbase + gn)"
                vals = []
            if vec_ok:
                c.open(f"if (gn < {g.N})")
                if not partial:
                    for q, j in enumerate(grp):
                        vals.append(self.epilogue_value(c, f"acc[i][{j}]", f"(rowbase + gn + {q})",
                                                        "gm", f"(gn + {q})", f"_{q}"))
                c(cg.vec_store(dst, vals, 0))
                c.close()
            else:
                for q, j in enumerate(grp):
                    c.open(f"if (gn + {q} < {g.N})")
                    if partial:
                        c(f"{dst}[{q}] = acc[i][{j}];")
                    else:
                        v = self.epilogue_value(c, f"acc[i][{j}]", f"(rowbase + gn + {q})", "gm",
                                                f"(gn + {q})", f"_{q}")
                        c(f"out[rowbase + gn + {q}] = {v};")
                    c.close()
            c.close()
        c.close().close()

    def store_phase_tile(self, c: Code, partial: bool) -> None:
        """A phase's columns are output pixels a stride apart: each of the thread's columns is
        decoded once (its pixel, whether this phase has it), then stored element by element
        down its rows, through the epilogue or raw to the split-K workspace."""
        g = self.g
        dst = "part" if partial else "out"
        for j in range(self.TN):
            c.open("")
            c(*self.phased().column_lines(f"n0 + {self.col(j)}", "c", origin=False))
            c.open("if (validc)")
            c("#pragma unroll")
            c.open(f"for (int i = 0; i < {self.TM}; ++i)")
            if self.split_frag and self.TM == 8:
                c(f"const int gm = m0 + (i < 4 ? ty * 4 + i : {self.BM // 2} + ty * 4 + i - 4);")
            else:
                c(f"const int gm = m0 + ty * {self.TM} + i;")
            c.open(f"if (gm < {g.M})")
            c(f"const idx_t fl_ = ((idx_t)bat * {g.M} + gm) * {g.N} + pixc;")
            v = f"acc[i][{j}]"
            if not partial:
                v = self.epilogue_value(c, v, "fl_", "gm", "pixc", "_p")
            c(f"{dst}[fl_] = {v};")
            c.close().close().close().close()

    def phased(self) -> tconv.PhaseLayout:
        """The layout of the phase-by-phase transposed convolution this kernel runs."""
        assert self.phase is not None, "not a phase-by-phase kernel"
        return self.phase

    def zero_tile_test(self) -> str | None:
        """Condition under which this block's whole tile is fixed to zero by a triangle mask."""
        g = self.g
        if g.zero_outside is None or (g.rows_per_matrix != g.M and
                                      g.rows_per_matrix % self.BM):
            return None
        side, d = g.zero_outside
        r0 = "m0" if g.rows_per_matrix == g.M else f"(m0 % {g.rows_per_matrix})"
        if side == "upper":  # kept where col - row >= d
            return f"(n0 + {self.BN - 1}) - {r0} < {d}"
        return f"n0 - ({r0} + {self.BM - 1}) > {d}"

    def computed_tiles(self) -> int:
        """Tiles (over the whole batch) whose product runs: all but those `zero_tile_test`
        skips, counted as the kernel decides (for the simulator's wave count)."""
        g = self.g
        total = self.tiles_m * self.tiles_n * g.batch
        if self.phase is not None:
            return total * self.phase.count
        if self.zero_tile_test() is None or g.zero_outside is None:
            return total
        side, d = g.zero_outside
        skipped = 0
        for bx in range(self.tiles_m * self.tiles_n):
            m0, n0 = (bx // self.tiles_n) * self.BM, (bx % self.tiles_n) * self.BN
            r0 = m0 if g.rows_per_matrix == g.M else m0 % g.rows_per_matrix
            if side == "upper":
                skipped += (n0 + self.BN - 1) - r0 < d
            else:
                skipped += n0 - (r0 + self.BM - 1) > d
        return total - skipped * g.batch

    # -- kernels --------------------------------------------------------------------------------
    def main_kernel(self, c: Code) -> Launch:
        self.prologue(c)
        if self.ST > 2:
            self.pipeline(c)
            self.finish_main(c)
            return self.main_launch()
        self.declare_prefetch(c)
        c(f"const int ntiles = (kend - kbeg + {self.BK - 1}) / {self.BK};")
        self.tile_loads(c, "kbeg")
        self.tile_stores(c, "0")
        c("__syncthreads();")
        c.open("for (int t = 0; t < ntiles; ++t)")
        if self.ST == 2:
            c("const int cur = t & 1;")
            c.open("if (t + 1 < ntiles)")
            self.tile_loads(c, f"kbeg + (t + 1) * {self.BK}")
            c.close()
            self.multiply(c, "cur")
            c.open("if (t + 1 < ntiles)")
            self.tile_stores(c, "cur ^ 1")
            c.close()
            c("__syncthreads();")
        else:
            self.multiply(c, "0")
            c("__syncthreads();")
            c.open("if (t + 1 < ntiles)")
            self.tile_loads(c, f"kbeg + (t + 1) * {self.BK}")
            self.tile_stores(c, "0")
            c.close()
            c("__syncthreads();")
        c.close()
        self.finish_main(c)
        return self.main_launch()

    def prologue(self, c: Code) -> None:
        """Everything before the K loop: signature, thread and block coordinates, the tile
        skipped by a triangle mask, this split's K range, zeroed accumulators."""
        self.open_kernel(c)
        self.thread_layout(c)
        self.block_origin(c)
        self.skip_zero_tile(c)
        self.k_range(c)
        self.declare_acc(c)

    def open_kernel(self, c: Code) -> None:
        """The main kernel's signature and the pointers every layout uses."""
        g = self.g
        c.open(f'extern "C" __global__ void __launch_bounds__({self.NT}, {self.minblocks}) '
               f"ca_gemm({cg.kernel_params(self.plan)})")
        c(f"typedef {self.idx_t} idx_t;",
          "extern __shared__ __align__(16) float ca_smem[];",
          "float* As = ca_smem;",
          f"float* Bs = ca_smem + {self.ST * self.A_STAGE};",
          f"const float* __restrict__ Ag = in{g.a} + {self.a_batch_offset()};",
          f"const float* __restrict__ Bg = in{g.b} + {self.b_batch_offset()};",
          "const int bat = blockIdx.y;",
          "const int tid = threadIdx.x;")

    def thread_layout(self, c: Code) -> None:
        wn = self.BN // self.TN  # thread tiles along n
        if self.warp == "4x8":
            c("const int warp_ = tid >> 5, lane_ = tid & 31;",
              f"const int tx = (warp_ % {wn // 8}) * 8 + (lane_ & 7);",
              f"const int ty = (warp_ / {wn // 8}) * 4 + (lane_ >> 3);")
        else:
            c(f"const int tx = tid % {wn}, ty = tid / {wn};")

    def block_origin(self, c: Code) -> None:
        """m0, n0: this block's tile, in plain or grouped (raster) order. A transposed
        convolution's phase is the fastest part of blockIdx.x (`tconv_phases`)."""
        tile = "blockIdx.x"
        if self.phase is not None:
            c(*self.phase.block_lines())
            tile = "tile_"
        if self.raster > 1:
            width = self.raster * self.tiles_n
            c(f"const int pid = {tile}, grp_ = pid / {width};",
              f"const int first_ = grp_ * {self.raster};",
              f"const int gsz_ = min({self.tiles_m} - first_, {self.raster});",
              f"const int m0 = (first_ + (pid % {width}) % gsz_) * {self.BM};",
              f"const int n0 = ((pid % {width}) / gsz_) * {self.BN};")
        else:
            c(f"const int m0 = ({tile} / {self.tiles_n}) * {self.BM};",
              f"const int n0 = ({tile} % {self.tiles_n}) * {self.BN};")

    def skip_zero_tile(self, c: Code) -> None:
        g = self.g
        zero = self.zero_tile_test()
        if not zero:
            return
        c.open(f"if ({zero})")
        if self.SPLIT == 1:
            c("// the mask fixes this whole tile to zero: write it, skip the product")
            c(f"for (int e = tid; e < {self.BM * self.BN}; e += {self.NT}) {{",
              f"  const int gm = m0 + e / {self.BN}, gn = n0 + e % {self.BN};",
              f"  if (gm < {g.M} && gn < {g.N}) out[((idx_t)bat * {g.M} + gm) * {g.N} + gn]"
              " = 0.f;",
              "}")
        c("return;")
        c.close()

    def k_range(self, c: Code) -> None:
        # a phase's K is its own (pkn_), at most the largest phase's that KC was sized for
        k = "pkn_" if self.phase is not None else str(self.g.K)
        if self.SPLIT > 1:
            c(f"const int kbeg = blockIdx.z * {self.KC};",
              f"const int kend = min({k}, kbeg + {self.KC});")
        else:
            c("const int kbeg = 0;", f"const int kend = {k};")

    def declare_acc(self, c: Code) -> None:
        c(f"float acc[{self.TM}][{self.TN}];",
          "#pragma unroll",
          f"for (int i = 0; i < {self.TM}; ++i)",
          "#pragma unroll",
          f"  for (int j = 0; j < {self.TN}; ++j) acc[i][j] = 0.f;")

    def finish_main(self, c: Code) -> None:
        g = self.g
        if self.SPLIT > 1:
            c(f"float* part = reinterpret_cast<float*>(ws) + "
              f"(idx_t)blockIdx.z * {g.batch * g.M * g.N};")
        self.store_tile(c, partial=self.SPLIT > 1)
        c.close()

    def main_launch(self) -> Launch:
        phases = self.phase.count if self.phase is not None else 1
        return Launch("ca_gemm", (self.tiles_m * self.tiles_n * phases, self.g.batch,
                                  self.SPLIT), (self.NT, 1, 1), self.smem)

    def sum_kernel(self, c: Code) -> Launch:
        """Split-K: add the parts in a fixed order (deterministic), then the epilogue."""
        g = self.g
        total = g.batch * g.M * g.N
        threads = 256
        c.open(f'extern "C" __global__ void __launch_bounds__({threads}) '
               f"ca_gemm_sum({cg.kernel_params(self.plan)})")
        c(f"typedef {self.idx_t} idx_t;",
          f"const idx_t f = (idx_t)blockIdx.x * {threads} + threadIdx.x;",
          f"if (f >= {total}) return;",
          "const float* part = reinterpret_cast<const float*>(ws);",
          "float s = part[f];")
        for k in range(1, self.SPLIT):
            c(f"s += part[{k * total} + f];")
        c(f"const idx_t gm = (f / {g.N}) % {g.M};", f"const idx_t gn = f % {g.N};")
        v = self.epilogue_value(c, "s", "f", "gm", "gn", "_s")
        c(f"out[f] = {v};")
        c.close()
        return Launch("ca_gemm_sum", (-(-total // threads), 1, 1), (threads, 1, 1))

    def kernels(self, c: Code) -> tuple[list[Launch], int]:
        """The main kernel, and split-K's summing kernel with its workspace bytes."""
        launches = [self.main_kernel(c)]
        if self.SPLIT == 1:
            return launches, 0
        launches.append(self.sum_kernel(c))
        return launches, self.SPLIT * self.g.batch * self.g.M * self.g.N * 4

    def render(self) -> Rendered:
        c = Code()
        c(cg.prelude(self.plan))
        if self.ST > 2:
            c(CP_ASYNC)
        if self.phase is not None:
            c(*self.phase.tables())
        launches, ws = self.kernels(c)
        g = self.g
        facts: tuple[tuple[str, Any], ...] = (
            ("family", "gemm"), ("threads", self.NT), ("blocks", launches[0].blocks),
            ("bm", self.BM), ("bn", self.BN), ("bk", self.BK), ("tm", self.TM),
            ("tn", self.TN), ("stages", self.ST), ("vec_a", self.AV), ("vec_b", self.BV),
            ("split", self.SPLIT), ("minblocks", self.minblocks), ("frag", "split" if self.split_frag else "contig"),
            ("pad", self.LDA - self.BM), ("raster", self.raster), ("warp", self.warp), ("M", g.M), ("N", g.N),
            ("K", g.K), ("batch", g.batch), ("smem", self.smem),
            ("a_along", _a_along(g)), ("b_along", _b_along(g)),
            ("skips_zero_tiles", int(self.zero_tile_test() is not None)),
            # an implicit-GEMM convolution: B's elements gathered through the window
            ("gather_dims", len(g.b_gather.kernel) if g.b_gather is not None else 0))
        if self.phase is not None:
            # a block's product is one phase's: its columns and the largest phase's K; each
            # phase's own K beside (the model prices the multiply-adds each really does)
            ph = self.phase
            facts = tuple((k, {"N": ph.columns, "K": ph.k_max}.get(k, v)) for k, v in facts)
            facts += (("tconv", "phase"), ("phases", ph.count), ("phase_k", ph.phase_k))
        elif g.b_gather is not None and g.b_gather.phased:
            facts += (("tconv", "gather"),)
        return Rendered(c.text(), tuple(launches), workspace_bytes=ws, facts=facts)
