"""Totals over all rows (a loss's mean over rows of per-row values, `KernelPlan.outer`), for
templates where blocks own whole rows.

Each thread folds the values of the rows it finished into accumulators, the block combines
them, and the blocks' partials meet per the reduction agent's `reduction.cross`:

* ``two_pass``: partials go to the workspace and a one-block kernel folds them;
* ``last_block``: partials go to the workspace, and the last block to finish (an atomic
  ticket) folds them and resets the ticket, so the workspace stays valid across runs.

The fold computes what derives from the totals (a division by the row count) and writes the
single output value. Partials are folded in block order, so results are deterministic.
"""

from __future__ import annotations

from ...ir.plan import KernelPlan
from .. import codegen as cg
from ..slots import Launch
from .base import Code, Reducer, block_combine, pow2_ceil, smem_for_combine

CROSS = ("two_pass", "last_block")
FOLD_MAX_THREADS = 256


class Totals:
    """The outer reductions of `plan` for a launch of `blocks` blocks of `threads` threads."""

    def __init__(self, plan: KernelPlan, blocks: int, threads: int, cross: str,
                 mode: str) -> None:
        self.plan, self.blocks, self.threads = plan, blocks, threads
        self.cross, self.mode = cross, mode
        self.reds = [Reducer(n, plan.graph[n].attr("kind")) for n in plan.outer]
        self.fold_threads = max(32, min(FOLD_MAX_THREADS, pow2_ceil(blocks)))
        self.ticket = len(self.reds) * blocks  # word index of the last-block ticket

    @property
    def workspace_bytes(self) -> int:
        return 4 * (self.ticket + (1 if self.cross == "last_block" else 0))

    def declare(self, c: Code) -> None:
        """Before the row loop: the block's combine buffer and each thread's accumulators."""
        n, _ = smem_for_combine(self.reds, self.threads, 1, self.mode)
        if n:
            c(f"__shared__ float ca_tot[{n}];")
        for r in self.reds:
            c(*r.declare())

    def add_row(self, c: Code, row_bound: dict[int, str], fast: bool, when: str) -> None:
        """Inside the row loop, once a row's values are known: fold them in where `when`."""
        bodies = [self.plan.graph[r.nid].args[0] for r in self.reds]
        stmts, names = cg.emit_values(self.plan, bodies, dict(row_bound), fast, suffix="t")
        c.open(f"if ({when})")
        c(*stmts)
        for r, b in zip(self.reds, bodies):
            c(r.update(names[b]))
        c.close()

    def finish(self, c: Code, fast: bool) -> None:
        """After the row loop: combine the block, then publish its partial (and, with
        last_block, fold every block's partial in the last block to finish)."""
        block_combine(c, self.reds, self.threads, 1, self.mode, lane="threadIdx.x", grp="0",
                      buf="ca_tot")
        c("float* wsf = reinterpret_cast<float*>(ws);")
        c.open("if (threadIdx.x == 0)")
        for q, r in enumerate(self.reds):
            c(f"wsf[{q * self.blocks} + blockIdx.x] = {r.acc};")
        c.close()
        if self.cross != "last_block":
            return
        c("__shared__ int ca_last;")
        c.open("if (threadIdx.x == 0)")
        c("__threadfence();  // the partial is visible before the ticket is taken",
          "const unsigned ticket = atomicAdd(reinterpret_cast<unsigned*>(ws) + "
          f"{self.ticket}, 1u);",
          f"ca_last = ticket == {self.blocks - 1}u;")
        c.close()
        c("__syncthreads();")
        c("// ca_last is block-uniform: the barriers of the fold are reached by every thread")
        c.open("if (ca_last)")
        c("__threadfence();")
        self._fold(c, self.threads, "__ldcg", fast)
        c.open("if (threadIdx.x == 0)")
        c(f"reinterpret_cast<unsigned*>(ws)[{self.ticket}] = 0u;  // ready for the next run")
        c.close()
        c.close()

    def fold_kernel(self, c: Code, fast: bool) -> Launch | None:
        """The second kernel of two_pass (None for last_block, which folds in place)."""
        if self.cross != "two_pass":
            return None
        T = self.fold_threads
        c.open(f'extern "C" __global__ void __launch_bounds__({T}) '
               f"ca_total({cg.kernel_params(self.plan)})")
        n, _ = smem_for_combine(self.reds, T, 1, self.mode)
        if n:
            c(f"__shared__ float ca_tot[{n}];")
        c("const float* wsf = reinterpret_cast<const float*>(ws);")
        for r in self.reds:
            c(*r.declare())
        self._fold(c, T, "", fast)
        c.close()
        return Launch("ca_total", (1, 1, 1), (T, 1, 1), 0)

    def _fold(self, c: Code, T: int, load: str, fast: bool) -> None:
        """T threads fold the blocks' partials; thread 0 writes the output."""
        for r in self.reds:
            c(*r.reset())
        c.open(f"for (int p = threadIdx.x; p < {self.blocks}; p += {T})")
        for q, r in enumerate(self.reds):
            at = f"{q * self.blocks} + p"
            c(r.update(f"{load}(wsf + {at})" if load else f"wsf[{at}]"))
        c.close()
        block_combine(c, self.reds, T, 1, self.mode, lane="threadIdx.x", grp="0", buf="ca_tot")
        c.open("if (threadIdx.x == 0)")
        bound = {r.nid: r.acc for r in self.reds}
        stmts, names = cg.emit_values(self.plan, [self.plan.output], bound, fast, suffix="o")
        c(*stmts)
        c(f"out[0] = {names[self.plan.output]};")
        c.close()
