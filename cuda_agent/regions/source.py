"""A kernel region as a problem file of its own, in the field's common format, so that every
part of cuda-agent (capture, planning, the worker's verification, the baselines, emit) tunes it
as it tunes any problem.

The region's parameters and buffers are the region Model's own (`w0`, `w1` ...: the whole
model's tensors are bound to them by name when the region runs, `emit.py`); its other operands
are forward() arguments. A bool operand is passed as a float32 0/1 tensor and made a mask again
(`!= 0`) inside, as `split.py` planned it.
"""

from __future__ import annotations

import math

from . import pycode
from .split import Region


def state_names(region: Region) -> dict[str, str]:
    """Region Model attribute name of each parameter or buffer operand, by FX name."""
    return {op.name: f"w{k}" for k, op in enumerate(
        o for o in region.reads if o.role in ("parameter", "buffer"))}


def args_of(region: Region) -> list[str]:
    """The FX names of the region's forward() arguments, in order."""
    return [o.name for o in region.reads if o.role not in ("parameter", "buffer")]


def _make(op_shape: tuple[int, ...], dtype: str, what: str) -> str:
    shape = repr(tuple(op_shape))
    if dtype == "bool":
        return f"(torch.rand{shape} > 0.5).float()"
    if dtype in ("int64", "int32"):
        return f"torch.randint(0, 2, {shape})"
    # a half-precision operand is drawn in its own type, as the model holds it
    cast = f".to(torch.{dtype})" if dtype in ("float16", "bfloat16") else ""
    if what == "buffer":
        return f"(torch.rand{shape} + 0.5){cast}"
    return f"torch.randn{shape}{cast}"


def problem_source(region: Region, model_name: str) -> str:
    names = state_names(region)
    args = args_of(region)
    ops = {o.name: o for o in region.reads}
    lines = [f'"""Region {region.index} of {model_name} (cuda-agent\'s whole-model split): '
             f'{", ".join(region.ops)}."""',
             "import torch", "import torch.nn as nn", "", "",
             "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()"]
    for fx, attr in names.items():
        o = ops[fx]
        made = _make(o.shape, o.dtype, o.role)
        if o.role == "parameter":
            lines.append(f"        self.{attr} = nn.Parameter({made})")
        else:
            lines.append(f"        self.register_buffer({attr!r}, {made})")
    if not names:
        lines.append("        pass")
    params = [pycode.var(a) + ("_f" if ops[a].dtype == "bool" else "") for a in args]
    lines += ["", f"    def forward(self, {', '.join(params)}):",
              f"        _device = {params[0] if params else 'self.w0'}.device"]
    for a in args:
        if ops[a].dtype == "bool":
            v = pycode.var(a)
            lines.append(f"        {v} = torch.ops.aten.ne.Scalar({v}_f, 0)")
    for fx, attr in names.items():
        lines.append(f"        {pycode.var(fx)} = self.{attr}")
    lines += ["        " + line for line in region.code.splitlines()]
    lines += [f"        return {pycode.var(region.writes[0])}", "", "",
              "def get_inputs():",
              "    return [" + ", ".join(_make(ops[a].shape, ops[a].dtype, "input")
                                      for a in args) + "]", "", "",
              "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines)


def bytes_of(region: Region) -> int:
    """Bytes the region reads and writes at least (operands once, output once)."""
    size = {"float32": 4, "int64": 8, "bool": 1, "int32": 4, "float16": 2, "bfloat16": 2}
    n = sum(math.prod(o.shape) * size.get(o.dtype, 4) for o in region.reads)
    return n + math.prod(region.out_shape) * size.get(region.out_dtype, 4)
