"""CUDA autocast in a captured graph: the casts torch's own policy applies, made explicit.

A forward() that runs `with torch.autocast("cuda", dtype=...)` is traced on meta tensors, which
autocast does not cast: the graph records each op as called, uncast (the PreDispatch key, where
`pretrace.py` records and where torch.export records the body of its `wrap_with_autocast`
higher-order op, sits above the Autocast key). What autocast does to each op on the GPU is asked
of torch itself, op by op: the op runs once on fake CUDA tensors of the same shapes and dtypes
with CUDA autocast on, and a dispatch mode below the Autocast key notes the casts autocast made
of its arguments (`_to_copy` of an argument that the same call without autocast does not make).
Those casts become explicit `_to_copy` nodes before the op (`resolve`), and every value's dtype
is recomputed after them, so the lowering sees the half-precision values the user's GPU
computes: a product of operands rounded to fp16 or bf16, an fp32-policy op (softmax, layer
norm, sums) reading them upcast. No list of autocast ops is kept here: the policy is torch's,
asked on this machine even without a GPU (fake CUDA tensors carry the AutocastCUDA key).

Which path traces such a forward(): both. `pretrace.py` tags each op it records with the CUDA
autocast dtype in effect (torch's global autocast state, which `torch.autocast.__enter__` sets
and the tracer reads); torch.export's graph has each autocast region as a `wrap_with_autocast`
node, which `inline` replaces by its body, tagged the same way. After `resolve` the two graphs
are the same, so pretrace still only saves time. On a machine without CUDA `torch.autocast`
disables itself at construction ("CUDA is not available"); `as_on_gpu` makes it construct as on
the GPU for the length of a trace, so that CI captures what the user's GPU runs.

`torch.autocast("cpu")` casts CPU tensors only; forward() run on the GPU would ignore it, but a
model written for it is not a CUDA model: it is refused (`UnsupportedError`) with that reason.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import UnsupportedError

AUTOCAST = "autocast"
"""node.meta key: the CUDA autocast dtype (torch.float16 / torch.bfloat16) in effect where
forward() called the op; absent outside an enabled CUDA autocast region"""

CPU_REFUSED = ("unsupported: forward() uses torch.autocast('cpu'), which casts CPU tensors "
               "only; the kernels run on CUDA tensors (use torch.autocast('cuda'))")

_TO_COPY = torch.ops.aten._to_copy.default
_HALF = (torch.float16, torch.bfloat16)


@contextlib.contextmanager
def as_on_gpu() -> Iterator[None]:
    """`torch.autocast("cuda", ...)` constructed as on a GPU with bf16 (H100, H200): enabled,
    not switched off for want of CUDA on this machine. The autocast state is restored after."""
    amp_common = torch.cuda.amp.common
    saved = (amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported)
    state = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
             for d in ("cuda", "cpu")]
    amp_common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *a, **k: True
    try:
        yield
    finally:
        amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported = saved
        for d, on, dt in state:
            torch.set_autocast_enabled(d, on)
            torch.set_autocast_dtype(d, dt)


def current() -> torch.dtype | None:
    """The CUDA autocast dtype in effect now (None: off); CPU autocast refused."""
    if torch.is_autocast_enabled("cpu"):
        raise UnsupportedError(CPU_REFUSED)
    return torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None


# -- torch.export's form: wrap_with_autocast higher-order ops -----------------------------------

def _is_wrap(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and \
        getattr(node.target, "__name__", "") == "wrap_with_autocast"


def inline(program: Any) -> None:
    """Replace each `wrap_with_autocast` node of an ExportedProgram's graph by the ops of its
    body (nested regions too), each tagged with the CUDA autocast dtype in effect there, as
    `pretrace` tags them."""
    graph: torch.fx.Graph = program.graph
    if not any(_is_wrap(n) for n in graph.nodes):
        return
    _inline(graph, program.graph_module, None)
    graph.eliminate_dead_code()
    graph.lint()


def _inline(graph: torch.fx.Graph, owner: torch.nn.Module, tag: torch.dtype | None) -> None:
    for node in list(graph.nodes):
        if node.op == "call_function" and not _is_wrap(node) and tag is not None \
                and node.target is not operator.getitem:
            node.meta[AUTOCAST] = tag
        if not _is_wrap(node):
            continue
        device, dtype, enabled, _cache, sub, *operands = node.args
        if device == "cpu" and enabled:
            raise UnsupportedError(CPU_REFUSED)
        inner_tag = (dtype if enabled else None) if device == "cuda" else tag
        assert isinstance(sub, torch.fx.Node) and sub.op == "get_attr"
        body: torch.fx.GraphModule = getattr(owner, str(sub.target))
        body_graph = body.graph
        # the body's nested regions first, in its own module's terms
        _inline(body_graph, body, inner_tag)
        env: dict[torch.fx.Node, Any] = {}
        placeholders = [n for n in body_graph.nodes if n.op == "placeholder"]
        for ph, value in zip(placeholders, operands):
            env[ph] = value
        outputs: Any = None
        with graph.inserting_before(node):
            for n in body_graph.nodes:
                if n.op == "placeholder":
                    continue
                if n.op == "output":
                    outputs = pytree.tree_map_only(torch.fx.Node, lambda x: env[x], n.args[0])
                    continue
                if n.op == "get_attr":  # a nested region's body: already inlined away
                    continue
                env[n] = graph.node_copy(n, lambda x: env[x])
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        for user in list(node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(outputs[user.args[1]])
                graph.erase_node(user)
        graph.erase_node(node)
        if sub.op == "get_attr" and not sub.users:
            graph.erase_node(sub)


# -- the casts -------------------------------------------------------------------------------

class _Casts(TorchDispatchMode):
    """Below the Autocast key: the dtype each of an op's tensor arguments (by leaf index) is
    cast to by a `_to_copy` of that very tensor."""

    def __init__(self, leaves: dict[int, int]) -> None:
        super().__init__()
        self.leaves = leaves  # id(tensor) -> leaf index
        self.casts: dict[int, torch.dtype] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _TO_COPY and args and id(args[0]) in self.leaves and "dtype" in kwargs:
            self.casts.setdefault(self.leaves[id(args[0])], kwargs["dtype"])
        return func(*args, **kwargs)


class _Policy:
    """torch's CUDA autocast policy, asked per op on fake CUDA tensors (cached per op, argument
    dtypes and autocast dtype)."""

    def __init__(self) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self.cache: dict[Any, tuple[dict[int, torch.dtype], Any]] = {}

    def casts_of(self, target: Any, args: tuple, kwargs: dict, dtype: torch.dtype
            ) -> tuple[dict[int, torch.dtype], Any]:
        """({leaf index: dtype} of the casts autocast in `dtype` applies to the op's tensor
        arguments, the dtype(s) of its result) for `target(*args, **kwargs)` on meta values."""
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = (target, dtype, spec, tuple((t.dtype, t.dim()) if isinstance(t, torch.Tensor)
                                          else repr(t) for t in leaves))
        if key not in self.cache:
            self.cache[key] = self._run(target, leaves, spec, dtype)
        return self.cache[key]

    def _run(self, target: Any, leaves: list, spec: Any, dtype: torch.dtype
             ) -> tuple[dict[int, torch.dtype], Any]:
        seen: dict[bool, dict[int, torch.dtype]] = {}
        out: Any = None
        try:
            with self.fake, torch.no_grad():
                fakes = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
                         if isinstance(t, torch.Tensor) else t for t in leaves]
                fargs, fkwargs = pytree.tree_unflatten(fakes, spec)
                ids = {id(t): k for k, t in enumerate(fakes) if isinstance(t, torch.Tensor)}
                for on in (False, True):
                    before = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
                              torch.is_autocast_cache_enabled())
                    torch.set_autocast_dtype("cuda", dtype)
                    torch.set_autocast_enabled("cuda", on)
                    torch.set_autocast_cache_enabled(False)
                    try:
                        mode = _Casts(ids)
                        with mode:
                            result = target(*fargs, **fkwargs)
                    finally:
                        torch.set_autocast_enabled("cuda", before[0])
                        torch.set_autocast_dtype("cuda", before[1])
                        torch.set_autocast_cache_enabled(before[2])
                    seen[on] = mode.casts
                    if on:
                        out = pytree.tree_map_only(torch.Tensor, lambda t: t.dtype, result)
        except UnsupportedError:
            raise
        except Exception as exc:  # noqa: BLE001 - torch's own refusal, reported as a gap
            name = getattr(target, "__name__", str(target))
            raise UnsupportedError(f"unsupported: asking torch's CUDA autocast policy for {name} "
                                   f"failed ({type(exc).__name__}: {str(exc)[:120]})") from None
        # a cast the op's own decomposition makes without autocast is not autocast's
        casts = {k: d for k, d in seen[True].items() if seen[False].get(k) != d}
        return casts, out


def tagged(graph: torch.fx.Graph) -> bool:
    return any(AUTOCAST in n.meta for n in graph.nodes)


def regions(graph: torch.fx.Graph) -> list[str]:
    """The autocast dtypes the graph's ops run under ("float16", "bfloat16"), in order."""
    out: list[str] = []
    for n in graph.nodes:
        name = str(n.meta.get(AUTOCAST, "")).replace("torch.", "")
        if name and name not in out:
            out.append(name)
    return out


