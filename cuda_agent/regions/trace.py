"""A whole model's forward() as one FX graph of aten ops, traced on meta tensors, with in-place
ops taken as their out-of-place forms where that is what the graph means.

The graph is the one capture lowers (`ir/capture.py`: torch.export's training IR, recorded by
`ir/pretrace.py` where it can): the region split (`split.py`) then decides, op by op, what the
templates cover and what stays torch's.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from ..ir import capture, pretrace
from ..ir.capture import instantiate_on_meta


# ops that return a view of (an alias of) their first argument: an in-place op on such a value
# also writes the tensor it views
_VIEW_OPS = frozenset({
    "view", "reshape", "_unsafe_view", "transpose", "permute", "t", "expand", "unsqueeze",
    "squeeze", "flatten", "select", "slice", "narrow", "unfold", "diagonal", "alias",
    "as_strided", "split", "chunk", "unbind", "detach", "view_as", "expand_as", "swapaxes",
    "movedim", "unflatten", "split_with_sizes", "mT", "numpy_T", "getitem"})


def instantiate(model_cls: type, init_inputs: list, make_inputs: Callable[[], list]
                ) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The module and its forward() arguments on the meta device (any dtype: masks and
    indices are operands like any other tensor)."""
    return instantiate_on_meta(model_cls, init_inputs, make_inputs)


def trace(model: torch.nn.Module, inputs: list[torch.Tensor]) -> Any:
    """forward() as torch.export's graph and signature (`pretrace.TracedProgram` or an
    `ExportedProgram`), in-place ops normalised (`out_of_place`)."""
    program: Any = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = pretrace.trace(model, inputs)
    except Exception:  # noqa: BLE001 - torch.export traces it, and reports
        program = None
    if program is None:
        program = capture._export(model, inputs)  # noqa: SLF001 - one tracer, one error
    out_of_place(program.graph, placeholders_of(program))
    return program


def placeholders_of(program: Any) -> set[str]:
    return {n.name for n in program.graph.nodes if n.op == "placeholder"}


def op_name(node: torch.fx.Node) -> str:
    """The aten op's name without overload (`relu_`, `linear`), or the Python function's."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    return str(getattr(packet, "__name__", None) or getattr(target, "__name__", str(target)))


def _alias_root(node: torch.fx.Node) -> torch.fx.Node:
    """The tensor whose memory `node` views (itself where it is not a view)."""
    while node.op == "call_function" and op_name(node) in _VIEW_OPS and node.args \
            and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def out_of_place(graph: torch.fx.Graph, placeholders: set[str]) -> list[str]:
    """Rewrite each in-place aten op (`relu_`, `add_`, `mul_` ...) on a value computed in
    forward() and not viewed by anything else as its out-of-place form, later readers of the
    value reading the result: what the graph means, as a value. One on a forward() argument,
    a parameter or a buffer (BatchNorm's counter), or on a view of another tensor, changes a
    tensor the caller holds or that something else reads: kept as it is (torch runs it).
    Returns the names of the nodes rewritten."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    done = []
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = op_name(node)
        if not name.endswith("_") or name.endswith("__") or not node.args:
            continue
        schema = node.target._schema
        if not schema.arguments or schema.arguments[0].alias_info is None \
                or not schema.arguments[0].alias_info.is_write:
            continue
        x = node.args[0]
        if not isinstance(x, torch.fx.Node) or x.name in placeholders:
            continue
        if _alias_root(x) is not x:
            continue  # writes through a view into another tensor
        packet = getattr(torch.ops.aten, name[:-1], None)
        overload = getattr(packet, node.target._overloadname, None) if packet is not None \
            else None
        if overload is None:
            continue
        later = [u for u in x.users if u is not node and order[u] > order[node]]
        views = [u for u in x.users if u is not node and op_name(u) in _VIEW_OPS
                 and order[u] < order[node]]
        if views:
            continue  # a view taken before the write sees it: not a value rewrite
        node.target = overload
        node.meta["out_of_place"] = name
        for u in later:
            u.replace_input_with(x, node)
        done.append(node.name)
    return done
