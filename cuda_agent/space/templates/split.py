"""Few, long rows (a whole-tensor sum, x / torch.norm(x), 8 rows of 100M elements): several
blocks share one row, so that the whole GPU streams it.

A row is either the trailing reduced dims of a "reduce" plan, or one channel of a "chanreduce"
plan (batch norm's statistics over (N, S) for each channel C of x viewed as (A, C, B)): there a
block's chunk is a run of the channel's A*B elements taken as one flat index, as the chan
template walks it, and the chan template's one block (or cluster) per channel leaves most of the
GPU idle where channels are few and long (32 channels of 134 M elements: 32 blocks on 132 SMs,
0.04x of torch.compile on the H100).

Each reduction level is a partial kernel on a (S splits, O rows) grid: a block reduces its
contiguous chunk of the row (vector loads, a block-stride loop), combines within the block, and
then the S partials of a row meet per `reduction.cross`:

* ``two_pass``: partials go to the workspace, a second kernel (a block per row) folds them;
* ``last_block``: partials go to the workspace, and the last block of a row to finish (an atomic
  ticket per row) folds them and resets its ticket, so the workspace stays valid across runs;
* ``atomic``: partials go straight into a per-row accumulator with atomics (sums; max/min through
  an order-preserving unsigned encoding), in a workspace zeroed before each run.

With `compute.algo` online, a mean and the squared deviations from it (batch norm's two levels)
are one Welford pass: a block's partial is its (count, mean, squared deviations), and the fold
merges them (Chan's formula; no atomic form). Later levels read earlier levels' row results
from the workspace. Full outputs are written by a last elementwise kernel over the same (S, O)
grid; row outputs by the last fold (or, with atomics, by a small kernel with a thread per row).
A program stage's side outputs (`Graph.sides`) are stored by one block of each row of that last
kernel, or with the row output.
"""

from __future__ import annotations

from typing import Any

from ...ir.plan import CHAN_REDUCE, KernelPlan
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Reducer, Template, block_combine, pow2_ceil, smem_for_combine
from .chan import channel_runs, channel_sizes, channel_vectors_ok
from .rowcommon import (Pass, bind_welford, combine_state, make_passes, operand_roles,
                        pass_roots, row_values_after, side_stores, welford_alone, welford_declare,
                        welford_finish, welford_merge, welford_state, welford_update)

MAX_ROWS = 4096
OUT_BLOCK = 128  # threads per block of the row-output kernel (atomic cross)
WAVES = (1, 2, 4, 8)

ENCODE = r"""
// order-preserving float <-> unsigned: larger floats encode larger; zero is below every value
__device__ __forceinline__ unsigned ca_enc(float f) {
  const unsigned u = __float_as_uint(f); return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }
__device__ __forceinline__ float ca_dec(unsigned u) {
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u); }
// max and min through atomicMax; NaN encodes as the top value, so that it wins as in torch
__device__ __forceinline__ unsigned ca_enc_max(float f) {
  return f != f ? 0xffffffffu : ca_enc(f); }
__device__ __forceinline__ unsigned ca_enc_min(float f) {
  return f != f ? 0xffffffffu : ~ca_enc(f); }
__device__ __forceinline__ float ca_dec_max(unsigned u) {
  return u == 0xffffffffu ? CA_NAN : ca_dec(u); }
__device__ __forceinline__ float ca_dec_min(unsigned u) {
  return u == 0xffffffffu ? CA_NAN : ca_dec(~u); }
"""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)



def _kinds(plan: KernelPlan) -> set[str]:
    return plan.cached("split_kinds", lambda: {
        plan.graph[n].attr("kind") for lv in plan.levels for n in lv})


