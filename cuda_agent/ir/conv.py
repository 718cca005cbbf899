"""Convolutions as implicit GEMMs, planned for the GEMM template.

For each image n, out[n] (OC x P, P = output pixels) = W (OC x K) @ X_n (K x P) with
K = C x KH x KW and X_n the im2col matrix of the image, never materialized: the template reads
its element (k, p) straight from the input, zero where the window hangs over the padding. The
output (N, OC, P) is then exactly torch's NCHW layout, so the bias and whatever follows are the
GEMM's fused epilogue, and every slot of the GEMM template applies (B is gathered, so its loads
are scalar).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from .gemm import GemmInfo
from .graph import Graph
from .plan import KernelPlan, make_anchored_plan


@dataclass(frozen=True)
class ConvGather:
    """How element (k, p) of image n's im2col matrix is read from input x (N, C, *S)."""

    channels: int
    in_shape: tuple[int, ...]  # spatial sizes of x
    kernel: tuple[int, ...]
    out_shape: tuple[int, ...]  # spatial sizes of the output
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int = 1
    a_group_stride: int = 0  # elements between two groups' weight matrices

    @property
    def image_elems(self) -> int:
        """Elements of one image (all groups' channels)."""
        return self.channels * self.groups * math.prod(self.in_shape)

    @property
    def group_elems(self) -> int:
        """Elements of one group's channels of an image."""
        return self.channels * math.prod(self.in_shape)


def make_conv_plan(graph: Graph) -> KernelPlan:
    conv = next(n for n in graph.live() if n.op == "conv")
    x, w = graph[conv.args[0]], graph[conv.args[1]]
    for operand, what in ((x, "input"), (w, "weight")):
        if operand.op != "input":
            raise UnsupportedError(f"unsupported: a computed convolution {what} (op "
                                   f"{operand.op}); only tensors passed in or parameters")
    N, C = x.shape[:2]
    OC = w.shape[0]
    G = int(conv.attr("groups", 1))
    Cg, OCg = C // G, OC // G
    if w.shape[1] != Cg or C % G or OC % G:
        raise UnsupportedError(f"conv weight {w.shape} does not match {C} input channels in "
                               f"{G} groups")
    P = math.prod(conv.shape[2:])
    K = Cg * math.prod(w.shape[2:])
    gather = ConvGather(Cg, tuple(x.shape[2:]), tuple(w.shape[2:]), tuple(conv.shape[2:]),
                        tuple(conv.attr("stride")), tuple(conv.attr("padding")),
                        tuple(conv.attr("dilation")), G, OCg * K)
    # one GEMM per (image, group): out[n, g*OCg:(g+1)*OCg] = W_g (OCg x K) @ X_{n,g} (K x P),
    # consecutive in memory, so the GEMM batch is N*G with rows OCg; B is gathered in place
    info = GemmInfo(w.attr("index"), x.attr("index"), N * G, OCg, P, K, (0, K, 1),
                    (gather.image_elems, 0, 0), OCg, None, gather)
    return make_anchored_plan(graph, conv.id, "conv", [w.attr("index"), x.attr("index")],
                              info=info, anchor_flops=2 * N * OC * P * K)
