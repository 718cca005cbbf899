"""The region split: a whole model's graph as regions the templates cover and regions left to
torch, each with the reason.

The traced graph (`trace.py`) is a list of aten ops in order. Ops are taken in units (an op
with the `getitem`s that unpack its tuple result), and the split walks them in that order: from
each unit, the longest run of units ahead that lowers to the op IR and plans (`ir/capture.lower`,
`ir/planning.make_plan`: one kernel or a multi-kernel program) with one value used after it becomes
a kernel region; a unit no such run starts from is left to torch, with the reason capture or
the planner gave for it alone. A run of consecutive units is a contiguous range of a
topological order, so every region can run as one step: all it reads is computed before it.

What a kernel region cannot take goes to torch, never refuses the model: ops outside the IR
(`lstm`, `unfold`, `cat`, embeddings ...: cuDNN's, cuBLAS's or torch's own kernels run them),
float64 tensors, kernels in half precision that no template takes (a bf16 or fp16 model's
matrix products and convolutions: cuBLAS and cuDNN run them in that type), in-place changes of a buffer other than batch norm's running statistics (a counter), and views
alone (no computation). A kernel region with training-mode batch norm returns the running
statistics' new values besides its output (`Region.updates`), and the module copies them in. A bool operand (a mask) of a kernel region is read as a float32 0/1 tensor, cast
by torch before the kernel; int64 operands are class indices as capture reads them. A forward()
under `torch.autocast("cuda")` is split as the GPU runs it: the casts torch's autocast policy
applies are ops of the graph (`ir/autocast.py`), left to torch, and the products after them read
the cast values in the half type; each region says it ran under autocast (`Region.autocast`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                          TensorArgument)

from ..errors import CudaAgentError, UnsupportedError
from ..ir import autocast
from ..ir.graph import RunningStats
from ..ir.planning import half_gap, make_plan
from ..ir.pretrace import TracedProgram
from . import pycode
from ..ir.capture import _HANDLERS, _reads_mode, lower
from .trace import _VIEW_OPS, op_name, trace

KERNEL, TORCH = "kernel", "torch"
#: the longest run of units a kernel region is tried from (each try lowers and plans the run:
#: the walk costs O(runs x MAX_UNITS) tries on a model no run of which plans)
MAX_UNITS = 64
# ops with nothing to compute: a region of these alone is left to torch (views, copies)
_NO_WORK = _VIEW_OPS | {"clone", "contiguous", "lift_fresh_copy", "_assert_tensor_metadata",
                        "_to_copy", "to", "dropout"}
# ops whose traced form depends on the module's train/eval mode (their module passes it)
_MODE_OPS = frozenset({"batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                       "instance_norm", "dropout", "feature_dropout", "alpha_dropout",
                       "feature_alpha_dropout", "rrelu", "rrelu_with_noise", "lstm", "gru",
                       "rnn_tanh", "rnn_relu"})
# ops that make a tensor from nothing: torch fills it (a kernel has nothing to read)
_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "zeros_like", "ones_like",
              "empty_like", "full_like", "scalar_tensor", "new_zeros", "new_ones", "new_empty",
              "new_full", "randn", "rand", "randint", "randn_like", "rand_like"}


@dataclass
class Operand:
    """A value a region reads: a forward() argument, a parameter or buffer of the model, or a
    value an earlier region computed."""

    name: str  # the FX value's name
    role: str  # "input" | "parameter" | "buffer" | "value"
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without "torch."
    target: str | None = None  # state_dict name (parameter, buffer)
    arg_index: int | None = None  # forward() position (input)


@dataclass
class Region:
    """A contiguous run of the model's ops: a kernel region (tuned) or a torch region."""

    index: int
    kind: str  # KERNEL | TORCH
    ops: list[str]  # aten op names, in order
    nodes: list[str]  # FX node names
    reads: list[Operand]
    writes: list[str]  # FX values used after the region (a kernel region: exactly one)
    code: str  # Python lines computing `writes` from `reads` (`pycode.call`)
    reason: str = ""  # a torch region: why; a kernel region: what capture made of it
    family: str = ""  # a kernel region: its plan's family (row, gemm, program: gemm+row ...)
    out_shape: tuple[int, ...] = ()
    out_dtype: str = "float32"
    updates: list[str] = field(default_factory=list)
    """a kernel region: the buffers (FX names) whose new values it returns besides its output
    (training-mode batch norm's running statistics), which the module copies in"""
    flops: int = 0  # a kernel region: its plan's arithmetic and least bytes moved (the
    bytes: int = 0  # share of the budget it gets, `tune.py`)
    autocast: str = ""
    """the CUDA autocast dtype(s) forward() ran its ops under ("float16", "bfloat16"; "" for
    none): the region computes the casts torch's autocast policy applies (`ir/autocast.py`)"""
    dtype: str = ""
    """the floating dtypes it reads and writes ("float16", "bfloat16 -> float32"): a kernel
    region reads and stores them so, computing in float32"""

    def label(self) -> str:
        ops = ", ".join(_runs(self.ops))
        return f"region {self.index} ({self.kind}): {ops}"


