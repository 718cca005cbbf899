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

# order: where several apply, the first's default is the untuned baseline (the row template
# before split for rows, chan before split for channels)
TEMPLATES: list[Template] = [MapTemplate(), RowTemplate(), ColTemplate(), ChanTemplate(),
                             SplitTemplate(), GemmTemplate(), PoolTemplate(),
                             ScanTemplate(), LibraryTemplate(),
                             AttentionTemplate(), GemmTensorCoreTemplate(),
                             AttentionTensorCoreTemplate(), DepthwiseConvTemplate()]

__all__ = ["TEMPLATES", "Template"]
