"""A vendor library for the main product, a generated kernel for everything around it.

Where cuBLAS or cuDNN (called through torch) computes a matrix product or a convolution faster
than the generated GEMM, the tuner may keep the library call and generate only the epilogue: the
bias, activations, scaling, clamps, residual adds and masks that follow it, fused into one
pass over the product. The candidate is then two steps on one stream: the library call (a
`Launch` with `library` set, run by the launcher through torch) writes the product into a
buffer that the epilogue kernel reads through its workspace argument.

The template applies only where there is an epilogue to generate: a bare product would be the
library alone, with nothing of cuda-agent's in it. Reports say which part is library and which
is generated (`facts`: ``library``).

Slots: threads per block and elements per thread (config), vector width of the product's reads
and the output's writes (memory). A 2-D or 3-D convolution's library call has one more: the
memory layout cuDNN works in (memory: the operands as given, or converted to channels-last and
the product converted back; cuDNN's fast fp32 kernels differ by layout and shape, and
torch.compile converts to channels-last itself); in a program, a third value keeps the product
channels-last for the next stages (`channels_last_kept`, `ir/layout.py`). A matrix product's
call has no slots.

cuDNN's algorithm choice (its heuristics, or `cudnn.benchmark` timing every algorithm) is not a
slot: torch keeps one algorithm per convolution shape and layout for the life of the process,
found by whichever mode met that shape first, so in a worker that measures many candidates the
flag would change nothing after the first and a candidate's time would depend on the ones
measured before it. It is the worker's instead: candidates of a problem with a convolution
run in a worker set up in the benchmark mode (`runner/devices.CudaDevice`), so every library call
gets the algorithm cuDNN finds fastest for its shape and layout (docs/journal.md:
space/templates/library.py), and `model_new.py` runs its library
convolution in that mode too (`runner/launcher.run_library`). Eager and torch.compile are still
timed on the heuristics, as a user's process runs them, with eager in the benchmark mode
reported beside them.

A product of fp16 or bf16 tensors (a half-precision model's linear and convolution layers) runs
in that type, as torch.compile runs it: cuBLAS/cuDNN read the half operands, accumulate in
float32 and write the product rounded to that type, and the epilogue kernel reads the product
and its own operands as half, computes in float32 and stores the output rounded
(`library_dtype`; both operands of the call must share the type, as torch's own call needs).
"""

from __future__ import annotations

import math
from typing import Any

from ...ir.conv import conv_padding
from ...ir.gemm import GemmInfo
from ...ir.graph import HALF_DTYPES, element_bytes
from ...ir.planning import library_dtype
from ...ir.plan import KernelPlan
from ...precision import product_precision
from .. import codegen as cg
from ..slots import Launch, Rendered, Slot, Target
from .base import Code, Template
from .gemm import epilogue_value

LIBRARY_NAMES = {"matmul": "cuBLAS (torch.matmul)", "conv": "cuDNN (torch convolution)",
                 "conv_transpose": "cuDNN (torch transposed convolution)"}


#: `memory.layout`'s value for a product kept channels-last: the epilogue walks it in its
#: memory order and writes the stage's buffer so (`ir/layout.py`)
KEPT = "channels_last_kept"
#: the same, its readers computed in the buffer's memory order (`ir/layout.memory_order_graph`:
#: BatchNorm's statistics a column reduction over contiguous channels, a min over the
#: channels a row reduction), offered where every reader plans so
KEPT_MO = "channels_last_kept_ordered"
KEPTS = (KEPT, KEPT_MO)


def _info(plan: KernelPlan) -> GemmInfo:
    return plan.info


def _bare(plan: KernelPlan) -> bool:
    """A convolution or matrix product stage of a program with no epilogue
    (`partition.defer_epilogues` left it to the stages that read the buffer): the library call
    alone writes the stage's buffer (`planning.library_dtype` offers the route there)."""
    return plan.kind in ("conv", "gemm") and plan.feeds_stage and plan.output == plan.anchor


def conv_output_padding(gather: Any) -> tuple[int, ...]:
    """The output_padding of a transposed convolution: what its output has beyond
    (i - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1."""
    return tuple(o - ((i - 1) * s - 2 * p + d * (k - 1) + 1) for i, k, o, s, p, d in zip(
        gather.in_shape, gather.kernel, gather.out_shape, gather.stride, gather.padding,
        gather.dilation))


