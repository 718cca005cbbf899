"""Partition a graph that no single kernel pattern covers into a program of stages.

One kernel covers a graph built around at most one structured op (matrix product,
convolution, pooling, scan, attention) with an elementwise epilogue, or elementwise work and
reductions over one shared set of dims (`planning.make_plan`). Layers users bring chain more: a
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
batch mean and variance) must lie in buffers of their own after the program ran, where the
state update reads them, and the stages after them read the very values that update uses. The
stage that computes one writes it as a side output (`Graph.sides`: batch norm's statistics and
normalisation stay one reduction stage, over channels, rows or columns; its two levels can be
one Welford pass (chan, split and row templates): the activations read
twice, as torch.compile reads them, where a stage per statistic read them three times). Where
that stage's plan has no template that writes side outputs (`SIDE_PLAN_KINDS`), each kept
value is cut into a stage of its own instead (`partition(sides=False)`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Collection

from ..errors import UnsupportedError
from .graph import INDEX_DTYPE, Graph, GraphInput, Node
from .ops import is_elementwise
from .plan import CHAN_REDUCE, KernelPlan, _ancestors
from .pool import pool_prologue, through_views
from .structured import _planners

INTERMEDIATE = "intermediate"  # GraphInput.role of a value an earlier stage wrote


def structured_ops() -> set[str]:
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
    sides: list[int] = field(default_factory=list)  # buffers of its side outputs (graph.sides)
    # its plan where buffer `nhwc_buffer` is stored channels-last (`ir/layout.py`), or None
    nhwc_plan: Any = None
    nhwc_buffer: int | None = None
    # its plan computed in that buffer's memory order (`layout.memory_order_graph`), or None
    nhwc_mo_plan: Any = None


@dataclass
class Program:
    stages: list[Stage]
    buffers: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # shape, dtype
    values: list[int] = field(default_factory=list)  # the graph node each buffer holds


def _signature(graph: Graph, n: Node) -> tuple:
    """What one kernel's reductions must share: the body shape and the reduced dims."""
    return (graph[n.args[0]].shape, n.attr("dims"))


#: plan kinds every template of which writes side outputs (`Template.writes_sides`: row, col
#: and split for "reduce"; chan and split for CHAN_REDUCE)
SIDE_PLAN_KINDS = frozenset({CHAN_REDUCE, "reduce"})


def cut_values(graph: Graph, cut_kept: bool = True) -> list[int]:
    """Node ids whose values must be materialized, in topological order (empty: one kernel);
    with `cut_kept`, the kept values among them whatever their users."""
    structured = structured_ops()
    live = graph.live()
    kept = set(graph.kept_values()) if cut_kept else set()
    cuts: list[int] = []
    # views and permutes over a cut value: recomputed where used (free), not stage barriers
    through: set[int] = set()

    def cut(a: int) -> None:
        base, chain = _natural_layout(graph, a)
        through.update(chain)
        if base not in cuts:
            cuts.append(base)

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
            if not up or a in cuts or a in through:
                continue
            if n.op in structured:
                need = True
            elif n.op == "reduce":
                need = any(b[0] == "structured" or b != ("reduce", _signature(graph, n))
                           for b in up)
            else:
                need = False
            if need:
                cut(a)
        # two structured ops meeting at one node (silu(x @ Wg) * (x @ Wu)): the operands
        # after all but the last op are cut, and its stage reads them as inputs
        meeting = [a for a in n.args if a not in cuts and a not in through and any(
            b[0] == "structured" for b in barriers.get(a, frozenset()))]
        if len({b for a in meeting for b in barriers[a] if b[0] == "structured"}) > 1:
            last = max(meeting, key=lambda a: max(b[2] for b in barriers[a]
                                                   if b[0] == "structured"))
            for a in meeting:
                if a != last:
                    cut(a)
        own: set = set()
        for a in n.args:
            if a not in cuts and a not in through:
                own |= barriers.get(a, frozenset())
        if n.op in structured:
            own.add(("structured", n.op, n.id))
        elif n.op == "reduce":
            own.add(("reduce", _signature(graph, n)))
        barriers[n.id] = frozenset(own)
    return sorted(cuts)