def splits(plan: KernelPlan, block: int, vec: int, waves: int, sm_count: int) -> tuple[int, int]:
    """(S blocks per row, CH elements per block): about `waves` waves of blocks over all rows,
    each block with at least block*vec elements, chunks a multiple of vec, none empty."""
    R = plan.R
    want = max(1, _cdiv(waves * sm_count, plan.O))
    s = max(1, min(want, R // (block * vec)))
    ch = _cdiv(_cdiv(R, s), vec) * vec
    return _cdiv(R, ch), ch


class SplitTemplate(Template):
    name = "split"
    writes_sides = True
    takes_half = True  # loads through ca_ld* (fp16/bf16 convert), stores round
    version = "3"  # 3: compute.algo (Welford)
    legacy = {"config.out_grid": "chunks", "compute.algo": "passes"}

    def applies(self, plan: KernelPlan) -> bool:
        # only where some configuration gives a row two blocks or more (one block per row is
        # the row template's kernel, and the chan template's)
        rows = (plan.kind == "reduce" and plan.I == 1) or (
            plan.kind == CHAN_REDUCE and not _kinds(plan) & {"argmax", "argmin"})
        return rows and plan.O <= MAX_ROWS and not plan.whole_rows_only and \
            splits(plan, 128, 1, max(WAVES), Target().sm_count)[0] >= 2

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        return [
            Slot("config.block", (128, 256, 512, 1024), "threads per block"),
            Slot("config.waves", WAVES, "blocks per row: about this many waves over the GPU"),
            Slot("config.out_grid", ("chunks", "tiles") if not plan.output_is_row else
                 ("chunks",), "the output pass: each block walks its chunk of the row (as "
                 "the reductions do), or a grid of small blocks, each unroll x block x vec "
                 "consecutive elements (an elementwise kernel's layout)"),
            Slot("memory.vec", (1, 2, 4), "elements per load along the row"),
            Slot("memory.load", ("default", "ldg", "stream"), "load cache hint"),
            Slot("compute.unroll", (1, 2, 4), "unroll of the block-stride loop over a chunk"),
            Slot("compute.fastmath", (0, 1) if plan.fast_math_matters() else (0,),
                 "hardware approximations of exp/log/div"),
            Slot("compute.algo", ("passes", "online") if welford_alone(plan) else ("passes",),
                 "a partial kernel per reduction level, or the mean and the squared deviations "
                 "from it in one Welford pass (each block's partial a (count, mean, M2) state)"),
            Slot("reduction.cross", ("two_pass", "last_block", "atomic"),
                 "how the blocks of a row meet: fold kernel, last block folds, or atomics"),
            Slot("reduction.combine", ("shfl", "smem_tree"),
                 "combine within a block: warp shuffles or shared-memory tree"),
        ]

    # -- validity ------------------------------------------------------------------------------
    def _split(self, plan: KernelPlan, cfg: dict[str, Any], sm_count: int = 132
               ) -> tuple[int, int]:
        return splits(plan, cfg["config.block"], cfg["memory.vec"], cfg["config.waves"],
                      sm_count)

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        cfg = dict(cfg)
        if not plan.fast_math_matters():
            cfg["compute.fastmath"] = 0
        S, CH = self._split(plan, cfg)
        # waves that give the same split are the same kernel: keep the smallest
        for w in WAVES:
            if self._split(plan, {**cfg, "config.waves": w}) == (S, CH):
                cfg["config.waves"] = w
                break
        if S == 1:
            cfg["reduction.cross"] = "two_pass"
        if cfg["compute.algo"] == "online" and len(plan.levels) == 2:
            cfg["reduction.combine"] = "shfl"  # Welford states merge by shuffles only
        trips = _cdiv(CH, cfg["config.block"] * cfg["memory.vec"])
        while cfg["compute.unroll"] > 1 and cfg["compute.unroll"] > trips:
            cfg["compute.unroll"] //= 2  # unrolling past the trip count changes nothing
        return cfg

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        vec = cfg["memory.vec"]
        if self._split(plan, cfg, target.sm_count)[0] < 2:
            return "one block per row: that is the row template"
        if plan.R >= 2**31 - 2**22 and _kinds(plan) & {"argmax", "argmin"}:
            # positions along the row are 64-bit (idx_t) at this length, but the index an
            # argmax carries is an int
            return "row too long for an argmax's int index"
        if vec > 1:
            layout = RowLayout.of(plan)
            if layout.inner % vec:
                return (f"vector width {vec} does not divide the trailing extent {layout.inner}"
                        if layout.chan else
                        f"vector width {vec} does not divide the row length {plan.R}")
            if not layout.vector_reads_ok(plan, vec):
                return "an operand cannot be read in vectors along the row"
        if cfg["reduction.cross"] == "atomic" and not _kinds(plan) <= {"sum", "max", "min"}:
            return "atomics combine only sum, max and min"
        if cfg["reduction.cross"] == "atomic" and cfg.get("compute.algo") == "online":
            return "atomics do not merge Welford states"
        return None

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        # 256 threads, two waves of blocks; more blocks where rows are many or short
        block, waves = next(((b, w) for b, w in ((256, 2), (256, 4), (256, 8), (128, 8))
                             if splits(plan, b, 1, w, target.sm_count)[0] >= 2), (128, 8))
        return {"config.block": block, "config.waves": waves, "memory.vec": 1,
                "memory.load": "default", "compute.unroll": 1, "compute.fastmath": 0,
                "compute.algo": "passes", "reduction.cross": "two_pass",
                "reduction.combine": "smem_tree", "config.out_grid": "chunks"}

    # -- code ----------------------------------------------------------------------------------
    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        return _Renderer(plan, cfg, target).render()


class RowLayout:
    """Where element c of row o lies: the groups operands are indexed by, and the output's
    offset. A reduce plan's row is its trailing dims (c indexes them flat, the output is
    row-major); a chanreduce plan's is a channel: c = a * B + b over its leading and trailing
    reduced dims, around the kept ones."""

    def __init__(self, plan: KernelPlan) -> None:
        self.chan = plan.kind == CHAN_REDUCE
        if self.chan:
            lead, kept, trail = channel_runs(plan)
            self.rows = cg.Group("o", kept)
            self.inner = channel_sizes(plan)[2]
            self.vgrp = cg.Group("b", trail)
            self.groups = [cg.Group("a", lead), self.rows, self.vgrp]
        else:
            self.rows = cg.Group("o", tuple(range(plan.reduce_dims[0])))
            self.inner = plan.R
            self.vgrp = cg.Group("c", tuple(plan.reduce_dims))
            self.groups = [self.rows, self.vgrp]
        self.O = plan.O

    @staticmethod
    def of(plan: KernelPlan) -> "RowLayout":
        return plan.cached("split_layout", lambda: RowLayout(plan))

    def element(self, c: Code) -> None:
        """Declare the indices the groups use, from the flat index `c` along the row."""
        if self.chan:
            c(f"const idx_t a = c / {self.inner};", f"const idx_t b = c % {self.inner};")

    def out_offset(self, R: int) -> str:
        if self.chan:
            return f"a * {self.O * self.inner} + o * {self.inner} + b"
        return f"o * {R} + c"

    def vector_reads_ok(self, plan: KernelPlan, vec: int) -> bool:
        if self.chan:  # vectors along the trailing run, as the chan template reads them
            return channel_vectors_ok(plan, vec)
        return cg.vector_reads_ok(plan, plan.reduce_dims, vec)


class _Renderer:
    """Builds the launch sequence of one configuration."""

    def __init__(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> None:
        self.plan, self.cfg = plan, cfg
        self.B, self.vec = cfg["config.block"], cfg["memory.vec"]
        self.S, self.CH = splits(plan, self.B, self.vec, cfg["config.waves"], target.sm_count)
        self.hint = cg.HINTS[cfg["memory.load"]]
        self.fast = bool(cfg["compute.fastmath"])
        self.cross = cfg["reduction.cross"] if self.S > 1 else "none"
        self.mode = cfg["reduction.combine"]
        self.unroll = cfg["compute.unroll"]
        self.passes = make_passes(plan, cfg["compute.algo"] == "online")
        self.roles = operand_roles(plan, self.passes)
        self.op_index = {nid: k for k, nid in self.roles.full + self.roles.row}
        self.levels = [p for p in self.passes if p.reducers]
        self.all_red = [r for p in self.levels for r in p.reducers]
        self.qall = {r.nid: q for q, r in enumerate(self.all_red)}
        self.level_of = {r.nid: li for li, p in enumerate(self.levels) for r in p.reducers}
        self.has_arg = any(r.is_arg for r in self.all_red)
        self.idx_t = "int" if plan.numel + (1 << 22) < 2**31 else "long long"
        self.layout = RowLayout.of(plan)
        self.ogrp = self.layout.rows
        # workspace layout, in 4-byte words
        O, S = plan.O, self.S
        nall = len(self.all_red)
        # a Welford partial is three words: (count, mean, squared deviations)
        maxlev = max(3 if p.welford_shift is not None else len(p.reducers) for p in self.levels)
        self.RES = 0
        self.RESI = nall * O
        words = self.RESI + (nall * O if self.has_arg else 0)
        self.TICKET = words
        if self.cross == "last_block":
            words += O
        self.PART = words
        if self.cross in ("two_pass", "last_block"):
            words += maxlev * O * S
        self.PARTI = words
        if self.cross in ("two_pass", "last_block") and self.has_arg:
            words += maxlev * O * S
        self.ws_words = words

    # -- pieces --------------------------------------------------------------------------------
    def head(self, c: Code, name: str, threads: int) -> None:
        c.open(f'extern "C" __global__ void __launch_bounds__({threads}) '
               f"{name}({cg.kernel_params(self.plan)})")
        c(f"typedef {self.idx_t} idx_t;",
          "float* wsf = reinterpret_cast<float*>(ws);",
          "int* wsi = reinterpret_cast<int*>(ws);",
          "unsigned* wsu = reinterpret_cast<unsigned*>(ws);")

    def combine_buffers(self, c: Code, reds: list[Reducer], T: int, welford: bool = False
                        ) -> None:
        if welford:  # a warp's part of each float of the state (`combine_state`)
            if T > 32:
                c(*(f"__shared__ float {a}[{T // 32}];" for a in ("ca_red", "ca_red2", "ca_red3")))
        else:
            n, need_i = smem_for_combine(reds, T, 1, self.mode)
            if n:
                c(f"__shared__ float ca_red[{n}];")
                if need_i:
                    c(f"__shared__ int ca_red_i[{n}];")
        c("const int lane = threadIdx.x;", "const int grp = 0;")

    def result_expr(self, r: Reducer) -> tuple[str, str]:
        """(C type, expression) of a finished level's row result for row `o`, from ws."""
        q = self.qall[r.nid]
        if r.is_arg:
            return "long long", f"(long long)wsi[{self.RESI + q * self.plan.O} + o]"
        at = f"{self.RES + q * self.plan.O} + o"
        if self.cross == "atomic" and r.kind == "max":
            return "float", f"ca_dec_max(wsu[{at}])"
        if self.cross == "atomic" and r.kind == "min":
            return "float", f"ca_dec_min(wsu[{at}])"
        return "float", f"wsf[{at}]"

    def row_context(self, c: Code, upto: int) -> dict[int, str]:
        """Row operands and the results of levels < `upto` for row `o`, plus what derives from
        them; returns the bound names."""
        bound: dict[int, str] = {}
        for k, nid in self.roles.row:
            off = cg.offset_expr(self.plan, nid, [self.ogrp])
            c(f"const float w{k} = ca_ld<{self.hint}>(in{k} + ({off}));")
            bound[nid] = f"w{k}"
        done = set()
        for r in self.all_red:
            if self.level_of[r.nid] < upto:
                ctype, expr = self.result_expr(r)
                c(f"const {ctype} s{r.nid} = {expr};")
                bound[r.nid] = f"s{r.nid}"
                done.add(r.nid)
        return self.add_rows(c, bound, done, "r")

    def add_rows(self, c: Code, bound: dict[int, str], done: set[int], suffix: str
                 ) -> dict[int, str]:
        rows = [n for n in row_values_after(self.plan, done) if n not in bound]
        if rows:
            stmts, names = cg.emit_values(self.plan, rows, bound, self.fast, suffix=suffix)
            c(*stmts)
            bound = {**bound, **{n: names[n] for n in rows}}
        return bound

    def chunk_loop(self, c: Code, p: Pass, bound: dict[int, str], pi: int,
                   tiles: bool = False) -> None:
        """The block-stride loop over this block's chunk of row o: reduce, or write output.
        With `tiles` (output only): the block's `unroll` consecutive tiles of block x vec."""
        plan, vec, hint = self.plan, self.vec, self.hint
        vt = cg.vec_type(vec)
        R = plan.R
        if tiles:
            c("#pragma unroll")
            c.open(f"for (int u = 0; u < {self.unroll}; ++u)")
            c(f"const idx_t c = ((idx_t)blockIdx.x * {self.unroll} + u) * {self.B * vec} + "
              f"threadIdx.x * {vec};")
            c.open(f"if (c < {R})")
            self.layout.element(c)
        else:
            c(f"const idx_t c0 = (idx_t)blockIdx.x * {self.CH};",
              f"const idx_t c1 = c0 + {self.CH} < {R} ? c0 + {self.CH} : (idx_t){R};")
            c(f"#pragma unroll {self.unroll}")
            c.open(f"for (idx_t c = c0 + threadIdx.x * {vec}; c < c1; c += {self.B * vec})")
            self.layout.element(c)
        lanes: dict[int, list[str]] = {}
        vgrp = self.layout.vgrp
        for nid in sorted(self.roles.per_pass[pi]):
            k = self.op_index[nid]
            name = f"x{k}"
            off = cg.offset_expr(plan, nid, self.layout.groups)
            if vec > 1 and cg.is_unit_stride(plan, nid, vgrp, vec):
                c(f"const {vt} {name} = {cg.vec_load(f'in{k} + ({off})', vec, hint)};")
                lanes[nid] = [cg.vec_get(name, vec, l) for l in range(vec)]
            elif vec == 1 or cg.is_splat(plan, nid, vgrp, vec):
                c(f"const float {name} = ca_ld<{hint}>(in{k} + ({off}));")
                lanes[nid] = [name] * vec
            else:  # masked by check()
                raise AssertionError("unreachable: vector gathers are masked")
        roots = pass_roots(plan, p)
        out_vals = []
        for l in range(vec):
            b = dict(bound)
            b.update({nid: vals[l] for nid, vals in lanes.items()})
            stmts, names = cg.emit_values(plan, roots, b, self.fast, suffix=f"_{l}")
            c(*stmts)
            if p.writes_output:
                out_vals.append(names[plan.output])
            elif p.welford_shift is not None:
                c(welford_update(names[roots[0]]))
            else:
                for r in p.reducers:
                    c(r.update(names[plan.graph[r.nid].args[0]], f"c + {l}"))
        if p.writes_output:
            c(cg.vec_store(f"out + ({self.layout.out_offset(R)})", out_vals, 0))
        c.close()
        if tiles:
            c.close()

    def finish_row(self, c: Code, li: int, p: Pass, bound: dict[int, str]) -> None:
        """Thread 0 with a level's finished accumulators (or Welford state): write the
        results, or the output."""
        last = li == len(self.levels) - 1
        reds = p.reducers
        if p.welford_shift is not None:
            b = dict(bound)
            done = {n for n in b if self.plan.graph[n].op == "reduce"}
            bind_welford(c, self.plan, p, b, done, self.fast)
            values = {r.nid: b[r.nid] for r in reds}
        else:
            values = {r.nid: r.acc for r in reds}
        if last and self.plan.output_is_row:
            b = dict(bound)
            for r in reds:
                ctype = "long long" if r.is_arg else "float"
                c(f"const {ctype} f{r.nid} = {r.result() if r.is_arg else values[r.nid]};")
                b[r.nid] = f"f{r.nid}"
            done = {n for n in b if self.plan.graph[n].op == "reduce"}
            b = self.add_rows(c, b, done, "f")
            c(f"out[o] = {b[self.plan.output]};", *side_stores(self.plan, b))
            return
        O = self.plan.O
        for r in reds:
            q = self.qall[r.nid]
            if r.is_arg:
                c(f"wsi[{self.RESI + q * O} + o] = {r.idx};")
            else:
                c(f"wsf[{self.RES + q * O} + o] = {values[r.nid]};")

    def fold(self, c: Code, reds: list[Reducer], T: int, load: str, declared: bool) -> None:
        """All T threads fold the S partials of row o (and leave the result in every thread)."""
        O, S = self.plan.O, self.S
        ordinal = {r.nid: j for j, r in enumerate(reds)}
        for r in reds:
            c(*(r.reset() if declared else r.declare()))
        c.open(f"for (int p = threadIdx.x; p < {S}; p += {T})")
        for r in reds:
            at = f"({ordinal[r.nid] * O} + o) * {S} + p"
            if load:
                v = f"{load}(wsf + {self.PART} + {at})"
                i = f"{load}(wsi + {self.PARTI} + {at})" if r.is_arg else "0"
            else:
                v = f"wsf[{self.PART} + {at}]"
                i = f"wsi[{self.PARTI} + {at}]" if r.is_arg else "0"
            c(r.combine_from(v, i))
        c.close()
        block_combine(c, reds, T, 1, self.mode)

    def fold_welford(self, c: Code, T: int, load: str, declared: bool) -> None:
        """All T threads merge the S Welford partials of row o (every thread ends with the
        row's (wf_n, wf_m, wf_q))."""
        O, S = self.plan.O, self.S
        c(welford_state().reset if declared else "float wf_n = 0.f, wf_m = 0.f, wf_q = 0.f;")
        c.open(f"for (int p = threadIdx.x; p < {S}; p += {T})")
        parts = []
        for j, name in enumerate(("pn_", "pm_", "pq_")):
            at = f"wsf + {self.PART} + ({j * O} + o) * {S} + p"
            parts.append(name)
            c(f"const float {name} = {f'{load}({at})' if load else f'*({at})'};")
        c(welford_merge(*parts))
        c.close()
        combine_state(c, welford_state(), T)

    # -- kernels -------------------------------------------------------------------------------
    def partial_kernel(self, c: Code, li: int, p: Pass, pi: int) -> Launch:
        B, S, O = self.B, self.S, self.plan.O
        name = f"ca_split_l{li + 1}"
        self.head(c, name, B)
        reds = p.reducers
        welford = p.welford_shift is not None
        self.combine_buffers(c, reds, B, welford)
        c("const idx_t o = blockIdx.y;")
        bound = self.row_context(c, li)
        if welford:
            c(welford_declare())
        else:
            for r in reds:
                c(*r.declare())
        self.chunk_loop(c, p, bound, pi)
        if welford:
            c(welford_finish())
            combine_state(c, welford_state(), B)
        else:
            block_combine(c, reds, B, 1, self.mode)
        if self.cross == "none":
            c.open("if (threadIdx.x == 0)")
            self.finish_row(c, li, p, bound)
            c.close()
        elif self.cross == "atomic":
            c.open("if (threadIdx.x == 0)")
            for r in reds:
                at = f"{self.RES + self.qall[r.nid] * O} + o"
                if r.kind == "sum":
                    c(f"atomicAdd(wsf + {at}, {r.acc});")
                else:
                    c(f"atomicMax(wsu + {at}, ca_enc_{r.kind}({r.acc}));")
            c.close()
        else:
            c.open("if (threadIdx.x == 0)")
            for j, acc in enumerate(("wf_n", "wf_m", "wf_q") if welford else
                                    [r.acc for r in reds]):
                at = f"({j * O} + o) * {S} + blockIdx.x"
                c(f"wsf[{self.PART} + {at}] = {acc};")
                if not welford and reds[j].is_arg:
                    c(f"wsi[{self.PARTI} + {at}] = {reds[j].idx};")
            c.close()
            if self.cross == "last_block":
                c("__shared__ int ca_last;")
                c.open("if (threadIdx.x == 0)")
                c("__threadfence();  // partials visible before the ticket is taken",
                  f"const unsigned ticket = atomicAdd(wsu + {self.TICKET} + o, 1u);",
                  f"ca_last = ticket == {S - 1}u;")
                c.close()
                c("__syncthreads();")
                c("// ca_last is block-uniform: the barriers inside are reached by every thread")
                c.open("if (ca_last)")
                c("__threadfence();")
                if welford:
                    self.fold_welford(c, B, "__ldcg", True)
                else:
                    self.fold(c, reds, B, "__ldcg", True)
                c.open("if (threadIdx.x == 0)")
                self.finish_row(c, li, p, bound)
                c(f"wsu[{self.TICKET} + o] = 0u;  // ready for the next run")
                c.close()
                c.close()
        c.close()
        return Launch(name, (S, O, 1), (B, 1, 1), 0)

    def fold_kernel(self, c: Code, li: int, p: Pass) -> Launch:
        T = max(32, min(256, pow2_ceil(self.S)))
        name = f"ca_split_f{li + 1}"
        self.head(c, name, T)
        welford = p.welford_shift is not None
        self.combine_buffers(c, p.reducers, T, welford)
        c("const idx_t o = blockIdx.x;")
        bound = self.row_context(c, li)
        if welford:
            self.fold_welford(c, T, "", False)
        else:
            self.fold(c, p.reducers, T, "", False)
        c.open("if (threadIdx.x == 0)")
        self.finish_row(c, li, p, bound)
        c.close()
        c.close()
        return Launch(name, (self.plan.O, 1, 1), (T, 1, 1), 0)

    def output_kernel(self, c: Code, p: Pass, pi: int) -> Launch:
        plan = self.plan
        if p.writes_output:  # full output: elementwise over this block's chunk of row o
            self.head(c, "ca_split_out", self.B)
            c("const idx_t o = blockIdx.y;")
            bound = self.row_context(c, len(self.levels))
            tiles = self.cfg.get("config.out_grid") == "tiles"
            if plan.graph.sides:  # one block of each row stores them
                c.open("if (blockIdx.x == 0 && threadIdx.x == 0)")
                c(*side_stores(plan, bound))
                c.close()
            self.chunk_loop(c, p, bound, pi, tiles)
            c.close()
            blocks = _cdiv(plan.R, self.B * self.vec * self.unroll) if tiles else self.S
            return Launch("ca_split_out", (blocks, plan.O, 1), (self.B, 1, 1), 0)
        # row output after atomics: a thread per row
        self.head(c, "ca_split_out", OUT_BLOCK)
        c(f"const idx_t o = (idx_t)blockIdx.x * {OUT_BLOCK} + threadIdx.x;")
        c.open(f"if (o < {plan.O})")
        bound = self.row_context(c, len(self.levels))
        c(f"out[o] = {bound[plan.output]};", *side_stores(plan, bound))
        c.close()
        c.close()
        return Launch("ca_split_out", (_cdiv(plan.O, OUT_BLOCK), 1, 1), (OUT_BLOCK, 1, 1), 0)

    def render(self) -> Rendered:
        plan = self.plan
        c = Code()
        c(cg.prelude(plan))
        if self.cross == "atomic":
            c(ENCODE)
        launches: list[Launch] = []
        li = 0
        for pi, p in enumerate(self.passes):
            if p.reducers:
                launches.append(self.partial_kernel(c, li, p, pi))
                if self.cross == "two_pass":
                    launches.append(self.fold_kernel(c, li, p))
                li += 1
            else:
                launches.append(self.output_kernel(c, p, pi))
        if plan.output_is_row and self.cross == "atomic":
            launches.append(self.output_kernel(c, Pass([]), -1))
        ws_bytes = 4 * self.ws_words
        facts = (("family", "split"), ("threads", self.B), ("blocks", self.S * plan.O),
                 ("splits", self.S), ("chunk", self.CH), ("vec", self.vec),
                 ("passes", len(self.passes)), ("launches", len(launches)),
                 ("cross", self.cross), ("combine", self.mode), ("fast", int(self.fast)),
                 ("rows", plan.O), ("row_len", plan.R), ("reads_per_elem",
                                                         float(len(self.passes))))
        return Rendered(c.text(), tuple(launches), ws_bytes, self.cross == "atomic",
                        facts=facts)
