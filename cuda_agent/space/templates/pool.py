"""Max and average pooling, 1-3 spatial dims: one thread computes ITEMS consecutive outputs
along the innermost output dim, then the fused epilogue.

The input is read as (planes, *spatial). Work item t is (plane, outer output dims, chunk of
ITEMS outputs of one output row). For every window row (the outer window dims), the thread
either loads the SPAN input elements its ITEMS windows cover once into registers and reduces
from there (``memory.cache=regs``: a window element shared by overlapping windows is loaded
once), or loads each window element where it is used (``reload``: repeats hit L1).

Padding follows torch: a padded position is never read; max ignores it (as -inf would), avg
adds nothing and divides by torch's divisor (the window clipped at input+padding when
count_include_pad, at the input otherwise, or divisor_override). ``compute.guard=interior``
gives threads whose whole footprint lies inside the input a copy of the loop without bounds
checks (most threads on large inputs); ``all`` checks every load.
"""

from __future__ import annotations

import math
from typing import Any

from ...ir.conv import window_info
from ...ir.pool import PoolInfo
from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Template, persistent_grid

MAX_SPAN = 64  # registers one thread may hold for a shared window row
MAX_WEIGHTS = 64  # registers one thread may hold for a depthwise convolution's weights


def span(info: PoolInfo, items: int) -> int:
    """Input elements of one innermost window row covered by ITEMS consecutive outputs."""
    return (items - 1) * info.stride[-1] + (info.kernel[-1] - 1) * info.dilation[-1] + 1


