"""Tracing a module to torch.export's training IR without torch.export's tracer.

`torch.export.export(model, inputs, strict=False)` imports Dynamo on its first call in a
process (about 1.4 s on a CPU, against 0.04 s of tracing), and so does `make_fx`. For a module
with static shapes on meta tensors, what export records is simple: the aten ops forward() calls,
seen at the PreDispatch key (before autograd, so that composite ops such as linear, softmax or
batch_norm stay whole), in-place ops included, with one placeholder per parameter, buffer and
forward() argument, named as export names them. `trace` records the same graph with a small
dispatch mode of its own and returns it with the graph signature `lower` reads.

Dynamo may still be imported by the ops themselves: where torch's meta kernel of an op is
written in Python (batch norm's, most elementwise ops'), running it on meta tensors imports
Dynamo, and loading such a problem (`problem.check_problem`) already does. The second is saved
for the others: softmax, matrix products, convolutions, pooling, reductions.

It does not try to cover what export handles beyond that: a tensor forward() did not get as an
input (a constant, `torch.tensor(...)`), a factory op off the meta device, grad-mode
switches, module attributes assigned during forward(), non-persistent or shared buffers and
parameters; nor a torch version it was not compared on (`VERIFIED_TORCH`). Each raises
`NotTraced`, and the caller falls back to torch.export, as it does on any other error (an import
error included: this module uses torch internals, and is imported only when a capture uses
it): this path only ever saves time.

CUDA autocast regions are recorded as export records their bodies: each op as called, uncast,
here tagged with the autocast dtype in effect (torch's global autocast state, which
`torch.autocast.__enter__` sets; `autocast.as_on_gpu` keeps it from switching itself off on a
machine without CUDA). `autocast.resolve` then adds the casts torch's policy applies, to this
graph and to export's alike (`autocast.inline` takes export's `wrap_with_autocast` apart).
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._export.utils import _rename_without_collisions
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                          TensorArgument)
from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode
from torch.fx.node import _side_effectful_need_to_be_preserved_pre_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree as pytree
from torch.utils.weak import WeakTensorKeyDictionary

from . import autocast

_META = torch.device("meta")
# torch versions whose torch.export this tracer was compared with on every problem file
# (benchmarks/capture_equality.py): another version's export may record other ops or names,
# so there torch.export traces, until the comparison is run on it and it is added here.
# 2.13: benchmarks/results/2026-12-06-capture-equality-cpu.json (198 of 198 equal)
VERIFIED_TORCH = {(2, 13)}


class NotTraced(Exception):
    """The module uses something this tracer does not reproduce; torch.export must trace it."""


@dataclass
class TracedProgram:
    """The two parts of an `ExportedProgram` that `capture.lower` reads."""

    graph: torch.fx.Graph
    graph_signature: ExportGraphSignature


class _Recorder(ProxyTorchDispatchMode):
    """Records every aten op called at the PreDispatch key into an FX graph, running it on the
    meta tensors. A ProxyTorchDispatchMode only because torch accepts no other kind of mode at
    that key; none of its machinery (which imports Dynamo) is used."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # True would wrap __torch_dispatch__ in torch._disable_dynamo, which imports Dynamo
        return False

    def __init__(self, graph: torch.fx.Graph) -> None:
        # not ProxyTorchDispatchMode.__init__: it imports torch._inductor's config, and Dynamo
        TorchDispatchMode.__init__(self, torch._C.DispatchKey.PreDispatch)
        self._mode_key = torch._C._TorchDispatchModeKey.PROXY
        self.enter_stack: list = []  # ProxyTorchDispatchMode.__enter__/__exit__ use it
        self.graph = graph
        # tensor -> node, held weakly as make_fx holds them: a second reference to an op's
        # result makes torch's factory bindings (zeros_like, ...) return a copy of it
        self.nodes: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.count = 0

    def track(self, value: Any, node: torch.fx.Node) -> None:
        """Record `node` as the producer of the tensor(s) in `value`; a tuple or list gets one
        getitem node per tensor element, as make_fx creates them."""
        if isinstance(value, torch.Tensor):
            self.nodes[value] = node
            node.meta["val"] = value.detach()  # shape and dtype, not a reference to `value`
        elif isinstance(value, (tuple, list)):
            node.meta["val"] = tuple(v.detach() if isinstance(v, torch.Tensor) else v
                                     for v in value)
            for k, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    self.track(item, self.graph.call_function(
                        operator.getitem, (node, k), name=self._name("getitem")))

    def node_of(self, t: torch.Tensor) -> torch.fx.Node:
        node = self.nodes.get(t)
        if node is None:
            raise NotTraced("a tensor forward() did not get as an input (a constant)")
        return node

    def _name(self, base: str) -> str:
        # An upper-case letter: placeholder names (export's) are lower case, so no node can
        # take a placeholder's name, which `lower` keys its values by.
        self.count += 1
        return f"N{self.count}_{base}"

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        reads = any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves((args, kwargs)))
        # an op making a tensor off the meta device (a factory's default is the CPU): export
        # makes a fake one there, this path would allocate it
        if kwargs.get("device", _META if reads else None) != _META:
            raise NotTraced(f"{func} makes a tensor off the meta device")
        node_args, node_kwargs = pytree.tree_map_only(torch.Tensor, self.node_of, (args, kwargs))
        node = self.graph.call_function(func, tuple(node_args), node_kwargs,
                                        name=self._name(func.overloadpacket.__name__))
        dtype = autocast.current()  # the op as called; `autocast.resolve` adds the casts
        if dtype is not None:
            node.meta[autocast.AUTOCAST] = dtype
        out = func(*args, **kwargs)  # this mode is popped here: the op runs below PreDispatch
        self.track(out, node)
        return out


