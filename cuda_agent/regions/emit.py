"""The whole model's `model_new.py`: `ModelNew(Model)` runs the model's graph region by region,
each kernel region as a `torch.library` custom op, each torch region as the aten calls it was
traced as.

* State: `ModelNew` subclasses the problem's own `Model` (its source is included verbatim), so
  its parameters and buffers keep their names and its state_dict loads into the original and
  back. A region reads the module's own tensors (`self.get_parameter(...)`).
* Custom ops: one per kernel region, `<namespace>::r<k>`, with a fake (meta) implementation
  (the output's shape and dtype), so the module traces under `torch.compile(fullgraph=True)`
  and `torch.export`. On CUDA tensors it runs the region's generated kernels (the region's own
  `model_new.py`, embedded, imported on first use); on other devices the region's torch
  reference, so the module runs anywhere.
* State: a region with training-mode batch norm returns the running statistics' new values
  besides its output (the op changes none of its inputs), and forward() copies them into the
  module's buffers, as torch's batch norm updates them.
* Gradients: each op's backward is a second custom op that recomputes the region's reference
  with torch's own ops and differentiates it (`torch.autograd.grad`); a region torch cannot
  differentiate raises one line naming it.
* Other input shapes or dtypes than the tuned ones, or another train/eval mode where the graph
  depends on it (batch norm, dropout, recurrent layers): the original forward() runs (no configuration was tuned for them), never an error.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re

from ..version import __version__
from . import pycode
from .source import args_of, state_names
from .split import KERNEL, Region, Split


def _strip_future(src: str) -> str:
    return re.sub(r"^from __future__ import [^\n]*\n", "", src, flags=re.M)


RUNTIME = '''
# ---- the regions' runtime ---------------------------------------------------------------------
_LOADED = {}


def _region_module(k):
    """Region k's generated module (its model_new.py), imported on first use."""
    if k not in _LOADED:
        namespace = {"__name__": f"{_NS}_r{k}"}
        exec(compile(REGION_SOURCES[k], f"<cuda-agent region {k}>", "exec"), namespace)
        with torch.device("meta"):
            _LOADED[k] = namespace["ModelNew"]()
    return _LOADED[k]


def _run_kernel(k, args, state):
    """Region k's generated kernels on CUDA tensors: the region module with the model's own
    parameters and buffers bound to its names."""
    return torch.func.functional_call(_region_module(k), state, tuple(args))


def _fresh(out, inputs):
    """A custom op's output may not alias its inputs."""
    for t in inputs:
        if t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
            return out.clone()
    return out


def _ref_grad(k, what, ref, grad, inputs, skip=()):
    """Gradients of region k's torch reference at `inputs`, one per input (zeros for those
    that are not floating point); one line naming the region where torch cannot
    differentiate it. torch.func.vjp: a custom op's implementation runs below autograd."""
    floats = [i for i, t in enumerate(inputs) if t.is_floating_point() and i not in skip]

    def of_floats(*xs):
        args = list(inputs)
        for i, x in zip(floats, xs):
            args[i] = x
        return ref(grad.device, *args)

    try:
        _, vjp = torch.func.vjp(of_floats, *(inputs[i] for i in floats))
        got = dict(zip(floats, vjp(grad)))
    except (RuntimeError, NotImplementedError) as exc:
        raise RuntimeError(f"region {k} ({what}) has no gradient: "
                           f"{str(exc).strip().splitlines()[0]}") from None
    out, seen = [], {grad.untyped_storage().data_ptr()}
    seen |= {t.untyped_storage().data_ptr() for t in inputs}
    for i, t in enumerate(inputs):
        g = got[i] if i in got else torch.zeros_like(t)
        if g.untyped_storage().data_ptr() in seen:  # a custom op's outputs alias nothing
            g = g.clone()
        seen.add(g.untyped_storage().data_ptr())
        out.append(g)
    return out


def _tuned_for(module, args):
    """Whether forward()'s arguments and the module's modes are those the regions were
    tuned for."""
    return (len(args) == len(INPUT_SHAPES)
            and all(isinstance(a, torch.Tensor) and tuple(a.shape) == s
                    and a.dtype == getattr(torch, d)
                    for a, s, d in zip(args, INPUT_SHAPES, INPUT_DTYPES))
            and (MODES is None or tuple(m.training for m in module.modules()) == MODES))
'''

OP = '''
{ref}

