"""Scaled dot-product attention on tensor cores at fp32 accuracy (3xTF32, as `gemm_tc`).

A block owns BQ query rows of one batch entry; each warp owns 16 of them and the whole head dim,
as mma.sync m16n8k8 tiles. Per tile of BK keys (K and V staged in shared memory as the SIMT
template stages them): S = Q K^T from the Q tile in shared memory, each 8-deep step summed
into a fresh partial and added in rounded fp32 (the tensor core truncates as it accumulates);
scale, mask and causal drop on the accumulator fragments; the online softmax's row max and
sum over the four lanes that share a row (two shuffles); then O += P V with P taken straight
from the score fragments: a lane holds P[g][2t] and P[g][2t + 1], so the product's k index t
is read as key 2t and t + 4 as key 2t + 1, and V's fragment rows are permuted the same way (no
shuffles). Each operand is split into a TF32 big part and the TF32 rounding of the rest: three
mma per tile. The row sum is combined over the quad once, at the end; the epilogue is fused.

Slots: config: query rows per block (4 or 8 warps); memory: keys per tile, single or double
buffered K/V tiles (the SIMT template's copies); compute: fast exp.
"""

from __future__ import annotations

from typing import Any

from ...ir.attention import AttentionInfo
from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Rendered, Slot, Target
from .attention import _AttentionWriter, _vec_ok
from .base import Code, Template
from .gemm_tc import MMA, mma_name, mma_products, mma_terms

PAD = 4  # words of padding on shared rows: conflict-free fragment reads (see _layout)


def _info(plan: KernelPlan) -> AttentionInfo:
    return plan.info


def _layout(cfg: dict[str, Any], info: AttentionInfo) -> dict[str, int]:
    """Shared memory (float offsets). Row pitches of D + 4: lanes (g, t) read word
    g * (D + 4) + t of K (4g + t: 32 banks) and words 2t * (DV + 4) + g of V (8t + g)."""
    bq, bk, st = cfg["config.bm"], cfg["memory.bk"], cfg["memory.stages"]
    ldq = ldk = info.D + PAD
    ldv = info.DV + PAD
    q = 0
    k = q + bq * ldq
    v = k + st * bk * ldk
    end = v + st * bk * ldv
    return {"ldq": ldq, "ldk": ldk, "ldv": ldv, "q": q, "k": k, "v": v, "bytes": 4 * end}


