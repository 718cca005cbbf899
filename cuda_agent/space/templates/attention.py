"""Scaled dot-product attention in strict fp32: a flash-attention style SIMT kernel with the
epilogue fused.

A block owns BQ query rows of one batch entry (batch and head flattened) and G threads work on
each row. It walks the keys in tiles of BK rows of K and V staged in shared memory. Per tile a
thread scores BK/G keys (keys lane, lane + G, ...: its slice of q . k over the whole head dim),
the row's tile maximum is combined over the G threads, and the scores become probabilities
under the running maximum (online softmax: the accumulator and the running sum are rescaled by
exp(old max - new max) when the maximum grows). The probabilities go through shared memory to
the second product, in which a thread owns the output dims lane, lane + G, ... (consecutive
lanes read consecutive V elements). The running sum is combined over the G threads once, at the
end; the output is written once, through the fused epilogue. Causal attention stops at the last
key tile any row of the block sees, and the blocks with most tiles are scheduled first.

Slots: config: query rows per block (BQ) and threads per row (G); memory: the key tile (BK),
single or double buffered K/V tiles (the next tile is loaded into registers while the current
one is used), 16-byte global loads, one word of padding on the K and Q rows in shared memory
(bank conflicts when the G threads of a row read different keys at the same dim), and where the
query row lives (registers or shared memory); compute: unroll of the head-dim and key loops,
fast exp; reduction: how the G threads of a row combine the row maximum and sum (warp shuffles,
or through shared memory).
"""

from __future__ import annotations

from typing import Any

from ...ir.attention import AttentionInfo, AttnOperand
from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Template

MIN_THREADS = 32
MAX_THREADS = 1024
# registers a thread needs besides its arrays (indices, pointers, running max and sum)
OVERHEAD_REGISTERS = 32


def _info(plan: KernelPlan) -> AttentionInfo:
    return plan.info


