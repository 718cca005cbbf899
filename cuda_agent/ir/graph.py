"""The op IR: a small, normalized dataflow graph with static shapes and dtypes.

Capture (`capture.py`) lowers a traced PyTorch program into this graph; composite ops such as
softmax or layer norm are expanded into elementwise ops and single-kind reductions, so the
templates only need to know a handful of node kinds:

* ``input``   a tensor argument of forward() or a parameter/buffer of the module;
* ``const``   a scalar constant;
* elementwise ops (names in `ops.UNARY` / `ops.BINARY`), broadcasting like torch;
* ``reduce``  one of sum/prod/max/min/argmax/argmin over a set of dims, keepdim or not;
* ``view``    a reshape that keeps the element order (squeeze/unsqueeze/flatten of a result);
* ``iota``    the int64 index along one dim (attr ``dim``), size 1 elsewhere: with ``eq``
              against class indices it selects x[i, target[i]] as a one-hot reduction.

Besides its output, forward() may update module state in place: BatchNorm in training mode
updates its running statistics from the batch's (`RunningStats`) and counts the batches it saw
(`Increment`). A graph lists these `updates`; the statistics they read are values the kernels
write to memory (`Graph.kept_values`), and the emitted module applies the update after them.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

REDUCE_KINDS = ("sum", "prod", "max", "min", "argmax", "argmin")
FLOAT_DTYPES = ("float32",)
INDEX_DTYPE = "int64"
HALF_DTYPES = ("float16", "bfloat16")
"""storage types of half-precision tensors (a bf16 or fp16 model's parameters and activations):
as torch.compile's Inductor does, a kernel loads them into float registers, computes and
accumulates in float32, and rounds to nearest even where it stores its output in that type"""
STORAGE_FLOATS = FLOAT_DTYPES + HALF_DTYPES
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, INDEX_DTYPE: 8, "int32": 4,
                 "bool": 1, "float64": 8}


def element_bytes(dtype: str) -> int:
    """Bytes of one element of a tensor stored in `dtype` (an IR dtype name)."""
    return ELEMENT_BYTES.get(dtype, 4)


def compute_dtype(dtype: str) -> str:
    """The dtype a kernel computes a stored value in: float32 for half-precision storage."""
    return "float32" if dtype in HALF_DTYPES else dtype


@dataclass(frozen=True)
class Node:
    """One value of the graph. `args` are ids of earlier nodes; `attrs` hold op parameters."""

    id: int
    op: str
    args: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GraphInput:
    """A tensor the kernel reads: a forward() argument or a module parameter/buffer."""

    name: str
    role: str  # "input" | "parameter" | "buffer"
    shape: tuple[int, ...]
    dtype: str
    arg_index: int | None = None  # position in forward() for role == "input"
    target: str | None = None  # state_dict name for parameters and buffers
    # an int64 input read as class indices: valid values are [0, index_bound), plus
    # `index_ignore` (rows a loss skips); verification draws its cases from that domain
    index_bound: int | None = None
    index_ignore: int | None = None
    # a float input an op only accepts inside [lo, hi] (binary cross-entropy's probabilities):
    # verification draws its cases inside, or the reference itself would fail
    value_range: tuple[float, float] | None = None

    def position(self) -> int:
        """`arg_index`, of a forward() argument."""
        assert self.arg_index is not None, f"{self.name} is not a forward() argument"
        return self.arg_index

    def state_name(self) -> str:
        """`target`, of a parameter or buffer."""
        assert self.target is not None, f"{self.name} is not a parameter or buffer"
        return self.target

    def as_json(self) -> dict[str, Any]:
        # domain fields only where set, so that other graphs keep their fingerprints
        return {k: v for k, v in self.__dict__.items()
                if v is not None or k not in ("index_bound", "index_ignore", "value_range")}


@dataclass(frozen=True)
class RunningStats:
    """Running statistics forward() updates in place (BatchNorm in training mode), from the
    per-channel batch mean and biased variance that the normalisation itself uses:
    running_mean <- (1 - momentum) * running_mean + momentum * mean and
    running_var <- (1 - momentum) * running_var + momentum * var * count / (count - 1)."""

    mean: int  # node of the batch mean (one value per channel, shaped to broadcast)
    var: int  # node of the biased batch variance, shaped like `mean`
    running_mean: str  # state_dict names of the buffers updated
    running_var: str
    momentum: float
    count: int  # elements per channel the statistics are taken over


@dataclass(frozen=True)
class Increment:
    """A buffer forward() adds a constant to in place (BatchNorm's num_batches_tracked)."""

    target: str
    by: float


@dataclass
class Graph:
    """Nodes in topological order; `inputs[k]` is the node with op ``input`` and attr index=k."""

    nodes: list[Node] = field(default_factory=list)
    inputs: list[GraphInput] = field(default_factory=list)
    output: int = -1
    updates: list[RunningStats | Increment] = field(default_factory=list)
    """state forward() updates in place (`RunningStats`, `Increment`), in program order"""
    modes: tuple[bool, ...] | None = None
    """where the computation depends on train/eval mode (batch norm, dropout): the `training`
    flag of each of the module's submodules (`nn.Module.modules()` order) when captured"""
    sides: list[int] = field(default_factory=list)
    """values a program stage's kernel writes besides its output (`partition`: batch
    statistics a state update reads), each to a buffer of its own, in kernel-parameter order"""
    out_dtype: str = "float32"
    """the dtype the output is stored in where it differs from its node's (computed in
    float32): "float16" or "bfloat16" for a half-precision model's result, rounded to
    nearest even at the store"""

    # -- construction -------------------------------------------------------------------------
    def add(self, op: str, args: tuple[int, ...], shape: tuple[int, ...], dtype: str,
            **attrs: Any) -> int:
        node = Node(len(self.nodes), op, tuple(args), tuple(int(s) for s in shape), dtype,
                    tuple(sorted(attrs.items())))
        self.nodes.append(node)
        return node.id

    def add_input(self, gin: GraphInput) -> int:
        """The input's node; a half-precision input's is float32 (its loads convert), its
        storage type stays the `GraphInput`'s."""
        self.inputs.append(gin)
        return self.add("input", (), gin.shape, compute_dtype(gin.dtype),
                        index=len(self.inputs) - 1)

    def store_dtype(self) -> str:
        """The dtype the output is stored in: `out_dtype` for a float32 output node."""
        node = self.nodes[self.output]
        return self.out_dtype if node.dtype == "float32" else node.dtype

    def has_half(self) -> bool:
        """Whether a tensor the kernels read or write is stored in half precision."""
        return self.out_dtype in HALF_DTYPES or any(g.dtype in HALF_DTYPES for g in self.inputs)

    def const(self, value: float) -> int:
        return self.add("const", (), (), "float32", value=float(value))

    # -- queries ------------------------------------------------------------------------------
    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def users(self) -> dict[int, list[int]]:
        users: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.args:
                users[a].append(n.id)
        return users

    def live_users(self) -> dict[int, list[int]]:
        """Each live node's users among the live nodes (`users` counts dead ones too)."""
        live = self.live()
        users: dict[int, list[int]] = {n.id: [] for n in live}
        for n in live:
            for a in n.args:
                users[a].append(n.id)
        return users

    def live(self) -> list[Node]:
        """Nodes the output depends on, in topological order."""
        keep = {self.output}
        for n in reversed(self.nodes):
            if n.id in keep:
                keep.update(n.args)
        return [n for n in self.nodes if n.id in keep]

    def reduces(self) -> list[Node]:
        return [n for n in self.live() if n.op == "reduce"]

    def kept_values(self) -> list[int]:
        """Nodes whose values the kernels must leave in memory besides the output: the batch
        statistics a `RunningStats` update reads."""
        return sorted({k for u in self.updates if isinstance(u, RunningStats)
                       for k in (u.mean, u.var)})

    def to_json(self) -> dict[str, Any]:
        out = {
            "inputs": [gin.as_json() for gin in self.inputs],
            "nodes": [
                {"id": n.id, "op": n.op, "args": list(n.args), "shape": list(n.shape),
                 "dtype": n.dtype, "attrs": {k: _jsonable(v) for k, v in n.attrs}}
                for n in self.nodes
            ],
            "output": self.output,
        }
        if self.updates:  # only where present, so that other graphs keep their fingerprints
            out["updates"] = [{"kind": type(u).__name__, **u.__dict__} for u in self.updates]
        if self.sides:
            out["sides"] = list(self.sides)
        if self.out_dtype != "float32":
            out["out_dtype"] = self.out_dtype
        return out

    def fingerprint(self) -> str:
        """Stable hash of the computation (shapes included): part of every content key."""
        blob = json.dumps(self.to_json(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> str:
        lines = []
        for n in self.live():
            extra = ", ".join(f"{k}={v}" for k, v in n.attrs)
            lines.append(f"%{n.id} = {n.op}({', '.join('%' + str(a) for a in n.args)}"
                         f"{', ' if extra and n.args else ''}{extra}) : {n.dtype}{list(n.shape)}")
        return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """torch broadcasting of shapes (right-aligned); raises ValueError when incompatible."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for k, size in enumerate(s):
            j = rank - len(s) + k
            if size != 1:
                if out[j] not in (1, size):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                out[j] = size
    return tuple(out)


def view_runs(src: tuple[int, ...], dst: tuple[int, ...]
               ) -> list[tuple[list[int], list[int]]]:
    """The dims of two shapes of one size in runs of equal size, (src dims, dst dims) each:
    (N, G, C/G, HW) and (N, C, H, W) give ([0], [0]), ([1, 2], [1]), ([3], [2, 3]). A
    trailing dim of size 1 joins the last run."""
    runs: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) and j < len(dst):
        si, dj, ps, pd = [i], [j], src[i], dst[j]
        i, j = i + 1, j + 1
        while ps != pd:
            if ps < pd:
                si.append(i)
                ps *= src[i]
                i += 1
            else:
                dj.append(j)
                pd *= dst[j]
                j += 1
        runs.append((si, dj))
    if runs:
        runs[-1][0].extend(range(i, len(src)))
        runs[-1][1].extend(range(j, len(dst)))
    return runs
