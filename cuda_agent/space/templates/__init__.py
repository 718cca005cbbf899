"""The template library. Adding a template: write it, add it to `TEMPLATES`."""

from .base import Template
from .map import MapTemplate
from .row import RowTemplate

TEMPLATES: list[Template] = [MapTemplate(), RowTemplate()]

__all__ = ["TEMPLATES", "Template"]