@torch.library.custom_op(_NS + "::r{k}", mutates_args=())
def _r{k}({typed}) -> {returns}:
    """Region {k}: {what}."""
    if {first}.is_cuda and {k} in REGION_SOURCES:
{kernel}
    return {reference}


@_r{k}.register_fake
def _r{k}_fake({names}):
    return {fake}


@torch.library.custom_op(_NS + "::r{k}_grad", mutates_args=())
def _r{k}_grad(grad: torch.Tensor, {typed}) -> list[torch.Tensor]:
    return _ref_grad({k}, {what!r}, {grad_ref}, grad, [{names}], {skip!r})


@_r{k}_grad.register_fake
def _r{k}_grad_fake(grad, {names}):
    return [torch.empty_like(t) for t in ({names},)]


def _r{k}_setup(ctx, inputs, output):
    # the running statistics as they were: forward() copies the new ones into them after
    ctx.save_for_backward(*(t.clone() if i in {skip!r} else t for i, t in enumerate(inputs)))
    if isinstance(output, tuple):
        ctx.mark_non_differentiable(*output[1:])


def _r{k}_backward(ctx, grad, *state_grads):
    saved = ctx.saved_tensors
    grads = torch.ops.{ns}.r{k}_grad(grad, *saved)
    return tuple(g if t.is_floating_point() and i not in {skip!r} else None
                 for i, (g, t) in enumerate(zip(grads, saved)))


torch.library.register_autograd(_NS + "::r{k}", _r{k}_backward, setup_context=_r{k}_setup)
'''

MODEL = '''

class ModelNew(Model):
    """`Model` computed region by region: generated kernels where they were tuned, torch
    elsewhere (see the header)."""

    def forward(self, *args):
        if not _tuned_for(self, args):
            return super().forward(*args)  # shapes, dtypes or modes not tuned for
        return _program(self, *args)


