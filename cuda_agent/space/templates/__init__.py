"""The template library. Adding a template: write it, add it to `TEMPLATES`."""

from .base import Template
from .col import ColTemplate
from .map import MapTemplate
from .row import RowTemplate
from .split import SplitTemplate

TEMPLATES: list[Template] = [MapTemplate(), RowTemplate(), ColTemplate(), SplitTemplate()]

__all__ = ["TEMPLATES", "Template"]
