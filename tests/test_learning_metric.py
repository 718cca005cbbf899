"""The metric beyond the first pick (cuda_agent/experiments/learning_metric.py): best time after
k measurements over the pooled best, and its comparisons between arms."""

from __future__ import annotations

import math

import pytest

from cuda_agent.experiments import learning_metric as lm


def test_best_after_reads_only_the_first_k_and_skips_failures() -> None:
    times = [5.0, None, 3.0, float("inf"), 1.0]
    assert lm.best_after(times, 1) == 5.0
    assert lm.best_after(times, 2) == 5.0
    assert lm.best_after(times, 4) == 3.0
    assert lm.best_after(times, 5) == 1.0
    # a search that stopped early holds its best
    assert lm.best_after(times, 32) == 1.0
    assert lm.best_after([None, None], 2) is None


def row(name: str, best: float, runs: dict[str, list[list[float | None]]]) -> dict:
    return {"problem": name, "family": "f", "best_ms": best, "worst_ms": 10.0, "runs": runs,
            "in_sample": []}


def test_ratios_use_the_pooled_best_and_penalize_no_valid_time() -> None:
    # an arm found 1.5, under the sweep's best 2.0 given: the pooled best is 1.5
    r = row("p", 2.0, {"a": [[3.0, 1.5]], "b": [[None, 3.0]]})
    out = lm.ratios(r, ["a", "b"], ks=(1, 2))
    assert out["a"][1] == [2.0] and out["a"][2] == [1.0]
    # nothing valid after 1: the slowest time the problem ran (worst_ms 10) over 1.5
    assert out["b"][1] == [pytest.approx(10.0 / 1.5)]
    assert out["b"][2] == [2.0]


def test_a_clear_winner_is_found_and_a_tie_is_not() -> None:
    rows = []
    for i in range(30):
        # a finds the best by its 4th measurement on every seed; b stays 20 % off
        rows.append(row(f"p{i}", 1.0, {"a": [[2.0, 1.5, 1.2, 1.0]] * 3,
                                       "b": [[2.0, 1.5, 1.2, 1.2]] * 3,
                                       "c": [[2.0, 1.5, 1.2, 1.0]] * 3}))
    s = lm.summarize(rows, arms=("a", "b", "c"), pairs=(("a", "b"), ("a", "c")), ks=(1, 4))
    assert s["problems"] == 30 and s["seeds"] == [3]
    ab4 = next(p for p in s["pairs"] if (p["a"], p["b"], p["k"]) == ("a", "b", 4))
    assert ab4["a_better"] == 90 and ab4["a_worse"] == 0 and ab4["verdict"] == "a"
    assert ab4["geomean_ratio_a_over_b"] == pytest.approx(1 / 1.2)
    ab1 = next(p for p in s["pairs"] if (p["a"], p["b"], p["k"]) == ("a", "b", 1))
    assert ab1["tied"] == 90 and ab1["verdict"] == "none" and ab1["sign_test_p"] is None
    ac4 = next(p for p in s["pairs"] if (p["a"], p["b"], p["k"]) == ("a", "c", 4))
    assert ac4["verdict"] == "none"
    assert s["arms"]["a"]["4"]["found_best"] == 1.0 and s["arms"]["b"]["4"]["found_best"] == 0
    assert s["arms"]["b"]["4"]["geomean_ratio"] == pytest.approx(1.2)
    assert s["arms"]["b"]["4"]["within_5pct"] == 0.0


def test_the_interval_resamples_problems_not_pairs() -> None:
    """A difference on a few problems only is not significant in the interval even with many
    seeds each: the interval is over problems."""
    rows = [row(f"p{i}", 1.0, {"a": [[1.0]] * 3, "b": [[1.0 if i else 2.0]] * 3})
            for i in range(30)]
    s = lm.summarize(rows, arms=("a", "b"), pairs=(("a", "b"),), ks=(1,))
    p = s["pairs"][0]
    assert p["a_better"] == 3 and p["tied"] == 87
    lo, hi = p["ci95"]
    assert lo <= 1.0 <= hi or math.isclose(lo, 1.0)
    assert p["verdict"] == "none"


def test_rows_without_every_arm_or_in_sample_are_left_out() -> None:
    rows = [row("p", 1.0, {"a": [[1.0]], "b": [[1.0]]}), row("q", 1.0, {"a": [[1.0]]}),
            {**row("r", 1.0, {"a": [[1.0]], "b": [[1.0]]}), "in_sample": ["a: trained on it"]}]
    assert [r["problem"] for r in lm.usable(rows, ("a", "b"))] == ["p"]
    with pytest.raises(ValueError):
        lm.summarize(rows[1:], arms=("a", "b"), pairs=(), ks=(1,))


def test_tables_have_a_row_per_arm_and_pair() -> None:
    rows = [row(f"p{i}", 1.0, {"a": [[1.0, 1.0]], "b": [[1.1, 1.0 + i / 100]]})
            for i in range(5)]
    s = lm.summarize(rows, arms=("a", "b"), pairs=(("a", "b"),), ks=(1, 2))
    head = lm.arm_header(s)
    assert head[:3] == ["arm", "after 1", "after 2"]
    assert [r[0] for r in lm.arm_rows(s)] == ["a", "b"]
    assert all(len(r) == len(head) for r in lm.arm_rows(s))
    md = lm.markdown_table(head, lm.arm_rows(s))
    assert md[0].startswith("| arm |") and len(md) == 4
    assert len(lm.pair_rows(s)) == 1 and len(lm.winners(s, 2)) == 1


def test_the_command_prints_the_tables_of_a_result_and_refuses_other_files(tmp_path, capsys):
    import json

    rows = [row(f"p{i}", 1.0, {a: [[1.2, 1.0]] * 3 for a in lm.ARMS}) for i in range(3)]
    res = tmp_path / "m.json"
    res.write_text(json.dumps({"label": "REPLAY", "metric": lm.summarize(rows, ks=(1, 2))}))
    assert lm.main([str(res)]) == 0
    out = capsys.readouterr().out
    assert "trained+prior" in out and "1.200" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert lm.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.json" in err


def test_the_shares_of_the_entry_point_partition_the_recorded_problems(monkeypatch):
    """`python -m benchmarks.learning_metric --share i/n` runs share i; the shares together are
    every recorded problem once, each share a mix of families."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root))
    from benchmarks.learning_metric import selected
    from benchmarks.learning_replay import problem_names

    shares = [selected(f"{i}/4") for i in range(4)]
    flat = [n for s in shares for n in s]
    assert sorted(flat) == sorted(problem_names("")) and len(set(flat)) == len(flat)
    assert all(len({n.split("_")[0] for n in s}) > 5 for s in shares)
    bad = subprocess.run([sys.executable, "-m", "benchmarks.learning_metric", "--share", "4/4"],
                         cwd=root, capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [
        "--share '4/4': i must be in 0..n-1"]