@dataclass
class Split:
    """A model's graph as regions, and how forward()'s values bind to it."""

    placeholders: list[Operand]
    regions: list[Region]
    output: str
    input_shapes: list[tuple[int, ...]]
    input_dtypes: list[str]
    modes: tuple[bool, ...] | None
    """every submodule's train/eval flag when traced, where the graph depends on them (batch
    norm, dropout, recurrent layers, a forward() that reads `self.training`); else None"""
    inplace: list[str] = field(default_factory=list)  # in-place ops taken out of place
    opaque: str = ""
    """why the graph is not split at all (a higher-order op such as autocast's): the module
    runs the original forward(), one torch region"""

    def kernels(self) -> list[Region]:
        return [r for r in self.regions if r.kind == KERNEL]

    def lines(self) -> list[str]:
        """One line per region: what it computes and what becomes of it."""
        return [f"{r.label()}: {r.reason}" for r in self.regions]


def _runs(ops: list[str]) -> list[str]:
    """Op names with repeats folded (`linear x3`)."""
    out: list[str] = []
    for op in ops:
        if out and (out[-1] == op or out[-1].startswith(op + " x")):
            n = int(out[-1].split(" x")[1]) + 1 if " x" in out[-1] else 2
            out[-1] = f"{op} x{n}"
        else:
            out.append(op)
    return out


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _val(node: torch.fx.Node) -> Any:
    return node.meta.get("val")


def _units(graph: torch.fx.Graph) -> list[list[torch.fx.Node]]:
    """The graph's ops in order, each with the getitems that unpack its result."""
    units: list[list[torch.fx.Node]] = []
    owner: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node) \
                and n.args[0] in owner:
            owner[n.args[0]].append(n)
            owner[n] = owner[n.args[0]]
            continue
        unit = [n]
        owner[n] = unit
        units.append(unit)
    return units


def _short(exc: BaseException) -> str:
    """A capture or planner refusal in a few words."""
    text = str(exc).strip()
    msg = text.splitlines()[0] if text else type(exc).__name__
    for prefix in ("unsupported op ",):
        if msg.startswith(prefix):
            return "no template covers aten." + msg[len(prefix):].split(" ")[0]
    msg = msg.removeprefix("unsupported: ").removeprefix("unsupported ")
    return msg.split("; supported:")[0]


