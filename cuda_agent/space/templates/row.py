"""Reductions over the innermost dims (softmax, norms, row reductions): a group of T threads
owns a row of R contiguous elements.

Slots decide the group size and rows per block (config), vector width and where the row lives
between passes: registers, shared memory, or re-read from global memory/L2 (memory), unrolling,
intrinsics and single-pass online softmax (compute), and how the group combines partial results:
warp shuffles or a shared-memory tree (reduction). Losses that fold per-row values over all
rows add how the blocks' partial totals meet (reduction.cross, `total.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...ir.graph import HALF_DTYPES
from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .gemm import CP_ASYNC
from .base import (Code, Template, block_combine, pow2_ceil, pow2_choices, smem_for_combine,
                   wave_blocks)
from .total import CROSS, Totals
from .rowcommon import (bind_reducers, carve_dynamic, cluster_combine, cluster_combine_state,
                        combine_state, emit_new_row_values, finish_welford, make_passes,
                        online_pair, online_state, online_update, operand_roles, pass_extras,
                        pass_roots, side_stores, welford_declare, welford_update)

MAX_CACHED_REGS = 64  # floats per thread kept in registers across passes
FULL_UNROLL_CHUNKS = 8  # a row loop of at most this many chunks is always unrolled whole
CLUSTERS = (1, 2, 4, 8)  # 8: the largest portable cluster
# Launches of fewer blocks than half the SMs leave the GPU idle; on large problems such
# configurations are hopeless (minutes of measuring for nothing), so they are not in the space.
UNDERFILL_MIN_ELEMS = 1 << 20



# cp.async of 8 bytes (a float2), beside gemm's 4- and 16-byte copies
ROW_CP8 = r"""
#ifndef CA_EMULATED
__device__ __forceinline__ void ca_cp8(float* dst, const float* src, bool in) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::
               "r"(s), "l"(src), "r"(in ? 8 : 0));
}
#endif
"""


class RowTemplate(Template):
    name = "row"
    version = "4"
    # version 1 stored with plain stores; version 2 had no clusters; version 3 folded the
    # warps' parts of a row serially
    legacy = {"memory.store": "default", "config.cluster": 1}
    writes_sides = True
    takes_half = True

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind == "reduce" and plan.I == 1

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.block", (32, 64, 128, 256, 512, 1024), "threads per block"),
            Slot("config.tpr", pow2_choices(1, 1024), "threads cooperating on one row"),
            Slot("config.grid", ("exact", "persistent"), "a block per row group, or one wave"),
            Slot("config.cluster", CLUSTERS,
                 "blocks of a thread-block cluster that split one long row (each keeps its "
                 "segment; partial results meet in distributed shared memory)"),
            Slot("memory.vec", (1, 2, 4), "elements per load/store along the row"),
            Slot("memory.cache", ("regs", "smem", "reload", "async"),
                 "where a row is kept between passes; async: in shared memory, copied there "
                 "by cp.async while the block works on its previous row group (two buffers)"),
            Slot("memory.load", ("default", "ldg", "stream", "keep"),
                 "load cache hint; keep: a row re-read by a later pass (cache=reload) is read "
                 "with an L2 evict-last policy, and evict-first by the last pass reading it"),
            Slot("memory.store", ("default", "stream"),
                 "store cache hint for full outputs (streaming: evict first)"),
            Slot("compute.unroll", (1, 2, 4), "unroll of the loop over a row's chunks"),
            Slot("compute.fastmath", (0, 1), "hardware approximations of exp/log/div"),
            Slot("compute.algo", ("passes", "online"),
                 "separate passes, or one online pass: softmax's max and sum, or a mean and "
                 "the squared deviations from it (Welford)"),
            Slot("reduction.combine", ("shfl", "smem_tree"),
                 "combine within a row group: warp shuffles or shared-memory tree"),
        ] + ([Slot("reduction.cross", CROSS, "how the blocks' partial totals over all rows "
                   "meet: a fold kernel, or the last block folds")] if plan.outer else [])

    # -- validity ------------------------------------------------------------------------------
    def _nch(self, plan: KernelPlan, cfg: dict[str, Any]) -> int:
        return -(-_segment(plan, cfg) // (cfg["config.tpr"] * cfg["memory.vec"]))

    def excluded(self, cfg: dict[str, Any]) -> bool:
        # canonical() never changes the block, the threads per row or the cluster, and only
        # ever sets the cache to reload
        return cfg["config.cluster"] > 1 and (cfg["config.tpr"] != cfg["config.block"] or
                                              cfg["memory.cache"] in ("reload", "async"))

    prefix_slots = 4  # block, threads per row, grid, cluster (canonical() changes only grid)

    def prefix_excluded(self, plan: KernelPlan, prefix: dict[str, Any], target: Target
                        ) -> bool:
        T, B, CL = prefix["config.tpr"], prefix["config.block"], prefix["config.cluster"]
        return T > B or self._underfills(plan, B, T, target) or (
            CL > 1 and (T != B or bool(plan.outer)))

    @staticmethod
    def _underfills(plan: KernelPlan, B: int, T: int, target: Target) -> bool:
        return plan.numel >= UNDERFILL_MIN_ELEMS and -(-plan.O // (B // T)) < target.sm_count // 2

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        f = _facts(plan)
        cfg = dict(cfg)
        algo = f.by_algo[cfg["compute.algo"] == "online"]
        if not algo.keeps_rows:
            cfg["memory.cache"] = "reload"
        if cfg["memory.load"] == "keep" and (cfg["memory.cache"] != "reload" or
                                             not algo.cached):
            cfg["memory.load"] = "default"  # nothing is read twice: nothing to keep
        if cfg["memory.cache"] == "async" and algo.all_copied:
            cfg["memory.load"] = "default"  # every operand comes by cp.async: no hint
        if not f.online_pair:
            cfg["compute.algo"] = "passes"
        if not f.fast_math:
            cfg["compute.fastmath"] = 0
        if cfg["config.tpr"] == 1:
            cfg["reduction.combine"] = "shfl"
        if f.output_is_row:
            cfg["memory.store"] = "default"  # one value per row: no stream to hint
        if cfg["memory.cache"] == "regs" or _chunks(f.R, cfg) <= FULL_UNROLL_CHUNKS:
            cfg["compute.unroll"] = 1  # the loop is unrolled whole: the slot has no effect
        G = max(1, cfg["config.block"] // cfg["config.tpr"])
        rows_blocks = -(-f.O // G)
        if rows_blocks <= wave_blocks(cfg["config.block"], target):
            cfg["config.grid"] = "exact"
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        f = _facts(plan)
        T, B, vec = cfg["config.tpr"], cfg["config.block"], cfg["memory.vec"]
        if T > B:
            return "threads per row exceed the block"
        if self._underfills(plan, B, T, target):
            return "too few blocks to fill the GPU (the split template covers few long rows)"
        R = f.R
        if T > 1 and T * vec > 2 * f.R_pow2:
            return "more threads per row than elements"
        if vec > 1:
            if R % vec:
                return f"vector width {vec} does not divide the row length {R}"
            if not cg.vector_reads_ok(plan, plan.reduce_dims, vec):
                return "an operand cannot be read in vectors along the row"
        if cfg["compute.algo"] == "online" and cfg["reduction.combine"] != "shfl":
            return "an online pass combines with shuffles only"
        CL = cfg["config.cluster"]
        if CL > 1:
            if T != B:
                return "a cluster splits one row: one row per block"
            if f.outer:
                return "a cluster does not fold totals over rows"
            if cfg["memory.cache"] == "reload":
                return "a cluster keeps its row on chip (the split template re-reads long rows)"
            if _segment_of(R, CL, vec) < T * vec:
                return "a cluster's segments are shorter than a block's loads"
        cached = f.by_algo[cfg["compute.algo"] == "online"].cached
        nch = _chunks(R, cfg)
        if cfg["memory.cache"] == "regs" and nch * vec * len(cached) > MAX_CACHED_REGS:
            return "row does not fit in registers"
        if cfg["memory.cache"] in ("smem", "async") and \
                self._dyn_smem(plan, cfg, cached) + 8192 > target.max_smem_per_block:
            return "row group does not fit in shared memory"
        if cfg["memory.cache"] == "async" and any(
                plan.graph.inputs[k].dtype in HALF_DTYPES for k in plan.operands):
            return "cp.async copies float words: half-precision rows are cached by loads"
        if cfg["memory.cache"] == "async" and vec > 1 and not all(
                cg.is_unit_stride(plan, nid, cg.Group("c", plan.reduce_dims), vec)
                for nid in cached):
            return "cp.async copies a vector only from contiguous elements"
        return None

    def _dyn_smem(self, plan: KernelPlan, cfg: dict[str, Any], cached: Sequence[int]) -> int:
        """Bytes of the row cache (shared-memory caching: a segment per operand and group; two
        sets of them when the next row group is copied in while this one is worked on)."""
        G = cfg["config.block"] // cfg["config.tpr"]
        copies = {"smem": 1, "async": 2}.get(cfg["memory.cache"], 0)
        return copies * G * len(cached) * _segment(plan, cfg) * 4

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        # a block of 256 per row, scalar loads, re-reading the row each pass: the textbook kernel
        return {"config.block": 256, "config.tpr": min(256, pow2_ceil(plan.R)),
                "config.grid": "exact", "config.cluster": 1, "memory.vec": 1, "memory.cache": "reload",
                "memory.load": "default", "memory.store": "default", "compute.unroll": 1,
                "compute.fastmath": 0,
                "compute.algo": "passes", "reduction.combine": "smem_tree",
                **({"reduction.cross": "two_pass"} if plan.outer else {})}

    # -- code ----------------------------------------------------------------------------------
    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        T, B, vec = cfg["config.tpr"], cfg["config.block"], cfg["memory.vec"]
        G = B // T
        O, R = plan.O, plan.R
        hint = cg.HINTS["default" if cfg["memory.load"] == "keep" else cfg["memory.load"]]
        fast = bool(cfg["compute.fastmath"])
        cache = cfg["memory.cache"]
        nch = self._nch(plan, cfg)
        passes = make_passes(plan, cfg["compute.algo"] == "online")
        roles = operand_roles(plan, passes)
        first_use = {nid: min(i for i, s in enumerate(roles.per_pass) if nid in s)
                     for nid in roles.cached}
        op_index = {nid: k for k, nid in roles.full + roles.row}
        ogrp = cg.Group("o", tuple(range(plan.reduce_dims[0])))
        cgrp = cg.Group("c", plan.reduce_dims)
        all_red = [r for p in passes for r in p.reducers]
        n_red, need_i = smem_for_combine(all_red, T, G, cfg["reduction.combine"])
        if any(p.online for p in passes) and T > 32:
            n_red = max(n_red, G * (T // 32))
        CL = cfg["config.cluster"]
        Rseg = _segment(plan, cfg)  # the row, or a cluster block's segment of it
        exact_blocks = -(-O // G) * CL
        grid = exact_blocks if cfg["config.grid"] == "exact" else min(exact_blocks, max(
            CL, wave_blocks(B, target) // CL * CL))
        dyn = self._dyn_smem(plan, cfg, roles.cached)
        online = any(p.online for p in passes)
        welford = any(p.welford_shift is not None for p in passes)

        c = Code()
        c(cg.prelude(plan))
        if cache == "async":
            c(CP_ASYNC, ROW_CP8)
        if CL == 1:
            c.open(f'extern "C" __global__ void __launch_bounds__({B}) '
                   f'ca_row({cg.kernel_params(plan)})')
        else:
            c(cg.CLUSTER_PRELUDE)
            c.open(f'extern "C" __global__ void __cluster_dims__({CL}, 1, 1) '
                   f'__launch_bounds__({B}) ca_row({cg.kernel_params(plan)})')
        c(f"const int lane = threadIdx.x % {T};", f"const int grp = threadIdx.x / {T};")
        if CL > 1:
            # all of a cluster kernel's shared memory is dynamic: the row segment cache, the
            # block's combine buffers, and the slots its partial results are read from by the
            # cluster's other blocks
            n_slots = sum(len(p.reducers) + (3 if p.online else 0) for p in passes)
            parts = [("ca_red", n_red, "float"), ("ca_red_i", n_red if need_i else 0, "int"),
                     ("ca_red2", n_red if online else 0, "float"),
                     ("ca_red3", n_red if welford else 0, "float"),
                     ("ca_cl", n_slots, "float"), ("ca_cl_i", n_slots if need_i else 0, "int")]
            c("extern __shared__ float4 ca_dyn4[];",
              "float* ca_dyn = reinterpret_cast<float*>(ca_dyn4);")
            dyn = 4 * carve_dynamic(c, dyn // 4, parts)
            c("const unsigned ca_rank = ca_cluster_rank();",
              f"const int ca_seg0 = (int)ca_rank * {Rseg};  // this block's segment of the row")
        else:
            if n_red:
                c(f"__shared__ float ca_red[{n_red}];")
                if need_i:
                    c(f"__shared__ int ca_red_i[{n_red}];")
                if online:
                    c(f"__shared__ float ca_red2[{n_red}];")
                if welford:
                    c(f"__shared__ float ca_red3[{n_red}];")
            if dyn:
                c("extern __shared__ float4 ca_dyn4[];",
                  "float* ca_dyn = reinterpret_cast<float*>(ca_dyn4);")
        slot = 0  # the next cluster exchange slot
        totals = Totals(plan, grid, B, cfg["reduction.cross"], cfg["reduction.combine"]) \
            if plan.outer else None
        if totals:
            totals.declare(c)
        ncached = len(roles.cached)

        def copy_rows(first: str, buf: str) -> None:
            """cp.async copies of the cached operands of the row group starting at row `first`
            into buffer `buf`; each thread copies the elements it reads later, so a wait for
            its own copies suffices (no barrier)."""
            c.open(f"if ({first} < {O}LL)")
            c(f"const long long o = ({first}) + grp < {O}LL ? ({first}) + grp : {O - 1}LL;")
            if nch <= FULL_UNROLL_CHUNKS:
                c("#pragma unroll")
            c.open(f"for (int j = 0; j < {nch}; ++j)")
            c(f"const int c = (j * {T} + lane) * {vec};")
            c.open(f"if (c < {R})")
            for q, nid in enumerate(roles.cached):
                off = cg.offset_expr(plan, nid, [ogrp, cgrp])
                c(f"{ {1: 'ca_cp4', 2: 'ca_cp8', 4: 'ca_cp16'}[vec]}(ca_dyn + ((({buf}) * {G} + "
                  f"grp) * {ncached} + {q}) * {Rseg} + c, in{op_index[nid]} + ({off}), true);")
            c.close()
            c.close()
            c.close()
            c("ca_cp_commit();")

        if cache == "async":
            c("int ca_buf = 0;  // the shared-memory buffer of this row group")
            copy_rows(f"(long long)blockIdx.x * {G}", "0")
        if CL == 1:
            c.open(f"for (long long ob = (long long)blockIdx.x * {G}; ob < {O}LL; "
                   f"ob += (long long)gridDim.x * {G})")
        else:  # a cluster per row: its blocks share the row index
            c.open(f"for (long long ob = (long long)(blockIdx.x / {CL}) * {G}; ob < {O}LL; "
                   f"ob += (long long)(gridDim.x / {CL}) * {G})")
        c("const long long o_ = ob + grp;", f"const bool active = o_ < {O}LL;",
          f"const long long o = active ? o_ : {O - 1}LL;")
        if cache == "async":  # the next row group's copies fly while this one is worked on
            copy_rows(f"ob + (long long)gridDim.x * {G}", "ca_buf ^ 1")
            c("ca_cp_wait<1>();  // this row group's copies have landed")
        row_bound: dict[int, str] = {}
        for k, nid in roles.row:
            off = cg.offset_expr(plan, nid, [ogrp])
            c(f"const {cg.in_ctype(plan, k)} w{k} = {cg.load_scalar(plan, k, off, hint)};")
            row_bound[nid] = f"w{k}"
        if cache == "regs":
            for nid in roles.cached:
                c(f"{cg.vec_type(vec)} cr{op_index[nid]}[{nch}];")
        done: set[int] = set()
        for pi, p in enumerate(passes):
            c(f"// pass {pi + 1}: " + ("output" if p.writes_output else
                                       "reduce " + ", ".join(f"%{r.nid}:{r.kind}" for r in p.reducers)))
            if p.welford_shift is not None:
                c(welford_declare())
            elif p.online:
                c("float om = -CA_INF, os = 0.f;")
            for r in pass_extras(p):
                c(*r.declare())
            if cache == "regs" or nch <= FULL_UNROLL_CHUNKS:
                c("#pragma unroll")
            else:
                c(f"#pragma unroll {cfg['compute.unroll']}")
            c.open(f"for (int j = 0; j < {nch}; ++j)")
            if CL == 1:
                c(f"const int c = (j * {T} + lane) * {vec};")
                c.open(f"if (c < {R})")
            else:  # cs_: the position in this block's segment; c: in the row
                c(f"const int cs_ = (j * {T} + lane) * {vec}, c = ca_seg0 + cs_;")
                c.open(f"if (cs_ < {Rseg} && c < {R})")
            lanes: dict[int, list[str]] = {}
            for nid in sorted(roles.per_pass[pi]):
                k = op_index[nid]
                name = f"x{k}"
                hint = pass_hint(cfg["memory.load"], roles.per_pass, pi, nid,
                                 shared=not cg.varies_along(plan, nid, ogrp.dims))
                cached_here = nid in roles.cached and cache != "reload"
                from_cache = cached_here and (first_use[nid] < pi or cache == "async")
                grp = cg.Group("c", plan.reduce_dims)
                if from_cache and cache == "regs":
                    c(f"const {cg.vec_type(vec)} {name} = cr{k}[j];")
                    lanes[nid] = [cg.vec_get(name, vec, l) for l in range(vec)]
                    continue
                q = roles.cached.index(nid) if nid in roles.cached else -1
                sbase = (f"ca_dyn + ((grp * {ncached} + {q}) * {Rseg} + "
                         f"{'c' if CL == 1 else 'cs_'})")
                if cache == "async":
                    sbase = f"ca_dyn + (((ca_buf * {G} + grp) * {ncached} + {q}) * {Rseg} + c)"
                if from_cache and cache in ("smem", "async"):
                    c(f"const {cg.vec_type(vec)} {name} = "
                      f"*reinterpret_cast<const {cg.vec_type(vec)}*>({sbase});")
                    lanes[nid] = [cg.vec_get(name, vec, l) for l in range(vec)]
                    continue
                if vec > 1 and cg.is_unit_stride(plan, nid, grp, vec):
                    off = cg.offset_expr(plan, nid, [ogrp, grp])
                    c(f"const {cg.vec_type(vec)} {name} = "
                      f"{cg.vec_load(f'in{k} + ({off})', vec, hint)};")
                    lanes[nid] = [cg.vec_get(name, vec, l) for l in range(vec)]
                elif vec == 1 or cg.is_splat(plan, nid, grp, vec):
                    off = cg.offset_expr(plan, nid, [ogrp, grp])
                    if vec == 1:
                        c(f"const float {name} = ca_ld<{hint}>(in{k} + ({off}));")
                    else:
                        c(f"const float {name}s = ca_ld<{hint}>(in{k} + ({off}));")
                        c(f"const {cg.vec_type(vec)} {name} = make_float{vec}(" +
                          ", ".join([f"{name}s"] * vec) + ");")
                    lanes[nid] = [cg.vec_get(name, vec, l) for l in range(vec)]
                else:  # gathers never pass check() for vec > 1; kept for completeness
                    raise AssertionError("unreachable: vector gathers are masked")
                if cached_here and cache == "regs":
                    c(f"cr{k}[j] = {name};")
                elif cached_here and cache == "smem":
                    c(f"*reinterpret_cast<{cg.vec_type(vec)}*>({sbase}) = {name};")
            roots = pass_roots(plan, p)
            out_lane_vals = []
            for l in range(vec):
                bound = dict(row_bound)
                bound.update({nid: vals[l] for nid, vals in lanes.items()})
                bound.update({nid: cg.index_along(plan, d, cgrp, f"c + {l}")
                              for nid, d in cg.iota_nodes(plan)})
                stmts, names = cg.emit_values(plan, roots, bound, fast, suffix=f"_{l}")
                c(*stmts)
                if p.writes_output:
                    out_lane_vals.append(names[plan.output])
                elif p.online:
                    c(welford_update(names[roots[0]]) if p.welford_shift is not None else
                      online_update("om", "os", names[roots[0]], fast))
                    for r in pass_extras(p):
                        c(r.update(names[plan.graph[r.nid].args[0]], f"c + {l}"))
                else:
                    for r in p.reducers:
                        c(r.update(names[plan.graph[r.nid].args[0]], f"c + {l}"))
            if p.writes_output:
                c.open("if (active)")
                c(cg.vec_store(f"out + o * {R} + c", out_lane_vals,
                               cg.STORE_HINTS[cfg["memory.store"]]))
                c.close()
            c.close()  # if c < R
            c.close()  # for j
            if p.welford_shift is not None:
                slot = finish_welford(c, plan, p, row_bound, done, fast, T, CL, slot)
            elif p.online:
                combine_state(c, online_state(fast), T)
                if CL > 1:
                    slot = cluster_combine_state(c, online_state(fast), CL, slot)
                m, s = p.online
                c(f"const float s{m} = om;", f"const float s{s} = os;")
                row_bound[m], row_bound[s] = f"s{m}", f"s{s}"
                done.update(p.online)
            if p.online and pass_extras(p):
                # the reductions computed alongside the pair (shuffles only)
                extras = pass_extras(p)
                block_combine(c, extras, T, G, cfg["reduction.combine"])
                if CL > 1:
                    cluster_combine(c, extras, CL, slot)
                    slot += len(extras)
                bind_reducers(c, extras, row_bound, done)
            if not p.online and p.reducers:
                block_combine(c, p.reducers, T, G, cfg["reduction.combine"])
                if CL > 1:
                    cluster_combine(c, p.reducers, CL, slot)
                    slot += len(p.reducers)
                bind_reducers(c, p.reducers, row_bound, done)
            emit_new_row_values(c, plan, row_bound, done, fast)
        if totals:
            totals.add_row(c, row_bound, fast, "active && lane == 0")
        # the row's one writer (its first lane, of the cluster's first block) stores its row
        # output and a program stage's per-row side outputs, as the chan template does
        row_out = not totals and plan.output_is_row
        if row_out or plan.graph.sides:
            c.open("if (active && lane == 0" + (" && ca_rank == 0)" if CL > 1 else ")"))
            if row_out:
                c(f"out[o] = {row_bound[plan.output]};")
            c(*side_stores(plan, row_bound))
            c.close()
        if cache == "async":
            c("ca_buf ^= 1;")
        if CL > 1:
            # the cluster's blocks are done reading each other's slots before the next row
            # overwrites them (and before any block exits, which would free its shared memory)
            c("ca_cluster_sync();")
        c.close()  # row loop
        launches = [Launch("ca_row", (grid, 1, 1), (B, 1, 1), dyn, cluster=CL)]
        if totals:
            totals.finish(c, fast)
        c.close()  # kernel
        fold = totals.fold_kernel(c, fast) if totals else None
        if fold:
            launches.append(fold)
        facts: tuple[tuple[str, Any], ...] = (
            ("family", "row"), ("threads", B), ("blocks", grid), ("vec", vec), ("tpr", T),
            ("passes", len(passes)), ("cache", cache), ("dyn_smem", dyn),
            ("cached_operands", len(roles.cached)), ("fast", int(fast)),
            ("combine", cfg["reduction.combine"]), ("rows", O), ("row_len", R),
            ("cluster", CL))
        if totals:
            facts += (("cross", cfg["reduction.cross"]), ("launches", len(launches)))
        return Rendered(c.text(), tuple(launches), totals.workspace_bytes if totals else 0,
                        facts=facts)


def pass_hint(load: str, per_pass: list[set[int]], pi: int, nid: int,
              shared: bool = False) -> int:
    """The load hint of operand `nid` in pass `pi`: the slot's, or with `keep` evict-last
    while a later pass reads the operand again, evict-first in the last pass that does.
    A `shared` operand (one every row reads: a layer norm's weight) stays evict-last: the
    next row reads it again (streaming it out made every row fetch it from DRAM again)."""
    if load != "keep":
        return cg.HINTS[load]
    again = shared or any(nid in s for s in per_pass[pi + 1:])
    return cg.HINTS["keep" if again else "stream"]


def _segment(plan: KernelPlan, cfg: dict[str, Any]) -> int:
    """Elements of a row one block covers: the row, or with a cluster of CL blocks a CL-th of it
    (rounded up to whole vectors; the last block's may be shorter)."""
    return _segment_of(plan.R, cfg.get("config.cluster", 1), cfg["memory.vec"])


def _segment_of(R: int, CL: int, vec: int) -> int:  # noqa: N803 - the view's names
    return R if CL == 1 else -(-R // (CL * vec)) * vec


def _chunks(R: int, cfg: dict[str, Any]) -> int:  # noqa: N803
    """Chunks of `tpr * vec` elements in a block's segment of a row of `R` (`_nch`)."""
    vec = cfg["memory.vec"]
    return -(-_segment_of(R, cfg.get("config.cluster", 1), vec) // (cfg["config.tpr"] * vec))


@dataclass(frozen=True)
class _AlgoFacts:
    """How a plan's operands are read under one choice of `compute.algo` (`operand_roles`)."""

    keeps_rows: bool  # two or more passes, some operand read by more than one: a row cache helps
    cached: tuple[int, ...]  # the operands read by more than one pass
    all_copied: bool  # every operand is such a full operand (cp.async brings them all)


@dataclass(frozen=True)
class _Facts:
    """What `canonical` and `check` read of a plan, looked up once per plan and shape: they run
    for each raw combination a row space walks (hundreds of thousands), and reading these
    through the plan's memo on each call was most of counting or listing a row space."""

    R: int  # noqa: N815 - the view's names
    O: int  # noqa: N815
    R_pow2: int  # noqa: N815
    outer: bool
    online_pair: bool
    fast_math: bool
    output_is_row: bool
    by_algo: dict[bool, _AlgoFacts]  # by compute.algo == "online"


def _facts(plan: KernelPlan) -> _Facts:
    shape = (plan.full_shape, plan.reduce_dims)
    hit = plan.memo.get("row_facts")
    # keyed by the shape's identity, as the plan's own view is (`KernelPlan._view`)
    if hit is not None and hit[0][0] is shape[0] and hit[0][1] is shape[1]:
        return hit[1]
    by_algo = {}
    for online in (False, True):
        passes = make_passes(plan, online)
        roles = operand_roles(plan, passes)
        by_algo[online] = _AlgoFacts(
            keeps_rows=len(passes) >= 2 and bool(roles.cached), cached=tuple(roles.cached),
            all_copied=not roles.row and all(nid in roles.cached for _, nid in roles.full))
    facts = _Facts(R=plan.R, O=plan.O, R_pow2=pow2_ceil(plan.R), outer=bool(plan.outer),
                   online_pair=online_pair(plan), fast_math=plan.fast_math_matters(),
                   output_is_row=plan.output_is_row, by_algo=by_algo)
    plan.memo["row_facts"] = (shape, facts)
    return facts


