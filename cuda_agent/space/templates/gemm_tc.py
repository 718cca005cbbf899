"""Matrix products on tensor cores at fp32 accuracy: error-compensated TF32 (3xTF32).

A TF32 tensor-core product alone keeps 11 significant bits of each operand: about 1e-3 relative
error, which the fp32 verifier rejects. Splitting each operand into a TF32 "big" part and the
TF32 rounding of what is left (x = big + small, 22 bits together) and summing
small*big + big*small + big*big (small*small, about 2^-22 of the product, is dropped) restores
fp32-level products. One more trap: the tensor core truncates as it accumulates, a bias that
grows with K. So each 8-deep step is summed by the tensor core into a fresh zero and added to
the running total with an ordinary rounded fp32 add, as accurate as cuBLAS's strict fp32
(docs/journal.md: space/templates/gemm_tc.py).

Each block computes a BM x BN tile of C with warps that each own a WM x WN warp tile made of
16 x 8 mma tiles (`mma.sync.m16n8k8` TF32); K slices are copied by cp.async straight into shared
memory, 2 to 4 slices in flight. Each operand is kept in shared memory in its global layout
(rows along its contiguous dim, padded so the fragment reads hit 32 distinct banks), so
transposed operands such as nn.Linear's weight are read in place with 16-byte copies.

Slots: config: block tile, warp tile, raster; memory: K slice, slices in flight; reduction:
split-K (workspace and a second kernel that adds the parts in a fixed order, as the SIMT GEMM).
The epilogue is fused as in the SIMT template. Convolutions run as the SIMT template runs them,
implicit GEMMs whose B tile is gathered from the input (element copies, zero where the window
covers padding). A strided transposed convolution may instead run as one sub-convolution per
output phase (slot `memory.tconv`, `tconv_phases.py`): its own taps only, A and B copied
element by element through the per-tap tables, each output pixel stored at its phase's place.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...ir.plan import KernelPlan
from ...precision import product_precision
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from . import tconv_phases as tp
from .base import Code, Template
from .gemm import (CP_ASYNC, MAX_THREADS, MIN_THREADS, _a_along, _b_along, _GemmWriter, _info,
                   _max_offset, _vec_ok, split_grid_check)

#: warp tile (rows x columns of C per warp): multiples of the 16 x 8 mma tile
WARP_TILES = {"32x32": (32, 32), "64x32": (64, 32), "32x64": (32, 64), "64x64": (64, 64)}

# TF32 conversion and the warp-wide mma (sm_80+); the CPU emulator of the tests defines
# CA_EMULATED and its own versions.
MMA = r"""
#ifndef CA_EMULATED
__device__ __forceinline__ unsigned ca_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void ca_mma_tf32(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// half-precision operands (`--precision fp16|bf16`): two fp32 values rounded to nearest into
// one register, the lower k in the low half; the m16n8k8 mma on them, fp32 accumulation
__device__ __forceinline__ unsigned ca_pack_f16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned ca_pack_bf16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ void ca_mma_f16(float* c, const unsigned* a, unsigned b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b));
}
__device__ __forceinline__ void ca_mma_bf16(float* c, const unsigned* a, unsigned b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b));
}
// two 8-deep steps in one m16n8k16 mma: a = {rows g, g + 8 at k 2t; the same at k 8 + 2t},
// b = {k 2t, k 8 + 2t}
__device__ __forceinline__ void ca_mma16_f16(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ca_mma16_bf16(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
// x = big + small, both TF32: 22 significant bits together
__device__ __forceinline__ void ca_split_tf32(float x, unsigned& big, unsigned& small) {
  big = ca_tf32(x);
  small = ca_tf32(x - __uint_as_float(big));
}
"""


def _warp_tile(cfg: dict[str, Any]) -> tuple[int, int]:
    return WARP_TILES[cfg["config.warp"]]


def _layout(plan: KernelPlan, cfg: dict[str, Any]) -> dict[str, Any]:
    """Shared-memory layout of both operands: rows along each one's contiguous dim."""
    g = _info(plan)
    bm, bn, bk = cfg["config.bm"], cfg["config.bn"], cfg["memory.bk"]
    # the phased form reads A through its tap table along K: rows along K
    a_rowk, b_rowk = _a_along(g) == "k" or tp.is_phased(cfg), _b_along(g) == "k"
    # [rows][BK + 4] when K is contiguous, [BK][rows + 8] otherwise: either way the 32 lanes'
    # fragment reads (row g = lane / 4, k t = lane % 4) fall on 32 distinct banks
    lda = bk + 4 if a_rowk else bm + 8
    ldb = bk + 4 if b_rowk else bn + 8
    a_stage = (bm if a_rowk else bk) * lda
    b_stage = (bn if b_rowk else bk) * ldb
    return {"a_rowk": a_rowk, "b_rowk": b_rowk, "lda": lda, "ldb": ldb, "a_stage": a_stage,
            "b_stage": b_stage, "smem": 4 * cfg["memory.stages"] * (a_stage + b_stage)}


class GemmTensorCoreTemplate(Template):
    name = "gemm_tc"
    version = "4"
    # v2: compute.fresh (v1 summed every 8-deep step apart); v3: half products accumulate in
    # the tensor core, two 8-deep steps as one m16n8k16; v4: memory.tconv (strided transposed
    # convolutions gathered, or as sub-convolutions per phase); other kernels unchanged
    legacy = {"compute.fresh": 8, tp.SLOT: "gather"}

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind in ("gemm", "conv")

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.bm", _row_tiles(plan), "rows of C per block"),
            Slot("config.bn", (64, 128, 256), "columns of C per block"),
            Slot("config.raster", (1, 8), "row tiles walked together (L2 reuse of B tiles)"),
            Slot("config.warp", tuple(WARP_TILES), "rows x columns of C per warp, in 16 x 8 "
                                                   "tensor-core tiles"),
            Slot("memory.bk", (16, 32), "K slice staged in shared memory per step"),
            Slot("memory.stages", (2, 3, 4), "K slices in flight, copied by cp.async"),
            Slot("compute.unroll", ("full", "none", 2), "the 8-deep steps of a K slice unrolled "
                                                        "(loads overlap the previous step's "
                                                        "mma), one at a time (fewer registers) "
                                                        "or two at a time"),
            Slot("compute.fresh", (8, 16),
                 "K depth the tensor core sums into a fresh partial before the rounded fp32 "
                 "add into the total (16: half the adds and their waits on the mma, twice the "
                 "truncating accumulations per partial, more live fragments)"),
            Slot("reduction.split", (1, 2, 4, 8, 16, 32, 64),
                 "blocks sharing one tile's K (split-K)"),
        ] + ([Slot(tp.SLOT, tp.CHOICES, tp.DOC)] if tp.offers_phases(plan) else [])

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        g = _info(plan)
        cfg = dict(cfg)
        if -(-g.M // cfg["config.bm"]) <= 1 or -(-g.N // cfg["config.bn"]) <= 1:
            cfg["config.raster"] = 1
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        g = grid = _info(plan)
        if tp.is_phased(cfg):
            lay = tp.phase_layout(plan)
            why = lay.problem()
            if why:
                return why
            # a block's product is a phase's (its columns, the largest phase's K); the grid
            # holds every phase's tiles
            g = tp.phase_gemm(plan)
            grid = replace(g, N=lay.columns * lay.count)
        elif g.a_k_split is not None and _a_along(g) != "k":
            return "a weight whose K runs in two pieces is copied along K only"
        bm, bn, bk, split = (cfg["config.bm"], cfg["config.bn"], cfg["memory.bk"],
                             cfg["reduction.split"])
        wm, wn = _warp_tile(cfg)
        if bm % wm or bn % wn:
            return "the warp tile does not divide the block tile"
        threads = (bm // wm) * (bn // wn) * 32
        if not MIN_THREADS <= threads <= MAX_THREADS:
            return f"{threads} threads per block"
        if bm > max(64, 2 * g.M) or bn > max(64, 2 * g.N):
            return "block tile far larger than the matrix"
        if _layout(plan, cfg)["smem"] > target.max_smem_per_block:
            return "shared memory per block exceeds the limit"
        return split_grid_check(grid, bm, bn, bk, split, target)

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        cfg = {"config.bm": 128, "config.bn": 128, "config.raster": 1, "config.warp": "64x64",
               "memory.bk": 32, "memory.stages": 3, "compute.unroll": "none",
               "reduction.split": 1}
        if tp.offers_phases(plan):  # no multiply-adds on zeros, where the tables fit
            phased = {**cfg, tp.SLOT: "phase"}
            cfg[tp.SLOT] = "phase" if self.check(plan, phased, target) is None else "gather"
        return cfg

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        return _TensorCoreWriter(plan, cfg, mma_terms(target, product_op(plan)),
                                 half_mma(target)).render()


def _row_tiles(plan: KernelPlan) -> tuple[int, ...]:
    """Block tile heights: 32 as well for a strided transposed convolution of at most 32
    output channels per group (the realistic suite's upsampling layers have 16 or 32: a
    64-row tile left half to three quarters of each mma idle)."""
    if tp.offers_phases(plan) and _info(plan).M <= 32:
        return (32, 64, 128, 256)
    return (64, 128, 256)


def product_op(plan: KernelPlan) -> str:
    """Which of torch's TF32 flags governs this plan's products: cuDNN's for a convolution
    (direct or transposed), cuBLAS's for a matrix product and attention."""
    return "conv" if plan.kind == "conv" else "matmul"


def mma_terms(target: Target, op: str) -> int:
    """TF32 products per tensor-core tile: three (error-compensated, strict fp32 accuracy), or
    one where the contract lets `op`'s products use TF32 (torch's own `allow_tf32`: by default
    for convolutions, `--precision auto`; verified against its TF32 answer) or lower (fp16
    and bf16 allow more error still, so one TF32 product meets them where a template has no
    half-precision path)."""
    return 3 if product_precision(target.precision, op) == "fp32" else 1


def half_mma(target: Target) -> str | None:
    """The half-precision operand type of the products (`--precision fp16|bf16`), else None."""
    return {"fp16": "f16", "bf16": "bf16"}.get(target.precision)


def mma_name(terms: int) -> str:
    return "tf32x3" if terms == 3 else "tf32"


def mma_products(p: str, ab: str, as_: str, bb: str, bs: str, terms: int) -> list[str]:
    """p += A B on the tensor core, one statement per mma: with three terms small*big +
    big*small + big*big; with one, big*big (the small parts' values are then dead code, which
    the compiler drops)."""
    big = f"ca_mma_tf32({p}, {ab}, {bb});"
    return [big] if terms == 1 else [f"ca_mma_tf32({p}, {as_}, {bb});",
                                     f"ca_mma_tf32({p}, {ab}, {bs});", big]


KTAB_MAX = 4096  # entries of the gather's __constant__ tables (two ints each: 32 KB)


def _spatial_strides(shape: tuple[int, ...]) -> list[int]:
    """Element strides of a row-major spatial block of `shape`."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def _ktab_ok(g: Any) -> bool:
    """A convolution gathered through per-k tables: not transposed (whose input coordinate
    needs an exact division), K within the table, kernel offsets within 10 bits, offsets
    within an int."""
    cv = g.b_gather
    return (cv is not None and not cv.transposed and g.K <= KTAB_MAX and len(cv.kernel) <= 3
            and all((k - 1) * d < 1024 for k, d in zip(cv.kernel, cv.dilation))
            and cv.image_elems < 2**31 - 2**20)


class _TensorCoreWriter(_GemmWriter):
    """The SIMT writer's kernel skeleton (block order, zero tiles, K range, split-K, epilogue)
    with warp-level mma tiles and a cp.async pipeline in place of thread tiles."""

    def __init__(self, plan: KernelPlan, cfg: dict[str, Any],  # noqa: super not called
                 terms: int = 3, half: str | None = None) -> None:
        self.plan, self.g = plan, _info(plan)
        self.terms, self.half = terms, half
        g = self.g
        self.BM, self.BN, self.BK = cfg["config.bm"], cfg["config.bn"], cfg["memory.bk"]
        self.WM, self.WN = _warp_tile(cfg)
        self.MT, self.NTL = self.WM // 16, self.WN // 8  # mma tiles per warp
        self.warps_n = self.BN // self.WN
        self.ST, self.raster = cfg["memory.stages"], cfg["config.raster"]
        self.warp = cfg["config.warp"]
        self.unroll = cfg["compute.unroll"]
        # "none": one 8-deep step at a time (fewer live fragments: no spills at big warp tiles)
        self.kk_unroll = {"full": "#pragma unroll", "none": "#pragma unroll 1"}.get(
            self.unroll, f"#pragma unroll {self.unroll}")
        self.FRESH = cfg["compute.fresh"] // 8  # 8-deep steps per fresh partial sum
        self.SPLIT = cfg["reduction.split"]
        self.idx_t = "int" if _max_offset(g, plan) * self.SPLIT < 2**31 - 2**20 else "long long"
        self.minblocks = 1
        self.NT = (self.BM // self.WM) * self.warps_n * 32  # threads per block
        lay = _layout(plan, cfg)
        self.a_rowk, self.b_rowk = lay["a_rowk"], lay["b_rowk"]
        self.LDA, self.LDB = lay["lda"], lay["ldb"]
        self.A_STAGE, self.B_STAGE = lay["a_stage"], lay["b_stage"]
        self.smem = lay["smem"]
        # a strided transposed convolution as sub-convolutions (`tconv_phases`): a block's
        # product is one phase's, A and B copied element by element through the tap tables
        self.phase = tp.phase_layout(plan) if tp.is_phased(cfg) else None
        self.AV = 4 if self.phase is None and _vec_ok(g, "a", 4) else 1
        self.BV = 4 if _vec_ok(g, "b", 4) else 1
        block = tp.phase_gemm(plan) if self.phase is not None else g
        self.tiles_m, self.tiles_n = -(-block.M // self.BM), -(-block.N // self.BN)
        self.ktab = self.phase is None and _ktab_ok(g)
        # K per split, whole slices
        self.KC = -(-(-(-block.K // self.BK)) // self.SPLIT) * self.BK

    def thread_layout(self, c: Code) -> None:
        c("const int warp_ = tid >> 5, lane_ = tid & 31;",
          f"const int wm_ = (warp_ / {self.warps_n}) * {self.WM};",
          f"const int wn_ = (warp_ % {self.warps_n}) * {self.WN};",
          "const int g_ = lane_ >> 2, t_ = lane_ & 3;  // the mma fragments' row and k")

    def declare_acc(self, c: Code) -> None:
        c(f"float acc[{self.MT}][{self.NTL}][4];",
          "#pragma unroll",
          f"for (int i = 0; i < {self.MT}; ++i)",
          "#pragma unroll",
          f"  for (int j = 0; j < {self.NTL}; ++j)",
          "#pragma unroll",
          "    for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;")

    def tile_async(self, c: Code, k0: str, buf: str) -> None:
        """Copy the K slice at `k0` into stage `buf`: 16 bytes at a time along the operand's
        contiguous dim where aligned, else element by element (that dim fastest). A thread's
        copies lie a fixed step apart (rows, or K for [k][row] tiles), so one source and one
        destination pointer per operand serve them all with constant offsets: the unrolled
        copies keep no addresses live across the K loop."""
        g = self.g
        for name, rowk, vec, rows, ld, stage, lim in (
                ("a", self.a_rowk, self.AV, self.BM, self.LDA, self.A_STAGE, g.M),
                ("b", self.b_rowk, self.BV, self.BN, self.LDB, self.B_STAGE, g.N)):
            src = f"{name.upper()}g"
            total = rows * self.BK // vec
            if self.phase is not None:
                (self._phase_weight_copies if name == "a" else self._tabled_gather)(c, k0, buf)
                continue
            if name == "b" and g.b_gather is not None:
                if self.ktab:
                    self._tabled_gather(c, k0, buf)
                else:
                    self._gathered_copies(c, k0, buf)
                continue
            per = self.BK // vec if rowk else rows // vec  # copies along one shared row
            if per > self.NT:
                self._copies_over_rounds(c, name, rowk, vec, rows, ld, stage, lim, k0, buf)
                continue
            step = self.NT // per  # shared rows between a thread's copies (NT % per == 0)
            row_of = "m0" if name == "a" else "n0"
            c.open("")
            if rowk:  # shared [row][k]: copies step along rows
                c(f"const int r_ = tid / {per}, kk_ = (tid % {per}) * {vec};")
                src_step = self.offset(name, f"{step}", "0")
                dst_step = step * ld
            else:  # shared [k][row]: copies step along K
                c(f"const int r_ = (tid % {per}) * {vec}, kk_ = tid / {per};")
                src_step = self.offset(name, "0", f"{step}")
                dst_step = step * ld
            c(f"const float* src_ = {src} + {self.offset(name, f'{row_of} + r_', f'{k0} + kk_')};",
              f"float* dst_ = {name.upper()}s + ({buf}) * {stage} + " +
              (f"r_ * {ld} + kk_;" if rowk else f"kk_ * {ld} + r_;"))
            fn = "ca_cp16" if vec == 4 else "ca_cp4"
            for j in range(-(-total // self.NT)):
                if rowk:
                    guard = f"{row_of} + r_ + {j * step} < {lim} && {k0} + kk_ < kend"
                else:
                    guard = f"{row_of} + r_ < {lim} && {k0} + kk_ + {j * step} < kend"
                stmt = (f"{{ const bool in_ = {guard}; {fn}(dst_ + {j * dst_step}, "
                        f"in_ ? src_ + {j} * ({src_step}) : {src}, in_); }}")
                c(self.in_round(stmt, j, total))
            c.close()

    def in_round(self, stmt: str, j: int, total: int) -> str:
        """Copy `stmt` of round j of NT threads, guarded where the last round of `total`
        copies covers part of the threads."""
        if (j + 1) * self.NT > total:
            return f"if (tid + {j * self.NT} < {total}) {stmt}"
        return stmt

    # -- convolutions: the im2col tile gathered with a table of K -----------------------------
    def prologue(self, c: Code) -> None:
        super().prologue(c)
        if self.ktab:
            self._gather_setup(c)
        elif self.phase is not None:
            self._phase_gather_setup(c)

    def _pixel_rounds(self) -> tuple[int, int]:
        """(pixel positions per thread, k rows between a thread's copies of one position): a
        round of NT copies covers NT/BN rows of k at one position a thread, or BN/NT rounds
        cover a row of k at BN/NT positions."""
        return (max(1, self.BN // self.NT), max(1, self.NT // self.BN))

    def _gather_setup(self, c: Code) -> None:
        """Once per thread: the input window origin of each of its output pixels (the per-k
        part of a copy's address then comes from the constant table)."""
        cv, g = self.g.b_gather, self.g
        npos, _ = self._pixel_rounds()
        strides = _spatial_strides(cv.in_shape)
        c("// this thread's output pixels: where their input windows start",
          f"const int kq0_ = tid / {self.BN}, p0_ = tid % {self.BN};")
        for pp in range(npos):
            dims = range(len(cv.kernel))
            c(f"const int gp{pp}_ = n0 + p0_ + {pp * self.NT};",
              f"const bool pv{pp}_ = gp{pp}_ < {g.N};",
              "int " + ", ".join(f"ib{pp}_{d}" for d in dims) + ";")
            c.open("")
            c(f"int o_ = pv{pp}_ ? gp{pp}_ : 0;")
            for d in reversed(dims):
                c(f"ib{pp}_{d} = (o_ % {cv.out_shape[d]}) * {cv.stride[d]} - {cv.padding[d]}; "
                  f"o_ /= {cv.out_shape[d]};")
            c.close()
            c(f"const int pb{pp}_ = " + " + ".join(f"ib{pp}_{d} * {strides[d]}" for d in dims)
              + ";")

    def _tabled_gather(self, c: Code, k0: str, buf: str) -> None:
        """A convolution's B tile: copy j of a thread reads k row kq0_ + j * (NT/BN) (or row j
        at position j % (BN/NT)); the row's channel-and-kernel offset and its kernel
        coordinates come from __constant__ tables, the same entry for a warp's lanes (one
        broadcast), and bounds are one unsigned compare per dim. A phase of a transposed
        convolution (`tconv_phases`) reads its tap's entry of the phase tables instead."""
        cv, ph = self.g.b_gather, self.phase
        npos, krows = self._pixel_rounds()
        total = self.BN * self.BK
        c.open("")
        c(f"float* dst_ = Bs + ({buf}) * {self.B_STAGE} + kq0_ * {self.LDB} + p0_;",
          f"const int gk0_ = {k0} + kq0_;")
        for j in range(-(-total // self.NT)):
            pp, krow = (j % npos, (j // npos)) if npos > 1 else (0, j * krows)
            dst = krow * self.LDB + pp * self.NT
            body = [f"const int gk_ = gk0_ + {krow};",
                    f"const bool ok_ = pv{pp}_ && gk_ < kend;",
                    "const int t_ = ok_ ? gk_ : 0;"]
            if ph is None:
                body.append("const int kp_ = ca_kpos[t_];")
                conds = " && ".join(
                    f"(unsigned)(ib{pp}_{d} + ((kp_ >> {10 * d}) & 1023)) < {cv.in_shape[d]}u"
                    for d in range(len(cv.kernel)))
                src = f"pb{pp}_ + ca_koff[t_]"
            else:  # a phase's k: tap-major over the channels, the tap's shifts from its table
                body += ph.tap_lines("t_") + ["const int kp_ = ca_tpos[tt_];"]
                conds, src = ph.in_bounds(str(pp)), ph.input_offset(str(pp))
            body += [f"const bool in_ = ok_ && {conds};",
                     f"ca_cp4(dst_ + {dst}, in_ ? Bg + ({src}) : Bg, in_);"]
            stmt = "{ " + " ".join(body) + " }"
            c(self.in_round(stmt, j, total))
        c.close()

    def _phase_gather_setup(self, c: Code) -> None:
        """Once per thread: the window origin of each of its columns in this block's phase
        (`tconv_phases`), as `_gather_setup` for a direct convolution."""
        ph = self.phased()
        npos, _ = self._pixel_rounds()
        c("// this thread's columns of the phase: where their input windows start",
          f"const int kq0_ = tid / {self.BN}, p0_ = tid % {self.BN};")
        for pp in range(npos):
            c(*ph.column_lines(f"n0 + p0_ + {pp * self.NT}", str(pp), origin=True))
            c(f"const bool pv{pp}_ = valid{pp};",
              f"const int pb{pp}_ = {ph.origin_offset(str(pp))};")

    def _phase_weight_copies(self, c: Code, k0: str, buf: str) -> None:
        """A phase's A tile, [row][k]: element copies, k fastest across the lanes (a warp
        spans one or two taps: its table reads are near broadcasts); a thread's copies step
        along rows, one table read per slice."""
        ph, g = self.phased(), self.g
        per = self.BK  # copies along one shared row; NT is a multiple of it
        step = self.NT // per
        ksize = ph.kernel_size  # one weight row
        c.open("")
        c(f"const int r_ = tid / {per}, kk_ = tid % {per};",
          f"const int gk_ = {k0} + kk_;",
          "const bool kin_ = gk_ < kend;",
          "const int t_ = kin_ ? gk_ : 0;",
          *ph.tap_lines("t_"),
          f"const float* src_ = Ag + (idx_t)(m0 + r_) * {ksize} + ({ph.weight_offset()});",
          f"float* dst_ = As + ({buf}) * {self.A_STAGE} + r_ * {self.LDA} + kk_;")
        total = self.BM * self.BK
        for j in range(-(-total // self.NT)):
            stmt = (f"{{ const bool in_ = kin_ && m0 + r_ + {j * step} < {g.M}; "
                    f"ca_cp4(dst_ + {j * step * self.LDA}, in_ ? src_ + {j * step * ksize} : "
                    "Ag, in_); }")
            c(self.in_round(stmt, j, total))
        c.close()

    def ktab_decl(self) -> list[str]:
        """The gather's per-k tables: the input offset of k's channel and kernel position (from
        the window origin), and the kernel position's offsets per dim, 10 bits each."""
        cv = self.g.b_gather
        strides = _spatial_strides(cv.in_shape)
        plane = 1
        for n in cv.in_shape:
            plane *= n
        ksize = 1
        for n in cv.kernel:
            ksize *= n
        koff, kpos = [], []
        for k in range(self.g.K):
            ch, q = divmod(k, ksize)
            offs = []
            for d in reversed(range(len(cv.kernel))):
                q, kd = divmod(q, cv.kernel[d])
                offs.append(kd * cv.dilation[d])
            offs.reverse()
            koff.append(ch * plane + sum(o * st for o, st in zip(offs, strides)))
            kpos.append(sum(o << (10 * d) for d, o in enumerate(offs)))
        return [f"__constant__ int ca_koff[{len(koff)}] = {{{', '.join(map(str, koff))}}};",
                f"__constant__ int ca_kpos[{len(kpos)}] = {{{', '.join(map(str, kpos))}}};"]

    def _gathered_copies(self, c: Code, k0: str, buf: str) -> None:
        """A convolution's B tile, gathered from the input as the SIMT template reads it
        (channel and kernel offset from k, output pixel from n, zero where the window covers
        padding): element copies, output pixels fastest across the threads."""
        g = self.g
        total = self.BN * self.BK
        for j in range(-(-total // self.NT)):
            idx = f"(tid + {j * self.NT})"
            c.open("" if (j + 1) * self.NT <= total else f"if ({idx} < {total})")
            c(f"const int p_ = {idx} % {self.BN}, kq_ = {idx} / {self.BN};",
              f"const int gk_ = {k0} + kq_, gp_ = n0 + p_;",
              f"float* dst_ = Bs + ({buf}) * {self.B_STAGE} + kq_ * {self.LDB} + p_;")
            c.open(f"if (gp_ < {g.N} && gk_ < kend)")
            c(*self.gather_index())
            c("ca_cp4(dst_, in_ ? Bg + off_ : Bg, in_);")
            c.close()
            c.open("else")
            c("ca_cp4(dst_, Bg, false);")
            c.close()
            c.close()

    def _copies_over_rounds(self, c: Code, name: str, rowk: bool, vec: int, rows: int,
                            ld: int, stage: int, lim: int, k0: str, buf: str) -> None:
        """The copies of an operand whose shared rows are longer than a round of NT copies
        (element copies of a 256-wide tile, say): a thread's copies step along the row for
        several rounds, then to the next row; still one pointer and constant offsets."""
        src = f"{name.upper()}g"
        total = rows * self.BK // vec
        per = self.BK // vec if rowk else rows // vec  # copies along one shared row
        # both powers of two: here a row takes several rounds (per a multiple of NT)
        lines_per_round, rounds_per_line = max(1, self.NT // per), max(1, per // self.NT)
        row_of = "m0" if name == "a" else "n0"
        c.open("")
        c(f"const int pos_ = (tid % {per}) * {vec}, line_ = tid / {per};")
        # operand row and k of this thread's first copy: rows run along lines in a
        # [row][k] tile, along positions in a [k][row] one
        row, k = ("line_", "pos_") if rowk else ("pos_", "line_")
        c(f"const float* src_ = {src} + {self.offset(name, f'{row_of} + {row}', f'{k0} + {k}')};",
          f"float* dst_ = {name.upper()}s + ({buf}) * {stage} + line_ * {ld} + pos_;")
        fn = "ca_cp16" if vec == 4 else "ca_cp4"
        for j in range(-(-total // self.NT)):
            dpos = (j % rounds_per_line) * self.NT * vec
            dline = (j // rounds_per_line) * lines_per_round
            drow, dk = (dline, dpos) if rowk else (dpos, dline)
            guard = f"{row_of} + {row} + {drow} < {lim} && {k0} + {k} + {dk} < kend"
            src_j = f"src_ + {self.offset(name, str(drow), str(dk))}" if j else "src_"
            stmt = (f"{{ const bool in_ = {guard}; {fn}(dst_ + {dline * ld + dpos}, "
                    f"in_ ? {src_j} : {src}, in_); }}")
            c(self.in_round(stmt, j, total))
        c.close()

    def multiply(self, c: Code, buf: str) -> None:
        """One K slice: per 8-deep step, split this warp's A fragments (kept for the step) and
        each column tile's B fragment, three mma per tile into a fresh partial sum, then a
        rounded fp32 add into the accumulator. With `compute.fresh` 16, two 8-deep steps go
        into one partial (fragments of both steps live at once; step f's named with suffix
        f, the first step's names those of the 8-deep form). Under `--precision fp16|bf16`
        the same skeleton packs two values of a row or column (k = 2t, 2t + 1) into one f16x2
        or bf16x2 register each and runs one half-precision mma per tile: the operands' single
        rounding is the contract, the accumulation stays fp32."""
        def a_at(m: str, k: str) -> str:
            return f"({m}) * {self.LDA} + ({k})" if self.a_rowk else \
                f"({k}) * {self.LDA} + ({m})"

        def b_at(k: str, n: str) -> str:
            return f"({n}) * {self.LDB} + ({k})" if self.b_rowk else \
                f"({k}) * {self.LDB} + ({n})"

        steps = [("", "kk")] + [(str(f), f"kk + {8 * f}") for f in range(1, self.FRESH)]
        if self.half:
            # half-precision operands: two values of a row (k = 2t, 2t + 1) packed per register
            pack, mma = f"ca_pack_{self.half}", f"ca_mma_{self.half}"

            def declare(sfx: str) -> list[str]:
                return [f"unsigned ah{sfx}_[{self.MT}][2];"]

            def load_a(sfx: str, k0: str) -> list[str]:
                return [f"ah{sfx}_[i][{q}] = {pack}(a_[{a_at(m, f'{k0} + 2 * t_')}], "
                        f"a_[{a_at(m, f'{k0} + 2 * t_ + 1')}]);"
                        for q, m in enumerate(("r_", "r_ + 8"))]

            def load_b(sfx: str, k0: str) -> list[str]:
                return [f"const unsigned bh{sfx}_ = {pack}(b_[{b_at(f'{k0} + 2 * t_', 'n_')}], "
                        f"b_[{b_at(f'{k0} + 2 * t_ + 1', 'n_')}]);"]

            def products(sfx: str) -> list[str]:
                # accumulated in the tensor core, as cuBLAS's half GEMMs do: the contract's
                # error is the operands' rounding, far above the accumulation's; two 8-deep
                # steps (compute.fresh 16) are one m16n8k16 mma
                if self.FRESH == 1:
                    return [f"{mma}(acc[i][j], ah_[i], bh_);"]
                if sfx:
                    return []
                return [f"{{ const unsigned a4_[4] = {{ah_[i][0], ah_[i][1], ah1_[i][0], "
                        f"ah1_[i][1]}}; const unsigned b2_[2] = {{bh_, bh1_}}; "
                        f"ca_mma16_{self.half}(acc[i][j], a4_, b2_); }}"]
        else:
            # TF32 operands split into big and small parts (k = t and t + 4 per register)
            def declare(sfx: str) -> list[str]:
                return [f"unsigned ab{sfx}_[{self.MT}][4], as{sfx}_[{self.MT}][4];"]

            def load_a(sfx: str, k0: str) -> list[str]:
                return [f"ca_split_tf32(a_[{a_at(m, k)}], ab{sfx}_[i][{q}], as{sfx}_[i][{q}]);"
                        for q, (m, k) in enumerate(
                            (("r_", f"{k0} + t_"), ("r_ + 8", f"{k0} + t_"),
                             ("r_", f"{k0} + t_ + 4"), ("r_ + 8", f"{k0} + t_ + 4")))]

            def load_b(sfx: str, k0: str) -> list[str]:
                return [f"unsigned bb{sfx}_[2], bs{sfx}_[2];",
                        f"ca_split_tf32(b_[{b_at(f'{k0} + t_', 'n_')}], bb{sfx}_[0], "
                        f"bs{sfx}_[0]);",
                        f"ca_split_tf32(b_[{b_at(f'{k0} + t_ + 4', 'n_')}], bb{sfx}_[1], "
                        f"bs{sfx}_[1]);"]

            def products(sfx: str) -> list[str]:
                return mma_products("p_", f"ab{sfx}_[i]", f"as{sfx}_[i]", f"bb{sfx}_",
                                    f"bs{sfx}_", self.terms)
        c.open("")
        c(f"const float* a_ = As + ({buf}) * {self.A_STAGE};",
          f"const float* b_ = Bs + ({buf}) * {self.B_STAGE};")
        c(self.kk_unroll)
        c.open(f"for (int kk = 0; kk < {self.BK}; kk += {8 * self.FRESH})")
        for sfx, _ in steps:
            c(*declare(sfx))
        c("#pragma unroll")
        c.open(f"for (int i = 0; i < {self.MT}; ++i)")
        c("const int r_ = wm_ + i * 16 + g_;")
        for sfx, k0 in steps:
            c(*load_a(sfx, k0))
        c.close()
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.NTL}; ++j)")
        c("const int n_ = wn_ + j * 8 + g_;")
        for sfx, k0 in steps:
            c(*load_b(sfx, k0))
        c("#pragma unroll")
        c.open(f"for (int i = 0; i < {self.MT}; ++i)")
        if self.half:
            for sfx, _ in steps:
                c(*products(sfx))
        else:
            c("// the tensor core truncates as it adds: sum the step apart, then round into acc",
              "float p_[4] = {0.f, 0.f, 0.f, 0.f};")
            for sfx, _ in steps:
                c(*products(sfx))
            c("acc[i][j][0] += p_[0]; acc[i][j][1] += p_[1];",
              "acc[i][j][2] += p_[2]; acc[i][j][3] += p_[3];")
        c.close().close().close().close()

    def store_tile(self, c: Code, partial: bool) -> None:
        """Each lane holds rows g and g + 8, columns 2t and 2t + 1 of every mma tile."""
        if self.phase is not None:
            self._store_phase_tile(c, partial)
            return
        g = self.g
        pair = g.N % 2 == 0  # the two columns are in or out together: one 8-byte store
        c("#pragma unroll")
        c.open(f"for (int i = 0; i < {self.MT}; ++i)")
        c("#pragma unroll")
        c.open("for (int h = 0; h < 2; ++h)")
        c("const int gm = m0 + wm_ + i * 16 + h * 8 + g_;")
        c.open(f"if (gm < {g.M})")
        c(f"const idx_t rowbase = ((idx_t)bat * {g.M} + gm) * {g.N};")
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.NTL}; ++j)")
        c("const int gn = n0 + wn_ + j * 8 + 2 * t_;")
        dst = "(part + rowbase + gn)" if partial else "(out + rowbase + gn)"
        if pair:
            c.open(f"if (gn < {g.N})")
            vals = [f"acc[i][j][2 * h + {q}]" for q in range(2)]
            if not partial:
                vals = [self.epilogue_value(c, v, f"(rowbase + gn + {q})", "gm", f"(gn + {q})",
                                            f"_{q}") for q, v in enumerate(vals)]
            c(cg.vec_store(dst, vals, 0))
            c.close()
        else:
            for q in range(2):
                c.open(f"if (gn + {q} < {g.N})")
                v = f"acc[i][j][2 * h + {q}]"
                if not partial:
                    v = self.epilogue_value(c, v, f"(rowbase + gn + {q})", "gm", f"(gn + {q})",
                                            f"_{q}")
                c(f"{dst}[{q}] = {v};")
                c.close()
        c.close().close().close().close()

    def _store_phase_tile(self, c: Code, partial: bool) -> None:
        """A phase's columns are output pixels a stride apart: each of a lane's columns is
        decoded once (its pixel, whether this phase has it), then stored element by element
        down its rows, through the epilogue or raw to the split-K workspace."""
        g = self.g
        dst = "part" if partial else "out"
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.NTL}; ++j)")
        c("#pragma unroll")
        c.open("for (int q = 0; q < 2; ++q)")
        c(*self.phased().column_lines("n0 + wn_ + j * 8 + 2 * t_ + q", "c", origin=False))
        c.open("if (validc)")
        c("#pragma unroll")
        c.open(f"for (int i = 0; i < {self.MT}; ++i)")
        c("#pragma unroll")
        c.open("for (int h = 0; h < 2; ++h)")
        c("const int gm = m0 + wm_ + i * 16 + h * 8 + g_;")
        c.open(f"if (gm < {g.M})")
        c(f"const idx_t fl_ = ((idx_t)bat * {g.M} + gm) * {g.N} + pixc;")
        v = "acc[i][j][2 * h + q]"
        if not partial:
            v = self.epilogue_value(c, v, "fl_", "gm", "pixc", "_p")
        c(f"{dst}[fl_] = {v};")
        c.close().close().close().close().close().close()

    def main_kernel(self, c: Code) -> Launch:
        self.prologue(c)
        self.pipeline(c)
        self.finish_main(c)
        return self.main_launch()

    def render(self) -> Rendered:
        c = Code()
        c(cg.prelude(self.plan), CP_ASYNC, MMA)
        if self.ktab:
            c(*self.ktab_decl())
        if self.phase is not None:
            c(*self.phase.tables())
        launches, ws = self.kernels(c)
        g = self.g
        facts: tuple[tuple[str, Any], ...] = (
            ("family", "gemm"), ("mma", self.half or mma_name(self.terms)),
            ("threads", self.NT),
            ("blocks", launches[0].blocks), ("bm", self.BM), ("bn", self.BN),
            ("bk", self.BK), ("wm", self.WM), ("wn", self.WN), ("stages", self.ST),
            ("vec_a", self.AV), ("vec_b", self.BV), ("split", self.SPLIT),
            ("raster", self.raster), ("warp", self.warp), ("unroll", self.unroll),
            ("fresh_steps", self.FRESH), ("M", g.M), ("N", g.N),
            ("K", g.K), ("batch", g.batch), ("smem", self.smem),
            ("a_along", _a_along(g)), ("b_along", _b_along(g)),
            ("skips_zero_tiles", int(self.zero_tile_test() is not None)),
            ("computed_tiles", self.computed_tiles()),
            ("gather_dims", len(g.b_gather.kernel) if g.b_gather is not None else 0),
            ("gather", "table" if self.ktab else "arith"),
            ("gather_transposed", int(g.b_gather is not None and g.b_gather.transposed)))
        if self.phase is not None:
            # a block's product is one phase's: its columns and the largest phase's K; each
            # phase's own K beside (the model prices the multiply-adds each really does); B
            # gathered through tables, with no zeros to skip
            ph = self.phase
            facts = tuple((k, {"N": ph.columns, "K": ph.k_max, "gather": "table",
                               "gather_transposed": 0}.get(k, v)) for k, v in facts)
            facts += (("tconv", "phase"), ("phases", ph.count), ("phase_k", ph.phase_k))
        elif g.b_gather is not None and g.b_gather.phased:
            facts += (("tconv", "gather"),)
        return Rendered(c.text(), tuple(launches), workspace_bytes=ws, facts=facts)
