"""Channels-last buffers inside a program: which intermediate buffers may be NHWC (NDHWC).

A convolution's library stage computed by cuDNN in channels-last used to convert its product
back to NCHW before the next stage read it: one more read and write of the whole activation.
Here a program may keep such a buffer channels-last instead, and the stages that read it index
it so; the program's own inputs and output stay in the user's layout (NCHW), so every layout
change happens at the program's boundary or inside a kernel's reads, never as a pass of its own.

The choice belongs to the producer (the library template's `memory.layout` value
``channels_last_kept``, offered where `KernelPlan.nhwc_out` is set); a consumer follows it by
running its *channels-last variant*: its stage graph with the buffer's input node declared in
its memory shape (N, *spatial, C) and a ``permute`` back to the logical (N, C, *spatial) in
front of every use. The pattern planner reads a permuted input in place
(`plan._read_through_permute`), so every template that indexes operands through their fmaps
(`codegen.offset_expr`: map, row, col, split, chan) reads the buffer with NHWC strides with no
template of its own; a planner that cannot (pooling and convolutions read their input whole,
a reshape of a permuted value is refused) makes the producer's choice unavailable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedError
from .graph import Graph, GraphInput
from .plan import CHAN_REDUCE

if TYPE_CHECKING:
    from .partition import Program


def nhwc_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The memory order of a channels-last (N, C, *spatial) tensor: (N, *spatial, C)."""
    return (shape[0], *shape[2:], shape[1])


def to_logical(rank: int) -> tuple[int, ...]:
    """The permute from the channels-last memory order back to (N, C, *spatial)."""
    return (0, rank - 1, *range(1, rank - 1))


def channels_last_graph(graph: Graph, inputs: set[int]) -> Graph:
    """`graph` with its inputs `inputs` (graph input indices) stored channels-last: each such
    input node in its memory shape, every use reading it through a permute to its logical
    shape. Node ids shift; inputs keep their indices, the output and side outputs follow."""
    g = Graph()
    new_id: dict[int, int] = {}
    for n in graph.nodes:
        if n.op != "input":
            new_id[n.id] = g.add(n.op, tuple(new_id[a] for a in n.args), n.shape, n.dtype,
                                 **dict(n.attrs))
            continue
        # a stage's graph adds its inputs in node order: their indices stay as they were
        assert n.attr("index") == len(g.inputs), "inputs out of node order"
        gin = graph.inputs[n.attr("index")]
        if n.attr("index") not in inputs:
            new_id[n.id] = g.add_input(gin)
            continue
        assert len(gin.shape) in (4, 5), "channels-last: 4-D and 5-D tensors"
        stored = g.add_input(GraphInput(gin.name, gin.role, nhwc_shape(gin.shape), gin.dtype,
                                        gin.arg_index, gin.target))
        new_id[n.id] = g.add("permute", (stored,), gin.shape, gin.dtype,
                             perm=to_logical(len(gin.shape)))
    g.output = new_id[graph.output]
    g.sides = [new_id[k] for k in graph.sides]
    g.modes = graph.modes
    return g


def mark_channels_last(program: "Program", make_plan) -> None:  # noqa: ANN001 - planning's
    """Offer channels-last buffers where they can be consumed so: each buffer written by a 2-D
    or 3-D convolution's stage (its plan kind "conv", the output the convolution's shape) and
    read only by stages whose channels-last variant plans (`make_plan` on
    `channels_last_graph`) as the same kind of kernel. Sets the producer's `plan.nhwc_out` and
    each consumer's `Stage.nhwc_plan` (with `nhwc_buffer`, the buffer it reads so). A consumer
    reads at most one such buffer (two would need variants per combination of layouts)."""
    candidates = [k for k, st in enumerate(program.stages)
                  if st.writes is not None and st.plan.kind == "conv"
                  and len(program.buffers[st.writes][0]) in (4, 5)
                  and st.plan.graph[st.plan.output].shape == program.buffers[st.writes][0]]
    for k in candidates:
        b = program.stages[k].writes
        readers = [st for st in program.stages
                   if any(s.kind == "buffer" and s.index == b for s in st.sources)]
        if not readers or any(st.nhwc_plan is not None for st in readers):
            continue
        variants = []
        for st in readers:
            ins = {j for j, s in enumerate(st.sources) if s.kind == "buffer" and s.index == b}
            try:
                plan = make_plan(channels_last_graph(st.graph, ins))
            except UnsupportedError:
                break
            # the pattern kernels only: they read operands through fmaps (a structured
            # planner reads its input whole, in torch's layout)
            if plan.kind != st.plan.kind or plan.kind not in ("map", "reduce", CHAN_REDUCE):
                break
            variants.append(plan)
        else:
            program.stages[k].plan.nhwc_out = True
            for st, plan in zip(readers, variants):
                st.nhwc_plan, st.nhwc_buffer = plan, b
