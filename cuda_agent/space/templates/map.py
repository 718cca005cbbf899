"""Elementwise chains: one thread computes ITEMS vectors of VEC consecutive outputs.

Structure: loads of every operand for all items first (independent loads in flight), then the
fused arithmetic and the stores. Operands of the output's full shape are read with vector loads;
broadcast operands are read once per vector where they are constant over it, else per element.
"""

from __future__ import annotations

from typing import Any

from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Template, persistent_grid


class MapTemplate(Template):
    name = "map"
    version = "1"
    writes_permuted = True
    takes_half = True

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind == "map"

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.block", (64, 128, 256, 512, 1024), "threads per block"),
            Slot("config.items", (1, 2, 4, 8), "vectors per thread per grid step"),
            Slot("config.grid", ("exact", "persistent"),
                 "one thread per work item, or one wave of blocks striding over the data"),
            Slot("memory.vec", (1, 2, 4), "elements per load/store (4 = 16 bytes)"),
            Slot("memory.load", ("default", "ldg", "stream"), "load cache hint"),
            Slot("memory.store", ("default", "stream"), "store cache hint"),
            Slot("compute.unroll", ("full", "none"), "unroll the per-thread item loop"),
            Slot("compute.fastmath", (0, 1), "hardware approximations of exp/log/div"),
            Slot("compute.index", ("i32", "i64"), "index arithmetic width"),
        ]

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        if not plan.fast_math_matters():
            cfg["compute.fastmath"] = 0
        if cfg["config.items"] == 1:
            cfg["compute.unroll"] = "full"
        exact = _exact_blocks(plan, cfg)
        if persistent_grid(exact, cfg["config.block"], target.sm_count,
                           target.max_threads_per_sm) == exact:
            cfg["config.grid"] = "exact"  # one wave holds the grid: the same launch
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        if cfg["compute.index"] == "i32" and plan.numel + 8 * 1024 * 8 >= 2**31:
            return "i32 indexing overflows for this size"
        return None

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        return {"config.block": 256, "config.items": 1, "config.grid": "exact", "memory.vec": 1,
                "memory.load": "default", "memory.store": "default", "compute.unroll": "full",
                "compute.fastmath": 0, "compute.index": "i64"}

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        block, items, vec = cfg["config.block"], cfg["config.items"], cfg["memory.vec"]
        hint, shint = cg.HINTS[cfg["memory.load"]], cg.STORE_HINTS[cfg["memory.store"]]
        fast = bool(cfg["compute.fastmath"])
        idx_t = "int" if cfg["compute.index"] == "i32" else "long long"
        unrolled = cfg["compute.unroll"] == "full"
        N = plan.numel
        NV = N // vec
        exact_blocks = _exact_blocks(plan, cfg)
        grid = exact_blocks
        if cfg["config.grid"] == "persistent":
            grid = persistent_grid(exact_blocks, block, target.sm_count,
                                   target.max_threads_per_sm)

        group = cg.Group("n0", tuple(range(len(plan.full_shape))))
        operands = [(k, cg.operand_node(plan, k)) for k in plan.operands]
        gathers = 0

        def load_stmts(item: str, n0: str, v: int) -> tuple[list[str], dict[int, list[str]]]:
            """Loads for one vector at flat index n0; returns statements and per-lane exprs."""
            nonlocal gathers
            stmts, lanes = [], {}
            grp = cg.Group(n0, group.dims)
            for k, nid in operands:
                name = f"a{k}_{item}"
                if v > 1 and cg.is_unit_stride(plan, nid, grp, v):
                    off = cg.offset_expr(plan, nid, [grp])
                    stmts.append(f"const {cg.vec_type(v)} {name} = "
                                 f"{cg.vec_load(f'in{k} + ({off})', v, hint)};")
                    lanes[nid] = [cg.vec_get(name, v, l) for l in range(v)]
                elif v == 1 or cg.is_splat(plan, nid, grp, v):
                    off = cg.offset_expr(plan, nid, [grp])
                    stmts.append(f"const float {name} = ca_ld<{hint}>(in{k} + ({off}));")
                    lanes[nid] = [name] * v
                else:
                    gathers += 1
                    exprs = []
                    for l in range(v):
                        off = cg.offset_expr(plan, nid, [cg.Group(f"({n0} + {l})", group.dims)])
                        stmts.append(f"const float {name}_{l} = ca_ld<{hint}>(in{k} + ({off}));")
                        exprs.append(f"{name}_{l}")
                    lanes[nid] = exprs
            return stmts, lanes

        def compute_store(code: Code, item: str, n0: str, lanes: dict[int, list[str]],
                          v: int) -> None:
            values = []
            for l in range(v):
                stmts, names = cg.emit_values(plan, [plan.output],
                                              {nid: lanes[nid][l] for nid in lanes}, fast,
                                              suffix=f"_{item}_{l}")
                code(*stmts)
                values.append(names[plan.output])
            code(*cg.out_store(plan, n0, values, shint))

        c = Code()
        c(cg.prelude(plan))
        c.open(f'extern "C" __global__ void __launch_bounds__({block}) '
               f"ca_map({cg.kernel_params(plan)})")
        c(f"typedef {idx_t} idx_t;",
          f"const idx_t NV = {NV};  // whole vectors of {vec}",
          f"const idx_t TILE = (idx_t){block} * {items};")
        c.open("for (idx_t base = (idx_t)blockIdx.x * TILE; base < NV; "
               "base += (idx_t)gridDim.x * TILE)")
        lanes_by_item: dict[int, dict[int, list[str]]] = {}
        if unrolled:
            # phase 1: all loads in flight; phase 2: arithmetic and stores
            for it in range(items):
                c(f"const idx_t v{it} = base + {it * block} + threadIdx.x;")
                c(f"const idx_t n{it} = (v{it} < NV ? v{it} : NV - 1) * {vec};")
                stmts, lanes = load_stmts(str(it), f"n{it}", vec)
                c(*stmts)
                lanes_by_item[it] = lanes
            for it in range(items):
                c.open(f"if (v{it} < NV)")
                compute_store(c, str(it), f"n{it}", lanes_by_item[it], vec)
                c.close()
        else:
            c("#pragma unroll 1")
            c.open(f"for (int it = 0; it < {items}; ++it)")
            c("const idx_t v = base + (idx_t)it * " + str(block) + " + threadIdx.x;")
            c.open("if (v < NV)")
            c(f"const idx_t n = v * {vec};")
            stmts, lanes = load_stmts("0", "n", vec)
            c(*stmts)
            compute_store(c, "0", "n", lanes, vec)
            c.close().close()
        c.close()
        tail = N - NV * vec
        if tail:
            c.open(f"if (blockIdx.x == 0 && threadIdx.x < {tail})")
            c(f"const idx_t t = {NV * vec} + threadIdx.x;")
            stmts, lanes = load_stmts("t", "t", 1)
            c(*stmts)
            compute_store(c, "t", "t", lanes, 1)
            c.close()
        c.close()
        facts = (("family", "map"), ("threads", block), ("blocks", grid), ("vec", vec),
                 ("items", items), ("gathers", gathers), ("fast", int(fast)),
                 ("passes", 1), ("reads_per_elem", 1.0))
        return Rendered(c.text(), (Launch("ca_map", (grid, 1, 1), (block, 1, 1)),), facts=facts)



def _exact_blocks(plan: KernelPlan, cfg: dict[str, Any]) -> int:
    """Blocks of the exact grid: one tile of block x items vectors each."""
    return max(1, -(-(plan.numel // cfg["memory.vec"]) //
                    (cfg["config.block"] * cfg["config.items"])))
