"""Depthwise convolution, direct: the pooling template's window walk with a weight per tap.

A depthwise convolution (one input channel per group: groups == input channels, any channel
multiplier, stride, padding, dilation, 1-3 spatial dims) does a handful of multiply-adds per
output: as an implicit GEMM its K is the kernel size alone (9 for 3x3), far too short to feed
a tile, and it is memory-bound. Read as a pooling whose window sum is weighted
(`ir/conv.depthwise_window`), every slot of `PoolTemplate` applies unchanged: outputs per
thread sharing window rows in registers, interior threads without bounds checks, cache hints.
The plane's weights are loaded once per work item into registers (hence the fully unrolled
window loops), the bias and whatever follows are the fused epilogue.
"""

from __future__ import annotations

from ...ir.conv import depthwise_window
from ...ir.plan import KernelPlan
from .pool import PoolTemplate


class DepthwiseConvTemplate(PoolTemplate):
    name = "dwconv"
    version = "1"
    takes_half = False  # not checked in half precision (its weight loads)
    kernel = "ca_dwconv"

    def applies(self, plan: KernelPlan) -> bool:
        return plan.kind == "conv" and depthwise_window(plan) is not None
