"""A view below a product's elementwise epilogue moved onto the product, so that the epilogue
can be deferred to the stage that reads it (`partition.defer_epilogues`).

GroupNorm reads a convolution's activation viewed as (N, groups, C / groups, spatial): the
view sits between the epilogue (bias, activation) and the reductions. A program whose cut
moved to the bare product would have its reducing stage view a computed value with per-channel
operands, which the pattern planner does not take; the same computation with the view applied
to the product first and the epilogue computed in the viewed shape (a bias (C, 1, 1) viewed as
(groups, C / groups, 1)) is an ordinary elementwise chain over a viewed input. This rewrite
produces that graph; planning tries it where the deferred program does not plan as it is.
"""

from __future__ import annotations

import math

from .graph import Graph, view_runs
from .ops import is_elementwise
from .partition import epilogue_product, is_parameter, structured_ops


def sink_epilogue_views(graph: Graph) -> Graph | None:
    """`graph` with every view of a deferrable product's elementwise epilogue (`partition.
    epilogue_product`) moved onto the product, the epilogue computed in the viewed shape, its
    per-channel operands viewed to match; None where no view moves. Only graphs with no state
    update and no side output, and chains used by nothing but the view."""
    if graph.updates or graph.sides or graph.has_half():  # no deferral there either
        return None
    moved = False
    while True:
        step = _sink_one(graph)
        if step is None:
            return graph if moved else None
        graph, moved = step, True


def _sink_one(graph: Graph) -> Graph | None:
    structured = structured_ops()
    users = graph.live_users()
    for v in graph.live():
        if v.op != "view" or v.attrs or graph[v.args[0]].op in structured:
            continue
        product = epilogue_product(graph, v.args[0], set(), structured)
        if product is None:
            continue
        chain = _chain(graph, v.args[0], product)
        if chain is None or any(set(users[k]) - set(chain) - {v.id} for k in chain):
            continue
        shapes = _param_shapes(graph, chain, graph[product].shape, v.shape)
        if shapes is None:
            continue
        return _rewrite(graph, v.id, product, chain, shapes)
    return None


def _chain(graph: Graph, value: int, product: int) -> list[int] | None:
    """The computed nodes between `product` and `value` (both ends: `value` included, the
    product not), in node order; None where one is not elementwise of the product's shape."""
    out, stack = set(), [value]
    while stack:
        k = stack.pop()
        if k == product or k in out or is_parameter(graph, k):
            continue
        n = graph[k]
        if not is_elementwise(n.op) or n.shape != graph[product].shape:
            return None
        out.add(k)
        stack.extend(n.args)
    return sorted(out)


def _param_shapes(graph: Graph, chain: list[int], src: tuple[int, ...],
                  dst: tuple[int, ...]) -> dict[int, tuple[int, ...]] | None:
    """For each parameter operand of the chain, its shape broadcasting against `dst` as it
    did against `src` (each run of the view either all 1 or whole in the parameter); None where
    one straddles a run (a parameter over part of a merged dim)."""
    runs = view_runs(src, dst)
    out: dict[int, tuple[int, ...]] = {}
    for k in chain:
        for a in graph[k].args:
            if a in chain or a in out or not is_parameter(graph, a):
                continue
            shape = graph[a].shape
            if math.prod(shape) == 1:
                continue  # a scalar broadcasts against any shape
            full = (1,) * (len(src) - len(shape)) + tuple(shape)
            new: list[int] = [1] * len(dst)
            for si, dj in runs:
                sizes = [full[i] for i in si]
                if all(s == 1 for s in sizes):
                    continue
                if sizes != [src[i] for i in si]:
                    return None
                for j in dj:
                    new[j] = dst[j]
            out[a] = tuple(new)
    return out


def _rewrite(graph: Graph, view: int, product: int, chain: list[int],
             shapes: dict[int, tuple[int, ...]]) -> Graph:
    g = Graph()
    new: dict[int, int] = {}
    viewed: dict[int, int] = {}
    vshape = graph[view].shape
    for n in graph.nodes:
        if n.op == "input":
            new[n.id] = g.add_input(graph.inputs[n.attr("index")])
            continue
        if n.id == view:
            viewed[product] = g.add("view", (new[product],), vshape, graph[product].dtype)
            for k in chain:
                c = graph[k]
                args = tuple(viewed[a] if a in viewed else _param_view(g, graph, new, a, shapes[a])
                             if a in shapes else new[a] for a in c.args)
                viewed[k] = g.add(c.op, args, vshape, c.dtype, **dict(c.attrs))
            new[n.id] = viewed[n.args[0]]
            continue
        new[n.id] = g.add(n.op, tuple(new[a] for a in n.args), n.shape, n.dtype,
                          **dict(n.attrs))
    g.output = new[graph.output]
    g.modes = graph.modes
    g.out_dtype = graph.out_dtype
    return g


def _param_view(g: Graph, graph: Graph, new: dict[int, int], param: int,
                shape: tuple[int, ...]) -> int:
    """The parameter `param` viewed to `shape` (its leading 1s dropped, as capture views a
    per-channel weight): a view of its input itself, not of its earlier view (the planner
    reads one view of an input)."""
    base = param
    while graph[base].op == "view":
        base = graph[base].args[0]
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return g.add("view", (new[base],), shape, graph[param].dtype)