def library_call(plan: KernelPlan) -> dict[str, Any] | None:
    """The launcher's description of the library step (`launcher.run_library`), or None."""
    g = _info(plan)
    pos = {k: i for i, k in enumerate(plan.operands)}
    if plan.kind == "conv" and g.b_gather.transposed:
        cv = g.b_gather
        return {"op": "conv_transpose", "x": pos[g.b], "w": pos[g.a], "dims": len(cv.kernel),
                "stride": list(cv.stride), "padding": list(cv.padding),
                "output_padding": list(conv_output_padding(cv)),
                "dilation": list(cv.dilation), "groups": cv.groups}
    if plan.kind == "conv":
        cv = g.b_gather
        padding = conv_padding(cv)
        if padding is None or len(cv.kernel) not in (1, 2, 3):
            return None
        return {"op": "conv", "x": pos[g.b], "w": pos[g.a], "dims": len(cv.kernel),
                "stride": list(cv.stride), "padding": list(padding),
                "dilation": list(cv.dilation), "groups": cv.groups}
    if g.b_gather is not None:
        return None
    return {"op": "matmul", "a": pos[g.a], "b": pos[g.b], "batch": g.batch, "M": g.M,
            "N": g.N, "K": g.K, "a_strides": list(g.a_strides), "b_strides": list(g.b_strides)}