def _natural_layout(graph: Graph, nid: int) -> tuple[int, list[int]]:
    """The value to keep in memory for `nid`, cut before a stage that needs it: `nid` itself,
    or, where `nid` is a chain of views and permutes with a permute in it over a computed
    value (attention's q = linear(x).view(B, S, H, D).transpose(1, 2)), the value below the
    chain, in its own layout, with the chain's nodes (the consumer reads the buffer through
    them by strides; a stage cannot write its output permuted)."""
    chain, base = [], nid
    while graph[base].op in ("view", "permute"):
        chain.append(base)
        base = graph[base].args[0]
    if any(graph[c].op == "permute" for c in chain) and graph[base].op not in ("input", "const"):
        return base, chain
    return nid, []


#: structured ops whose product a program may keep bare, its epilogue deferred to the readers
#: (cuDNN's convolutions and cuBLAS's matrix products: the library's result is the buffer)
DEFERRABLE = frozenset({"conv", "matmul"})


def defer_epilogues(graph: Graph, cuts: list[int]) -> list[int]:
    """`cuts` with each cut value that is a convolution's or a matrix product's elementwise
    epilogue (its bias, activations, scalings: elementwise ops over the product and
    parameters) replaced by the
    product itself, where every reader of the value is elementwise or a reduction (a pattern
    kernel, which recomputes the epilogue as it loads) or a pooling window it is a prologue of
    (parameters one value per plane: `ir/pool.PoolPrologue`). The producing stage is then the bare
    product: cuDNN's output is the buffer and no pass of its own applies the epilogue (read
    and write of the whole activation), as torch.compile fuses a convolution's epilogue into
    the kernel after it. A kept value (read by a state update) stays as it is, and so does
    every cut of a graph with half-precision tensors (the bare product would be the library's
    half result, and a program's buffers are fp32: the library route's epilogue converts)."""
    if graph.has_half():
        return cuts
    structured = structured_ops()
    users = graph.live_users()
    kept = frozenset(graph.kept_values())
    cut_set = set(cuts)
    out: list[int] = []
    for c in cuts:
        product, stats = (None, set()) if c in kept else \
            _epilogue_of(graph, c, cut_set, structured, kept)
        if product is not None and product not in cuts and all(
                _applies_as_it_loads(graph, u, c, product, stats) for u in users[c]):
            # the batch statistics it reads: in buffers of their own, the last computed cut
            # (its stage writes the earlier ones as side outputs: one pass over the product)
            new = [product] + [k for k in stats
                               if not any(k in _ancestors(graph, j) for j in stats if j != k)]
        else:
            new = [c]
        # a later cut's epilogue may pass through this one where it moved (a batch norm's
        # normalisation reads the biased product its statistics read)
        cut_set.discard(c)
        cut_set.update(new)
        out += [k for k in new if k not in out]
    return sorted(out)


def _applies_as_it_loads(graph: Graph, reader: int, value: int, product: int,
                         stats: set[int]) -> bool:
    """Whether the stage of `reader` can compute `value` (the epilogue of `product`, reading
    the batch statistics `stats` from buffers) from the product as it loads it: an elementwise
    op or a reduction (a pattern kernel recomputes its inputs, the statistics broadcast
    operands), or a pooling window whose prologue it is (per-plane parameters: `ir/pool.py`)."""
    n = graph[reader]
    if n.op == "reduce" or is_elementwise(n.op):
        return True
    if n.op != "pool" or n.args[0] != value:
        return False
    try:
        pool_prologue(graph, value, int(n.attr("rank")), frozenset({product, *stats}))
    except UnsupportedError:
        return False
    return True


def epilogue_product(graph: Graph, value: int, cuts: set[int],
                      structured: set[str]) -> int | None:
    """The structured op of `DEFERRABLE` whose elementwise epilogue `value` is, or None: every
    computed node between them elementwise, every other operand a parameter (computed from
    inputs and constants alone), no other cut value on the way."""
    return _epilogue_of(graph, value, cuts, structured)[0]


