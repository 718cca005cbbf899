"""Reductions over a leading and a trailing run of dims around kept middle dims (a "chanreduce"
plan): batch norm's statistics over (N, S) for each channel C of x of shape (N, C, S).

F is viewed as (A, C, B): A the leading reduced dims, C the kept ones, B the trailing reduced
ones. A block owns one channel c at a time (a grid-stride loop over channels when the grid is
persistent) and its T threads walk the channel's A*B elements as one flat index, VEC
consecutive b at a time (vector loads and stores along the contiguous B), so that every warp
reads contiguous runs of B. Each reduction level is one pass over the channel (mean, then the
mean-shifted variance), re-reading it from global memory: while the blocks in flight hold less
than L2, the later passes hit L2; or (`compute.algo` online) the mean and the squared deviations
are one Welford pass, merged across threads as (count, mean, squared deviations) states.
Partial results are combined with warp shuffles or a shared-memory tree.
"""

from __future__ import annotations

import math
from typing import Any

from ...ir.plan import CHAN_REDUCE, KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import (Code, Template, block_combine, pow2_ceil, smem_for_combine,
                   wave_blocks)
from .rowcommon import (bind_reducers, carve_dynamic, cluster_combine,
                        emit_new_row_values, finish_welford, make_passes, operand_roles,
                        pass_roots, side_stores, welford_alone, welford_declare,
                        welford_update)


