"""A graph's plan: one kernel pattern, a structured op's planner, or a program of stages.

The entry point of planning, above what it calls: plan.py (the kernel patterns, and the fused
epilogue every structured planner builds on), structured.py (the planners of matrix products,
convolutions, pooling, scans and attention) and partition.py (where a graph is cut into stages).
A program's stages are planned here again, one graph each, so none of those calls back up.
"""

from __future__ import annotations

from typing import Iterator

from ..errors import UnsupportedError
from .conv import conv_padding
from .graph import HALF_DTYPES, Graph
from .layout import mark_channels_last
from .partition import Program, ProgramPlan, partition, sides_written
from .sink import sink_epilogue_views
from .plan import CHAN_REDUCE, KernelPlan, make_pattern_plan
from .structured import planner_for


def make_plan(graph: Graph) -> KernelPlan:
    """Classify the graph into one kernel pattern; where none covers it, into a program of
    stages (`partition.py`); or raise `UnsupportedError` saying why."""
    if graph.kept_values():  # state updates read values kept in memory: always a program
        partition(graph)  # refuses, in one line, a state update from values the output ignores
        try:
            plan = _program_plan(graph, sides=True)
            if sides_written(plan.program):
                return plan
        except UnsupportedError:
            pass
        # no template writes these side outputs: a stage per kept value
        return _program_plan(graph, sides=False)
    try:
        return make_single_plan(graph)
    except UnsupportedError as single:
        if partition(graph) is None:  # no cut would help: the single-kernel reason stands
            raise
        try:
            return _program_plan(graph, sides=True)
        except UnsupportedError as split:
            raise UnsupportedError(f"{single}; split into kernels: {split}") from None


def _program_plan(graph: Graph, sides: bool) -> ProgramPlan:
    """The graph's program: its convolutions' epilogues deferred to the stages that read
    them (`partition.defer_epilogues`) where every stage plans so, with its side outputs
    written where `sides`; else cut after the epilogues."""
    program = partition(graph, sides)
    assert program is not None, "a graph planned as a program has a cut"

    def candidates() -> Iterator[tuple[Graph, Program]]:
        """Deferred programs: of the graph as it is, then (made only if that one is not taken)
        with a view between the epilogue and its reader (GroupNorm's grouping) moved onto the
        product; each where deferring moved a cut."""
        deferred = partition(graph, sides, defer=True)
        if deferred is not None and deferred.values != program.values:
            yield graph, deferred
        sunk = sink_epilogue_views(graph)
        if sunk is not None:
            deferred = partition(sunk, sides, defer=True)
            if deferred is not None and deferred.values != getattr(
                    partition(sunk, sides), "values", None):
                yield sunk, deferred

    for g, deferred in candidates():
        try:
            plan = make_program_plan(g, deferred)
            if not sides or sides_written(plan.program):
                return plan
        except UnsupportedError:
            pass
    return make_program_plan(graph, program)


def make_single_plan(graph: Graph) -> KernelPlan:
    """Classify the graph into one kernel pattern, or raise `UnsupportedError` saying why."""
    special = planner_for(graph)
    if special is not None:
        return special(graph)
    return make_pattern_plan(graph)


def make_program_plan(graph: Graph, program: Program) -> ProgramPlan:
    for k, stage in enumerate(program.stages):
        try:
            stage.plan = make_plan(stage.graph)
        except UnsupportedError as exc:
            raise UnsupportedError(f"stage {k + 1} of {len(program.stages)}: {exc}") from None
    for stage in program.stages:
        stage.plan.feeds_stage = stage.writes is not None
    mark_channels_last(program, make_plan)
    out = graph[graph.output]
    used = sorted({s.index for st in program.stages for s in st.sources if s.kind == "input"})
    last = program.stages[-1].plan
    plan = ProgramPlan(graph, "program", last.full_shape, (), graph.output, out.shape,
                       graph.store_dtype(), operands=used,
                       operand_shapes={k: graph.inputs[k].shape for k in used})
    plan.program = program
    return plan


def library_dtype(plan: KernelPlan) -> str | None:
    """The storage type in which cuBLAS or cuDNN (through torch) computes `plan`'s product
    with a generated epilogue after it (space/templates/library.py): "float32", or the half
    type both its operands are stored in (torch computes and writes the product in it); None
    where that route does not apply: no epilogue to generate (a bare product is the library
    alone, except a program stage's fp32 buffer), a gathered matrix product, a convolution
    whose padding torch cannot take (an asymmetric 'same') or of more than 3 dims, operands of
    two types."""
    if plan.kind not in ("gemm", "conv") or plan.anchor is None:
        return None
    # a bare product: a program's stage whose epilogue its readers apply
    # (`partition.defer_epilogues`), the library's fp32 result the stage's buffer
    bare = plan.output == plan.anchor
    if bare and not plan.feeds_stage:
        return None
    g = plan.info
    if plan.kind == "conv" and not g.b_gather.transposed and (
            conv_padding(g.b_gather) is None or len(g.b_gather.kernel) not in (1, 2, 3)):
        return None
    if plan.kind == "gemm" and g.b_gather is not None:
        return None
    dts = {plan.graph.inputs[g.a].dtype, plan.graph.inputs[g.b].dtype}
    dt = dts.pop()
    if bare and dt != "float32":
        return None
    return dt if not dts and dt in ("float32",) + HALF_DTYPES else None


def half_covered(plan: KernelPlan) -> bool:
    """Whether a template takes `plan` with tensors stored in fp16 or bf16: the templates with
    `takes_half` (space/templates: map; row, col and split for reductions; chan and split for
    reductions over channels; pool for pooling windows; the library route for a product of
    two half operands with an epilogue), each where its `applies` takes the plan; kept here,
    below the space, for the region split (tests/test_half_precision.py and
    tests/test_half_templates.py check the two agree)."""
    if plan.kind in ("map", "pool"):
        return True
    if plan.kind == "reduce":  # row (contiguous rows), col (strided columns)
        return plan.I == 1 or (not plan.whole_rows_only and (
            plan.out_perm is None or not plan.output_is_row))
    if plan.kind == CHAN_REDUCE:  # chan, split: not an arg-reduction over non-adjacent dims
        return not plan.whole_rows_only and not any(
            plan.graph[n].attr("kind") in ("argmax", "argmin") for lv in plan.levels for n in lv)
    return library_dtype(plan) in HALF_DTYPES


def half_gap(plan: KernelPlan) -> str:
    """Why no template takes `plan` (each stage of a program) with its half-precision tensors,
    or "" where one does (or it has none): the region split leaves such a region to torch."""
    stages = [s.plan for s in plan.program.stages] if isinstance(plan, ProgramPlan) else [plan]
    for p in stages:
        if p.graph.has_half() and not half_covered(p):
            dtypes = sorted(({g.dtype for g in p.graph.inputs} | {p.out_dtype})
                            & {"float16", "bfloat16"})
            return (f"no template takes a {p.family} kernel in half precision "
                    f"({', '.join(dtypes)}): torch runs it in that type")
    return ""
