"""Convolutions, direct and transposed, as implicit GEMMs planned for the GEMM template.

For each image n, out[n] (OC x P, P = output pixels) = W (OC x K) @ X_n (K x P) with
K = C x KH x KW and X_n the im2col matrix of the image, never materialized: the template reads
its element (k, p) straight from the input, zero where the window hangs over the padding. The
output (N, OC, P) is then exactly torch's NCHW layout, so the bias and whatever follows are the
GEMM's fused epilogue, and every slot of the GEMM template applies (B is gathered, so its loads
are scalar).

A transposed convolution scatters x[i] to out[i * stride - padding + k * dilation]; read from
the output's side it is the same GEMM with X_n[(c, k), o] = x[c, (o + padding - k * dilation) /
stride] where that division is exact and in range, zero elsewhere. Its weight is stored
(C, OC/G, *kernel), so A[oc, (c, k)] = w[c, oc, k] is not one stride along K: consecutive k
within one channel's kernel are adjacent, the next channel is OC/G kernels further
(`GemmInfo.a_k_split`). Gathered this way, the GEMM multiplies the inserted zeros too: about
prod(stride) times the useful arithmetic (the FLOP count reports the useful arithmetic).

The templates may instead run it as strided sub-convolutions (`transposed_phases`): an output
pixel o = q * stride + r (per spatial dim, phase r in [0, stride)) receives exactly the taps k
with (r + padding - k * dilation) divisible by the stride, from input pixel q + (r + padding -
k * dilation) / stride. Each phase is a direct convolution with its own subset of the taps; the
phases' tap subsets partition the kernel, so together they do only the useful multiply-adds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from .gemm import GemmInfo
from .ops import cast_operand
from .graph import Graph, Node
from .plan import KernelPlan, make_anchored_plan
from .pool import PoolInfo


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
    transposed: bool = False  # input coordinate (o + padding - k * dilation) / stride

    @property
    def image_elems(self) -> int:
        """Elements of one image (all groups' channels)."""
        return self.channels * self.groups * math.prod(self.in_shape)

    @property
    def group_elems(self) -> int:
        """Elements of one group's channels of an image."""
        return self.channels * math.prod(self.in_shape)

    @property
    def weight_elems(self) -> int:
        """Elements of the weight: every group's A matrix."""
        return self.groups * self.a_group_stride

    @property
    def phased(self) -> bool:
        """Whether the strided sub-convolutions (`transposed_phases`) differ from the gathered
        GEMM: a transposed convolution with a stride above one."""
        return self.transposed and any(s > 1 for s in self.stride)


def conv_padding(gather: ConvGather) -> tuple[int, ...] | None:
    """torch's symmetric padding that reproduces the gather's output size, or None where the
    capture resolved an asymmetric 'same' padding torch's convolution cannot take as ints."""
    for i, k, o, s, p, d in zip(gather.in_shape, gather.kernel, gather.out_shape, gather.stride,
                                gather.padding, gather.dilation):
        if (i + 2 * p - d * (k - 1) - 1) // s + 1 != o:
            return None
    return tuple(gather.padding)


@dataclass(frozen=True)
class TransposedPhase:
    """The output pixels o = q * stride + residue of a transposed convolution (per spatial
    dim) and the kernel taps that reach them: a direct convolution of its own."""

    residue: tuple[int, ...]
    taps: tuple[tuple[int, ...], ...]  # per dim: the kernel offsets k that reach the residue
    shifts: tuple[tuple[int, ...], ...]  # per dim and tap: input pixel = q + shift
    outputs: tuple[int, ...]  # per dim: the q with q * stride + residue inside the output

    @property
    def tap_count(self) -> int:
        """Kernel positions of the phase (the product of its per-dim taps; 0: no tap at all,
        the phase's outputs are the epilogue of zero)."""
        return math.prod(len(t) for t in self.taps)

    @property
    def pixels(self) -> int:
        return math.prod(self.outputs)

    def kernel_positions(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(kernel offsets, input shifts) per dim of each tap combination, row-major (the last
        dim fastest, as the weight stores the kernel)."""
        return [(tuple(k for k, _ in combo), tuple(s for _, s in combo))
                for combo in itertools.product(*(tuple(zip(t, s)) for t, s in
                                                 zip(self.taps, self.shifts)))]


def transposed_phases(g: ConvGather) -> tuple[TransposedPhase, ...]:
    """A transposed convolution as prod(stride) direct convolutions, one per output residue
    modulo the stride (row-major over the residues, the last dim fastest). Every kernel tap
    belongs to exactly one residue per dim, so the phases' taps partition the kernel."""
    per_dim = []
    for s, p, dl, ks, o in zip(g.stride, g.padding, g.dilation, g.kernel, g.out_shape):
        dims = []
        for r in range(s):
            taps = tuple(k for k in range(ks) if (r + p - k * dl) % s == 0)
            dims.append((r, taps, tuple((r + p - k * dl) // s for k in taps),
                         max(0, -(-(o - r) // s))))
        per_dim.append(dims)
    return tuple(TransposedPhase(tuple(d[0] for d in combo), tuple(d[1] for d in combo),
                                 tuple(d[2] for d in combo), tuple(d[3] for d in combo))
                 for combo in itertools.product(*per_dim))


def phase_grid(g: ConvGather) -> tuple[int, ...]:
    """The q extent per dim every phase is laid out in: ceil(out / stride), the largest
    phase's (a smaller phase leaves its last q unwritten)."""
    return tuple(-(-o // s) for o, s in zip(g.out_shape, g.stride))


def _operands(graph: Graph, conv: Node) -> tuple[Node, Node]:
    x, w = graph[conv.args[0]], graph[conv.args[1]]
    for operand, what in ((x, "input"), (w, "weight")):
        if operand.op != "input":
            cast = cast_operand(operand.op, "convolution")  # torch.autocast's (autocast.py)
            if cast:
                raise UnsupportedError(cast)
            raise UnsupportedError(f"unsupported: a computed convolution {what} (op "
                                   f"{operand.op}); only tensors passed in or parameters")
    return x, w


def _transposed_weight(out_per_group: int, ksize: int
                       ) -> tuple[tuple[int, int, int], tuple[int, int] | None]:
    """(batch, m, k) strides of A[oc, (c, k)] = w[c, oc, k] in w (C, OCg, *kernel), and the
    K split (kernel size, channel stride) where one stride along K does not describe it."""
    if ksize == 1:  # K is the channel alone
        return (0, 1, out_per_group), None
    if out_per_group == 1:  # channel after channel, kernel after kernel: contiguous along K
        return (0, ksize, 1), None
    return (0, ksize, 1), (ksize, out_per_group * ksize)


def make_conv_plan(graph: Graph) -> KernelPlan:
    conv = next(n for n in graph.live() if n.op == "conv")
    x, w = _operands(graph, conv)
    transposed = bool(conv.attr("transposed", False))
    N, C = x.shape[:2]
    G = int(conv.attr("groups", 1))
    OC = conv.shape[1]
    Cg, OCg = C // G, OC // G
    # direct weights are (OC, C/G, *kernel), transposed ones (C, OC/G, *kernel)
    expected = (C, OCg) if transposed else (OC, Cg)
    if tuple(w.shape[:2]) != expected or C % G or OC % G:
        raise UnsupportedError(f"conv weight {w.shape} does not match {C} input channels in "
                               f"{G} groups")
    ksize = math.prod(w.shape[2:])
    P = math.prod(conv.shape[2:])
    K = Cg * ksize
    gather = ConvGather(Cg, tuple(x.shape[2:]), tuple(w.shape[2:]), tuple(conv.shape[2:]),
                        tuple(conv.attr("stride")), tuple(conv.attr("padding")),
                        tuple(conv.attr("dilation")), G, OCg * K, transposed)
    if transposed:
        a_strides, a_k_split = _transposed_weight(OCg, ksize)
        # the useful products: each input element times each weight of its group's outputs
        flops = 2 * N * C * math.prod(x.shape[2:]) * OCg * ksize
    else:
        a_strides, a_k_split = (0, K, 1), None
        flops = 2 * N * OC * P * K
    # one GEMM per (image, group): out[n, g*OCg:(g+1)*OCg] = W_g (OCg x K) @ X_{n,g} (K x P),
    # consecutive in memory, so the GEMM batch is N*G with rows OCg; B is gathered in place
    info = GemmInfo(w.attr("index"), x.attr("index"), N * G, OCg, P, K, a_strides,
                    (gather.image_elems, 0, 0), OCg, None, gather, a_k_split)
    return make_anchored_plan(graph, conv.id, "conv", [w.attr("index"), x.attr("index")],
                              info=info, anchor_flops=flops)


def depthwise_window(plan: KernelPlan) -> PoolInfo | None:
    """A depthwise convolution (one input channel per group, not transposed) as the weighted
    window sum the pooling template slides (`space/templates/dwconv.py`): output plane
    (n, oc) reads input plane (n, oc / multiplier) with the weights w[oc, 0, *kernel]. None
    for any other plan."""
    if plan.kind != "conv":
        return None
    return plan.cached("depthwise", lambda: _depthwise_window(plan.info))


def window_info(plan: KernelPlan) -> PoolInfo:
    """The window a pool-like plan slides: a pooling's own, or a depthwise convolution's
    weighted window sum (`depthwise_window`)."""
    if isinstance(plan.info, PoolInfo):
        return plan.info
    info = depthwise_window(plan)
    if info is None:
        raise ValueError(f"a {plan.kind} plan slides no window")
    return info


def _depthwise_window(info: GemmInfo) -> PoolInfo | None:
    g: ConvGather | None = info.b_gather
    if g is None or g.transposed or g.channels != 1:
        return None
    return PoolInfo(info.b, "wsum", info.batch * info.M, g.in_shape, g.out_shape, g.kernel,
                    g.stride, g.padding, g.dilation, False, False, None,
                    weight=info.a, out_channels=g.groups * info.M, per_plane=info.M)