class LibraryTemplate(Template):
    name = "lib"
    version = "1"
    # recorded before the library call had slots: torch's layout, cuDNN's heuristics
    legacy = {"memory.layout": "as_given"}
    # a half-precision product runs in its type and the epilogue reads and stores half
    takes_half = True

    def applies(self, plan: KernelPlan) -> bool:
        return library_dtype(plan) is not None

    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]:
        out = [] if _bare(plan) else [
            Slot("config.block", (128, 256, 512), "threads per block of the epilogue kernel"),
            Slot("config.items", (1, 2, 4), "vectors of the product per thread"),
            Slot("memory.vec", (1, 4), "elements per load of the product and store of the "
                                       "output"),
        ]
        # cuDNN's call, direct or transposed (`library_call`); channels-last: 4-D and 5-D only
        if plan.kind == "conv" and len(_info(plan).b_gather.kernel) in (2, 3):
            # channels_last_kept: only where the stage's output is a program buffer every
            # reader can read channels-last (`ir/layout.py`); its readers then follow it
            kept = ((KEPT,) if plan.nhwc_out else ()) + ((KEPT_MO,) if plan.nhwc_mo_out
                                                         else ())
            out.append(Slot("memory.layout", ("as_given", "channels_last", *kept),
                            "the layout cuDNN computes in (channels_last: operands converted, "
                            "the product converted back; channels_last_kept: the product and "
                            "the stage's output stay channels-last for the next stages, which "
                            "read it in torch's order; channels_last_kept_ordered: ... which "
                            "iterate in its memory order)"))
        return out

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        if _bare(plan):
            return None
        if cfg["memory.vec"] == 4 and plan.numel % 4:
            return "vector access needs a multiple of 4 elements"
        if -(-plan.numel // (cfg["config.block"] * cfg["config.items"] *
                             cfg["memory.vec"])) > 2**31 - 1:
            return "grid exceeds the limit"
        return None

    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        names = {s.name for s in self.slots(plan, target)}
        own = {} if _bare(plan) else {"config.block": 256, "config.items": 1, "memory.vec": 1}
        return {**own, **{k: v for k, v in self.legacy.items() if k in names}}

    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered:
        g = _info(plan)
        call = library_call(plan)
        assert call is not None  # applies() guarantees it
        # only what differs from torch's defaults is said, so a configuration recorded before
        # these slots renders (and is cached) exactly as it was
        if cfg.get("memory.layout", "as_given") != "as_given":
            call["layout"] = cfg["memory.layout"]
        op = "matmul" if call["op"] == "matmul" else "conv"
        # half operands: the product in their own type (TF32 and the opted-in half products
        # below concern fp32 operands only)
        dtype = library_dtype(plan) or "float32"  # applies(): never None here
        half = dtype in HALF_DTYPES
        if not half and product_precision(target.precision, op) == "tf32":
            # the contract lets this product use TF32 (`--precision auto` under torch's default
            # for a convolution, or tf32): cuDNN and cuBLAS may round the operands to TF32, in
            # the worker and in model_new.py alike (`launcher.run_library`); without it the call
            # runs strict fp32 whatever the process's flags, which it restores after
            call["tf32"] = True
        if target.precision in ("fp16", "bf16") and not half:
            # the user opted into half-precision products: the library computes in that type,
            # as torch does under autocast (operands cast, the product cast back to fp32)
            call["dtype"] = target.precision
        total = plan.numel
        elem = element_bytes(dtype)
        head = (("family", "lib"), ("library", LIBRARY_NAMES[call["op"]]),
                ("library_layout", call.get("layout", "as_given")))
        tail = (("library_flops", plan.anchor_flops or 2 * g.batch * g.M * g.N * g.K),
                ("product_bytes", elem * total),
                ("library_in_bytes", elem * sum(math.prod(plan.graph[plan.operands[i]].shape)
                                                for i in (call.get("x"), call.get("w"))
                                                if i is not None)))
        if _bare(plan):
            # the product is the stage's buffer (`program.compose` points its readers at it)
            return Rendered(cg.prelude(plan) + f"// the product comes from "
                            f"{LIBRARY_NAMES[call['op']]}: {call}; no epilogue\n",
                            (Launch("torch_library", (1, 1, 1), (1, 1, 1), library=call),),
                            facts=head + tail + (("bare", True),))
        block, items, vec = cfg["config.block"], cfg["config.items"], cfg["memory.vec"]
        per_block = block * items * vec
        idx_t = "int" if total < 2**31 - per_block else "long long"
        c = Code()
        c(cg.prelude(plan))
        c(f"// the product comes from {LIBRARY_NAMES[call['op']]}: {call}")
        c.open(f'extern "C" __global__ void __launch_bounds__({block}) '
               f"ca_lib_epilogue({cg.kernel_params(plan)})")
        ptype = cg.MEMORY_TYPES.get(dtype, "float")
        c(f"typedef {idx_t} idx_t;",
          f"const {ptype}* __restrict__ prod = reinterpret_cast<const {ptype}*>(ws);",
          f"const idx_t base = (idx_t)blockIdx.x * {per_block} + (idx_t)threadIdx.x * {vec};")
        c("#pragma unroll")
        c.open(f"for (int it = 0; it < {items}; ++it)")
        c(f"const idx_t f0 = base + (idx_t)it * {block * vec};")
        c.open(f"if (f0 < {total})")
        if vec == 4:
            c("const float4 p4 = ca_ld4<1>(prod + f0);" if half else
              "const float4 p4 = __ldg(reinterpret_cast<const float4*>(prod + f0));")
            src = ["p4.x", "p4.y", "p4.z", "p4.w"]
        else:
            src = ["ca_ld<1>(prod + f0)" if half else "__ldg(prod + f0)"]
        vals = []
        kept = call.get("layout") in KEPTS
        for q, v in enumerate(src):
            # the epilogue's operands (a bias, a residual) and its row/column are indexed in
            # torch's layout: a kept product's element f0 + q is at its NCHW place
            fl = _nchw_index(plan, f"(f0 + {q})") if kept else f"(f0 + {q})"
            vals.append(epilogue_value(plan, c, v, fl, f"(({fl} / {g.N}) % {g.M})",
                                       f"({fl} % {g.N})", f"_{q}"))
        c(cg.vec_store("(out + f0)", vals, 0))
        c.close().close().close()
        grid = -(-total // per_block)
        launches = (Launch("torch_library", (1, 1, 1), (1, 1, 1), library=call),
                    Launch("ca_lib_epilogue", (grid, 1, 1), (block, 1, 1)))
        facts: tuple[tuple[str, Any], ...]  # Rendered.facts: a library_dtype may follow
        facts = head + (("threads", block), ("vec", vec), ("items", items)) + tail
        if half:
            facts += (("library_dtype", dtype),)
        return Rendered(c.text(), launches, facts=facts)


def _nchw_index(plan: KernelPlan, f: str) -> str:
    """The (N, C, *spatial) flat index of the element at flat index `f` of the same tensor
    stored channels-last (N, *spatial, C)."""
    C, S = plan.full_shape[1], math.prod(plan.full_shape[2:])
    return (f"(({f} / {C * S}) * {C * S} + ({f} % {C}) * {S} + (({f} / {C}) % {S}))")


def epilogue_bytes(plan: KernelPlan) -> int:
    """Bytes the epilogue kernel moves: the product read once, the output written once, plus
    the epilogue's own operands (a bias, a residual), each in its storage type."""
    g = plan.graph
    extra = sum(element_bytes(g.inputs[cg.read_index(plan, n)].dtype) * math.prod(g[n].shape)
                for n in cg.epilogue_reads(plan))
    prod = element_bytes(library_dtype(plan) or "float32")
    out = element_bytes(plan.out_dtype) if plan.out_dtype in HALF_DTYPES else 4
    return (prod + out) * plan.numel + extra