class _Splitter:
    def __init__(self, program: Any, modes: tuple[bool, ...]) -> None:
        self.program = program
        self.modes = modes
        self.graph: torch.fx.Graph = program.graph
        self.ph: dict[str, Operand] = {}
        user = 0
        for spec in program.graph_signature.input_specs:
            node = next(n for n in self.graph.nodes if n.name == spec.arg.name)
            v = _val(node)
            role = {InputKind.USER_INPUT: "input", InputKind.PARAMETER: "parameter",
                    InputKind.BUFFER: "buffer"}.get(spec.kind)
            if role is None:
                raise UnsupportedError(f"unsupported: a {spec.kind.name.lower()} input "
                                       f"({node.name}) in the traced graph")
            self.ph[node.name] = Operand(node.name, role, tuple(v.shape), _dtype(v),
                                         spec.target if role != "input" else None,
                                         user if role == "input" else None)
            user += role == "input"
        out = next(n for n in self.graph.nodes if n.op == "output").args[0]
        self.output_nodes = [a for a in (out if isinstance(out, (list, tuple)) else [out])]

    # -- one candidate region ----------------------------------------------------------------
    def reads_writes(self, nodes: list[torch.fx.Node]) -> tuple[list[torch.fx.Node],
                                                                list[torch.fx.Node]]:
        inside = set(nodes)
        reads: list[torch.fx.Node] = []
        for n in nodes:
            for a in n.all_input_nodes:
                if a not in inside and a not in reads:
                    reads.append(a)
        writes = [n for n in nodes if any(u not in inside for u in n.users)]
        return reads, writes

    def operand(self, node: torch.fx.Node) -> Operand:
        if node.name in self.ph:
            return self.ph[node.name]
        v = _val(node)
        return Operand(node.name, "value", tuple(v.shape), _dtype(v))

    def try_kernel(self, nodes: list[torch.fx.Node]) -> tuple[Any, str]:
        """(the region's plan, "") where `nodes` make a kernel region, else (None, why not)."""
        if all(op_name(n) in _NO_WORK for n in nodes):
            return None, "views and copies only: nothing to compute"
        if op_name(nodes[0]) in _FACTORIES:
            return None, "makes a new tensor: torch fills it"
        reads, writes = self.reads_writes(nodes)
        if not writes:
            return None, ("changes a tensor in place (" + ", ".join(
                self.operand(a).target or a.name for a in reads) + "): torch does")
        if len(writes) != 1:
            return None, (f"{len(writes)} values used after it; a kernel writes one")
        for n in reads + nodes:
            v = _val(n)
            if isinstance(v, torch.Tensor) and v.dtype == torch.float64:
                return None, ("the templates take float32, float16 and bfloat16 tensors, "
                              "this region's are float64")
        g = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        specs = []
        for a in reads:
            v = _val(a)
            if not isinstance(v, torch.Tensor):
                return None, f"reads {a.name}, not a tensor"
            op = self.operand(a)
            kind = {"parameter": InputKind.PARAMETER, "buffer": InputKind.BUFFER}.get(
                op.role, InputKind.USER_INPUT)
            if v.dtype == torch.bool:  # a mask: read as float32 0/1, made a mask again
                ph = g.placeholder(a.name + "_f")
                ph.meta["val"] = torch.empty(v.shape, dtype=torch.float32, device="meta")
                mask = g.call_function(torch.ops.aten.ne.Scalar, (ph, 0))
                mask.meta["val"] = torch.empty(v.shape, dtype=torch.bool, device="meta")
                env[a] = mask
                kind = InputKind.USER_INPUT
            else:
                ph = g.placeholder(a.name)
                ph.meta["val"] = v
                env[a] = ph
            specs.append(InputSpec(kind, TensorArgument(ph.name),
                                   op.target if kind != InputKind.USER_INPUT else None,
                                   persistent=True if kind == InputKind.BUFFER else None))
        for n in nodes:
            env[n] = g.node_copy(n, lambda x: env[x])
        g.output((env[writes[0]],))
        try:
            ir = lower(TracedProgram(g, ExportGraphSignature(specs, [])), self.modes)
            if any(not isinstance(u, RunningStats) for u in ir.updates):
                return None, "changes a buffer in place (a counter): torch does"
            plan = make_plan(ir)
            gap = half_gap(plan)
            if gap:
                return None, gap
        except (CudaAgentError, NotImplementedError) as exc:
            return None, _short(exc)
        except Exception as exc:  # noqa: BLE001 - capture's gap, not the user's error
            return None, f"capture failed: {_short(exc)}"
        return plan, ""

    # -- the walk ----------------------------------------------------------------------------
    def split(self) -> list[Region]:
        units = _units(self.graph)
        regions: list[Region] = []
        pending: list[tuple[list[torch.fx.Node], str]] = []  # torch units not yet closed

        def close_torch() -> None:
            if pending:
                nodes = [n for unit, _ in pending for n in unit]
                reasons: list[str] = []
                for unit, why in pending:
                    line = f"{op_name(unit[0])}: {why}"
                    if line not in reasons:
                        reasons.append(line)
                regions.append(self.region(TORCH, nodes, "; ".join(reasons)))
                pending.clear()

        i = 0
        while i < len(units):
            head = units[i][0]
            name = op_name(head)
            if name not in _HANDLERS:  # a factory says so whether capture knows it or not
                pending.append((units[i], "makes a new tensor: torch fills it"
                                if name in _FACTORIES else f"no template covers aten.{name}"))
                i += 1
                continue
            end = i
            while end < len(units) and end - i < MAX_UNITS and \
                    op_name(units[end][0]) in _HANDLERS:
                end += 1
            found = None
            why = ""
            for j in range(end, i, -1):
                nodes = [n for u in units[i:j] for n in u]
                plan, reason = self.try_kernel(nodes)
                if plan is not None:
                    found = (j, nodes, plan)
                    break
                if j == i + 1:
                    why = reason
            if found is None:
                pending.append((units[i], why))
                i += 1
                continue
            close_torch()
            j, nodes, plan = found
            regions.append(self.region(KERNEL, nodes, "", plan))
            i = j
        close_torch()
        for k, r in enumerate(regions):
            r.index = k + 1
        return regions

    def region(self, kind: str, nodes: list[torch.fx.Node], reason: str,
               plan: Any = None) -> Region:
        reads, writes = self.reads_writes(nodes)
        code = "\n".join(pycode.call(n) for n in nodes)
        out = _val(writes[0]) if writes else None
        r = Region(0, kind, [op_name(n) for n in nodes if n.target is not operator.getitem],
                   [n.name for n in nodes], [self.operand(a) for a in reads],
                   [w.name for w in writes], code, reason)
        r.dtype = _dtypes(r.reads, out)
        under = sorted({str(n.meta[autocast.AUTOCAST]).replace("torch.", "")
                        for n in nodes if autocast.AUTOCAST in n.meta})
        r.autocast = "/".join(under)
        if plan is not None:
            r.family = plan.family
            by_target = {o.target: o.name for o in r.reads if o.role == "buffer"}
            r.updates = [by_target[t] for u in plan.graph.updates
                         for t in (u.running_mean, u.running_var)]
            r.flops, r.bytes = int(plan.flops()), int(plan.bytes_moved())
            assert out is not None, "a planned region writes a value"
            r.out_shape = tuple(out.shape)
            r.out_dtype = _dtype(out)
            stages = len(plan.program.stages) if hasattr(plan, "program") else 1
            masks = [o.name for o in r.reads if o.dtype == "bool"]
            half = f", {r.dtype}" if any(d in r.dtype for d in ("float16", "bfloat16")) \
                else ""
            r.reason = (f"generated: {stages} kernel{'s' if stages > 1 else ''} "
                        f"({plan.family}{half})" + (f", bool operand {', '.join(masks)} read as "
                                              "float32 0/1 (cast by torch)" if masks else ""))
        if r.autocast and kind == TORCH and set(r.ops) == {"_to_copy"}:
            r.reason = (f"_to_copy: torch.autocast {r.autocast}'s casts of the next region's "
                        "operands: torch casts")
        elif r.autocast:  # the casts of torch's CUDA autocast policy are in its graph
            r.reason += f" (under autocast {r.autocast}: its casts explicit)"
        return r


