"""The template library. Adding a template: write it, add it to `TEMPLATES`."""

from .attention import AttentionTemplate
from .attention_tc import AttentionTensorCoreTemplate
from .base import Template
from .chan import ChanTemplate
from .dwconv import DepthwiseConvTemplate
from .col import ColTemplate
from .gemm import GemmTemplate
from .gemm_tc import GemmTensorCoreTemplate
from .library import LibraryTemplate
from .map import MapTemplate
from .pool import PoolTemplate
from .row import RowTemplate
from .scan import ScanTemplate
from .split import SplitTemplate

TEMPLATES: list[Template] = [MapTemplate(), RowTemplate(), ColTemplate(), SplitTemplate(),
                             GemmTemplate(), PoolTemplate(),
                             ChanTemplate(), ScanTemplate(), LibraryTemplate(),
                             AttentionTemplate(), GemmTensorCoreTemplate(),
                             AttentionTensorCoreTemplate(), DepthwiseConvTemplate()]

__all__ = ["TEMPLATES", "Template"]