class _RefuseSideEffects(torch.overrides.TorchFunctionMode):
    """export records grad-mode switches (and functorch transforms) as graph nodes; this
    tracer leaves such a forward() to export. (torch.autocast's `_enter_autocast` reaches only
    export's own PreDispatch mode: here autocast is read from torch's state, `autocast.py`.)"""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if func in _side_effectful_need_to_be_preserved_pre_dispatch or \
                (getattr(func, "__module__", None) or "").startswith("torch._functorch"):
            raise NotTraced(f"forward() calls {getattr(func, '__name__', func)}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _as_export_traces() -> Iterator[None]:
    """The global state export's non-strict tracing runs forward() under: compiling/exporting
    flags set (forward() may read them) and backend-specific paths off (cudnn_enabled=False in
    batch_norm's arguments, as export records it)."""
    flags = torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag
    backends = (torch.backends.mkldnn.set_flags(False), torch.backends.nnpack.set_flags(False),
                torch.backends.cudnn.set_flags(False))
    torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag = flags
        torch.backends.mkldnn.set_flags(*backends[0])
        torch.backends.nnpack.set_flags(*backends[1])
        torch.backends.cudnn.set_flags(*backends[2])


def _attributes(model: torch.nn.Module) -> list[tuple[str, str, int]]:
    """Every module's attributes by identity: forward() assigning one is export's to handle
    (a tensor assigned to a buffer becomes a copy_ in its graph)."""
    return [(name, key, id(value)) for name, m in model.named_modules(remove_duplicate=False)
            for key, value in (*vars(m).items(), *m._parameters.items(), *m._buffers.items())]


def _state(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Parameters and buffers as export lists them; a shared or non-persistent one is refused
    (export would name it twice, or lift it as a constant)."""
    params: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
    buffers: dict[str, torch.Tensor] = dict(model.named_buffers(remove_duplicate=False))
    tensors = [*params.values(), *buffers.values()]
    if len({id(t) for t in tensors}) != len(tensors):
        raise NotTraced("a parameter or buffer is shared")
    for name, m in model.named_modules(remove_duplicate=False):
        if m._non_persistent_buffers_set:
            raise NotTraced(f"{name or 'the model'} has non-persistent buffers")
    return params, buffers


def _placeholder_names(model: torch.nn.Module, inputs: list[torch.Tensor],
                       params: dict, buffers: dict) -> tuple[list[str], list[str], list[str]]:
    """Names as export's placeholder naming pass gives them: forward()'s argument names
    (lower case; *args as args_0, args_1, ...), then "p_"/"b_" and the state_dict name of each
    parameter/buffer, suffixed on a collision."""
    bound = inspect.signature(model.forward).bind_partial(*inputs).arguments
    paths = [path for path, _ in pytree.tree_flatten_with_path(dict(bound))[0]]
    if len(paths) != len(inputs):
        raise NotTraced("forward()'s arguments do not flatten to its inputs")

    def key(k: Any) -> str:
        if isinstance(k, pytree.MappingKey):
            return re.sub(r"[^a-zA-Z0-9]", "_", str(k.key))
        if isinstance(k, pytree.SequenceKey):
            return str(k.idx)
        raise NotTraced(f"forward() argument path {k!r}")

    def strip(fqn: str) -> str:
        for prefix in ("L__self___", "self_"):
            if fqn.startswith(prefix):
                fqn = fqn[len(prefix):]
                break
        return re.sub(r"[^a-zA-Z0-9]", "_", re.sub(r"[^a-zA-Z0-9]", "_", fqn).lower())

    name_map: dict[str, str] = {}
    available: dict[str, int] = defaultdict(int)
    used: set[str] = set()

    def name(orig: str, candidate: str) -> str:
        return _rename_without_collisions(name_map, available, used, orig, candidate,
                                          is_placeholder=True)

    user = [name(f"u{k}", "_".join(key(x).lower() for x in path))
            for k, path in enumerate(paths)]
    return ([name(f"p{k}", "p_" + strip(fqn)) for k, fqn in enumerate(params)],
            [name(f"b{k}", "b_" + strip(fqn)) for k, fqn in enumerate(buffers)], user)


def trace(model: torch.nn.Module, inputs: list[torch.Tensor]) -> TracedProgram:
    """forward(*inputs) as torch.export.export(model, inputs, strict=False) records it, for a
    module and inputs on the meta device; raises `NotTraced` (or forward()'s own error) where
    export must be asked."""
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) not in VERIFIED_TORCH:
        raise NotTraced(f"not compared with torch {torch.__version__}'s torch.export")
    params, buffers = _state(model)
    if len({id(t) for t in inputs}) != len(inputs):
        raise NotTraced("one tensor is passed as two forward() arguments")
    p_names, b_names, u_names = _placeholder_names(model, inputs, params, buffers)
    graph = torch.fx.Graph()
    recorder = _Recorder(graph)
    specs = []
    # (placeholder names, (export's target, tensor) each, kind); a user input has no target
    sources: list[tuple[list[str], list[tuple[str | None, torch.Tensor]], InputKind]] = [
        (p_names, list(params.items()), InputKind.PARAMETER),
        (b_names, list(buffers.items()), InputKind.BUFFER),
        (u_names, [(None, t) for t in inputs], InputKind.USER_INPUT)]
    for names, tensors, kind in sources:
        for ph_name, (target, t) in zip(names, tensors):
            node = graph.placeholder(ph_name)
            node.name = node.target = ph_name  # as export sets it: past FX's reserved names
            recorder.track(t, node)
            specs.append(InputSpec(kind, TensorArgument(ph_name), target,
                                   persistent=True if kind == InputKind.BUFFER else None))
    before = _attributes(model)
    with autocast.as_on_gpu(), _as_export_traces(), enable_python_dispatcher(), \
            _RefuseSideEffects(), recorder:
        result = model(*inputs)
    if _attributes(model) != before:
        raise NotTraced("forward() assigned a module attribute")
    outs = [recorder.node_of(v) if isinstance(v, torch.Tensor) else v
            for v in pytree.tree_leaves(result)]
    graph.output(tuple(outs))
    autocast.resolve(graph)
    return TracedProgram(graph, ExportGraphSignature(specs, []))
