"""The README and the pages under docs/: the README is short and starts with the two commands
that work on a fresh machine (the set-up `.ci/run` runs, then the test command it runs), and
every relative link of the README and of docs/*.md leads to a file (and, with a #fragment, to a
heading of it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 200
"""issue 49: the README is an entry page; the rest goes to docs/"""

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```bash\n(.*?)^```", flags=re.M | re.S)


def bash_blocks(text: str) -> list[str]:
    """The contents of a page's ```bash blocks, in order."""
    return [m.group(1).strip() for m in FENCE.finditer(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines, at most {MAX_README_LINES}: move detail to docs/")


def test_the_readme_starts_with_the_commands_ci_runs():
    """Before any section, the README's first command is setup.sh (what .ci/run runs first) and
    a tune of an example that exists; its second is the test command .ci/run ends with."""
    text = README.read_text()
    first, second = bash_blocks(text.split("\n## ", 1)[0])[:2]
    ci = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
          if ln.strip() and not ln.startswith("#")]
    setup, tune = first.split(" && ")
    assert setup == "bash scripts/setup.sh" and setup in ci and (ROOT / "scripts/setup.sh").is_file()
    assert ci[-1].startswith(".venv/bin/python -m pytest") and second == ci[-1]
    words = tune.split()
    assert words[:2] == [".venv/bin/cuda-agent", "tune"] and (ROOT / words[2]).is_file()
    # setup.sh makes the .venv the two commands use and installs the `cuda-agent` script
    script = (ROOT / "scripts/setup.sh").read_text()
    assert "python3 -m venv .venv" in script and 'pip install -q -e ".[' in script
    assert 'cuda-agent = "cuda_agent.cli:' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file(page: Path):
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links that lead nowhere: {broken}"
