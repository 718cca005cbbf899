"""Partition a graph that no single kernel pattern covers into a program of stages.

One kernel covers a graph built around at most one structured op (matrix product,
convolution, pooling, scan, attention) with an elementwise epilogue, or elementwise work and
reductions over one shared set of dims (`plan.make_plan`). Layers users bring chain more: a
convolution then a pooling window, a linear layer then a softmax or a norm over its output, two
matrix products. Such a graph is cut where the data flow needs a value in memory, and each piece
becomes one stage, planned on its own by `make_plan`, its cut values written to workspace
buffers that later stages read as inputs:

* before a structured op, at any operand computed from another structured op or a reduction
  (a template reads its operands from memory, with its own access pattern);
* before a reduction, at its operand when that is computed from a structured op, or from a
  reduction over other dims (a template makes one pass structure over one iteration space).

Everything else stays fused: an epilogue goes with its structured op, a normalization's
statistics and scaling stay one row kernel. A graph with no cut is not a program (None).

Values the module's state is updated from (`Graph.kept_values`: training-mode batch norm's
batch mean and variance) are cut too, whatever their users: each then lies in a buffer of its
own after the program ran, where the state update reads it, and the stages after it read the
very values that update uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnsupportedError
from .graph import INDEX_DTYPE, Graph, GraphInput, Node
from .plan import KernelPlan

INTERMEDIATE = "intermediate"  # GraphInput.role of a value an earlier stage wrote


def structured_ops() -> set[str]:
    from .structured import _planners

    return set(_planners())


@dataclass(frozen=True)
class StageSource:
    """Where a stage's input comes from: a program operand (graph input index) or an
    intermediate buffer (index into `Program.buffers`)."""

    kind: str  # "input" | "buffer"
    index: int


@dataclass
class Stage:
    graph: Graph  # the stage's own graph: its inputs are program inputs and buffers
    sources: list[StageSource]  # per stage-graph input, in order
    writes: int | None  # buffer index it writes, None for the last stage (the output)
    plan: Any = None  # its KernelPlan, set by the program planner


@dataclass
class Program:
    stages: list[Stage]
    buffers: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # shape, dtype
    values: list[int] = field(default_factory=list)  # the graph node each buffer holds


def _signature(graph: Graph, n: Node) -> tuple:
    """What one kernel's reductions must share: the body shape and the reduced dims."""
    return (graph[n.args[0]].shape, n.attr("dims"))


def cut_values(graph: Graph) -> list[int]:
    """Node ids whose values must be materialized, in topological order (empty: one kernel)."""
    structured = structured_ops()
    live = graph.live()
    kept = set(graph.kept_values())
    cuts: list[int] = []
    # barriers[n]: the structured ops and reduction signatures n depends on within its stage
    barriers: dict[int, frozenset] = {}
    for n in live:
        if n.op == "input" or n.op == "const":
            barriers[n.id] = frozenset()
            continue
        for a in n.args:
            if a in kept and a not in cuts:
                cuts.append(a)  # a value the state update reads: in memory, wherever used
            up = barriers.get(a, frozenset())
            if not up or a in cuts:
                continue
            if n.op in structured:
                need = True
            elif n.op == "reduce":
                need = any(b[0] == "structured" or b != ("reduce", _signature(graph, n))
                           for b in up)
            else:
                need = False
            if need:
                cuts.append(a)
        own: set = set()
        for a in n.args:
            if a not in cuts:
                own |= barriers.get(a, frozenset())
        if n.op in structured:
            own.add(("structured", n.op))
        elif n.op == "reduce":
            own.add(("reduce", _signature(graph, n)))
        barriers[n.id] = frozenset(own)
    return sorted(cuts)


def partition(graph: Graph) -> Program | None:
    """The graph as stages, or None when one kernel covers it."""
    cuts = cut_values(graph)
    if not cuts:
        return None
    buffer_of = {c: i for i, c in enumerate(cuts)}
    program = Program([], [(graph[c].shape, graph[c].dtype) for c in cuts], list(cuts))
    for target in cuts + [graph.output]:
        program.stages.append(_stage(graph, target, buffer_of))
    return program


def _stage(graph: Graph, target: int, buffer_of: dict[int, int]) -> Stage:
    """The subgraph computing `target` from graph inputs and earlier buffers."""
    keep: set[int] = set()
    stack = [target]
    while stack:
        k = stack.pop()
        if k in keep:
            continue
        keep.add(k)
        if k != target and k in buffer_of:
            continue  # read from its buffer
        stack.extend(graph[k].args)
    g = Graph()
    new_id: dict[int, int] = {}
    sources: list[StageSource] = []
    for n in graph.nodes:
        if n.id not in keep:
            continue
        if n.id != target and n.id in buffer_of:
            b = buffer_of[n.id]
            new_id[n.id] = g.add_input(GraphInput(f"t{b}", INTERMEDIATE, n.shape, n.dtype))
            sources.append(StageSource("buffer", b))
        elif n.op == "input":
            src = graph.inputs[n.attr("index")]
            new_id[n.id] = g.add_input(src)
            sources.append(StageSource("input", n.attr("index")))
        else:
            attrs = dict(n.attrs)
            new_id[n.id] = g.add(n.op, tuple(new_id[a] for a in n.args), n.shape, n.dtype,
                                 **attrs)
    g.output = new_id[target]
    return Stage(g, sources, buffer_of.get(target))


class ProgramPlan(KernelPlan):
    """The plan of a partitioned graph: the whole problem's operands, output and floor, plus
    its stages, each with its own KernelPlan. Templates never see it; each stage is tuned with
    its own space (`space/program.py`)."""

    program: Program

    @property
    def family(self) -> str:
        return "+".join(s.plan.family for s in self.program.stages)

    def flops(self) -> int:
        return sum(s.plan.flops() for s in self.program.stages)

    def buffer_bytes(self) -> list[int]:
        return [4 * math.prod(shape) * (2 if dtype == INDEX_DTYPE else 1)
                for shape, dtype in self.program.buffers]


def make_program_plan(graph: Graph, program: Program) -> ProgramPlan:
    from .plan import make_plan

    for k, stage in enumerate(program.stages):
        try:
            stage.plan = make_plan(stage.graph)
        except UnsupportedError as exc:
            raise UnsupportedError(f"stage {k + 1} of {len(program.stages)}: {exc}") from None
    out = graph[graph.output]
    used = sorted({s.index for st in program.stages for s in st.sources if s.kind == "input"})
    last = program.stages[-1].plan
    plan = ProgramPlan(graph, "program", last.full_shape, (), graph.output, out.shape,
                       out.dtype, operands=used,
                       operand_shapes={k: graph.inputs[k].shape for k in used})
    plan.program = program
    return plan
