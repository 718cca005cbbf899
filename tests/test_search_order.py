"""The search runs' order (benchmarks/search_order.py): listed runs in the list's order, later
ones by their rows' own times, and a run that cannot be placed is refused, not guessed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.search_order import ORDER, search_files


def _run(results: Path, name: str, finished: list[str | None] | None = None) -> None:
    (results / name).mkdir()
    rows = [{"problem": "p"} | ({"finished": f} if f else {}) for f in (finished or [None])]
    (results / name / "search.json").write_text(json.dumps(rows))


def test_listed_runs_keep_the_lists_order_and_later_ones_follow_by_time(tmp_path):
    # within a day the names sort against the run order ("b-fused3" before "b-fresh16")
    _run(tmp_path, "2026-11-30-fresh16")
    _run(tmp_path, "2026-11-30-fused3")
    _run(tmp_path, "2026-12-04-z", ["2026-12-04T08:00:00Z"])
    _run(tmp_path, "2026-12-04-a", ["2026-12-04T07:00:00Z", "2026-12-04T09:00:00Z"])
    (tmp_path / ORDER).write_text("# comment\n2026-11-30-fresh16\n2026-11-30-fused3\n")
    assert [f.parent.name for f in search_files(tmp_path)] == [
        "2026-11-30-fresh16", "2026-11-30-fused3", "2026-12-04-z", "2026-12-04-a"]


def test_a_run_that_cannot_be_placed_is_refused(tmp_path):
    _run(tmp_path, "2026-11-30-x")
    (tmp_path / ORDER).write_text("")
    with pytest.raises(ValueError, match="2026-11-30-x"):
        search_files(tmp_path)
    (tmp_path / ORDER).write_text("2026-11-30-x\n2026-11-30-gone\n")
    with pytest.raises(ValueError, match="gone"):
        search_files(tmp_path)


def test_the_committed_runs_are_all_placed():
    files = search_files()
    assert len(files) == len(list(Path(files[0]).parents[1].glob("*/search.json")))
