"""Scans (cumsum, cumprod; reverse, exclusive; a fused prologue and epilogue) over F = (O, L, I).

Two shapes of work, chosen by the plan:

* rows (I == 1: the scanned dim is innermost, a row is contiguous): a group of ``tpr`` threads
  per row (``block / tpr`` rows per block) walks the row in tiles of tpr x items x vec
  elements. Each thread loads its items x vec consecutive elements (vector loads), scans them
  in registers, the group scans the thread totals (warp shuffles then shared memory across
  warps, or a shared-memory Hillis-Steele tree: the reduction agent's ``combine``), and a
  running prefix carries from tile to tile;
* columns (I > 1: a scan along a middle dim): a thread per vec consecutive elements of I walks
  L sequentially; warps read consecutive addresses at every step. ``unroll`` steps are loaded
  before they are accumulated, so several loads are in flight per thread.

In both, ``reduction.split`` cuts L into chunks scanned by different blocks (few long rows or
few columns would otherwise leave the GPU idle): a first kernel writes each chunk's total to
the workspace (reduce-then-scan), the second scans every chunk starting from the combination of
the totals before it. Accumulation is fp32 in scan order; the split only regroups the sum.
Reverse scans walk L from its end; exclusive scans write the prefix before each element.
"""

from __future__ import annotations

from typing import Any

from ...ir.plan import KernelPlan
from ...ir.scan import ScanInfo
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Template

SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
FULL = "0xffffffffu"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _info(plan: KernelPlan) -> ScanInfo:
    return plan.info


def _rows(plan: KernelPlan) -> bool:
    """Rows mode: the scanned dim is innermost (I == 1)."""
    return _info(plan).I == 1



def _vector_ok(plan: KernelPlan, vec: int) -> bool:
    """Every operand reads `vec` consecutive elements along the vectorized dim (L for rows, I
    for columns) with one load, or is constant over them."""
    def check() -> bool:
        info = _info(plan)
        grp = _groups(plan)[1 if _rows(plan) else 2]
        if (info.L if _rows(plan) else info.I) % vec:
            return False
        return all(cg.is_unit_stride(plan, nid, grp, vec) or cg.is_splat(plan, nid, grp, vec)
                   for _, nid in _operands(plan))
    return plan.cached(("scan_vector_ok", vec), check)


def _groups(plan: KernelPlan) -> tuple[cg.Group, cg.Group, cg.Group]:
    d, rank = _info(plan).dim, len(plan.full_shape)
    return (cg.Group("o", tuple(range(d))), cg.Group("l", (d,)),
            cg.Group("i", tuple(range(d + 1, rank))))


def _operands(plan: KernelPlan) -> list[tuple[int, int]]:
    return plan.cached("scan_operands", lambda: [(k, cg.operand_node(plan, k))
                                                  for k in plan.operands])


def row_chunks(L: int, tile: int, split: int) -> tuple[int, int]:
    """(chunks, chunk length): L cut into `split` chunks of whole tiles (fewer if they run out)."""
    ch = _cdiv(_cdiv(L, tile), split) * tile
    return _cdiv(L, ch), ch


def col_chunks(L: int, split: int) -> tuple[int, int]:
    ch = _cdiv(L, split)
    return _cdiv(L, ch), ch