def channel_runs(plan: KernelPlan) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(leading reduced dims, kept dims, trailing reduced dims) of F (the split template's
    channels too)."""
    rank, red = len(plan.full_shape), set(plan.reduce_dims)
    kept = tuple(d for d in range(rank) if d not in red)
    return tuple(range(kept[0])), kept, tuple(range(kept[-1] + 1, rank))


def channel_sizes(plan: KernelPlan) -> tuple[int, int, int]:
    lead, kept, trail = channel_runs(plan)
    F = plan.full_shape
    return (math.prod(F[d] for d in lead), math.prod(F[d] for d in kept),
            math.prod(F[d] for d in trail))



def channel_vectors_ok(plan: KernelPlan, vec: int) -> bool:
    """Every operand varying along the reduced dims reads VEC consecutive b with one load, or
    is constant over them."""
    def check() -> bool:
        _, _, trail = channel_runs(plan)
        grp = cg.Group("v", trail)
        for k in plan.operands:
            nid = cg.operand_node(plan, k)
            if cg.varies_along(plan, nid, plan.reduce_dims) and not (
                    cg.is_unit_stride(plan, nid, grp, vec) or cg.is_splat(plan, nid, grp, vec)):
                return False
        return True
    return plan.cached(("chan_vector_ok", vec), check)


MAX_CACHED_REGS = 64  # floats per thread kept in registers across passes
CLUSTERS = (1, 2, 4, 8)


def _segment_vectors(plan: KernelPlan, cfg: dict[str, Any]) -> int:
    """Vectors of a channel one block covers: all, or a cluster block's share."""
    A, _, B = channel_sizes(plan)
    NV = A * B // cfg["memory.vec"]
    return -(-NV // cfg.get("config.cluster", 1))


LONG_CHANNEL = 1 << 20
"""elements per channel from which one block per channel is slow (a few ms a channel)"""


class ChanTemplate(Template):
    name = "chan"
    writes_sides = True
    takes_half = True  # loads through ca_ld* (fp16/bf16 convert), stores round
    version = "4"  # 4: compute.algo (Welford)
    # version 1 re-read the channel on every pass, one block per channel
    legacy = {"memory.cache": "reload", "config.cluster": 1, "compute.algo": "passes"}

    def applies(self, plan: KernelPlan) -> bool:
        # arg-reductions have no meaning over non-adjacent dims (torch's take one dim)
        return plan.kind == CHAN_REDUCE and not plan.whole_rows_only and not any(
            plan.graph[n].attr("kind") in ("argmax", "argmin") for lv in plan.levels for n in lv)

    def idles_the_gpu(self, plan: KernelPlan, target: Target) -> bool:
        # a block per channel: fewer channels than SMs, each long, leave most SMs idle for the
        # whole kernel (docs/journal.md: space/templates/chan.py; the split template shares
        # each channel among blocks)
        lead, kept, trail = channel_sizes(plan)
        return kept < target.sm_count and lead * trail >= LONG_CHANNEL

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.block", (32, 64, 128, 256, 512, 1024), "threads per channel"),
            Slot("config.grid", ("exact", "persistent"),
                 "a block per channel, or one wave looping over channels"),
            Slot("config.cluster", CLUSTERS,
                 "blocks of a thread-block cluster that split one channel (each keeps its "
                 "share on chip; partial results meet in distributed shared memory)"),
            Slot("memory.vec", (1, 2, 4), "elements per load/store along the trailing dims"),
            Slot("memory.cache", ("regs", "smem", "reload"),
                 "where a channel's elements are kept between passes"),
            Slot("memory.load", ("default", "ldg", "stream"), "load cache hint"),
            Slot("memory.store", ("default", "stream"),
                 "store cache hint for full outputs (streaming: evict first)"),
            Slot("compute.unroll", (1, 2, 4), "unroll of the loop over a channel's elements"),
            Slot("compute.fastmath", (0, 1), "hardware approximations of exp/log/div"),
            Slot("compute.algo", ("passes", "online") if welford_alone(plan) else ("passes",),
                 "a pass per reduction level, or the mean and the squared deviations from it "
                 "in one Welford pass"),
            Slot("reduction.combine", ("shfl", "smem_tree"),
                 "combine within a block: warp shuffles or shared-memory tree"),
        ]

    # -- validity ------------------------------------------------------------------------------
    def excluded(self, cfg: dict[str, Any]) -> bool:
        # canonical() only ever sets the cache to reload, which a cluster does not allow
        return cfg["config.cluster"] > 1 and cfg["memory.cache"] == "reload"

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        A, C, B = channel_sizes(plan)
        if not plan.fast_math_matters():
            cfg["compute.fastmath"] = 0
        if plan.output_is_row:
            cfg["memory.store"] = "default"  # one value per channel: no stream to hint
        if -(-A * B // (cfg["config.block"] * cfg["memory.vec"])) <= 1:
            cfg["compute.unroll"] = 1  # one trip per thread: nothing to unroll
        if C <= wave_blocks(cfg["config.block"], target):
            cfg["config.grid"] = "exact"
        if cfg["compute.algo"] == "online" and len(plan.levels) == 2:
            cfg["reduction.combine"] = "shfl"  # Welford states merge by shuffles only
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        if len(passes) < 2 or not operand_roles(plan, passes).cached:
            cfg["memory.cache"] = "reload"
        if cfg["memory.cache"] == "regs":
            cfg["compute.unroll"] = 1  # a row kept in registers is always unrolled whole
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        A, C, B = channel_sizes(plan)
        T, vec = cfg["config.block"], cfg["memory.vec"]
        if T > 32 and T > 2 * pow2_ceil(-(-A * B // vec)):
            return "more threads per channel than vectors in it"
        if vec > 1:
            if B % vec:
                return f"vector width {vec} does not divide the trailing extent {B}"
            if not channel_vectors_ok(plan, vec):
                return "an operand cannot be read in vectors along the trailing dims"
        cache, CL = cfg["memory.cache"], cfg["config.cluster"]
        if CL > 1 and cache == "reload":
            return "a cluster keeps its channel on chip"
        if CL > 1 and _segment_vectors(plan, cfg) < T:
            return "a cluster's shares are smaller than a block's loads"
        if cache != "reload":
            passes = make_passes(plan, cfg["compute.algo"] == "online")
            cached = len(operand_roles(plan, passes).cached)
            per_thread = -(-_segment_vectors(plan, cfg) // T) * vec * cached
            if cache == "regs" and per_thread > MAX_CACHED_REGS:
                return "channel share does not fit in registers"
            if cache == "smem" and self._dyn_smem(plan, cfg) + 8192 > target.max_smem_per_block:
                return "channel share does not fit in shared memory"
        return None

    def _dyn_smem(self, plan: KernelPlan, cfg: dict[str, Any]) -> int:
        if cfg["memory.cache"] != "smem":
            return 0
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        return _segment_vectors(plan, cfg) * cfg["memory.vec"] * len(
            operand_roles(plan, passes).cached) * 4

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        # a block of 256 per channel, scalar loads, a shared-memory tree: the textbook kernel
        return {"config.block": 256, "config.grid": "exact", "config.cluster": 1,
                "memory.cache": "reload", "memory.vec": 1,
                "memory.load": "default", "memory.store": "default", "compute.unroll": 1,
                "compute.fastmath": 0, "compute.algo": "passes", "reduction.combine": "smem_tree"}

    # -- code ----------------------------------------------------------------------------------
    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        T, vec = cfg["config.block"], cfg["memory.vec"]
        A, C, B = channel_sizes(plan)
        lead, kept, trail = channel_runs(plan)
        NV = A * B // vec if B % vec == 0 else -1
        assert NV >= 0, "check() rejects vector widths not dividing B"
        hint = cg.HINTS[cfg["memory.load"]]
        fast = bool(cfg["compute.fastmath"])
        # 32-bit index arithmetic where every offset fits (divisions by constants are cheaper)
        idx_t = "int" if plan.numel < 2 ** 31 else "long long"
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        roles = operand_roles(plan, passes)
        op_index = {nid: k for k, nid in roles.full + roles.row}
        all_red = [r for p in passes for r in p.reducers]
        n_red, _ = smem_for_combine(all_red, T, 1, cfg["reduction.combine"])
        welford = any(p.welford_shift is not None for p in passes)
        n_wf = T // 32 if welford and T > 32 else 0  # each float of a Welford state
        cache, CL = cfg["memory.cache"], cfg["config.cluster"]
        # a cached channel (or a cluster block's share of it) is walked in NCH chunks of T
        # vectors, unrolled, so that each thread's elements have fixed registers or slots
        NVseg = _segment_vectors(plan, cfg)
        NCH = -(-NVseg // T)
        first_use = {nid: min(i for i, s in enumerate(roles.per_pass) if nid in s)
                     for nid in roles.cached}
        grid = (C if cfg["config.grid"] == "exact" else
                min(C, max(1, wave_blocks(T, target) // CL))) * CL
        groups = [cg.Group("a", lead), cg.Group("o", kept), cg.Group("b", trail)]
        dyn = self._dyn_smem(plan, cfg)

        c = Code()
        c(cg.prelude(plan))
        if CL == 1:
            c.open(f'extern "C" __global__ void __launch_bounds__({T}) '
                   f"ca_chan({cg.kernel_params(plan)})")
        else:
            c(cg.CLUSTER_PRELUDE)
            c.open(f'extern "C" __global__ void __cluster_dims__({CL}, 1, 1) '
                   f"__launch_bounds__({T}) ca_chan({cg.kernel_params(plan)})")
        c(f"typedef {idx_t} idx_t;", "const int lane = threadIdx.x;", "const int grp = 0;")
        if dyn or CL > 1:
            c("extern __shared__ float4 ca_dyn4[];",
              "float* ca_dyn = reinterpret_cast<float*>(ca_dyn4);")
        if CL > 1:  # all shared memory dynamic (see the row template)
            dyn = 4 * carve_dynamic(c, dyn // 4, [
                ("ca_red", max(n_red, n_wf), "float"), ("ca_red2", n_wf, "float"),
                ("ca_red3", n_wf, "float"), ("ca_cl", len(all_red) + 3 * welford, "float")])
            c("const unsigned ca_rank = ca_cluster_rank();",
              f"const idx_t ca_seg0 = (idx_t)ca_rank * {NVseg};  // this block's first vector")
            c.open(f"for (idx_t o = blockIdx.x / {CL}; o < {C}; o += gridDim.x / {CL})")
        else:
            if max(n_red, n_wf):
                c(f"__shared__ float ca_red[{max(n_red, n_wf)}];")
            if n_wf:
                c(f"__shared__ float ca_red2[{n_wf}];", f"__shared__ float ca_red3[{n_wf}];")
            c.open(f"for (idx_t o = blockIdx.x; o < {C}; o += gridDim.x)")
        if cache == "regs":
            for nid in roles.cached:
                c(f"{cg.vec_type(vec)} cr{op_index[nid]}[{NCH}];")
        slot = 0
        row_bound: dict[int, str] = {}
        for k, nid in roles.row:  # per-channel operands (weights): read once per channel
            off = cg.offset_expr(plan, nid, [groups[1]])
            c(f"const float w{k} = ca_ld<{hint}>(in{k} + ({off}));")
            row_bound[nid] = f"w{k}"
        done: set[int] = set()
        for pi, p in enumerate(passes):
            c(f"// pass {pi + 1}: " + ("output" if p.writes_output else
                                       "reduce " + ", ".join(f"%{r.nid}:{r.kind}"
                                                             for r in p.reducers)))
            if p.welford_shift is not None:
                c(welford_declare())
            else:
                for r in p.reducers:
                    c(*r.declare())
            if cache == "reload":
                c(f"#pragma unroll {cfg['compute.unroll']}")
                c.open(f"for (idx_t j = lane; j < {NV}; j += {T})")
            else:
                c("#pragma unroll" if cache == "regs" else
                  f"#pragma unroll {cfg['compute.unroll']}")
                c.open(f"for (int jj = 0; jj < {NCH}; ++jj)")
                c(f"const int js_ = jj * {T} + lane;  // the vector in this block's share")
                if CL > 1:
                    c("const idx_t j = ca_seg0 + js_;")
                    c.open(f"if (js_ < {NVseg} && j < {NV})")
                else:
                    c("const idx_t j = js_;")
                    c.open(f"if (j < {NV})")
            c(f"const idx_t e = j * {vec};", f"const idx_t a = e / {B};",
              f"const idx_t b = e % {B};")
            lanes: dict[int, list[str]] = {}
            vt = cg.vec_type(vec)
            for nid in sorted(roles.per_pass[pi]):
                k = op_index[nid]
                cached_here = nid in roles.cached and cache != "reload"
                if cached_here and first_use[nid] < pi:  # kept on chip by an earlier pass
                    q = roles.cached.index(nid)
                    src = f"cr{k}[jj]" if cache == "regs" else \
                        f"*reinterpret_cast<const {vt}*>(ca_dyn + ({q} * {NVseg} + js_) * {vec})"
                    c(f"const {vt} x{k} = {src};")
                    lanes[nid] = [cg.vec_get(f"x{k}", vec, l) for l in range(vec)]
                    continue
                off = cg.offset_expr(plan, nid, groups)
                if vec > 1 and cg.is_unit_stride(plan, nid, groups[2], vec):
                    c(f"const {vt} x{k} = "
                      f"{cg.vec_load(f'in{k} + ({off})', vec, hint)};")
                    lanes[nid] = [cg.vec_get(f"x{k}", vec, l) for l in range(vec)]
                    whole = f"x{k}"
                else:  # scalar, or constant over the vector (check() masks gathers)
                    c(f"const float x{k} = ca_ld<{hint}>(in{k} + ({off}));")
                    lanes[nid] = [f"x{k}"] * vec
                    whole = f"x{k}" if vec == 1 else \
                        f"make_float{vec}(" + ", ".join([f"x{k}"] * vec) + ")"
                if cached_here:
                    q = roles.cached.index(nid)
                    dst = f"cr{k}[jj]" if cache == "regs" else \
                        f"*reinterpret_cast<{vt}*>(ca_dyn + ({q} * {NVseg} + js_) * {vec})"
                    c(f"{dst} = {whole};")
            out_vals = []
            for l in range(vec):
                bound = dict(row_bound)
                bound.update({nid: vals[l] for nid, vals in lanes.items()})
                stmts, names = cg.emit_values(plan, pass_roots(plan, p), bound, fast,
                                              suffix=f"_{l}")
                c(*stmts)
                if p.writes_output:
                    out_vals.append(names[plan.output])
                elif p.welford_shift is not None:
                    c(welford_update(names[pass_roots(plan, p)[0]]))
                else:
                    for r in p.reducers:
                        c(r.update(names[plan.graph[r.nid].args[0]]))
            if p.writes_output:
                c(cg.vec_store(f"out + (a * {C * B} + o * {B} + b)", out_vals,
                               cg.STORE_HINTS[cfg["memory.store"]]))
            if cache != "reload":
                c.close()  # if j
            c.close()  # for j
            if p.welford_shift is not None:
                slot = finish_welford(c, plan, p, row_bound, done, fast, T, CL, slot)
            elif p.reducers:
                block_combine(c, p.reducers, T, 1, cfg["reduction.combine"])
                if CL > 1:
                    cluster_combine(c, p.reducers, CL, slot)
                    slot += len(p.reducers)
                bind_reducers(c, p.reducers, row_bound, done)
            emit_new_row_values(c, plan, row_bound, done, fast)
        if plan.output_is_row or plan.graph.sides:
            c.open("if (lane == 0" + (" && ca_rank == 0)" if CL > 1 else ")"))
            if plan.output_is_row:
                c(f"out[o] = {row_bound[plan.output]};")
            c(*side_stores(plan, row_bound))
            c.close()
        if CL > 1:  # peers are done with this block's slots (see the row template)
            c("ca_cluster_sync();")
        c.close()  # channel loop
        c.close()  # kernel
        reads = sum(1 for s in roles.per_pass if s) if cache == "reload" else 1
        facts = (("family", "chan"), ("threads", T), ("blocks", grid), ("vec", vec),
                 ("passes", len(passes)), ("reads_per_elem", float(max(1, reads))),
                 ("fast", int(fast)), ("combine", cfg["reduction.combine"]), ("tpr", T),
                 ("rows", C), ("row_len", A * B), ("cache", cache), ("cluster", CL))
        return Rendered(c.text(), (Launch("ca_chan", (grid, 1, 1), (T, 1, 1), dyn, cluster=CL),),
                        facts=facts)