def _dtypes(reads: list[Operand], out: Any) -> str:
    """The floating dtypes a region reads, and what it writes where that differs."""
    read = sorted({o.dtype for o in reads if o.dtype.startswith(("float", "bfloat"))})
    wrote = _dtype(out) if isinstance(out, torch.Tensor) else ""
    text = "/".join(read) or wrote
    return text if not wrote or [wrote] == read or not read else f"{text} -> {wrote}"


def _opaque(program: Any) -> str:
    """Why the traced graph cannot be split into aten calls ("" where it can): a higher-order
    op other than CUDA autocast's (whose bodies `ir/autocast.py` inlines, with its casts)."""
    for n in program.graph.nodes:
        if n.op == "get_attr" or (n.op == "call_function" and n.target is not operator.getitem
                                  and not isinstance(n.target, torch._ops.OpOverload)):
            name = getattr(n.target, "__name__", str(n.target))
            return (f"forward() uses {name}, which the split does not take apart: the original "
                    "forward() runs")
    return ""


def split_model(model: torch.nn.Module, inputs: list[torch.Tensor]) -> Split:
    """Trace `model` (on meta tensors) and split its graph into regions."""
    ordered_inputs = [tuple(t.shape) for t in inputs], [_dtype(t) for t in inputs]
    modes = tuple(m.training for m in model.modules())
    try:
        program = trace(model, inputs)
    except UnsupportedError as exc:
        if str(exc) != autocast.CPU_REFUSED:
            raise
        why = ("forward() uses torch.autocast('cpu'), which casts CPU tensors only: the "
               "original forward() runs")
        return Split([], [Region(1, TORCH, ["forward"], [], [], [], "", why)], "",
                     *ordered_inputs, modes, opaque=why)
    inplace = [n.meta["out_of_place"] for n in program.graph.nodes
               if n.op == "call_function" and n.meta.get("out_of_place")]
    why = _opaque(program)
    if why:
        return Split([], [Region(1, TORCH, ["forward"], [], [], [], "", why)], "",
                     *ordered_inputs, modes, opaque=why)
    sp = _Splitter(program, modes)
    # the module's modes matter where an op's result depends on them or forward() reads them
    depends = _reads_mode(model) or any(
        n.op == "call_function" and op_name(n) in _MODE_OPS for n in program.graph.nodes)
    regions = sp.split()
    outs = sp.output_nodes
    if len(outs) != 1:
        raise UnsupportedError(f"unsupported: forward() returns {len(outs)} values; one output "
                               "tensor is supported")
    ordered = sorted(sp.ph.values(), key=lambda o: (o.role != "input", o.arg_index or 0))
    return Split(ordered, regions, outs[0].name, [tuple(t.shape) for t in inputs],
                 [_dtype(t) for t in inputs], modes if depends else None, inplace)