class ScanTemplate(Template):
    name = "scan"
    version = "1"

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind == "scan"

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        common = [
            Slot("config.block", (32, 64, 128, 256, 512, 1024), "threads per block"),
            Slot("memory.vec", (1, 2, 4), "elements per load/store along the contiguous dim"),
            Slot("memory.load", ("default", "ldg", "stream"), "load cache hint"),
            Slot("memory.store", ("default", "stream"), "store cache hint"),
            Slot("compute.fastmath", (0, 1) if plan.fast_math_matters() else (0,),
                 "hardware approximations of exp/log/div in the prologue and epilogue"),
            Slot("reduction.split", SPLITS,
                 "chunks of the scanned dim per row, scanned by different blocks (two-pass)"),
        ]
        if _rows(plan):
            return common + [
                Slot("config.tpr", (32, 64, 128, 256, 512, 1024), "threads per row"),
                Slot("config.items", (1, 2, 4, 8), "vectors per thread per tile"),
                Slot("reduction.combine", ("shfl", "smem_tree"),
                     "scan of thread totals: warp shuffles, or a shared-memory tree"),
            ]
        return common + [Slot("compute.unroll", (1, 2, 4, 8),
                              "steps of the scanned dim loaded before they are accumulated")]

    # -- validity ------------------------------------------------------------------------------
    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        info = _info(plan)
        L, vec, block, split = info.L, cfg["memory.vec"], cfg["config.block"], \
            cfg["reduction.split"]
        if L >= 2**31 - 2**22:
            return "scanned dim too long for int indices"
        if vec > 1 and not _vector_ok(plan, vec):
            return f"an operand cannot be read in vectors of {vec}"
        if _rows(plan):
            T, items = cfg["config.tpr"], cfg["config.items"]
            G = block // T
            if T > block:
                return "more threads per row than threads per block"
            if items > 1 and T * (items // 2) * vec >= L:
                return "more items per thread than the row needs"
            if T > 32 and (T // 2) * items * vec >= L:
                return "more threads per row than the row needs"
            if G > 1 and G // 2 >= info.O:
                return "more rows per block than there are rows"
            if split > 1:
                if G > 1:
                    return "a split row needs a block of its own (tpr == block)"
                if row_chunks(L, T * items * vec, split)[0] != split:
                    return f"the row has fewer than {split} tiles to split"
            return None
        ncols = info.O * info.I // vec
        if block > 32 and block // 2 >= ncols:
            return "more threads per block than columns"
        S, CH = col_chunks(L, split)
        if split > 1 and S != split:
            return f"the scanned dim is too short for {split} chunks"
        if cfg["compute.unroll"] > 1 and cfg["compute.unroll"] > CH:
            return "unroll beyond the chunk length"
        return None

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        if not plan.fast_math_matters():
            cfg["compute.fastmath"] = 0
        return cfg

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        info = _info(plan)
        base = {"memory.vec": 1, "memory.load": "default", "memory.store": "default",
                "compute.fastmath": 0, "reduction.split": 1}
        if _rows(plan):
            T = 32  # threads per row: up to 256 while the row has work for them
            while T < 256 and T < info.L:
                T *= 2
            block = T  # several rows per block for short rows, while there are rows
            while block < 128 and block * 2 // T // 2 < info.O:
                block *= 2
            return {**base, "config.block": block, "config.tpr": T, "config.items": 1,
                    "reduction.combine": "shfl"}
        block = 256
        while block > 32 and block // 2 >= info.O * info.I:
            block //= 2
        return {**base, "config.block": block, "compute.unroll": 1}

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        return _Renderer(plan, cfg).render()


class _Renderer:
    """The launch sequence of one configuration: [chunk totals,] scan."""

    def __init__(self, plan: KernelPlan, cfg: dict[str, Any]) -> None:
        self.plan, self.cfg, self.info = plan, cfg, _info(plan)
        self.rows = _rows(plan)
        self.B, self.vec = cfg["config.block"], cfg["memory.vec"]
        self.hint = cg.HINTS[cfg["memory.load"]]
        self.shint = cg.STORE_HINTS[cfg["memory.store"]]
        self.fast = bool(cfg["compute.fastmath"])
        self.idx_t = "int" if plan.numel + (1 << 22) < 2**31 else "long long"
        self.go, self.gl, self.gi = _groups(plan)
        self.operands = _operands(plan)
        L = self.info.L
        if self.rows:
            self.T, self.items = cfg["config.tpr"], cfg["config.items"]
            self.G = self.B // self.T
            self.K = self.items * self.vec
            self.tile = self.T * self.K
            self.S, self.CH = row_chunks(L, self.tile, cfg["reduction.split"])
            self.combine = cfg["reduction.combine"]
        else:
            self.unroll = cfg["compute.unroll"]
            self.S, self.CH = col_chunks(L, cfg["reduction.split"])
            self.NC = self.info.O * self.info.I // self.vec

    # -- shared pieces -------------------------------------------------------------------------
    def op(self, a: str, b: str) -> str:
        return self.info.op(a, b)

    def head(self, c: Code, name: str) -> None:
        c.open(f'extern "C" __global__ void __launch_bounds__({self.B}) '
               f"{name}({cg.kernel_params(self.plan)})")
        c(f"typedef {self.idx_t} idx_t;", "float* wsf = reinterpret_cast<float*>(ws);")

    def load(self, c: Code, tag: str, ok: str, grp_var: tuple[str, str, str]) -> dict[int, list[str]]:
        """Vector loads of every operand at (o, l, i) = grp_var (zeros where `ok` is false);
        returns per operand node its lane expressions in memory order."""
        plan, vec = self.plan, self.vec
        vdim = self.gl if self.rows else self.gi
        groups = [cg.Group(v, g.dims) for v, g in zip(grp_var, (self.go, self.gl, self.gi))]
        vgrp = groups[1] if self.rows else groups[2]
        lanes: dict[int, list[str]] = {}
        for k, nid in self.operands:
            name = f"a{k}_{tag}"
            off = cg.offset_expr(plan, nid, groups)
            if vec > 1 and cg.is_unit_stride(plan, nid, cg.Group(vgrp.var, vdim.dims), vec):
                vt = cg.vec_type(vec)
                zero = "make_float2(0.f, 0.f)" if vec == 2 else "make_float4(0.f, 0.f, 0.f, 0.f)"
                c(f"{vt} {name} = {zero};",
                  f"if ({ok}) {name} = {cg.vec_load(f'in{k} + ({off})', vec, self.hint)};")
                lanes[nid] = [cg.vec_get(name, vec, l) for l in range(vec)]
            else:  # scalar, or constant over the vector (masked by check otherwise)
                c(f"float {name} = 0.f;", f"if ({ok}) {name} = ca_ld<{self.hint}>(in{k} + ({off}));")
                lanes[nid] = [name] * vec
        return lanes

    def prologue(self, c: Code, lanes: dict[int, list[str]], lane: int, tag: str) -> str:
        """The scanned value at one lane, computed from the loaded operands."""
        stmts, names = cg.emit_values(self.plan, [self.info.arg],
                                      {n: v[lane] for n, v in lanes.items()}, self.fast,
                                      suffix=f"_p{tag}")
        c(*stmts)
        return names[self.info.arg]

    def epilogue(self, c: Code, lanes: dict[int, list[str]], lane: int, scanned: str,
                 tag: str) -> str:
        bound = {n: v[lane] for n, v in lanes.items()}
        bound[self.plan.anchor_id()] = scanned
        stmts, names = cg.emit_values(self.plan, [self.plan.output], bound, self.fast,
                                      suffix=f"_e{tag}")
        c(*stmts)
        return names[self.plan.output]

    def order(self, lane: int) -> int:
        """Memory lane of logical lane `lane` of a vector (a reverse scan walks vectors
        backwards)."""
        return self.vec - 1 - lane if self.info.reverse else lane

    # -- rows ----------------------------------------------------------------------------------
    def group_scan(self, c: Code, x: str) -> None:
        """Scan of the thread totals `x` over the T threads of each row: defines `ex` (the
        combination of earlier threads' totals) and `tot` (the row tile's total)."""
        T, B, ident = self.T, self.B, self.info.identity
        if self.combine == "shfl":
            c(f"float xs = {x};")
            off = 1
            while off < 32:
                c(f"{{ const float y_ = __shfl_up_sync({FULL}, xs, {off}); "
                  f"if (wl >= {off}) xs = {self.op('y_', 'xs')}; }}")
                off *= 2
            c(f"float wex = __shfl_up_sync({FULL}, xs, 1);", f"if (wl == 0) wex = {ident};")
            if T == 32:
                c("const float ex = wex;", f"const float tot = __shfl_sync({FULL}, xs, 31);")
                return
            W = T // 32
            c("if (wl == 31) ca_wt[threadIdx.x >> 5] = xs;", "__syncthreads();")
            c(f"float pre = {ident}, tot = {ident};",
              f"const int wi = (threadIdx.x >> 5) - grp * {W};")
            c("#pragma unroll")
            c.open(f"for (int w = 0; w < {W}; ++w)")
            c(f"const float t_ = ca_wt[grp * {W} + w];",
              f"if (w < wi) pre = {self.op('pre', 't_')};",
              f"tot = {self.op('tot', 't_')};")
            c.close()
            c(f"const float ex = {self.op('pre', 'wex')};", "__syncthreads();")
            return
        # smem_tree: Hillis-Steele over the row's T slots, double-buffered
        c(f"ca_sc[threadIdx.x] = {x};", "__syncthreads();")
        src, off = 0, 1
        while off < T:
            dst = B - src
            c(f"{{ float v_ = ca_sc[{src} + threadIdx.x]; "
              f"if (lane >= {off}) v_ = {self.op(f'ca_sc[{src} + threadIdx.x - {off}]', 'v_')}; "
              f"ca_sc[{dst} + threadIdx.x] = v_; }}", "__syncthreads();")
            src, off = dst, off * 2
        c(f"const float ex = lane > 0 ? ca_sc[{src} + threadIdx.x - 1] : {ident};",
          f"const float tot = ca_sc[{src} + grp * {T} + {T - 1}];", "__syncthreads();")

    def row_kernel(self, c: Code, totals: bool) -> Launch:
        """A pass over tiles of each row chunk: scan and write (or, with `totals`, only the
        chunk's total to the workspace)."""
        info, T, K, vec, G = self.info, self.T, self.K, self.vec, self.G
        L, ident = info.L, info.identity
        name = "ca_scan_totals" if totals else "ca_scan_rows"
        self.head(c, name)
        if self.combine == "shfl" and T > 32:
            c(f"__shared__ float ca_wt[{self.B // 32}];")
        elif self.combine == "smem_tree":
            c(f"__shared__ float ca_sc[{2 * self.B}];")
        c(f"const int lane = threadIdx.x % {T};", f"const int grp = threadIdx.x / {T};",
          "const int wl = threadIdx.x & 31;",
          f"const idx_t o = (idx_t)blockIdx.x * {G} + grp;",
          f"const bool row_ok = o < {info.O};",
          "const idx_t i = 0;",
          f"const int p_begin = blockIdx.y * {self.CH};",
          f"const int p_end = p_begin + {self.CH} < {L} ? p_begin + {self.CH} : {L};")
        c(f"float carry = {ident};")
        if not totals and self.S > 1:
            c("// the chunks before this one, from the first pass",
              "for (int s = 0; s < (int)blockIdx.y; ++s) "
              f"carry = {self.op('carry', f'wsf[o * {self.S} + s]')};")
        c("// block-uniform loop: every thread reaches the barriers inside")
        c.open(f"for (int p0 = p_begin; p0 < p_end; p0 += {self.tile})")
        c(f"const int pt = p0 + lane * {K};")
        lanes_of: list[dict[int, list[str]]] = []
        vals: list[str] = []
        for j in range(self.items):
            c(f"const int q{j} = pt + {j * vec};  // logical position of vector {j}",
              f"const bool ok{j} = row_ok && q{j} < p_end;",
              f"const int l{j} = {f'{L} - q{j} - {vec}' if info.reverse else f'q{j}'};")
            lanes = self.load(c, str(j), f"ok{j}", ("o", f"l{j}", "i"))
            lanes_of.append(lanes)
            for lg in range(vec):
                v = self.prologue(c, lanes, self.order(lg), f"{j}_{lg}")
                e = len(vals)
                c(f"float s{e} = ok{j} ? (float)({v}) : {ident};")
                vals.append(f"s{e}")
        if totals:
            c(f"float acc = {vals[0]};")
            for v in vals[1:]:
                c(f"acc = {self.op('acc', v)};")
            self.group_scan(c, "acc")
            c(f"carry = {self.op('carry', 'tot')};")
            c.close()
            c(f"if (row_ok && lane == 0) wsf[o * {self.S} + blockIdx.y] = carry;")
            c.close()
            return Launch(name, (_cdiv(info.O, G), self.S, 1), (self.B, 1, 1))
        for e in range(1, K):
            c(f"s{e} = {self.op(f's{e - 1}', f's{e}')};")
        self.group_scan(c, f"s{K - 1}")
        c(f"const float prefix = {self.op('carry', 'ex')};")
        for j in range(self.items):
            c.open(f"if (ok{j})")
            outs = {}
            for lg in range(vec):
                e = j * vec + lg
                if info.exclusive:
                    r = "prefix" if e == 0 else self.op("prefix", f"s{e - 1}")
                else:
                    r = self.op("prefix", f"s{e}")
                c(f"const float r{e} = {r};")
                outs[self.order(lg)] = self.epilogue(c, lanes_of[j], self.order(lg),
                                                     f"r{e}", f"{j}_{lg}")
            c(cg.vec_store(f"out + (o * {L} + l{j})", [outs[m] for m in range(vec)],
                           self.shint))
            c.close()
        c(f"carry = {self.op('carry', 'tot')};")
        c.close()
        c.close()
        return Launch(name, (_cdiv(info.O, G), self.S, 1), (self.B, 1, 1))

    # -- columns -------------------------------------------------------------------------------
    def col_step(self, c: Code, steps: int, totals: bool, tag: str) -> None:
        """`steps` consecutive steps of the scanned dim from logical position p: all loads
        first, then the sequential accumulation (and the stores)."""
        info, vec, L = self.info, self.vec, self.info.L
        lanes_of = []
        for u in range(steps):
            c(f"const int l{tag}{u} = {f'{L - 1} - (p + {u})' if info.reverse else f'p + {u}'};")
            lanes_of.append(self.load(c, f"{tag}{u}", "true", ("o", f"l{tag}{u}", "i")))
        for u in range(steps):
            outs = []
            for m in range(vec):
                v = self.prologue(c, lanes_of[u], m, f"{tag}{u}_{m}")
                if totals:
                    c(f"carry{m} = {self.op(f'carry{m}', v)};")
                    continue
                if info.exclusive:
                    c(f"const float r{tag}{u}_{m} = carry{m};",
                      f"carry{m} = {self.op(f'carry{m}', v)};")
                else:
                    c(f"carry{m} = {self.op(f'carry{m}', v)};",
                      f"const float r{tag}{u}_{m} = carry{m};")
                outs.append(self.epilogue(c, lanes_of[u], m, f"r{tag}{u}_{m}", f"{tag}{u}_{m}"))
            if not totals:
                c(cg.vec_store(f"out + ((o * {L} + l{tag}{u}) * {info.I} + i)", outs,
                               self.shint))

    def col_kernel(self, c: Code, totals: bool) -> Launch:
        info, vec, S, ident = self.info, self.vec, self.S, self.info.identity
        name = "ca_scan_totals" if totals else "ca_scan_cols"
        self.head(c, name)
        IV = info.I // vec
        c(f"const idx_t col = (idx_t)blockIdx.x * {self.B} + threadIdx.x;",
          f"if (col >= {self.NC}) return;  // no barriers below",
          f"const idx_t o = col / {IV};",
          f"const idx_t i = (col % {IV}) * {vec};",
          f"const int p_begin = blockIdx.y * {self.CH};",
          f"const int p_end = p_begin + {self.CH} < {info.L} ? p_begin + {self.CH} : {info.L};")
        for m in range(vec):
            c(f"float carry{m} = {ident};")
        if not totals and S > 1:
            c.open("for (int s = 0; s < (int)blockIdx.y; ++s)")
            for m in range(vec):
                c(f"carry{m} = {self.op(f'carry{m}', f'wsf[(o * {S} + s) * {info.I} + i + {m}]')};")
            c.close()
        c("int p = p_begin;")
        if self.unroll > 1:
            c.open(f"for (; p + {self.unroll} <= p_end; p += {self.unroll})")
            self.col_step(c, self.unroll, totals, "u")
            c.close()
        c("#pragma unroll 1")
        c.open("for (; p < p_end; ++p)")
        self.col_step(c, 1, totals, "t")
        c.close()
        if totals:
            for m in range(vec):
                c(f"wsf[(o * {S} + blockIdx.y) * {info.I} + i + {m}] = carry{m};")
        c.close()
        return Launch(name, (_cdiv(self.NC, self.B), S, 1), (self.B, 1, 1))

    def render(self) -> Rendered:
        info = self.info
        c = Code()
        c(cg.prelude(self.plan))
        kernel = self.row_kernel if self.rows else self.col_kernel
        launches = []
        if self.S > 1:
            launches.append(kernel(c, True))
        launches.append(kernel(c, False))
        ws_words = info.O * self.S * (1 if self.rows else info.I) if self.S > 1 else 0
        blocks = launches[-1].blocks
        facts = (("family", "scan"), ("threads", self.B), ("blocks", blocks), ("vec", self.vec),
                 ("items", self.items if self.rows else self.unroll),
                 ("tpr", self.T if self.rows else 1), ("splits", self.S),
                 ("combine", self.combine if self.rows else "serial"),
                 ("fast", int(self.fast)), ("passes", len(launches)),
                 ("launches", len(launches)), ("rows", info.O * info.I), ("row_len", info.L),
                 ("reads_per_elem", float(len(launches))))
        return Rendered(c.text(), tuple(launches), 4 * ws_words, facts=facts)
