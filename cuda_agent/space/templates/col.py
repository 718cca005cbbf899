"""Reductions over a middle run of dims (sum over dim 1 of (B, C, L), softmax over channels,
norms over a middle dim): F is viewed as (O, R, I) with I > 1, and neighbouring threads read
neighbouring columns i so that every load is coalesced.

A block is a 2-D grid of threads (BX, BY): x runs along i (VEC consecutive columns per thread,
read with vector loads where the operands allow), y splits r (thread y takes r = y, y+BY, ...).
A block owns BX*VEC columns of one o; the partial results of the BY threads of a column are
combined through shared memory (a tree, or one thread folding them serially), and broadcast back
when a later pass needs them. Multi-level plans (softmax, norms) keep the (R x BX*VEC) tile in
registers or shared memory between passes, or re-read it. Single-level plans with few columns
can also split R over several blocks (grid.y), folding the partials in a second kernel or
accumulating them with atomics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Reducer, Template, pow2_ceil, wave_blocks
from .rowcommon import (make_passes, online_merge, online_softmax_pair, online_update,
                        operand_roles, pass_roots, row_values_after, side_stores)

MAX_CACHED_REGS = 64  # floats per thread kept in registers across passes
SMEM_RESERVE = 8192  # bytes of shared memory kept free for the compiler and the runtime
FIN_BLOCK = 256  # threads per block of the split-fold kernel
_COMBINE_OPS = {"sum": "({a} + {b})", "prod": "({a} * {b})", "max": "ca_max({a}, {b})",
                "min": "ca_min({a}, {b})"}


@dataclass(frozen=True)
class _LaneReducer(Reducer):
    """A reducer's accumulator for one of the VEC columns a thread owns."""

    lane: int = 0

    @property
    def acc(self) -> str:
        return f"acc{self.nid}_{self.lane}"

    @property
    def idx(self) -> str:
        return f"aci{self.nid}_{self.lane}"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)



def _dims(plan: KernelPlan) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(dims of O, dims of R, dims of I)."""
    d0, d1 = plan.reduce_dims[0], plan.reduce_dims[-1]
    return tuple(range(d0)), tuple(plan.reduce_dims), tuple(range(d1 + 1, len(plan.full_shape)))


def _splittable(plan: KernelPlan) -> bool:
    """Single-level plans whose output is the reduction's row result."""
    return plan.cached("col_split", lambda: len(plan.levels) == 1 and plan.output_is_row)


def _all_sum(plan: KernelPlan) -> bool:
    return plan.cached("col_all_sum", lambda: all(
        plan.graph[n].attr("kind") == "sum" for lv in plan.levels for n in lv))


def _has_arg(plan: KernelPlan) -> bool:
    return plan.cached("col_has_arg", lambda: any(
        plan.graph[n].attr("kind") in ("argmax", "argmin") for lv in plan.levels for n in lv))


# Launches of fewer blocks than half the SMs leave the GPU idle; on large problems such
# configurations are hopeless (minutes of measuring for nothing), so they are not in the space.
UNDERFILL_MIN_ELEMS = 1 << 20


