"""BENCHMARKS.md sections owned by one script each, between <!-- name:begin --> and
<!-- name:end --> markers (collect.py keeps them when it rewrites the rest)."""

from __future__ import annotations

from pathlib import Path


def write_section(md: Path, begin: str, end: str, lines: list[str]) -> None:
    """Replace the section between `begin` and `end` in `md` by `lines` (which include both
    markers), placed at the end of the file."""
    text = md.read_text() if md.exists() else "# Benchmarks\n"
    if begin in text:
        text = text[:text.index(begin)] + text[text.index(end) + len(end):]
    md.write_text(text.rstrip() + "\n\n" + "\n".join(lines) + "\n")
