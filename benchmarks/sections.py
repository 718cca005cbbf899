"""Markdown sections owned by one script each, between <!-- name:begin --> and
<!-- name:end --> markers. BENCHMARKS.md itself is generated whole from the results files
(`python -m cuda_agent.experiments.benchmarks_md`): a section written to it regenerates the page
instead, which picks up the results file the script has just written."""

from __future__ import annotations

import sys
from pathlib import Path


def generated(md: Path) -> bool:
    """True for a page the generator wrote (its first lines say so): nothing is spliced in."""
    from cuda_agent.experiments.benchmarks_md import GENERATED

    if not md.is_file():
        return False
    with md.open() as fh:
        return any(GENERATED in fh.readline() for _ in range(5))


def regenerate(md: Path, what: str) -> None:
    """Write the generated page `md` anew from the results files of its checkout (the folder
    it lies in), in place of splicing the section `what` (its begin marker) into it."""
    from cuda_agent.experiments.benchmarks_md import write

    write(md.resolve().parent, md)
    name = what.removeprefix("<!-- ").removesuffix(":begin -->")
    print(f"{md} is generated from the results files: regenerated it (section {name} not "
          "spliced in)", file=sys.stderr)


def write_section(md: Path, begin: str, end: str, lines: list[str]) -> None:
    """Replace the section between `begin` and `end` in `md` by `lines` (which include both
    markers) where it is, or add it at the end of the file; a generated page is regenerated
    instead."""
    if generated(md):
        regenerate(md, begin)
        return
    text = md.read_text() if md.exists() else "# Benchmarks\n"
    new = "\n".join(lines)
    if begin in text:
        text = text[:text.index(begin)] + new + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    md.write_text(text)


def insert_after_intro(text: str, block: str) -> str:
    """`text` with `block` placed after its opening paragraph (the one after the title): where
    a summary is read first."""
    lines = text.split("\n")
    i = next((k for k, line in enumerate(lines) if line.startswith("# ")), -1) + 1
    while i < len(lines) and not lines[i].strip():  # blank lines after the title
        i += 1
    while i < len(lines) and lines[i].strip():  # the paragraph
        i += 1
    return "\n".join(lines[:i] + ["", block.strip("\n")] + lines[i:])


def write_summary_section(md: Path, name: str, lines: list[str]) -> None:
    """Like `write_section`, but a section not there yet goes after the page's opening paragraph
    (where a summary is read first)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = md.read_text() if md.exists() else "# Benchmarks\n"
    if begin in text or generated(md):
        write_section(md, begin, end, lines)
        return
    md.write_text(insert_after_intro(text, "\n".join(lines)))


def bench_section(md: Path, name: str, intro: str, run_dir: Path, root: Path) -> None:
    """The section `name` of `md`: `intro`, then a bench run's report (its bench.md without
    the title, headings one level down, images relative to `md`'s folder)."""
    rel = run_dir.resolve().relative_to(root)
    body = (run_dir / "bench.md").read_text().split("\n", 2)[2]
    body = body.replace("\n### ", "\n#### ").replace("](", f"]({rel}/")
    write_section(md, f"<!-- {name}:begin -->", f"<!-- {name}:end -->",
                  [f"<!-- {name}:begin -->", intro, body.strip(), f"<!-- {name}:end -->"])