class ColTemplate(Template):
    name = "col"
    version = "1"
    writes_sides = True
    takes_half = True  # loads through ca_ld* (fp16/bf16 convert), stores round
    writes_permuted = True

    def applies(self, plan: KernelPlan) -> bool:
        # a permuted output (`KernelPlan.out_perm`): full outputs only, stored element-wise
        return plan.kind == "reduce" and plan.I > 1 and not plan.whole_rows_only and (
            plan.out_perm is None or not plan.output_is_row)

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        # Slots that cannot change the kernel for this plan keep a single choice, so that the
        # product the space enumerates stays small.
        multi = len(make_passes(plan, False)) >= 2 and bool(
            operand_roles(plan, make_passes(plan, False)).cached)
        split = _splittable(plan)
        return [
            Slot("config.bx", (8, 16, 32, 64, 128, 256), "threads along the columns i"),
            Slot("config.by", (1, 2, 4, 8, 16, 32, 64, 128), "threads splitting the reduced run"),
            Slot("config.grid", ("exact", "persistent"),
                 "a block per column tile, or one wave of blocks striding over the tiles"),
            Slot("memory.vec", (1, 2, 4), "consecutive columns per thread (vector loads)"),
            Slot("memory.cache", ("regs", "smem", "reload") if multi else ("reload",),
                 "where the tile is kept between passes"),
            Slot("memory.load", ("default", "ldg", "stream"), "load cache hint"),
            Slot("compute.unroll", (1, 2, 4), "unroll of the loop over the reduced run"),
            Slot("compute.fastmath", (0, 1) if plan.fast_math_matters() else (0,),
                 "hardware approximations of exp/log/div"),
            Slot("compute.algo", ("passes", "online") if online_softmax_pair(plan, extras=False) else
                 ("passes",), "softmax: separate max and sum passes, or one online pass"),
            Slot("reduction.combine", ("smem_tree", "serial"),
                 "combine over y: shared-memory tree, or one thread folds the column serially"),
            Slot("reduction.split", (1, 2, 4, 8, 16, 32) if split else (1,),
                 "blocks splitting the reduced run of one column tile"),
            Slot("reduction.cross", ("two_pass", "atomic") if split and _all_sum(plan) else
                 ("two_pass",), "how split partials meet: a fold kernel, or atomicAdd"),
        ]

    # -- validity ------------------------------------------------------------------------------
    def _tiles(self, plan: KernelPlan, cfg: dict[str, Any]) -> int:
        return plan.O * _cdiv(plan.I, cfg["config.bx"] * cfg["memory.vec"])

    def _rows_per_split(self, plan: KernelPlan, cfg: dict[str, Any]) -> int:
        return _cdiv(plan.R, cfg["reduction.split"])

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        if not online_softmax_pair(plan, extras=False):
            cfg["compute.algo"] = "passes"
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        if len(passes) < 2 or not operand_roles(plan, passes).cached:
            cfg["memory.cache"] = "reload"
        if not plan.fast_math_matters():
            cfg["compute.fastmath"] = 0
        if cfg["config.by"] == 1:
            cfg["reduction.combine"] = "smem_tree"
        if not _splittable(plan):
            cfg["reduction.split"] = 1
        if cfg["reduction.split"] == 1:
            cfg["reduction.cross"] = "two_pass"
        trips = _cdiv(self._rows_per_split(plan, cfg), cfg["config.by"])
        if cfg["memory.cache"] == "regs":
            cfg["compute.unroll"] = 1  # the loop is unrolled fully
        while cfg["compute.unroll"] > 1 and cfg["compute.unroll"] > trips:
            cfg["compute.unroll"] //= 2  # unrolling past the trip count changes nothing
        if cfg["reduction.split"] > 1 or self._tiles(plan, cfg) <= wave_blocks(
                cfg["config.bx"] * cfg["config.by"], target):
            cfg["config.grid"] = "exact"
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        BX, BY, vec = cfg["config.bx"], cfg["config.by"], cfg["memory.vec"]
        B = BX * BY
        if B < 32 or B > 1024:
            return "threads per block outside [32, 1024]"
        if BX * vec > max(32, pow2_ceil(plan.I)):
            return "block is much wider than the columns"
        if BY > plan.R:
            return "more y threads than reduced elements"
        if vec > 1:
            if plan.I % vec:
                return f"vector width {vec} does not divide the column count {plan.I}"
            if not cg.vector_reads_ok(plan, _dims(plan)[2], vec):
                return "an operand cannot be read in vectors along the columns"
        if plan.R >= 2**31 - 1:
            return "reduced run too long for int indices"
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        cached = operand_roles(plan, passes).cached
        cache = cfg["memory.cache"]
        # at most half the registers a thread may have at this block size (64K per SM)
        if cache == "regs" and _cdiv(plan.R, BY) * vec * len(cached) > min(
                MAX_CACHED_REGS, 32768 // B):
            return "the tile does not fit in registers"
        if cache == "smem" and self._dyn_smem(plan, cfg, cached) + \
                self._static_smem(plan, cfg) + SMEM_RESERVE > target.max_smem_per_block:
            return "the tile does not fit in shared memory"
        S = cfg["reduction.split"]
        if S > 1:
            if not _splittable(plan):
                return "split only for single-level reductions with row outputs"
            if S > plan.R or self._rows_per_split(plan, cfg) < BY:
                return "fewer reduced elements per split than y threads"
            if self._tiles(plan, cfg) * (S // 2) >= wave_blocks(B, target):
                return "the grid already fills the GPU with half as many splits"
            if cfg["config.grid"] != "exact":
                return "a split grid is exact"
        if S > 1 and plan.graph.sides:
            return "side outputs are written by a column's one block"
        if cfg["reduction.cross"] == "atomic" and not _all_sum(plan):
            return "atomic cross-block combine only for sums"
        if plan.numel >= UNDERFILL_MIN_ELEMS and \
                self._tiles(plan, cfg) * S < target.sm_count // 2:
            return "too few blocks to fill the GPU"
        return None

    def _dyn_smem(self, plan: KernelPlan, cfg: dict[str, Any], cached: list[int]) -> int:
        if cfg["memory.cache"] != "smem":
            return 0
        return len(cached) * plan.R * cfg["config.bx"] * cfg["memory.vec"] * 4

    def _static_smem(self, plan: KernelPlan, cfg: dict[str, Any]) -> int:
        BY = cfg["config.by"]
        if BY == 1:
            return 0
        n = BY * cfg["config.bx"] * cfg["memory.vec"]
        bufs = 1 + int(_has_arg(plan)) + int(cfg["compute.algo"] == "online")
        return n * 4 * bufs

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        # 32 columns by 8 row-threads, scalar loads, re-reading each pass, a tree combine
        return {"config.bx": 32, "config.by": min(8, 1 << (plan.R.bit_length() - 1)),
                "config.grid": "exact", "memory.vec": 1, "memory.cache": "reload",
                "memory.load": "default", "compute.unroll": 1, "compute.fastmath": 0, "compute.algo": "passes",
                "reduction.combine": "smem_tree", "reduction.split": 1,
                "reduction.cross": "two_pass"}

    # -- code ----------------------------------------------------------------------------------
    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        BX, BY, VEC = cfg["config.bx"], cfg["config.by"], cfg["memory.vec"]
        B = BX * BY
        O, R, I = plan.O, plan.R, plan.I
        OI = O * I
        CB = BX * VEC  # columns per block
        NT = _cdiv(I, CB)  # column tiles per o
        tiles = O * NT
        hint = cg.HINTS[cfg["memory.load"]]
        fast = bool(cfg["compute.fastmath"])
        cache = cfg["memory.cache"]
        mode = cfg["reduction.combine"]
        cross = cfg["reduction.cross"]
        RC = _cdiv(R, cfg["reduction.split"])  # reduced elements per split
        S = _cdiv(R, RC)  # splits actually launched (none empty)
        NJ = _cdiv(RC, BY)  # reduced elements per y thread
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        roles = operand_roles(plan, passes)
        cached = roles.cached if cache != "reload" else []
        first_use = {nid: min(i for i, s in enumerate(roles.per_pass) if nid in s)
                     for nid in cached}
        op_index = {nid: k for k, nid in roles.full + roles.row}
        odims, rdims, idims = _dims(plan)
        ogrp, rgrp = cg.Group("o", odims), cg.Group("r", rdims)
        vt = cg.vec_type(VEC)
        all_red = [r for p in passes for r in p.reducers]
        has_arg = any(r.is_arg for r in all_red)
        has_online = any(p.online for p in passes)
        idx_t = "int" if plan.numel + 4 * 1024 * 4 < 2**31 else "long long"
        grid_x = tiles if cfg["config.grid"] == "exact" else min(tiles, wave_blocks(B, target))
        dyn = self._dyn_smem(plan, cfg, cached)

        c = Code()
        c(cg.prelude(plan))
        c.open(f'extern "C" __global__ void __launch_bounds__({B}) '
               f"ca_col({cg.kernel_params(plan)})")
        c(f"typedef {idx_t} idx_t;", "const int tx = threadIdx.x;", "const int ty = threadIdx.y;")
        if BY > 1:
            c(f"__shared__ float ca_red[{BY * CB}];")
            if has_arg:
                c(f"__shared__ int ca_red_i[{BY * CB}];")
            if has_online:
                c(f"__shared__ float ca_red2[{BY * CB}];")
        if dyn:
            c("extern __shared__ float4 ca_dyn4[];",
              "float* ca_dyn = reinterpret_cast<float*>(ca_dyn4);")
        if S > 1:
            c(f"const idx_t r0 = (idx_t)blockIdx.y * {RC};",
              f"const idx_t r1 = r0 + {RC} < {R} ? r0 + {RC} : (idx_t){R};")
        else:
            c("const idx_t r0 = 0;", f"const idx_t r1 = {R};")
        c.open(f"for (idx_t t = blockIdx.x; t < {tiles}; t += gridDim.x)")
        c(f"const idx_t o = t / {NT};",
          f"const idx_t i0_ = (t % {NT}) * {CB} + tx * {VEC};",
          f"const bool active = i0_ < {I};",
          f"const idx_t i0 = active ? i0_ : {I - VEC};  // idle columns read valid memory")
        # operands constant along the reduced dims: once per column
        rb: list[dict[int, str]] = [{} for _ in range(VEC)]
        for k, nid in roles.row:
            for l in range(VEC):
                off = cg.offset_expr(plan, nid, [ogrp, cg.Group(f"(i0 + {l})", idims)])
                c(f"const float w{k}_{l} = ca_ld<{hint}>(in{k} + ({off}));")
                rb[l][nid] = f"w{k}_{l}"
        if cache == "regs":
            for nid in cached:
                c(f"{vt} cr{op_index[nid]}[{NJ}];")
        done: set[int] = set()
        for pi, p in enumerate(passes):
            last = pi == len(passes) - 1
            c(f"// pass {pi + 1}: " + ("output" if p.writes_output else "reduce " + ", ".join(
                f"%{r.nid}:{r.kind}" for r in p.reducers)))
            lrs = {r.nid: [_LaneReducer(r.nid, r.kind, l) for l in range(VEC)]
                   for r in p.reducers}
            if p.online:
                for l in range(VEC):
                    c(f"float om_{l} = -CA_INF, os_{l} = 0.f;")
            else:
                for r in p.reducers:
                    for lr in lrs[r.nid]:
                        c(*lr.declare())
            if cache == "regs":
                c("#pragma unroll")
                c.open(f"for (int j = 0; j < {NJ}; ++j)")
                c(f"const idx_t r = r0 + j * {BY} + ty;")
                c.open("if (r < r1)")
            else:
                c(f"#pragma unroll {cfg['compute.unroll']}")
                c.open(f"for (idx_t r = r0 + ty; r < r1; r += {BY})")
            lanes: dict[int, list[str]] = {}
            grp_i = cg.Group("i0", idims)
            for nid in sorted(roles.per_pass[pi]):
                k = op_index[nid]
                name = f"x{k}"
                cached_here = nid in cached
                from_cache = cached_here and first_use[nid] < pi
                q = cached.index(nid) if cached_here else -1
                sptr = f"ca_dyn + (({q} * {R} + r) * {CB} + tx * {VEC})"
                if from_cache and cache == "regs":
                    c(f"const {vt} {name} = cr{k}[j];")
                elif from_cache and cache == "smem":
                    c(f"const {vt} {name} = *reinterpret_cast<const {vt}*>({sptr});")
                else:
                    off = cg.offset_expr(plan, nid, [ogrp, rgrp, grp_i])
                    if VEC > 1 and cg.is_unit_stride(plan, nid, grp_i, VEC):
                        c(f"const {vt} {name} = {cg.vec_load(f'in{k} + ({off})', VEC, hint)};")
                    elif VEC == 1:
                        c(f"const float {name} = ca_ld<{hint}>(in{k} + ({off}));")
                    elif cg.is_splat(plan, nid, grp_i, VEC):
                        c(f"const float {name}s = ca_ld<{hint}>(in{k} + ({off}));")
                        c(f"const {vt} {name} = make_float{VEC}(" +
                          ", ".join([f"{name}s"] * VEC) + ");")
                    else:  # masked by check()
                        raise AssertionError("unreachable: vector gathers are masked")
                    if cached_here and cache == "regs":
                        c(f"cr{k}[j] = {name};")
                    elif cached_here and cache == "smem":
                        c(f"*reinterpret_cast<{vt}*>({sptr}) = {name};")
                lanes[nid] = [cg.vec_get(name, VEC, l) for l in range(VEC)]
            roots = pass_roots(plan, p)
            out_vals = []
            for l in range(VEC):
                bound = dict(rb[l])
                bound.update({nid: vals[l] for nid, vals in lanes.items()})
                stmts, names = cg.emit_values(plan, roots, bound, fast, suffix=f"_{l}")
                c(*stmts)
                if p.writes_output:
                    out_vals.append(names[plan.output])
                elif p.online:
                    c(online_update(f"om_{l}", f"os_{l}", names[roots[0]], fast))
                else:
                    for r in p.reducers:
                        c(lrs[r.nid][l].update(names[plan.graph[r.nid].args[0]], "r"))
            if p.writes_output:
                c.open("if (active)")
                c(*cg.out_store(plan, f"((o * {R} + r) * {I} + i0)", out_vals, 0))
                c.close()
            if cache == "regs":
                c.close()  # if r < r1
            c.close()  # for r
            # every thread needs the result when another pass follows; otherwise only y == 0
            bcast = not last
            if p.online:
                if BY > 1:
                    _combine_online(c, BX, BY, VEC, mode, bcast, fast)
                m, s = p.online
                for l in range(VEC):
                    c(f"const float s{m}_{l} = om_{l};", f"const float s{s}_{l} = os_{l};")
                    rb[l][m], rb[l][s] = f"s{m}_{l}", f"s{s}_{l}"
                done.update(p.online)
            elif p.reducers:
                if BY > 1:
                    for r in p.reducers:
                        _combine_y(c, r, lrs[r.nid], BX, BY, VEC, mode, bcast)
                if S > 1:
                    continue  # partials leave through the workspace, see below
                for r in p.reducers:
                    ctype = "long long" if r.is_arg else "float"
                    for l, lr in enumerate(lrs[r.nid]):
                        c(f"const {ctype} s{r.nid}_{l} = {lr.result()};")
                        rb[l][r.nid] = f"s{r.nid}_{l}"
                    done.add(r.nid)
            new_rows = [n for n in row_values_after(plan, done) if n not in rb[0]]
            if new_rows:
                for l in range(VEC):
                    stmts, names = cg.emit_values(plan, new_rows, dict(rb[l]), fast,
                                                  suffix=f"r{l}")
                    c(*stmts)
                    for n in new_rows:
                        rb[l][n] = names[n]
        if plan.graph.sides:  # a program stage's per-column values besides its output
            c.open("if (active && ty == 0)")
            for l in range(VEC):
                c(*side_stores(plan, rb[l], f"o * {I} + i0 + {l}"))
            c.close()
        launches = []
        ws_bytes, zero_ws = 0, False
        reds = passes[0].reducers if S > 1 else []
        if S > 1:
            c("float* wsf = reinterpret_cast<float*>(ws);")
            if has_arg:
                c(f"int* wsi = reinterpret_cast<int*>(ws) + {len(reds) * S * OI};")
            c.open("if (active && ty == 0)")
            for q, r in enumerate(reds):
                for l in range(VEC):
                    lr = _LaneReducer(r.nid, r.kind, l)
                    col = f"o * {I} + i0 + {l}"
                    if cross == "atomic":
                        c(f"atomicAdd(wsf + ({q * OI}LL + {col}), {lr.acc});")
                    else:
                        at = f"({q * S}LL + blockIdx.y) * {OI}LL + {col}"
                        c(f"wsf[{at}] = {lr.acc};")
                        if r.is_arg:
                            c(f"wsi[{at}] = {lr.idx};")
            c.close()
            ws_bytes = len(reds) * OI * 4 * (1 if cross == "atomic" else S) * \
                (2 if has_arg else 1)
            zero_ws = cross == "atomic"
        elif plan.output_is_row:
            c.open("if (active && ty == 0)")
            vals = [rb[l][plan.output] for l in range(VEC)]
            if plan.is_index_output() or VEC == 1:
                for l in range(VEC):
                    c(f"out[o * {I} + i0 + {l}] = {vals[l]};")
            else:
                c(cg.vec_store(f"out + (o * {I} + i0)", vals, 0))
            c.close()
        c.close()  # tile loop
        c.close()  # kernel
        launches.append(Launch("ca_col", (grid_x, S, 1), (BX, BY, 1), dyn))
        if S > 1:
            self._fold_kernel(c, plan, reds, roles, S, cross, hint, fast, idx_t)
            launches.append(Launch("ca_col_fold", (_cdiv(OI, FIN_BLOCK), 1, 1),
                                   (FIN_BLOCK, 1, 1), 0))
        reloads = sum(1 for i, s in enumerate(roles.per_pass) for nid in s
                      if not (nid in cached and first_use[nid] < i))
        facts = (("family", "col"), ("threads", B), ("blocks", grid_x * S), ("vec", VEC),
                 ("bx", BX), ("by", BY), ("passes", len(passes)), ("cache", cache),
                 ("dyn_smem", dyn), ("cached_operands", len(cached)), ("fast", int(fast)),
                 ("combine", mode if BY > 1 else "none"), ("split", S), ("cross", cross),
                 ("rows", OI), ("row_len", R), ("launches", len(launches)),
                 ("reads_per_elem", reloads / max(1, len(roles.full))))
        return Rendered(c.text(), tuple(launches), ws_bytes, zero_ws, facts=facts)

    def _fold_kernel(self, c: Code, plan: KernelPlan, reds: list[Reducer], roles: Any, S: int,
                     cross: str, hint: int, fast: bool, idx_t: str) -> None:
        """One thread per (o, i): fold the S split partials, apply the row epilogue, write."""
        O, I = plan.O, plan.I
        OI = O * I
        odims, _, idims = _dims(plan)
        has_arg = any(r.is_arg for r in reds)
        c.open(f'extern "C" __global__ void __launch_bounds__({FIN_BLOCK}) '
               f"ca_col_fold({cg.kernel_params(plan)})")
        c(f"typedef {idx_t} idx_t;",
          f"const idx_t col = (idx_t)blockIdx.x * {FIN_BLOCK} + threadIdx.x;",
          f"if (col >= {OI}) return;",
          f"const idx_t o = col / {I};", f"const idx_t i = col % {I};",
          "const float* wsf = reinterpret_cast<const float*>(ws);")
        if has_arg:
            c(f"const int* wsi = reinterpret_cast<const int*>(ws) + {len(reds) * S * OI};")
        bound: dict[int, str] = {}
        for k, nid in roles.row:
            off = cg.offset_expr(plan, nid, [cg.Group("o", odims), cg.Group("i", idims)])
            c(f"const float w{k} = ca_ld<{hint}>(in{k} + ({off}));")
            bound[nid] = f"w{k}"
        for q, r in enumerate(reds):
            if cross == "atomic":
                c(f"const float s{r.nid} = wsf[{q * OI}LL + col];")
            else:
                c(*r.declare())
                c.open(f"for (int s = 0; s < {S}; ++s)")
                at = f"({q * S}LL + s) * {OI}LL + col"
                c(r.combine_from(f"wsf[{at}]", f"wsi[{at}]" if r.is_arg else "0"))
                c.close()
                ctype = "long long" if r.is_arg else "float"
                c(f"const {ctype} s{r.nid} = {r.result()};")
            bound[r.nid] = f"s{r.nid}"
        rows = [n for n in row_values_after(plan, {r.nid for r in reds}) if n not in bound]
        stmts, names = cg.emit_values(plan, rows, bound, fast, suffix="r")
        c(*stmts)
        names = {**bound, **names}
        c(f"out[col] = {names[plan.output]};")
        c.close()


def _combine_y(c: Code, red: Reducer, lrs: list[_LaneReducer], BX: int, BY: int, VEC: int,
               mode: str, bcast: bool) -> None:
    """Combine the BY partials of each column held by threads (x, 0..BY-1). Afterwards thread
    y == 0 holds the result, and every thread does when `bcast`. All threads reach every
    barrier (the caller's loops are block-uniform)."""
    CB = BX * VEC
    arg = red.is_arg

    def at(row: str, l: int) -> str:
        return f"{row} * {CB} + {l * BX} + tx" if l else f"{row} * {CB} + tx"

    c("__syncthreads();  // the buffer may still be read by an earlier combine")
    for l, lr in enumerate(lrs):
        c(f"ca_red[{at('ty', l)}] = {lr.acc};")
        if arg:
            c(f"ca_red_i[{at('ty', l)}] = {lr.idx};")
    c("__syncthreads();")
    if mode == "smem_tree":
        s = BY // 2
        while s >= 1:
            c.open(f"if (ty < {s})")
            for l in range(VEC):
                a, b = at("ty", l), at(f"(ty + {s})", l)
                if arg:
                    better = red._better("ov_", "oi_", "av_", "ai_")
                    c(f"{{ const float av_ = ca_red[{a}]; const int ai_ = ca_red_i[{a}]; "
                      f"const float ov_ = ca_red[{b}]; const int oi_ = ca_red_i[{b}]; "
                      f"if ({better}) {{ ca_red[{a}] = ov_; ca_red_i[{a}] = oi_; }} }}")
                else:
                    op = _COMBINE_OPS[red.kind].format(a=f"ca_red[{a}]", b=f"ca_red[{b}]")
                    c(f"ca_red[{a}] = {op};")
            c.close()
            c("__syncthreads();")
            s //= 2
        for l, lr in enumerate(lrs):
            c(f"{lr.acc} = ca_red[{at('0', l)}];")
            if arg:
                c(f"{lr.idx} = ca_red_i[{at('0', l)}];")
    else:  # serial: the y == 0 thread of each column folds the others in order
        c.open("if (ty == 0)")
        c.open(f"for (int y_ = 1; y_ < {BY}; ++y_)")
        for l, lr in enumerate(lrs):
            c(lr.combine_from(f"ca_red[{at('y_', l)}]",
                              f"ca_red_i[{at('y_', l)}]" if arg else "0"))
        c.close()
        if bcast:
            for l, lr in enumerate(lrs):
                c(f"ca_red[{at('0', l)}] = {lr.acc};")
                if arg:
                    c(f"ca_red_i[{at('0', l)}] = {lr.idx};")
        c.close()
        if bcast:
            c("__syncthreads();")
            for l, lr in enumerate(lrs):
                c(f"{lr.acc} = ca_red[{at('0', l)}];")
                if arg:
                    c(f"{lr.idx} = ca_red_i[{at('0', l)}];")


def _combine_online(c: Code, BX: int, BY: int, VEC: int, mode: str, bcast: bool,
                    fast: bool) -> None:
    """Combine the (max, sum) pairs of online softmax over y, like `_combine_y`."""
    CB = BX * VEC

    def at(row: str, l: int) -> str:
        return f"{row} * {CB} + {l * BX} + tx" if l else f"{row} * {CB} + tx"

    c("__syncthreads();")
    for l in range(VEC):
        c(f"ca_red[{at('ty', l)}] = om_{l};", f"ca_red2[{at('ty', l)}] = os_{l};")
    c("__syncthreads();")
    if mode == "smem_tree":
        s = BY // 2
        while s >= 1:
            c.open(f"if (ty < {s})")
            for l in range(VEC):
                a, b = at("ty", l), at(f"(ty + {s})", l)
                c(f"{{ float m_ = ca_red[{a}], s_ = ca_red2[{a}]; const float qm_ = ca_red[{b}]; "
                  f"const float qs_ = ca_red2[{b}]; " + online_merge("m_", "s_", "qm_", "qs_", fast)
                  + f" ca_red[{a}] = m_; ca_red2[{a}] = s_; }}")
            c.close()
            c("__syncthreads();")
            s //= 2
        for l in range(VEC):
            c(f"om_{l} = ca_red[{at('0', l)}];", f"os_{l} = ca_red2[{at('0', l)}];")
    else:
        c.open("if (ty == 0)")
        c.open(f"for (int y_ = 1; y_ < {BY}; ++y_)")
        for l in range(VEC):
            c(f"{{ const float qm_ = ca_red[{at('y_', l)}]; const float qs_ = "
              f"ca_red2[{at('y_', l)}]; " + online_merge(f"om_{l}", f"os_{l}", "qm_", "qs_", fast)
              + " }")
        c.close()
        if bcast:
            for l in range(VEC):
                c(f"ca_red[{at('0', l)}] = om_{l};", f"ca_red2[{at('0', l)}] = os_{l};")
        c.close()
        if bcast:
            c("__syncthreads();")
            for l in range(VEC):
                c(f"om_{l} = ca_red[{at('0', l)}];", f"os_{l} = ca_red2[{at('0', l)}];")
