"""Planners for graphs built around one structured op.

Elementwise chains and reductions are planned by `planning.make_plan`. A graph whose computation is
anchored on an op with its own data access pattern (a matrix product, a pooling window, a scan, attention)
is planned by that op's planner, which describes the anchor for its template and plans what
follows it as a fused epilogue (`plan.make_anchored_plan`). Adding a family: write its planner
module and list its IR op here.
"""

from __future__ import annotations

from typing import Callable

from ..errors import UnsupportedError
from .attention import make_attention_plan
from .conv import make_conv_plan
from .gemm import make_gemm_plan
from .graph import Graph
from .plan import KernelPlan
from .pool import make_pool_plan
from .scan import make_scan_plan

Planner = Callable[[Graph], KernelPlan]


def _planners() -> dict[str, Planner]:
    return {"matmul": make_gemm_plan, "pool": make_pool_plan,
            "scan": make_scan_plan, "conv": make_conv_plan, "attention": make_attention_plan}


def planner_for(graph: Graph) -> Planner | None:
    """The planner of the structured op the graph's output depends on, if any (one at most)."""
    planners = _planners()
    found = [n for n in graph.live() if n.op in planners]
    if not found:
        return None
    if len({n.op for n in found}) > 1 or len(found) > 1:
        names = ", ".join(sorted({n.op for n in found}))
        raise UnsupportedError(f"unsupported: {len(found)} structured ops ({names}) in one "
                               "problem; multi-kernel partitioning is not supported yet")
    return planners[found[0].op]