def _program(self, *args):
{body}
'''


def namespace(problem: str, body: str) -> str:
    """The custom ops' namespace: the problem's name and a hash of what the ops run, so that
    two emitted modules never define one op twice."""
    safe = re.sub(r"\W", "_", problem)
    return f"cuda_agent_{safe}_{hashlib.sha256(body.encode()).hexdigest()[:10]}"


def _op_source(r: Region, ns: str) -> str:
    names = [pycode.var(o.name) for o in r.reads]
    attrs = state_names(r)
    args = set(args_of(r))
    kernel_args = ", ".join(pycode.var(o.name) + (".to(torch.float32)" if o.dtype == "bool"
                                                  else "") for o in r.reads if o.name in args)
    updated = [pycode.var(u) for u in r.updates]
    # the buffers a region updates: copies, so that the op changes none of its inputs
    state = ", ".join(f"{attrs[o.name]!r}: {pycode.var(o.name)}"
                      + (".clone()" if o.name in r.updates else "")
                      for o in r.reads if o.name in attrs)
    out = pycode.var(r.writes[0])
    ref = [f"def _r{r.index}_ref(_device, {', '.join(names)}):"]
    ref += [f"    {u} = {u}.clone()" for u in updated]
    ref += [f"    {line}" for line in r.code.splitlines()]
    ref.append(f"    return {', '.join([out] + updated)}")
    first = names[0]
    fake_out = f"{first}.new_empty({tuple(r.out_shape)!r}, dtype=torch.{r.out_dtype})"
    if updated:
        ref.append(f"\n\ndef _r{r.index}_out(_device, *args):\n"
                   f"    return _r{r.index}_ref(_device, *args)[0]")
        keys = [attrs[u] for u in r.updates]
        kernel = (f"        state = {{{state}}}\n"
                  f"        out = _run_kernel({r.index}, [{kernel_args}], state)\n"
                  f"        return out, {', '.join(f'state[{k!r}]' for k in keys)}")
        reference = (f"tuple(_fresh(t, ({', '.join(names)},)) for t in "
                     f"_r{r.index}_ref({first}.device, {', '.join(names)}))")
        returns = "tuple[" + ", ".join(["torch.Tensor"] * (1 + len(updated))) + "]"
        fake = ", ".join([fake_out] + [f"torch.empty_like({u})" for u in updated])
        grad_ref = f"_r{r.index}_out"
    else:
        kernel = f"        return _run_kernel({r.index}, [{kernel_args}], {{{state}}})"
        reference = f"_fresh(_r{r.index}_ref({first}.device, {', '.join(names)}), " \
                    f"({', '.join(names)},))"
        returns, fake, grad_ref = "torch.Tensor", fake_out, f"_r{r.index}_ref"
    skip = tuple(names.index(u) for u in updated)
    return OP.format(k=r.index, ref="\n".join(ref), typed=", ".join(
        f"{n}: torch.Tensor" for n in names), returns=returns, first=first,
        names=", ".join(names), kernel=kernel, reference=reference, fake=fake,
        what=", ".join(r.ops), grad_ref=grad_ref, skip=skip, ns=ns)


def program_body(split: Split) -> list[str]:
    lines = []
    for p in split.placeholders:
        if p.role == "input":
            lines.append(f"{pycode.var(p.name)} = args[{p.arg_index}]")
        elif p.role == "parameter":
            lines.append(f"{pycode.var(p.name)} = self.get_parameter({p.target!r})")
        else:
            lines.append(f"{pycode.var(p.name)} = self.get_buffer({p.target!r})")
    lines.append("_device = args[0].device")
    return lines


def model_new_source(split: Split, problem_name: str, problem_source: str,
                     region_sources: dict[int, str], header: str) -> str:
    """The emitted module: header, the problem verbatim, the regions' sources, their ops, and
    `ModelNew`. `region_sources`: each kernel region's generated model_new.py (a region left
    out runs its torch reference everywhere)."""
    body = program_body(split)
    if split.opaque:  # one torch region: the original forward()
        body, split = ["return Model.forward(self, *args)"], Split(
            [], [], "", split.input_shapes, split.input_dtypes, split.modes)
    for r in split.regions:
        body.append(f"# {r.label()}")
        if r.kind == KERNEL:
            call = ", ".join(pycode.var(o.name) for o in r.reads)
            made = [pycode.var(r.writes[0])] + [f"_new_{pycode.var(u)}" for u in r.updates]
            body.append(f"{', '.join(made)} = torch.ops.{{ns}}.r{r.index}({call})")
            # the running statistics' new values, copied into the module's buffers
            body += [f"{pycode.var(u)}.copy_(_new_{pycode.var(u)}.detach())"
                     for u in r.updates]
        else:
            body += r.code.splitlines()
    if split.output:
        body.append(f"return {pycode.var(split.output)}")
    key = "\n".join(body) + "".join(region_sources.get(r.index, "") for r in split.kernels())
    ns = namespace(problem_name, key)
    ops = "".join(_op_source(r, ns) for r in split.kernels())
    program = "\n".join("    " + line.replace("{ns}", ns) for line in body)
    sources = "{\n" + "".join(f"    {k}: {src!r},\n"
                               for k, src in sorted(region_sources.items())) + "}"
    return (header + "\nimport torch\n\n"
            "# ---- the reference problem, verbatim " + "-" * 50 + "\n"
            + _strip_future(problem_source).rstrip() + "\n\n"
            "# ---- the regions " + "-" * 69 + "\n"
            f"_NS = {ns!r}\n"
            f"INPUT_SHAPES = {[tuple(s) for s in split.input_shapes]!r}\n"
            f"INPUT_DTYPES = {split.input_dtypes!r}\n"
            "# every submodule's train/eval flag when traced, where the graph depends on them\n"
            f"MODES = {None if split.modes is None else tuple(split.modes)!r}\n"
            "# each kernel region's generated module (its own model_new.py)\n"
            f"REGION_SOURCES = {sources}\n"
            + RUNTIME + ops + MODEL.format(body=program))


def header(problem: str, split: Split, device: str, lines: list[str], extra: str = "") -> str:
    shapes = ", ".join(str(tuple(s)) for s in split.input_shapes)
    body = "\n".join("    " + line for line in lines)
    return (f'"""Generated by cuda-agent {__version__} on {_dt.date.today().isoformat()}: '
            f"{problem} as a whole model, {len(split.regions)} regions, "
            f"{len(split.kernels())} of them generated kernels.\n\n{body}\n\n"
            f"Tuned for input shapes {shapes}; other shapes or dtypes, or another train/eval "
            "mode where the graph\ndepends on it, run the original forward(). On tensors other than CUDA ones each kernel region runs its "
            f"torch reference (the kernels need a GPU).\nChosen on: {device}.{extra}\n"
            '"""\n')
