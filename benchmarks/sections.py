"""BENCHMARKS.md sections owned by one script each, between <!-- name:begin --> and
<!-- name:end --> markers (collect.py keeps them when it rewrites the rest)."""

from __future__ import annotations

from pathlib import Path


def write_section(md: Path, begin: str, end: str, lines: list[str]) -> None:
    """Replace the section between `begin` and `end` in `md` by `lines` (which include both
    markers) where it is, or add it at the end of the file."""
    text = md.read_text() if md.exists() else "# Benchmarks\n"
    new = "\n".join(lines)
    if begin in text:
        text = text[:text.index(begin)] + new + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    md.write_text(text)


def bench_section(md: Path, name: str, intro: str, run_dir: Path, root: Path) -> None:
    """The section `name` of `md`: `intro`, then a bench run's report (its bench.md without
    the title, headings one level down, images relative to `md`'s folder)."""
    rel = run_dir.resolve().relative_to(root)
    body = (run_dir / "bench.md").read_text().split("\n", 2)[2]
    body = body.replace("\n### ", "\n#### ").replace("](", f"]({rel}/")
    write_section(md, f"<!-- {name}:begin -->", f"<!-- {name}:end -->",
                  [f"<!-- {name}:begin -->", intro, body.strip(), f"<!-- {name}:end -->"])