class PoolTemplate(Template):
    name = "pool"
    version = "2"
    kernel = "ca_pool"
    legacy = {"memory.vec": 1}
    takes_half = True  # loads through ca_ld* (fp16/bf16 convert), stores round

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind == "pool"

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.block", (64, 128, 256, 512, 1024), "threads per block"),
            Slot("config.items", (1, 2, 4, 8), "consecutive outputs of a row per thread"),
            Slot("config.grid", ("exact", "persistent"),
                 "one thread per work item, or one wave of blocks striding over the outputs"),
            Slot("memory.cache", ("regs", "reload"),
                 "load a window row shared by the thread's outputs once into registers, or "
                 "load each window element where it is used"),
            Slot("memory.vec", (1, 4),
                 "interior threads load their window rows as aligned float4s and store their "
                 "outputs as float4s (where rows, strides and outputs per thread allow)"),
            Slot("memory.load", ("default", "ldg", "stream"), "load cache hint"),
            Slot("memory.store", ("default", "stream"), "store cache hint"),
            Slot("compute.unroll", ("full", "none"),
                 "unroll the window loops (those indexing registers always unroll)"),
            Slot("compute.guard", ("all", "interior"),
                 "bounds-check every load, or give interior threads an unchecked copy"),
            Slot("compute.fastmath", (0, 1), "hardware approximations of exp/log/div"),
            Slot("compute.index", ("i32", "i64"), "index arithmetic width"),
        ]

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        info = window_info(plan)
        if info.kind == "wsum":
            cfg["compute.unroll"] = "full"  # the weights are registers: indices must be static
        if info.kind != "avg" and not plan.fast_math_matters():
            cfg["compute.fastmath"] = 0
        if cfg["config.items"] == 1:
            cfg["memory.cache"] = "reload"  # one window: nothing to share
        if info.rank == 1 and cfg["memory.cache"] == "regs":
            cfg["compute.unroll"] = "full"  # no outer window loop; the row loops must unroll
        if not (vector_loads(info, cfg) or vector_stores(info, cfg)):
            cfg["memory.vec"] = 1
        exact = _exact_blocks(info, cfg)
        if persistent_grid(exact, cfg["config.block"], target.sm_count,
                           target.max_threads_per_sm) == exact:
            cfg["config.grid"] = "exact"  # one wave holds the grid: the same launch
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        info = window_info(plan)
        items = cfg["config.items"]
        if info.kind == "wsum" and info.window > MAX_WEIGHTS:
            return f"a window of {info.window} weights does not fit in registers"
        # margin: the grid-stride loop's last step may pass the end by one wave of threads
        if cfg["compute.index"] == "i32" and \
                max(info.in_numel, info.out_numel) + (1 << 20) >= 2**31:
            return "i32 indexing overflows for this size"
        if items > 1 and items > info.out_spatial[-1]:
            return "more outputs per thread than the output row has"
        if cfg["memory.cache"] == "regs":
            s = span(info, items)
            if s > MAX_SPAN:
                return f"a shared window row of {s} elements does not fit in registers"
            if s > items * info.kernel[-1]:
                return "windows do not overlap: registers would load the gaps between them"
        return None

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        return {"config.block": 256, "config.items": 1, "config.grid": "exact",
                "memory.cache": "reload", "memory.vec": 1, "memory.load": "default",
                "memory.store": "default",
                "compute.unroll": "full", "compute.guard": "all", "compute.fastmath": 0,
                "compute.index": "i64"}

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        info = window_info(plan)
        block, items = cfg["config.block"], cfg["config.items"]
        regs = cfg["memory.cache"] == "regs"
        hint, shint = cg.HINTS[cfg["memory.load"]], cg.STORE_HINTS[cfg["memory.store"]]
        fast = bool(cfg["compute.fastmath"])
        idx_t = "int" if cfg["compute.index"] == "i32" else "long long"
        outer_unroll = "#pragma unroll" if cfg["compute.unroll"] == "full" else "#pragma unroll 1"
        interior = cfg["compute.guard"] == "interior"

        r = info.rank
        OW, IW = info.out_spatial[-1], info.in_spatial[-1]
        chunks = -(-OW // items)
        rows = info.planes * math.prod(info.out_spatial[:-1])
        T = rows * chunks
        exact_blocks = _exact_blocks(info, cfg)
        grid = exact_blocks
        if cfg["config.grid"] == "persistent":
            grid = persistent_grid(exact_blocks, block, target.sm_count,
                                   target.max_threads_per_sm)

        c = Code()
        c(cg.prelude(plan))
        c.open(f'extern "C" __global__ void __launch_bounds__({block}) '
               f"{self.kernel}({cg.kernel_params(plan)})")
        # the input's elements as stored (fp16/bf16: loads convert to float, `cg.in_mtype`)
        xt = cg.in_mtype(plan, info.input)
        c(f"typedef {idx_t} idx_t;",
          f"const {xt}* __restrict__ x = in{info.input};")
        c.open(f"for (idx_t t = (idx_t)blockIdx.x * {block} + threadIdx.x; t < (idx_t){T}; "
               f"t += (idx_t)gridDim.x * {block})")
        # decompose t: chunk of the output row, outer output dims (innermost first), plane
        c(f"const int ow0 = (int)(t % {chunks}) * {items};",
          f"const idx_t row = t / {chunks};  // (plane, outer output dims) flattened")
        if r > 1:
            c("idx_t rest = row;")
        for j in reversed(range(r - 1)):
            c(f"const int o{j} = (int)(rest % {info.out_spatial[j]}); rest /= "
              f"{info.out_spatial[j]};")
            c(f"const int s{j} = o{j} * {info.stride[j]} - {info.padding[j]};  // window start")
        plane = "rest" if r > 1 else "row"  # the output plane
        in_plane = plane if info.per_plane == 1 else f"({plane} / {info.per_plane})"
        pre = _prologue(c, plan, info, plane, hint, fast)
        c(f"const {xt}* __restrict__ src = x + {in_plane} * "
          f"(idx_t){math.prod(info.in_spatial)};",
          f"const int w0 = ow0 * {info.stride[-1]} - {info.padding[-1]};")
        if info.kind == "wsum":  # the plane's weights, one register a tap
            c(f"const {cg.in_mtype(plan, info.weight)}* __restrict__ wp = in{info.weight} + "
              f"(int)({plane} % {info.out_channels}) * {info.window};",
              f"float wk[{info.window}];", "#pragma unroll",
              f"for (int j = 0; j < {info.window}; ++j) wk[j] = ca_ld<1>(wp + j);")
        init = "-CA_INF" if info.kind == "max" else "0.f"
        c(f"float acc[{items}];")
        c("#pragma unroll")
        c(f"for (int i = 0; i < {items}; ++i) acc[i] = {init};")
        if interior:
            conds = [f"s{j} >= 0 && s{j} + {_extent(info, j)} <= {info.in_spatial[j]}"
                     for j in range(r - 1)]
            conds += ["w0 >= 0", f"w0 + {span(info, items)} <= {IW}", f"ow0 + {items} <= {OW}"]
            c(f"const bool inside = {' && '.join(conds)};")
            c.open("if (inside)")
            self._window(c, info, items, regs, hint, outer_unroll, guarded=False, xt=xt,
                         vec_loads=vector_loads(info, cfg), pre=pre)
            c.close(" else {")
            c.depth += 1
            self._window(c, info, items, regs, hint, outer_unroll, guarded=True, xt=xt,
                         pre=pre)
            c.close()
        else:
            self._window(c, info, items, regs, hint, outer_unroll, guarded=True, xt=xt,
                         pre=pre)
        self._finish(c, plan, info, items, fast, hint, shint, interior,
                     vector_stores(info, cfg))
        c.close()  # grid-stride loop
        c.close()  # kernel

        loads = (span(info, items) / items if regs else info.kernel[-1]) * \
            math.prod(info.kernel[:-1])
        redundant = max(0.0, loads - info.in_numel / info.out_numel)
        facts: tuple[tuple[str, Any], ...] = (
                 ("family", "pool"), ("threads", block), ("blocks", grid), ("vec", 1),
                 ("items", items), ("fast", int(fast)), ("passes", 1),
                 ("vec_loads", int(vector_loads(info, cfg))),
                 ("vec_stores", int(vector_stores(info, cfg))),
                 ("cache", "regs" if regs else "reload"), ("load", cfg["memory.load"]),
                 ("index", cfg["compute.index"]), ("window", info.window),
                 ("reads_per_elem", 1.0 + redundant))
        if info.prologue is not None:  # arithmetic on every element loaded
            facts += (("prologue_ops", info.prologue.ops),)
        return Rendered(c.text(), (Launch(self.kernel, (grid, 1, 1), (block, 1, 1)),),
                        facts=facts)

    # -- parts ----------------------------------------------------------------------------------
    def _window(self, c: Code, info: PoolInfo, items: int, regs: bool, hint: int,
                outer_unroll: str, guarded: bool, vec_loads: bool = False, xt: str = "float",
                pre: str = "{}") -> None:
        """Accumulate every window of the thread's ITEMS outputs into acc[] (the input's
        elements of C type `xt` in memory), each loaded element through `pre` (a format
        string: the prologue's call, or "{}")."""
        r = info.rank
        IW, SW, KW, DW = info.in_spatial[-1], info.stride[-1], info.kernel[-1], info.dilation[-1]
        ident = "-CA_INF" if info.kind == "max" else "0.f"
        combine = {"max": "acc[i] = ca_max(acc[i], {v});", "avg": "acc[i] += {v};",
                   "wsum": "acc[i] = fmaf({v}, wk[{t}], acc[i]);"}[info.kind]
        # the flat tap index of window element (k0, ..., k): static once the loops unroll
        tap = "k"
        for j in range(r - 1):
            tap = f"k{j} * {math.prod(info.kernel[j + 1:])} + " + tap
        # outer window dims: one loop each; a row outside the input contributes nothing
        row_off = []
        for j in range(r - 1):
            c(outer_unroll)
            c.open(f"for (int k{j} = 0; k{j} < {info.kernel[j]}; ++k{j})")
            c(f"const int p{j} = s{j} + k{j} * {info.dilation[j]};")
            if guarded:
                c(f"if ((unsigned)p{j} >= {info.in_spatial[j]}u) continue;")
            row_off.append(f"p{j}")
        # flat offset of the window row: ((p0 * I1 + p1) * ...) * IW
        off = row_off[0] if row_off else "0"
        for j in range(1, r - 1):
            off = f"({off}) * {info.in_spatial[j]} + {row_off[j]}"
        c(f"const {xt}* __restrict__ rp = src + (idx_t)({off}) * {IW};")

        def load(rel: str) -> str:
            v = pre.format(f"ca_ld<{hint}>(rp + (w0 + {rel}))")
            if not guarded:
                return v
            # the address is formed only for a position inside the row
            return f"((unsigned)(w0 + {rel}) < {IW}u ? {v} : {ident})"

        if regs:
            n = span(info, items)
            lead = 0  # window elements loaded before the thread's first (vector alignment)
            if vec_loads:
                # w0 = ow0 * SW - padding with ow0 a multiple of ITEMS and ITEMS * SW of 4:
                # w0's offset past a 16-byte boundary is the same in every thread
                lead = -info.padding[-1] % 4
                nv = -(-(lead + n) // 4)
                c(f"float win[{4 * nv}];")
                c("#pragma unroll")
                c.open(f"for (int q = 0; q < {nv}; ++q)")
                c(f"const float4 v4 = ca_ld4<{hint}>(rp + (w0 - {lead} + 4 * q));",
                  " ".join(f"win[4 * q{f' + {j}' if j else ''}] = {pre.format(f'v4.{f}')};"
                           for j, f in enumerate("xyzw")))
                c.close()
            else:
                c(f"float win[{n}];")
                c("#pragma unroll")
                c(f"for (int j = 0; j < {n}; ++j) win[j] = {load('j')};")
            c("#pragma unroll")
            c.open(f"for (int i = 0; i < {items}; ++i)")
            c("#pragma unroll")
            first = f"{lead} + i * {SW}" if lead else f"i * {SW}"
            c(f"for (int k = 0; k < {KW}; ++k) " +
              combine.format(v=f"win[{first} + k * {DW}]", t=tap))
            c.close()
        else:
            c("#pragma unroll")
            c.open(f"for (int i = 0; i < {items}; ++i)")
            c(outer_unroll if r == 1 else "#pragma unroll")
            c.open(f"for (int k = 0; k < {KW}; ++k)")
            c(f"const float v = {load(f'i * {SW} + k * {DW}')};")
            c(combine.format(v="v", t=tap))
            c.close().close()
        for _ in range(r - 1):
            c.close()

    def _finish(self, c: Code, plan: KernelPlan, info: PoolInfo, items: int, fast: bool,
                hint: int, shint: int, interior: bool, vec_stores: bool = False) -> None:
        """The pooled value of each output (avg: torch's divisor), the epilogue, the store
        (with `vec_stores`, every output of the thread exists and they go out as float4s)."""
        OW = info.out_spatial[-1]
        F = len(plan.full_shape)
        epilogue_inputs = cg.epilogue_reads(plan)
        for i in range(items):
            if vec_stores:  # every output exists: a block only scopes the item's names
                c(f"float r{i};")
            c.open("" if vec_stores else f"if (ow0 + {i} < {OW})")
            c(f"const idx_t n{i} = row * {OW} + ow0 + {i};")
            value = f"acc[{i}]"
            if info.kind == "avg":
                c(f"float d{i};")
                if info.divisor_override is not None:
                    c(f"d{i} = {float(info.divisor_override)!r}f;")
                else:
                    if interior:
                        c(f"if (inside) d{i} = {float(info.window)!r}f; else")
                    c.open("")
                    self._divisor(c, info, i)
                    c.close()
                value = f"__fdividef(acc[{i}], d{i})" if fast else f"acc[{i}] / d{i}"
            c(f"const float pv{i} = {value};")
            bound = {plan.anchor_id(): f"pv{i}"}
            grp = cg.Group(f"n{i}", tuple(range(F)))
            for nid in epilogue_inputs:
                name = f"ep{nid}_{i}"
                off = cg.offset_expr(plan, nid, [grp])
                c(f"const float {name} = ca_ld<{hint}>(in{cg.read_index(plan, nid)} + ({off}));")
                bound[nid] = name
            stmts, names = cg.emit_values(plan, [plan.output], bound, fast, suffix=f"_{i}")
            c(*stmts)
            if vec_stores:
                c(f"r{i} = {names[plan.output]};")
            else:
                c(f"ca_st<{shint}>(out + n{i}, {names[plan.output]});")
            c.close()
        if vec_stores:
            for q in range(0, items, 4):
                c(cg.vec_store(f"out + row * {OW} + ow0 + {q}", [f"r{q + j}" for j in range(4)],
                               shint))

    @staticmethod
    def _divisor(c: Code, info: PoolInfo, i: int) -> None:
        """torch's avg divisor for output item i: per dim, the window clipped at input+padding
        (count_include_pad) or at the input; an empty window gives 0 / 1 = 0, as torch's 0."""
        r = info.rank
        size, count = [], []
        for j in range(r):
            start = f"s{j}" if j < r - 1 else f"(w0 + {i * info.stride[-1]})"
            I, K, P = info.in_spatial[j], info.kernel[j], info.padding[j]
            c(f"const int wb{j} = {start}; const int we{j} = min(wb{j} + {K}, {I + P});")
            size.append(f"(we{j} - wb{j})")
            count.append(f"max(min(we{j}, {I}) - max(wb{j}, 0), 0)")
        chosen = size if info.count_include_pad else count
        c(f"d{i} = (float)max({' * '.join(chosen)}, 1);")


def _prologue(c: Code, plan: KernelPlan, info: PoolInfo, plane: str, hint: int, fast: bool
              ) -> str:
    """The prologue (`ir/pool.PoolPrologue`) of output plane `plane`: its per-plane parameters
    loaded (pp0, pp1, ...: the plane's lead indices from its flat index, then each at its
    offset) and `ca_pre`, a function of one loaded element (a lambda: a program's kernels and
    the tests' emulator share one translation unit); returns the format string of its call
    ("{}" where there is no prologue: the element as loaded)."""
    pro = info.prologue
    if pro is None:
        return "{}"
    used = [d for d in range(len(pro.lead)) if any(o.strides[d] for o in pro.operands)]
    if used:
        c(f"idx_t lq = {plane};")
        for d in reversed(range(min(used), len(pro.lead))):
            c(f"const idx_t l{d} = lq % {pro.lead[d]}; lq /= {pro.lead[d]};")
    for j, o in enumerate(pro.operands):
        terms = [f"l{d} * {o.strides[d]}" for d in range(len(pro.lead)) if o.strides[d]]
        c(f"const float pp{j} = ca_ld<{hint}>(in{o.input} + ({' + '.join(terms) or '0'}));")
    bound = {o.node: f"pp{j}" for j, o in enumerate(pro.operands)}
    if pro.plane_values:  # once per plane, before the elements
        stmts, names = cg.emit_values(plan, list(pro.plane_values), bound, fast, suffix="_p")
        c(*stmts)
        bound.update({k: names[k] for k in pro.plane_values})
    stmts, names = cg.emit_values(plan, [pro.root], {pro.source: "xv", **bound}, fast)
    c.open("auto ca_pre = [&](const float xv) -> float")
    c(*stmts, f"return {names[pro.root]};")
    c.close(";")
    return "ca_pre({})"


def vector_loads(info: PoolInfo, cfg: dict[str, Any]) -> bool:
    """Interior threads load window rows as float4s: rows start on 16-byte boundaries and
    every thread's first element sits at the same offset past one (ITEMS x stride a multiple
    of 4), so the loads are aligned float4s covering the span (up to 3 elements either side,
    inside the row wherever the span is)."""
    return (cfg["memory.vec"] == 4 and cfg["memory.cache"] == "regs" and
            cfg["compute.guard"] == "interior" and info.in_spatial[-1] % 4 == 0 and
            cfg["config.items"] * info.stride[-1] % 4 == 0)


def vector_stores(info: PoolInfo, cfg: dict[str, Any]) -> bool:
    """A thread's ITEMS outputs go out as float4s: ITEMS a multiple of 4 dividing the row."""
    items = cfg["config.items"]
    return cfg["memory.vec"] == 4 and items % 4 == 0 and info.out_spatial[-1] % items == 0


def _extent(info: PoolInfo, j: int) -> int:
    """Input elements one window spans along dim j (dilation included)."""
    return (info.kernel[j] - 1) * info.dilation[j] + 1



def _exact_blocks(info: PoolInfo, cfg: dict[str, Any]) -> int:
    """Blocks of the exact grid: a thread per `items` outputs of an output row."""
    rows = info.planes * math.prod(info.out_spatial[:-1])
    chunks = -(-info.out_spatial[-1] // cfg["config.items"])
    return max(1, -(-(rows * chunks) // cfg["config.block"]))