def _epilogue_of(graph: Graph, value: int, cuts: set[int], structured: set[str],
                 kept: frozenset[int] = frozenset()) -> tuple[int | None, set[int]]:
    """`epilogue_product`, where the epilogue may also read values of `kept` (a training
    batch norm's batch mean and variance, which the state update keeps in memory anyway):
    the product and the kept values it reads."""
    if graph[value].op in structured:
        return None, set()
    product = None
    stats: set[int] = set()
    stack, seen = [value], set()
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        n = graph[k]
        if n.op in structured:
            if n.op not in DEFERRABLE or (product is not None and product != k):
                return None, set()
            product = k
            continue
        if is_parameter(graph, k):
            continue
        if k in kept and k != value:
            stats.add(k)
            continue
        # a view of the product itself (`sink.py` moved GroupNorm's grouping onto it): the
        # reader views its input buffer
        direct_view = n.op == "view" and graph[n.args[0]].op in structured
        if k in cuts and k != value or not (is_elementwise(n.op) or direct_view):
            return None, set()
        stack.extend(n.args)
    return product, stats


def is_parameter(graph: Graph, nid: int) -> bool:
    """Whether `nid` is computed from inputs and constants alone through views (a bias viewed
    to broadcast over the channels)."""
    return through_views(graph, nid).op in ("input", "const")


def partition(graph: Graph, sides: bool = True, defer: bool = False) -> Program | None:
    """The graph as stages, or None when one kernel covers it. With `sides`, a kept value no
    other rule cuts is a side output of the first stage that computes it (a program of one
    stage where nothing else is cut); without, a stage of its own. With `defer`, a convolution's
    epilogue is computed by the stages that read it (`defer_epilogues`)."""
    cuts = cut_values(graph, cut_kept=not sides)
    if defer:
        cuts = defer_epilogues(graph, cuts)
    extra = [k for k in graph.kept_values() if k not in cuts] if sides else []
    if not cuts and not extra:
        return None
    values = cuts + extra
    buffer_of = {v: i for i, v in enumerate(values)}
    program = Program([], [(graph[v].shape, graph[v].dtype) for v in values], values)
    unowned = list(extra)
    for target in cuts + [graph.output]:
        reach = _reach(graph, target, {c: buffer_of[c] for c in cuts})
        own = [k for k in unowned if k in reach]
        unowned = [k for k in unowned if k not in own]
        program.stages.append(_stage(graph, target, buffer_of, own))
    if unowned:  # the statistics of a batch norm whose output forward() does not use
        raise UnsupportedError("unsupported: a module state update from values the output "
                               "does not depend on")
    return program


def _reach(graph: Graph, target: int, buffer_of: dict[int, int],
           own: Collection[int] = ()) -> set[int]:
    """The nodes of `target`'s stage: its ancestors, stopping at values read from buffers
    (other than its own side outputs `own`)."""
    keep: set[int] = set()
    stack = [target]
    while stack:
        k = stack.pop()
        if k in keep:
            continue
        keep.add(k)
        if k != target and k in buffer_of and k not in own:
            continue  # read from its buffer
        stack.extend(graph[k].args)
    return keep


def _stage(graph: Graph, target: int, buffer_of: dict[int, int], own: list[int]) -> Stage:
    """The subgraph computing `target` (and its side outputs `own`) from graph inputs and
    earlier buffers."""
    keep = _reach(graph, target, buffer_of, own)
    g = Graph()
    new_id: dict[int, int] = {}
    sources: list[StageSource] = []
    for n in graph.nodes:
        if n.id not in keep:
            continue
        if n.id != target and n.id in buffer_of and n.id not in own:
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
    g.sides = [new_id[k] for k in own]
    if target == graph.output:  # the program's result, stored as the problem's output is
        g.out_dtype = graph.out_dtype
    return Stage(g, sources, buffer_of.get(target), sides=[buffer_of[k] for k in own])


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


def as_program(plan: KernelPlan) -> ProgramPlan:
    """`plan`, of a problem run as a program of stages (an AssertionError where it is one
    kernel's)."""
    assert isinstance(plan, ProgramPlan), "not a program"
    return plan


def sides_written(program: Program) -> bool:
    """Whether every stage with side outputs has a plan whose templates write them: one of
    `SIDE_PLAN_KINDS`, the side values among its per-row values."""
    return all(not st.graph.sides or (
        st.plan.kind in SIDE_PLAN_KINDS and all(st.plan.classes.get(n) == "row"
                                                 for n in st.graph.sides)
        # the col template does not take whole-row-only reductions (the row template does)
        and not (st.plan.kind == "reduce" and st.plan.I > 1 and st.plan.whole_rows_only))
        for st in program.stages)