def _meta(node: Any) -> Any:
    return node.meta["val"] if isinstance(node, torch.fx.Node) else node


def _rerun(node: torch.fx.Node) -> Any:
    """The node's value on meta tensors of its arguments' (new) dtypes."""
    if node.target is operator.getitem:
        seq, idx = node.args
        return _meta(seq)[idx]
    args, kwargs = pytree.tree_map_only(torch.fx.Node, _meta, (node.args, node.kwargs))
    assert callable(node.target), node.target  # a call_function node
    with torch.no_grad():
        out = node.target(*args, **kwargs)
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach(), out)


def _dtypes(value: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: t.dtype, value)


def resolve(graph: torch.fx.Graph) -> None:
    """Make the casts of CUDA autocast explicit in a graph whose ops are tagged (`AUTOCAST`):
    `_to_copy` nodes where torch's policy casts an op's argument, every value's meta recomputed
    after them (an op outside the autocast region reading a half value computes in half, as in
    torch). An fp32-policy op that computes in float32 from its half argument without a cast
    (softmax's half_to_float) reads it upcast by an explicit `_to_copy` (the same values).
    Export's dtype assertions (of the uncast trace) are dropped."""
    if not tagged(graph):
        return
    policy = _Policy()
    copies: dict[tuple[torch.fx.Node, torch.dtype], torch.fx.Node] = {}

    def cast(arg: torch.fx.Node, dtype: torch.dtype, before: torch.fx.Node) -> torch.fx.Node:
        key = (arg, dtype)
        if key not in copies:  # one cast of a value per dtype, as autocast caches a weight's
            with graph.inserting_before(before):
                c = graph.call_function(_TO_COPY, (arg,), {"dtype": dtype})
            c.meta["val"] = _meta(arg).to(dtype)
            c.meta[AUTOCAST] = before.meta.get(AUTOCAST)  # autocast's, where its op runs
            copies[key] = c
        return copies[key]

    def recast(node: torch.fx.Node, casts: dict[int, torch.dtype]) -> None:
        leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
        for k, d in casts.items():
            if isinstance(leaves[k], torch.fx.Node) and _meta(leaves[k]).dtype != d:
                leaves[k] = cast(leaves[k], d, node)
        node.args, node.kwargs = pytree.tree_unflatten(leaves, spec)

    changed: set[torch.fx.Node] = set()  # values whose dtypes the casts changed
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if getattr(node.target, "__name__", "").startswith("_assert_tensor_metadata"):
            graph.erase_node(node)
            continue
        old = _dtypes(node.meta.get("val"))
        dtype = node.meta.get(AUTOCAST)
        if dtype is not None and node.target is not operator.getitem:
            args, kwargs = pytree.tree_map_only(torch.fx.Node, _meta, (node.args, node.kwargs))
            casts, want = policy.casts_of(node.target, args, kwargs, dtype)
            recast(node, casts)
            val = _rerun(node)
            if _dtypes(val) != want:
                # computed in float32 from half arguments without a cast of them: the same
                # values as upcast arguments (exact), which the graph then says
                leaves = pytree.tree_leaves((node.args, node.kwargs))
                up = {k: torch.float32 for k, a in enumerate(leaves)
                      if isinstance(a, torch.fx.Node) and isinstance(_meta(a), torch.Tensor)
                      and _meta(a).dtype in _HALF}
                recast(node, up)
                val = _rerun(node)
            if _dtypes(val) != want:
                raise UnsupportedError(
                    f"unsupported: {node.target} under CUDA autocast returns {want}; the graph "
                    f"with its casts gives {_dtypes(val)}")
            node.meta["val"] = val
        elif any(a in changed for a in node.all_input_nodes):
            node.meta["val"] = _rerun(node)
        if _dtypes(node.meta.get("val")) != old:
            changed.add(node)
    graph.lint()