def _per_thread(n: int, g: int) -> int:
    return -(-n // g)


def _vec_ok(info: AttentionInfo) -> bool:
    """16-byte loads of q, k and v rows: unit-stride rows whose length and other strides are
    multiples of 4 floats (each vector lies inside one row, aligned)."""
    for op, cols in ((info.q, info.D), (info.k, info.D), (info.v, info.DV)):
        strides = op.batch_strides + (op.row_stride,)
        if op.col_stride != 1 or cols % 4 or any(s % 4 for s in strides):
            return False
    return True


def _layout(cfg: dict[str, Any], info: AttentionInfo) -> dict[str, int]:
    """Shared-memory layout (float offsets) and sizes of one configuration."""
    bq, bk, st, pad = cfg["config.bm"], cfg["memory.bk"], cfg["memory.stages"], cfg["memory.pad"]
    threads = bq * cfg["config.tpr"]
    ldk = info.D + pad
    ldq = ldk if cfg["memory.cache"] == "smem" else 0
    q = 0
    k = q + bq * ldq
    v = k + st * bk * ldk
    p = v + st * bk * info.DV
    red = p + bq * (bk + 1)
    end = red + (threads if cfg["reduction.combine"] == "serial" else 0)
    return {"ldq": ldq, "ldk": ldk, "ldp": bk + 1, "q": q, "k": k, "v": v, "p": p, "red": red,
            "bytes": 4 * end}


def _registers(cfg: dict[str, Any], info: AttentionInfo) -> int:
    """Estimated registers per thread. Besides the accumulators, the scores and the query row,
    the compiler issues every load of an unrolled tile copy before its stores (and holds the
    prefetched tile through the tile's arithmetic), and hoists the V loads of the unrolled keys
    of p @ v: both measured with ptxas to dominate at head dim 128."""
    g, bk = cfg["config.tpr"], cfg["memory.bk"]
    threads = cfg["config.bm"] * g
    dpt = _per_thread(info.DV, g)
    copy = (_per_thread(bk * info.D // cfg["memory.vec"], threads) +
            _per_thread(bk * info.DV // cfg["memory.vec"], threads)) * cfg["memory.vec"]
    est = OVERHEAD_REGISTERS + dpt + bk // g + copy
    est += dpt * (1 if cfg["compute.unroll"] == 1 else 2)
    if cfg["memory.cache"] == "regs":
        est += info.D
    if cfg["memory.stages"] == 2:
        est += copy
    return est


class AttentionTemplate(Template):
    name = "attention"
    version = "1"

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind == "attention"

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.bm", (16, 32, 64, 128), "query rows per block"),
            Slot("config.tpr", (1, 2, 4, 8, 16, 32), "threads per query row"),
            Slot("memory.bk", (16, 32, 64), "keys per K/V tile in shared memory"),
            Slot("memory.stages", (1, 2),
                 "single, or double buffered K/V tiles (next tile prefetched to registers)"),
            Slot("memory.vec", (1, 4), "floats per global load of q, k, v"),
            Slot("memory.pad", (0, 1), "words of padding on the K and Q rows in shared memory"),
            Slot("memory.cache", ("regs", "smem"), "where the query row is kept"),
            Slot("compute.unroll", (1, 4, "full"), "unroll of the head-dim and key loops"),
            Slot("compute.fastmath", (0, 1), "hardware exp (__expf) and division"),
            Slot("reduction.combine", ("shfl", "serial"),
                 "row max and sum over the threads of a row: warp shuffles, or through shared "
                 "memory"),
        ]

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        if cfg["config.tpr"] == 1:
            cfg["reduction.combine"] = "shfl"  # one thread per row: nothing to combine
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        info = _info(plan)
        bq, g, bk = cfg["config.bm"], cfg["config.tpr"], cfg["memory.bk"]
        threads = bq * g
        if not MIN_THREADS <= threads <= MAX_THREADS:
            return f"{threads} threads per block"
        if g > bk:
            return "more threads per row than keys per tile"
        if bq > max(16, 2 * info.Sq) or bk > max(16, 2 * info.Sk):
            return "tile far larger than the sequence"
        if g > max(info.D, info.DV):
            return "more threads per row than head dims"
        if cfg["memory.vec"] == 4 and not _vec_ok(info):
            return "16-byte loads of q, k, v are not aligned here"
        if cfg["memory.cache"] == "regs" and cfg["compute.unroll"] != "full":
            # the query row in registers is indexed by the head-dim loop: it must unroll
            return "a query row in registers needs the head-dim loop fully unrolled"
        cap = min(255, target.regs_per_sm // threads)
        if _registers(cfg, info) > cap:
            return "accumulators, scores and prefetch registers exceed the register budget"
        if _layout(cfg, info)["bytes"] > target.max_smem_per_block:
            return "shared memory per block exceeds the limit"
        if -(-info.Sq // bq) * info.batch >= 2**31:
            return "too many blocks"
        return None

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        return {"config.bm": 64, "config.tpr": 4, "memory.bk": 32, "memory.stages": 1,
                "memory.vec": 1, "memory.pad": 1, "memory.cache": "smem", "compute.unroll": 4,
                "compute.fastmath": 0, "reduction.combine": "shfl"}

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        return _AttentionWriter(plan, cfg).render()


class _AttentionWriter:
    """Renders one configuration: the slot values as attributes, one method per part."""

    def __init__(self, plan: KernelPlan, cfg: dict[str, Any]) -> None:
        self.plan, self.info = plan, _info(plan)
        self.BQ, self.G, self.BK = cfg["config.bm"], cfg["config.tpr"], cfg["memory.bk"]
        self.ST, self.VEC = cfg["memory.stages"], cfg["memory.vec"]
        self.regs_q = cfg["memory.cache"] == "regs"
        self.unroll = cfg["compute.unroll"]
        self.fast = bool(cfg["compute.fastmath"])
        self.serial = cfg["reduction.combine"] == "serial"
        self.NT = self.BQ * self.G
        self.KPT = self.BK // self.G  # keys a thread scores per tile
        self.DPT = _per_thread(self.info.DV, self.G)  # output dims a thread accumulates
        self.lay = _layout(cfg, self.info)
        self.cfg = cfg

    # -- helpers --------------------------------------------------------------------------------
    def pragma(self, full: bool = False) -> str:
        if full or self.unroll == "full":
            return "#pragma unroll"
        return f"#pragma unroll {self.unroll}"

    def exp(self, x: str) -> str:
        return f"__expf({x})" if self.fast else f"expf({x})"

    def combine(self, c: Code, var: str, op: str) -> None:
        """Fold `var` over the G threads of a row (`op`: C of two floats {a} and {b})."""
        if self.G == 1:
            return
        if self.serial:
            c(f"red[threadIdx.x] = {var};", "__syncthreads();")
            c(f"{var} = red[r * {self.G}];")
            c(self.pragma(full=True))
            fold = op.format(a=var, b=f"red[r * {self.G} + g_]")
            c(f"for (int g_ = 1; g_ < {self.G}; ++g_) {var} = {fold};")
            return
        off = self.G // 2
        while off >= 1:
            other = f"__shfl_xor_sync(0xffffffffu, {var}, {off}, {self.G})"
            c(f"{var} = {op.format(a=var, b=other)};")
            off //= 2

    def tile_copies(self) -> list[tuple[str, str, str, int, int]]:
        """(smem array, global pointer, operand name, columns, smem row pitch) of a K/V tile."""
        i = self.info
        return [("Ks", "Kg", "k", i.D, self.lay["ldk"]), ("Vs", "Vg", "v", i.DV, i.DV)]

    def operand(self, name: str) -> AttnOperand:
        return getattr(self.info, name)

    def copy_steps(self, cols: int, rows: int) -> int:
        return _per_thread(rows * cols // self.VEC, self.NT)

    def emit_copy(self, c: Code, smem: str, gptr: str, name: str, cols: int, ld: int,
                  rows: int, row0: str, limit: int, prefetch: str | None = None,
                  store_only: bool = False) -> None:
        """Copy rows [row0, row0 + rows) of an operand to `smem` (zeros from row `limit` on,
        so that masked keys meet finite values), or only load them into the registers
        `prefetch`, or only store those registers (`store_only`)."""
        op = self.operand(name)
        per_row = cols // self.VEC
        total = rows * per_row
        c(self.pragma(full=True))
        c.open(f"for (int s_ = 0; s_ < {self.copy_steps(cols, rows)}; ++s_)")
        c(f"const int e_ = threadIdx.x + s_ * {self.NT};")
        c.open(f"if (e_ < {total})" if total % self.NT else "")
        c(f"const int j_ = e_ / {per_row}, d_ = (e_ % {per_row}) * {self.VEC};")
        reg = f"{prefetch}[s_]" if prefetch else "x_"
        if not store_only:
            zero = "0.f" if self.VEC == 1 else "make_float4(0.f, 0.f, 0.f, 0.f)"
            src = (f"{gptr} + (ca_i64)({row0} + j_) * {op.row_stride} + "
                   f"(ca_i64)d_ * {op.col_stride}")
            lhs = reg if prefetch else f"const {cg.vec_type(self.VEC)} x_"
            c(f"{lhs} = ({row0} + j_ < {limit}) ? {cg.vec_load(src, self.VEC, 0)} : {zero};")
        if store_only or not prefetch:
            c(f"float* row_ = {smem} + j_ * {ld} + d_;")
            c(*[f"row_[{k}] = {cg.vec_get(reg, self.VEC, k)};" for k in range(self.VEC)])
        c.close()
        c.close()

    # -- the kernel ------------------------------------------------------------------------------
    def render(self) -> Rendered:
        plan = self.plan
        c = Code()
        c(cg.prelude(plan))
        c.open(f'extern "C" __global__ void __launch_bounds__({self.NT}) '
               f"ca_attention({cg.kernel_params(plan)})")
        self.setup(c)
        self.load_query(c)
        c(f"float acc[{self.DPT}];")
        c(self.pragma(full=True))
        c(f"for (int c_ = 0; c_ < {self.DPT}; ++c_) acc[c_] = 0.f;")
        c("float m_run = -CA_INF, l_run = 0.f;")
        self.key_loop(c)
        self.finish(c)
        c.close()
        return Rendered(c.text(), (self.launch(),), facts=self.facts())

    def key_loop(self, c: Code) -> None:
        """The walk over the key tiles: the first K/V tile staged, then per tile the scores,
        the online softmax step, the product with V and the next tile's copy (Kt, Vt: the
        tile in use, of the two buffers when double buffered)."""
        i = self.info
        kend = f"min({i.Sk}, q0 + {self.BQ})" if i.causal else f"{i.Sk}"
        c(f"const int ntiles = ({kend} + {self.BK - 1}) / {self.BK};")
        tiles = self.tile_copies()
        for smem, gptr, name, cols, ld in tiles:
            self.emit_copy(c, smem, gptr, name, cols, ld, self.BK, "0", i.Sk)
        c("__syncthreads();")
        c.open("for (int t = 0; t < ntiles; ++t)")
        c(f"const int k0 = t * {self.BK};")
        for smem, _, _, _, ld in tiles:
            buf = f" + (t & 1) * {self.BK * ld}" if self.ST == 2 else ""
            c(f"const float* {smem[0]}t = {smem}{buf};")
        if self.ST == 2:
            self.prefetch(c)
        self.scores(c)
        self.softmax_step(c)
        self.probabilities_ready(c)
        self.accumulate(c)
        self.next_tile(c)
        c.close()

    def probabilities_ready(self, c: Code) -> None:
        c("__syncthreads();  // probabilities visible; the K tile is no longer read")

    def setup(self, c: Code) -> None:
        i, lay = self.info, self.lay
        nqt = -(-i.Sq // self.BQ)
        c("extern __shared__ __align__(16) float ca_smem[];")
        c(f"float* Qs = ca_smem + {lay['q']};", f"float* Ks = ca_smem + {lay['k']};",
          f"float* Vs = ca_smem + {lay['v']};", f"float* Ps = ca_smem + {lay['p']};")
        if self.serial and self.G > 1:
            c(f"float* red = ca_smem + {lay['red']};")
        c(f"const int r = threadIdx.x / {self.G}, lane = threadIdx.x % {self.G};")
        # the last query tiles have the most keys under a causal mask: start them first
        c(f"const int qt = {nqt - 1} - (int)(blockIdx.x % {nqt}u);",
          f"const ca_i64 bz = blockIdx.x / {nqt}u;",
          f"const int q0 = qt * {self.BQ}, qi = q0 + r;")
        self.operand_pointers(c)

    def operand_pointers(self, c: Code) -> None:
        """Qg, Kg, Vg (and Mg): each operand at batch entry bz, decomposed over the batch dims,
        innermost first."""
        i = self.info
        names = [("q", i.q), ("k", i.k), ("v", i.v)] + ([("m", i.mask)] if i.mask else [])
        for name, _ in names:
            c(f"ca_i64 off_{name} = 0;")
        if i.batch_shape:
            c("ca_i64 rest_ = bz;")
            for d in reversed(range(len(i.batch_shape))):
                size = i.batch_shape[d]
                c(f"{{ const ca_i64 ix_ = rest_ % {size}; rest_ /= {size};")
                for name, op in names:
                    if op.batch_strides[d]:
                        c(f"  off_{name} += ix_ * {op.batch_strides[d]};")
                c("}")
        for name, op in names:
            c(f"const float* __restrict__ {name.upper()}g = in{op.index} + off_{name};")

    def load_query(self, c: Code) -> None:
        i = self.info
        if self.regs_q:
            c(f"float qr[{i.D}];")
            c(self.pragma(full=True))
            c(f"for (int d = 0; d < {i.D}; ++d) qr[d] = qi < {i.Sq} ? "
              f"Qg[(ca_i64)qi * {i.q.row_stride} + (ca_i64)d * {i.q.col_stride}] : 0.f;")
            return
        self.emit_copy(c, "Qs", "Qg", "q", i.D, self.lay["ldq"], self.BQ, "q0", i.Sq)

    def prefetch(self, c: Code) -> None:
        """Double buffering: the next tile's loads are issued into registers now, stored to
        the other buffer after this tile is used."""
        vt = cg.vec_type(self.VEC)
        c("const bool more = t + 1 < ntiles;")
        for smem, gptr, name, cols, ld in self.tile_copies():
            c(f"{vt} pf_{name}[{self.copy_steps(cols, self.BK)}];")
            c.open("if (more)")
            self.emit_copy(c, smem, gptr, name, cols, ld, self.BK, "k0 + " + str(self.BK),
                           self.info.Sk, prefetch=f"pf_{name}")
            c.close()

    def next_tile(self, c: Code) -> None:
        if self.ST == 2:
            c.open("if (more)")
            for smem, gptr, name, cols, ld in self.tile_copies():
                nxt = f"{smem} + ((t + 1) & 1) * {self.BK * ld}"
                c.open("")
                c(f"float* dst_ = {nxt};")
                self.emit_copy(c, "dst_", gptr, name, cols, ld, self.BK, "k0", 0,
                               prefetch=f"pf_{name}", store_only=True)
                c.close()
            c.close()
            c("__syncthreads();")
            return
        c("__syncthreads();  // every thread is done with the V tile")
        c.open("if (t + 1 < ntiles)")
        for smem, gptr, name, cols, ld in self.tile_copies():
            self.emit_copy(c, smem, gptr, name, cols, ld, self.BK, f"k0 + {self.BK}",
                           self.info.Sk)
        c.close()
        c("__syncthreads();")

    def scores(self, c: Code) -> None:
        """s[i]: scaled (masked) score of key lane + G*i of the tile, -inf where dropped."""
        i = self.info
        ldk, ldq = self.lay["ldk"], self.lay["ldq"]
        q_at = "qr[d]" if self.regs_q else f"Qs[r * {ldq} + d]"
        c(f"float s[{self.KPT}];")
        c(self.pragma(full=True))
        c.open(f"for (int i = 0; i < {self.KPT}; ++i)")
        c(f"const int j = lane + {self.G} * i, kj = k0 + j;")
        c("float dot = 0.f;")
        c(self.pragma(full=self.regs_q))
        c(f"for (int d = 0; d < {i.D}; ++d) dot = fmaf({q_at}, Kt[j * {ldk} + d], dot);")
        keep = [f"kj < {i.Sk}", f"qi < {i.Sq}"] + (["kj <= qi"] if i.causal else [])
        c(f"const bool keep = {' && '.join(keep)};")
        score = f"dot * {cg.ops.float_literal(i.scale)}" if i.scale != 1.0 else "dot"
        if i.mask is not None:
            m = i.mask
            score += (f" + (keep ? Mg[(ca_i64)qi * {m.row_stride} + (ca_i64)kj * "
                      f"{m.col_stride}] : 0.f)")
        c(f"s[i] = keep ? {score} : -CA_INF;")
        c.close()

    def softmax_step(self, c: Code) -> None:
        """Online softmax: the tile's row max, the rescale factor, the probabilities."""
        c("float mt = -CA_INF;")
        c(self.pragma(full=True))
        c(f"for (int i = 0; i < {self.KPT}; ++i) mt = ca_max(mt, s[i]);")
        self.combine(c, "mt", "ca_max({a}, {b})")
        c("const float m_new = ca_max(m_run, mt);",
          "// nothing kept yet in this row: no rescale, every probability 0",
          "const float m_use = m_new == -CA_INF ? 0.f : m_new;",
          f"const float alpha = {self.exp('m_run - m_use')};",
          "m_run = m_new;",
          "float lsum = 0.f;")
        c(self.pragma(full=True))
        c.open(f"for (int i = 0; i < {self.KPT}; ++i)")
        c(f"const float p = {self.exp('s[i] - m_use')};")
        c(f"Ps[r * {self.lay['ldp']} + lane + {self.G} * i] = p;", "lsum += p;")
        c.close()
        c("l_run = l_run * alpha + lsum;")

    def accumulate(self, c: Code) -> None:
        """acc = acc * alpha + P(row) @ V(tile), over the thread's output dims."""
        i = self.info
        c(self.pragma(full=True))
        c(f"for (int c_ = 0; c_ < {self.DPT}; ++c_) acc[c_] *= alpha;")
        c(self.pragma())
        c.open(f"for (int j = 0; j < {self.BK}; ++j)")
        c(f"const float p = Ps[r * {self.lay['ldp']} + j];")
        c(f"const float* vr = Vt + j * {i.DV} + lane;")
        c(self.pragma(full=True))
        if i.DV % self.G:
            c(f"for (int c_ = 0; c_ < {self.DPT}; ++c_) if (lane + {self.G} * c_ < {i.DV}) "
              f"acc[c_] = fmaf(p, vr[{self.G} * c_], acc[c_]);")
        else:
            c(f"for (int c_ = 0; c_ < {self.DPT}; ++c_) "
              f"acc[c_] = fmaf(p, vr[{self.G} * c_], acc[c_]);")
        c.close()

    def finish(self, c: Code) -> None:
        """Combine the row sum, normalise, apply the epilogue, store each output once."""
        plan, i = self.plan, self.info
        self.combine(c, "l_run", "{a} + {b}")
        c(f"const float inv = {'__fdividef(1.f, l_run)' if self.fast else '1.f / l_run'};")
        c.open(f"if (qi < {i.Sq})")
        F = len(plan.full_shape)
        reads = cg.epilogue_reads(plan)
        for k in range(self.DPT):
            d = f"lane + {self.G * k}"
            c.open(f"if ({d} < {i.DV})" if i.DV % self.G else "")
            c(f"const ca_i64 n{k} = (bz * {i.Sq} + qi) * (ca_i64){i.DV} + {d};")
            value = f"acc[{k}] * inv" if self.fast else f"acc[{k}] / l_run"
            c(f"const float ov{k} = {value};")
            bound = {plan.anchor_id(): f"ov{k}"}
            grp = cg.Group(f"n{k}", tuple(range(F)))
            for nid in reads:
                name = f"ep{nid}_{k}"
                off = cg.offset_expr(plan, nid, [grp])
                c(f"const float {name} = in{cg.read_index(plan, nid)}[{off}];")
                bound[nid] = name
            stmts, names = cg.emit_values(plan, [plan.output], bound, self.fast, suffix=f"_{k}")
            c(*stmts)
            c(f"out[n{k}] = {names[plan.output]};")
            c.close()
        c.close()

    def launch(self) -> Launch:
        i = self.info
        blocks = -(-i.Sq // self.BQ) * i.batch
        return Launch("ca_attention", (blocks, 1, 1), (self.NT, 1, 1), self.lay["bytes"])

    def kv_tiles(self) -> int:
        """Key/value tiles the blocks visit (a causal block stops at its diagonal)."""
        i = self.info
        return sum(-(-(min(i.Sk, (q + 1) * self.BQ) if i.causal else i.Sk) // self.BK)
                   for q in range(-(-i.Sq // self.BQ))) * i.batch

    def facts(self) -> tuple[tuple[str, Any], ...]:
        i = self.info
        nqt = -(-i.Sq // self.BQ)
        tiles = self.kv_tiles()
        return (("family", "attention"), ("threads", self.NT), ("blocks", nqt * i.batch),
                ("bq", self.BQ), ("g", self.G), ("bk", self.BK), ("stages", self.ST),
                ("vec", self.VEC), ("pad", self.cfg["memory.pad"]),
                ("cache", self.cfg["memory.cache"]), ("unroll", str(self.unroll)),
                ("fast", int(self.fast)), ("combine", self.cfg["reduction.combine"]),
                ("smem", self.lay["bytes"]), ("Sq", i.Sq), ("Sk", i.Sk), ("D", i.D),
                ("DV", i.DV), ("batch", i.batch), ("causal", int(i.causal)),
                ("masked", int(i.mask is not None)), ("tiles", tiles),
                ("registers_est", _registers(self.cfg, i)))
