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

That variant still iterates in torch's order over strided memory. The producer's other kept
value, ``channels_last_kept_ordered`` (`KernelPlan.nhwc_mo_out`), runs each consumer's
*memory-order variant* (`memory_order_graph`, `Stage.nhwc_mo_plan`): the consumer's graph
carried in the buffer's (N, *spatial, C) order, so the planner sees a contiguous input and
picks a row reduction over the channels, a column reduction with the channels innermost, or a
map walking memory; an output that must be torch's layout is stored permuted
(`KernelPlan.out_perm`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedError
from .graph import Graph, GraphInput, compute_dtype
from .ops import is_elementwise
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
        new_id[n.id] = g.add("permute", (stored,), gin.shape, compute_dtype(gin.dtype),
                             perm=to_logical(len(gin.shape)))
    g.output = new_id[graph.output]
    g.sides = [new_id[k] for k in graph.sides]
    g.modes = graph.modes
    g.out_dtype = graph.out_dtype
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
        variants, ordered = [], []
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
            ordered.append(_memory_order_plan(st.graph, ins, make_plan))
        else:
            program.stages[k].plan.nhwc_out = True
            program.stages[k].plan.nhwc_mo_out = all(p is not None for p in ordered)
            for st, plan, mo in zip(readers, variants, ordered):
                st.nhwc_plan, st.nhwc_buffer = plan, b
                st.nhwc_mo_plan = mo if program.stages[k].plan.nhwc_mo_out else None


def _memory_order_plan(graph: Graph, inputs: set[int], make_plan):  # noqa: ANN001, ANN202
    """The plan of `graph` computed in its channels-last inputs' memory order
    (`memory_order_graph`), where it is a pattern kernel; else None."""
    try:
        plan = make_plan(memory_order_graph(graph, inputs))
    except UnsupportedError:
        return None
    return plan if plan.kind in ("map", "reduce", CHAN_REDUCE) else None


def to_memory(rank: int) -> tuple[int, ...]:
    """The permute from the logical (N, C, *spatial) to the channels-last memory order."""
    return (0, *range(2, rank), 1)


def _memory_dim(d: int, rank: int) -> int:
    """Where logical dim `d` of an (N, C, *spatial) tensor lies in its channels-last order."""
    return 0 if d == 0 else rank - 1 if d == 1 else d - 1


def memory_order_graph(graph: Graph, inputs: set[int]) -> Graph:
    """`graph` computed in the memory order of its channels-last inputs `inputs`: where
    `channels_last_graph` reads them through a permute and iterates in torch's (N, C,
    *spatial) order, this one carries every value of the buffer's rank in (N, *spatial, C):
    a reduction's dims are remapped (BatchNorm's statistics over (N, H, W) become a
    reduction over the leading run with the channels innermost; a min over the channels one
    over the contiguous last dim), a per-channel parameter ((C, 1, 1), (1, C, 1, 1)) is viewed
    along the last dim, another full-rank input is read through a permute, and an output of
    the buffer's rank is permuted back to torch's order at the end (the kernel stores it so:
    `KernelPlan.out_perm`). Raises `UnsupportedError` where a value cannot be carried so (a
    lower-rank value broadcast against the channels-last ones, a reshape of one, a side
    output that is not per channel); the caller falls back to `channels_last_graph`."""
    rank = len(graph.inputs[min(inputs)].shape)
    g = Graph()
    new_id: dict[int, int] = {}
    mem: set[int] = set()  # new ids of the values carried in memory order
    converted: dict[int, int] = {}  # old id -> its memory-order form, made at first use

    def memory_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
        full = (1,) * (rank - len(shape)) + tuple(shape)
        return nhwc_shape(full)

    def as_memory(old: int) -> int:
        """The memory-order form of a value held in torch's order (an input, a view of one,
        a constant), for an elementwise node computed in memory order."""
        n = graph[old]
        if n.op == "const" or new_id[old] in mem:
            return new_id[old]
        if old in converted:
            return converted[old]
        if len(n.shape) > rank:
            raise UnsupportedError("unsupported: a value of higher rank than the buffer")
        full = (1,) * (rank - len(n.shape)) + n.shape
        perm = to_memory(rank)
        shape = memory_shape(n.shape)
        # a view keeps the element order: enough where the dims that are not 1 keep theirs
        if [full[p] for p in perm if full[p] != 1] == [s for s in full if s != 1]:
            src = n.args[0] if n.op == "view" and graph[n.args[0]].op == "input" else old
            if graph[src].op != "input" and n.numel != 1:
                raise UnsupportedError("unsupported: a computed value broadcast against "
                                       "channels-last ones")
            converted[old] = g.add("view", (new_id[src],), shape, n.dtype)
        elif n.op == "input" and len(n.shape) == rank:
            converted[old] = g.add("permute", (new_id[old],), shape, n.dtype, perm=perm)
        else:
            raise UnsupportedError("unsupported: a value in torch's layout read against "
                                   "channels-last ones")
        mem.add(converted[old])
        return converted[old]

    for n in graph.nodes:
        if n.op == "input":
            assert n.attr("index") == len(g.inputs), "inputs out of node order"
            gin = graph.inputs[n.attr("index")]
            if n.attr("index") in inputs:
                assert len(gin.shape) == rank, "channels-last inputs of one rank"
                new_id[n.id] = g.add_input(GraphInput(
                    gin.name, gin.role, nhwc_shape(gin.shape), gin.dtype, gin.arg_index,
                    gin.target))
                mem.add(new_id[n.id])
            else:
                new_id[n.id] = g.add_input(gin)
            continue
        args_mem = [new_id[a] in mem for a in n.args]
        if not any(args_mem):
            new_id[n.id] = g.add(n.op, tuple(new_id[a] for a in n.args), n.shape, n.dtype,
                                 **dict(n.attrs))
            continue
        if n.op == "reduce":
            dims = tuple(sorted(_memory_dim(d, rank) for d in n.attr("dims")))
            attrs = {**dict(n.attrs), "dims": dims}
            if n.attr("keepdim"):
                new_id[n.id] = g.add("reduce", (new_id[n.args[0]],), nhwc_shape(n.shape),
                                     n.dtype, **attrs)
                mem.add(new_id[n.id])
                continue
            # the kept dims in memory order: torch's order where it is the same (the channels
            # reduced, or no spatial dim kept with them)
            kept = [d for d in to_memory(rank) if d not in n.attr("dims")]
            if kept != sorted(kept):
                raise UnsupportedError("unsupported: a reduction keeping channels and "
                                       "spatial dims of a channels-last value")
            new_id[n.id] = g.add("reduce", (new_id[n.args[0]],), n.shape, n.dtype, **attrs)
            continue
        if n.op == "const" or not is_elementwise(n.op):
            raise UnsupportedError(f"unsupported: {n.op} of a channels-last value")
        if len(n.shape) != rank:
            raise UnsupportedError("unsupported: a channels-last value broadcast to another "
                                   "rank")
        new_id[n.id] = g.add(n.op, tuple(as_memory(a) for a in n.args), nhwc_shape(n.shape),
                             n.dtype, **dict(n.attrs))
        mem.add(new_id[n.id])

    def back(old: int, what: str) -> int:
        nid = new_id[old]
        if nid not in mem:
            return nid
        n = graph[old]
        # a per-channel statistic, a reduction over the channels kept as a size-1 dim: the
        # same element order either way
        if [s for s in nhwc_shape(n.shape) if s != 1] == [s for s in n.shape if s != 1]:
            # a side output is stored flat from the value itself (its buffer has its logical
            # shape, the same elements in the same order)
            return nid if what == "a side output" else g.add("view", (nid,), n.shape, n.dtype)
        if what == "a side output":
            raise UnsupportedError("unsupported: a side output carried channels-last")
        return g.add("permute", (nid,), n.shape, n.dtype, perm=to_logical(rank))

    g.output = back(graph.output, "the output")
    g.out_dtype = graph.out_dtype
    g.sides = [back(k, "a side output") for k in graph.sides]
    g.modes = graph.modes
    return g