def _registers(cfg: dict[str, Any], info: AttentionInfo) -> int:
    """Estimated registers per thread: output and score fragments, split operands, and the
    prefetched tile when double buffered."""
    bq, bk = cfg["config.bm"], cfg["memory.bk"]
    threads = bq * 2  # 16 rows a warp: 2 threads per row
    est = 48 + info.DV // 2 + bk // 2
    if cfg["memory.stages"] == 2:
        vec = 4 if _vec_ok(info) else 1
        est += (-(-bk * info.D // (vec * threads)) + -(-bk * info.DV // (vec * threads))) * vec
    return est


class AttentionTensorCoreTemplate(Template):
    name = "attention_tc"
    version = "1"

    def applies(self, plan: KernelPlan) -> bool:
        if plan.kind != "attention":
            return False
        info = _info(plan)
        return info.D % 8 == 0 and info.DV % 8 == 0

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.bm", (64, 128), "query rows per block (16 a warp)"),
            Slot("memory.bk", (32, 64), "keys per K/V tile in shared memory"),
            Slot("memory.stages", (1, 2),
                 "single, or double buffered K/V tiles (next tile prefetched to registers)"),
            Slot("compute.fastmath", (0, 1), "hardware exp (__expf) and division"),
        ]

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        info = _info(plan)
        bq, bk = cfg["config.bm"], cfg["memory.bk"]
        if bq > max(64, 2 * info.Sq) or bk > max(32, 2 * info.Sk):
            return "tile far larger than the sequence"
        if _registers(cfg, info) > 255:
            return "fragments and prefetch registers exceed the register budget"
        if _layout(cfg, info)["bytes"] > target.max_smem_per_block:
            return "shared memory per block exceeds the limit"
        if -(-info.Sq // bq) * info.batch >= 2**31:
            return "too many blocks"
        return None

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        return {"config.bm": 64, "memory.bk": 64, "memory.stages": 1, "compute.fastmath": 0}

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        return _TensorCoreAttentionWriter(plan, cfg, mma_terms(target, "matmul")).render()


class _TensorCoreAttentionWriter(_AttentionWriter):
    """The SIMT writer's operand pointers, tile copies and epilogue; mma tiles in between."""

    def __init__(self, plan: KernelPlan, cfg: dict[str, Any],  # noqa: super not called
                 terms: int = 3) -> None:
        self.plan, self.info = plan, _info(plan)
        self.terms = terms
        self.BQ, self.BK = cfg["config.bm"], cfg["memory.bk"]
        self.ST = cfg["memory.stages"]
        self.VEC = 4 if _vec_ok(self.info) else 1
        self.fast = bool(cfg["compute.fastmath"])
        self.unroll = "full"
        self.NT = self.BQ * 2  # a warp per 16 rows
        self.G = 1
        self.NS = self.BK // 8  # score tiles (8 keys) per warp
        self.NO = self.info.DV // 8  # output tiles (8 dims) per warp
        self.lay = _layout(cfg, self.info)
        self.cfg = cfg

    def tile_copies(self) -> list[tuple[str, str, str, int, int]]:
        i = self.info
        return [("Ks", "Kg", "k", i.D, self.lay["ldk"]), ("Vs", "Vg", "v", i.DV, self.lay["ldv"])]

    def render(self) -> Rendered:
        i, lay = self.info, self.lay
        c = Code()
        c(cg.prelude(self.plan), MMA)
        c.open(f'extern "C" __global__ void __launch_bounds__({self.NT}) '
               f"ca_attention({cg.kernel_params(self.plan)})")
        nqt = -(-i.Sq // self.BQ)
        c("extern __shared__ __align__(16) float ca_smem[];",
          f"float* Qs = ca_smem + {lay['q']};", f"float* Ks = ca_smem + {lay['k']};",
          f"float* Vs = ca_smem + {lay['v']};",
          "const int warp_ = threadIdx.x >> 5, lane_ = threadIdx.x & 31;",
          "const int g_ = lane_ >> 2, t_ = lane_ & 3;  // the fragments' row and column",
          # the last query tiles have the most keys under a causal mask: start them first
          f"const int qt = {nqt - 1} - (int)(blockIdx.x % {nqt}u);",
          f"const ca_i64 bz = blockIdx.x / {nqt}u;",
          f"const int q0 = qt * {self.BQ};",
          "const int wr_ = warp_ * 16;  // this warp's first row in the tile",
          "// this thread's two rows: g and g + 8 of the warp's 16",
          "const int qa_ = q0 + wr_ + g_, qb_ = qa_ + 8;")
        self.operand_pointers(c)
        self.emit_copy(c, "Qs", "Qg", "q", i.D, lay["ldq"], self.BQ, "q0", i.Sq)
        c(f"float o_[{self.NO}][4];")
        c("#pragma unroll")
        c(f"for (int n = 0; n < {self.NO}; ++n) {{ o_[n][0] = 0.f; o_[n][1] = 0.f; "
          "o_[n][2] = 0.f; o_[n][3] = 0.f; }")
        c("float m_run[2] = {-CA_INF, -CA_INF}, l_run[2] = {0.f, 0.f};")
        self.key_loop(c)
        self.finish(c)
        c.close()
        return Rendered(c.text(), (self.launch(),), facts=self.facts())

    def probabilities_ready(self, c: Code) -> None:
        """The probabilities stay in the lanes' fragments: nothing to wait for."""

    def scores(self, c: Code) -> None:
        """s_[j]: the warp's 16 x 8 score tile of keys k0 + 8j..; scaled, masked, -inf where
        dropped."""
        i, ldq, ldk = self.info, self.lay["ldq"], self.lay["ldk"]
        c(f"float s_[{self.NS}][4];")
        c("#pragma unroll")
        c(f"for (int j = 0; j < {self.NS}; ++j) {{ s_[j][0] = 0.f; s_[j][1] = 0.f; "
          "s_[j][2] = 0.f; s_[j][3] = 0.f; }")
        c("#pragma unroll 2")
        c.open(f"for (int kk = 0; kk < {i.D}; kk += 8)")
        c("unsigned ab_[4], as_[4];",
          f"const float* qr_ = Qs + (wr_ + g_) * {ldq} + kk + t_;",
          "ca_split_tf32(qr_[0], ab_[0], as_[0]);",
          f"ca_split_tf32(qr_[{8 * ldq}], ab_[1], as_[1]);",
          "ca_split_tf32(qr_[4], ab_[2], as_[2]);",
          f"ca_split_tf32(qr_[{8 * ldq + 4}], ab_[3], as_[3]);")
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.NS}; ++j)")
        c("unsigned bb_[2], bs_[2];",
          f"const float* kr_ = Kt + (j * 8 + g_) * {ldk} + kk + t_;",
          "ca_split_tf32(kr_[0], bb_[0], bs_[0]);",
          "ca_split_tf32(kr_[4], bb_[1], bs_[1]);")
        self.mma3(c, "s_[j]", "ab_", "as_", "bb_", "bs_")
        c.close().close()
        # scale, mask, causal drop: element q of tile j is row (g or g + 8), key 2t + (q & 1)
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.NS}; ++j)")
        c("#pragma unroll")
        c.open("for (int q = 0; q < 4; ++q)")
        c("const int qi = q < 2 ? qa_ : qb_, kj = k0 + j * 8 + 2 * t_ + (q & 1);")
        keep = [f"kj < {i.Sk}", f"qi < {i.Sq}"] + (["kj <= qi"] if i.causal else [])
        c(f"const bool keep = {' && '.join(keep)};")
        score = (f"s_[j][q] * {cg.ops.float_literal(i.scale)}" if i.scale != 1.0 else "s_[j][q]")
        if i.mask is not None:
            m = i.mask
            score += (f" + (keep ? Mg[(ca_i64)qi * {m.row_stride} + (ca_i64)kj * "
                      f"{m.col_stride}] : 0.f)")
        c(f"s_[j][q] = keep ? {score} : -CA_INF;")
        c.close().close()

    def mma3(self, c: Code, acc: str, ab: str, as_: str, bb: str, bs: str) -> None:
        """acc += A B in three TF32 products (one where the user opted into TF32), summed
        apart and added in rounded fp32."""
        c("{ float p_[4] = {0.f, 0.f, 0.f, 0.f};",
          "  " + " ".join(mma_products("p_", ab, as_, bb, bs, self.terms)),
          f"  {acc}[0] += p_[0]; {acc}[1] += p_[1]; {acc}[2] += p_[2]; {acc}[3] += p_[3]; }}")

    def softmax_step(self, c: Code) -> None:
        """Per row h (g: elements 0, 1; g + 8: 2, 3): the tile max over the quad, the rescale
        of the output and sum, the probabilities in place of the scores."""
        c("float alpha_[2];")
        c("#pragma unroll")
        c.open("for (int h = 0; h < 2; ++h)")
        c("float mt = -CA_INF;")
        c("#pragma unroll")
        c(f"for (int j = 0; j < {self.NS}; ++j) mt = ca_max(mt, ca_max(s_[j][2 * h], "
          "s_[j][2 * h + 1]));")
        c("mt = ca_max(mt, __shfl_xor_sync(0xffffffffu, mt, 1));",
          "mt = ca_max(mt, __shfl_xor_sync(0xffffffffu, mt, 2));",
          "const float m_new = ca_max(m_run[h], mt);",
          "// nothing kept yet in this row: no rescale, every probability 0",
          "const float m_use = m_new == -CA_INF ? 0.f : m_new;",
          f"alpha_[h] = {self.exp('m_run[h] - m_use')};",
          "m_run[h] = m_new;",
          "float lsum = 0.f;")
        c("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.NS}; ++j)")
        c(f"s_[j][2 * h] = {self.exp('s_[j][2 * h] - m_use')};",
          f"s_[j][2 * h + 1] = {self.exp('s_[j][2 * h + 1] - m_use')};",
          "lsum += s_[j][2 * h] + s_[j][2 * h + 1];")
        c.close()
        c("l_run[h] = l_run[h] * alpha_[h] + lsum;")
        c.close()
        c("#pragma unroll")
        c(f"for (int n = 0; n < {self.NO}; ++n) {{ o_[n][0] *= alpha_[0]; o_[n][1] *= alpha_[0]; "
          "o_[n][2] *= alpha_[1]; o_[n][3] *= alpha_[1]; }")

    def accumulate(self, c: Code) -> None:
        """o_ += P V: P's fragment from the score tile (k index t = key 2t, t + 4 = key
        2t + 1), V's rows in the same order."""
        ldv = self.lay["ldv"]
        c("#pragma unroll  // s_ stays in registers only if every index is a constant")
        c.open(f"for (int j = 0; j < {self.NS}; ++j)")
        c("unsigned ab_[4], as_[4];",
          "ca_split_tf32(s_[j][0], ab_[0], as_[0]);",
          "ca_split_tf32(s_[j][2], ab_[1], as_[1]);",
          "ca_split_tf32(s_[j][1], ab_[2], as_[2]);",
          "ca_split_tf32(s_[j][3], ab_[3], as_[3]);",
          f"const float* vr_ = Vt + (j * 8 + 2 * t_) * {ldv} + g_;")
        c("#pragma unroll")
        c.open(f"for (int n = 0; n < {self.NO}; ++n)")
        c("unsigned bb_[2], bs_[2];",
          "ca_split_tf32(vr_[n * 8], bb_[0], bs_[0]);",
          f"ca_split_tf32(vr_[n * 8 + {ldv}], bb_[1], bs_[1]);")
        self.mma3(c, "o_[n]", "ab_", "as_", "bb_", "bs_")
        c.close().close()

    def finish(self, c: Code) -> None:
        """The row sums over the quad, normalise, the epilogue, each output stored once."""
        plan, i = self.plan, self.info
        c("#pragma unroll")
        c.open("for (int h = 0; h < 2; ++h)")
        c("l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);",
          "l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);")
        c.close()
        F = len(plan.full_shape)
        reads = cg.epilogue_reads(plan)
        c("#pragma unroll")
        c.open(f"for (int n = 0; n < {self.NO}; ++n)")
        c("#pragma unroll")
        c.open("for (int q = 0; q < 4; ++q)")
        c("const int qi = q < 2 ? qa_ : qb_, d = n * 8 + 2 * t_ + (q & 1);")
        c.open(f"if (qi < {i.Sq})")
        c(f"const ca_i64 n0 = (bz * {i.Sq} + qi) * (ca_i64){i.DV} + d;")
        inv = "__fdividef(o_[n][q], l_run[q >> 1])" if self.fast else "o_[n][q] / l_run[q >> 1]"
        c(f"const float ov = {inv};")
        bound = {plan.anchor_id(): "ov"}
        grp = cg.Group("n0", tuple(range(F)))
        for nid in reads:
            name = f"ep{nid}"
            off = cg.offset_expr(plan, nid, [grp])
            c(f"const float {name} = in{cg.read_index(plan, nid)}[{off}];")
            bound[nid] = name
        stmts, names = cg.emit_values(plan, [plan.output], bound, self.fast, suffix="_e")
        c(*stmts)
        c(f"out[n0] = {names[plan.output]};")
        c.close().close().close()

    def facts(self) -> tuple[tuple[str, Any], ...]:
        i = self.info
        nqt = -(-i.Sq // self.BQ)
        tiles = self.kv_tiles()
        return (("family", "attention"), ("mma", mma_name(self.terms)), ("threads", self.NT),
                ("blocks", nqt * i.batch), ("bq", self.BQ), ("g", 2), ("bk", self.BK),
                ("stages", self.ST), ("vec", self.VEC), ("pad", PAD), ("cache", "smem"),
                ("unroll", "full"), ("fast", int(self.fast)), ("combine", "shfl"),
                ("smem", self.lay["bytes"]), ("Sq", i.Sq), ("Sk", i.Sk), ("D", i.D),
                ("DV", i.DV), ("batch", i.batch), ("causal", int(i.causal)),
                ("masked", int(i.mask is not None)), ("tiles", tiles),
                ("registers_est", _registers(self.cfg, i)))
