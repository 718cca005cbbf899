"""BENCHMARKS.md's script-owned sections: replaced where they stand, and the library section's
reading of a measured table (hand-made cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import sections
from benchmarks.library_section import algorithm_pairs, best_per_layout
from benchmarks.sections import write_section

ROOT = Path(__file__).resolve().parents[1]


def test_a_section_is_replaced_where_it_stands(tmp_path):
    md = tmp_path / "B.md"
    md.write_text("# B\n\n<!-- a:begin -->\nold\n<!-- a:end -->\n\n## later\n")
    write_section(md, "<!-- a:begin -->", "<!-- a:end -->",
                  ["<!-- a:begin -->", "new", "<!-- a:end -->"])
    assert md.read_text() == "# B\n\n<!-- a:begin -->\nnew\n<!-- a:end -->\n\n## later\n"
    write_section(md, "<!-- b:begin -->", "<!-- b:end -->",
                  ["<!-- b:begin -->", "added", "<!-- b:end -->"])
    assert md.read_text().endswith("## later\n\n<!-- b:begin -->\nadded\n<!-- b:end -->\n")


def test_a_section_written_to_the_generated_page_regenerates_it_instead(tmp_path,
                                                                        monkeypatch):
    """BENCHMARKS.md is generated whole from the results files: a script writing its section
    there (after writing its results file) has the page regenerated, not spliced into."""
    from cuda_agent.experiments.benchmarks_md import GENERATED

    page = f"# Benchmarks\n\n{GENERATED} from the results files -->\n\nthe tables\n"
    md = tmp_path / "BENCHMARKS.md"
    md.write_text(page)
    calls = []
    monkeypatch.setattr(sections, "regenerate", lambda md, what: calls.append((md, what)),
                        raising=False)  # so that it runs, and fails, where none exists
    write_section(md, "<!-- a:begin -->", "<!-- a:end -->",
                  ["<!-- a:begin -->", "spliced", "<!-- a:end -->"])
    sections.write_summary_section(md, "x-summary", ["<!-- x-summary:begin -->", "headline",
                                                     "<!-- x-summary:end -->"])
    assert md.read_text() == page
    assert calls == [(md, "<!-- a:begin -->"), (md, "<!-- x-summary:begin -->")]


def test_library_table_reads_best_per_layout_and_algorithm_twins():
    trials = [["cudnn=heuristic block=128 layout=as_given scope=lib", 2.0],
              ["cudnn=benchmark block=128 layout=as_given scope=lib", 1.0],
              ["cudnn=heuristic block=256 layout=channels_last scope=lib", 0.5],
              ["cudnn=benchmark block=256 layout=channels_last scope=lib", "runtime"],
              ["block=128 scope=lib", 3.0]]  # a 1-D convolution: no layout slot
    assert best_per_layout(trials) == {"as_given": 1.0, "channels_last": 0.5}
    assert algorithm_pairs(trials) == [2.0]  # the failed twin has no pair


def test_agents_folds_pairs_by_hand():
    """Multi against single per problem: fewer, more, tied and the sign test on the untied
    pairs (3 against 1 untied: two-sided binomial p = 0.625)."""
    from benchmarks.agents_folds import compare

    multi = {"a": 2, "b": 5, "c": 41, "d": 3, "e": 7, "only_multi": 1}
    single = {"a": 4, "b": 5, "c": 41, "d": 9, "e": 6, "f": 2}
    c = compare(multi, single)
    assert c["problems"] == 5 and (c["multi_fewer"], c["single_fewer"], c["tied"]) == (2, 1, 2)
    assert c["median_multi"] == 5 and c["median_single"] == 6
    assert abs(c["sign_test_p"] - 1.0) < 1e-9  # 2 of 3 untied: p = 1
    c = compare({"a": 1, "b": 1, "c": 1, "d": 9}, {"a": 2, "b": 2, "c": 2, "d": 1})
    assert (c["multi_fewer"], c["single_fewer"]) == (3, 1)
    assert abs(c["sign_test_p"] - 0.625) < 1e-9


def test_live_union_counts_each_problem_by_its_latest_run(tmp_path):
    """The union of the live sections by hand: a problem benched twice counts by its later run,
    the agents count only where their policy never trained on the problem (the peers on those
    same problems), a multi-kernel program is named apart and not as missing."""
    from benchmarks.live_section import union_section

    def result(problems, marl, bayes, trained_on=(), skipped=None):
        return {"problems": {p: {"best_ms": b, "compile_ms": c, "family": f}
                             for p, (b, c, f) in problems.items()},
                "trained_on": list(trained_on), "skipped": skipped or {},
                "summary": {"marl": {"evals_to_95": marl},
                            "kt:bayes_opt": {"evals_to_95": bayes}}}

    first = result({"a": (1.0, 2.0, "gemm"), "b": (3.0, 2.0, "norm"), "c": (1.0, 1.5, "norm")},
                   {"a": 40, "b": 2, "c": 1}, {"a": 10, "b": 20, "c": 30}, trained_on=["c"],
                   skipped={"p": "a multi-kernel program (sweeps are stage by stage)"})
    later = result({"a": (1.0, 3.0, "gemm")}, {"a": 4}, {"a": 12})
    suite = [tmp_path / f"{n}.py" for n in ("a", "b", "c", "d", "p")]
    md = tmp_path / "B.md"
    assert union_section(md, [first, later], len(suite), suite) == 3
    text = md.read_text()
    assert "faster on **2 of 3" in text and "not faster on b (0 of these" in text
    # a: marl 4 / bayes 12 (the later run), b: 2 / 20; c is not counted (the policy trained on it)
    assert "2 problems" in text and "marl 3, kt:bayes_opt 16" in text
    assert "(kt:bayes_opt): **5.3x fewer**" in text
    assert "gemm 4 against 12 (1), norm 2 against 20 (1)" in text
    assert ("not yet benched live: d, and the multi-kernel programs, which are not compared (p)"
            in text)
    # a program benched by a later run (its stages one at a time) is counted, not named apart
    program = result({"p": (1.0, 2.0, "conv+pool")}, {"p": 3}, {"p": 9})
    assert union_section(md, [first, later, program], len(suite), suite) == 4
    text = md.read_text()
    assert "not yet benched live: d)" in text, text
    assert "multi-kernel programs, which are not compared" not in text


def test_live_union_without_the_reruns_chosen_for_the_agents(tmp_path):
    """Problems benched again because the agents had needed many measurements (two such
    sections) are also counted by their runs before: both sections left out together."""
    from benchmarks.live_section import union_section

    def result(problems, marl, bayes):
        return {"problems": {p: {"best_ms": 1.0, "compile_ms": 2.0, "family": "gemm"}
                             for p in problems}, "trained_on": [], "skipped": {},
                "summary": {"marl": {"evals_to_95": marl},
                            "kt:bayes_opt": {"evals_to_95": bayes}}}

    first = result("abc", {"a": 40, "b": 30, "c": 2}, {"a": 10, "b": 10, "c": 10})
    rerun_one = result("a", {"a": 1}, {"a": 10})
    rerun_two = result("b", {"b": 1}, {"b": 10})
    suite = [tmp_path / f"{n}.py" for n in "abc"]
    md = tmp_path / "B.md"
    union_section(md, [first, rerun_one, rerun_two], len(suite), suite,
                  rebench=(rerun_one, rerun_two))
    text = " ".join(md.read_text().split())
    assert "marl 1, kt:bayes_opt 10" in text  # a and b by their reruns
    assert "2 of these problems were benched again" in text
    assert "agents 30, kt:bayes_opt 10 (0.3x fewer)" in text  # a: 40, b: 30, c: 2


def test_rule_drawn_sample_text_by_hand():
    """The rule-drawn samples' sentences by hand: medians, the best peer by median, the peers'
    per-problem minimum, the sign test, the target met or not, a problem drawn twice counted
    once per run, identical Kernel Tuner columns named."""
    from benchmarks.live_section import sample_comparison, sample_text

    def merged(marl, optuna, bayes, ga, rs, skipped=None):
        return {"problems": {p: {"best_ms": 1.0, "compile_ms": 2.0, "family": "gemm"}
                             for p in marl}, "trained_on": [], "skipped": skipped or {},
                "summary": {"marl": {"evals_to_95": marl},
                            "optuna": {"evals_to_95": optuna},
                            "kt:bayes_opt": {"evals_to_95": bayes},
                            "kt:genetic_algorithm": {"evals_to_95": ga},
                            "kt:random_sample": {"evals_to_95": rs}}}

    # medians: marl 2, optuna 12, bayes 12, ga/rs 41; per-problem peer minimum 3, 8, 12 -> 8
    first = merged({"a": 1, "b": 2, "c": 5}, {"a": 12, "b": 8, "c": 30},
                   {"a": 3, "b": 20, "c": 12}, {"a": 41, "b": 41, "c": 41},
                   {"a": 41, "b": 41, "c": 41})
    # the agents behind on the second draw; "a" drawn again
    second = merged({"a": 9, "d": 9}, {"a": 1, "d": 2}, {"a": 41, "d": 41},
                    {"a": 41, "d": 40}, {"a": 41, "d": 41}, skipped={"e": "not finished"})
    text = " ".join(sample_text([("one", first), ("two", second)]).split())
    assert ("(3 problems): medians marl 2, optuna 12, kt:genetic_algorithm 41, kt:bayes_opt 12"
            in text)
    assert "(optuna): **6.0x fewer** (target 3x: met)" in text
    assert "(median 8): 4.0x fewer" in text
    assert "fewer on 3, more on 0, tied on 0 (sign test, two-sided p 0.25)" in text
    assert "(2 problems; not finished: e): medians marl 9, optuna 1.5" in text
    assert "**0.2x fewer** (target 3x: not met)" in text
    # pooled: marl 1,2,5,9,9 -> 5; optuna 12,8,30,1,2 -> 8
    assert ("(5 problem runs; a drawn in both, counted once per run): medians marl 5, optuna 8"
            in text)
    assert "kt:genetic_algorithm and kt:random_sample needed the same count" in text
    rows = [("x", {"marl": 3, "optuna": 3, "kt:bayes_opt": 3})]
    assert "tied on 1 (sign test, two-sided p -)" in sample_comparison(rows)


def test_live_union_names_ties_with_torch_compile(tmp_path):
    """A problem not faster than torch.compile by less than 1 % is counted as a tie a rerun can
    flip; one clearly slower is not."""
    from benchmarks.live_section import union_section

    def result(problems):
        return {"problems": {p: {"best_ms": b, "compile_ms": 1.0, "family": "norm"}
                             for p, b in problems.items()}, "trained_on": [], "skipped": {},
                "summary": {"marl": {"evals_to_95": {p: 1 for p in problems}},
                            "optuna": {"evals_to_95": {p: 3 for p in problems}}}}

    suite = [tmp_path / f"{n}.py" for n in "abc"]
    md = tmp_path / "B.md"
    union_section(md, [result({"a": 0.5, "b": 1.005, "c": 1.2})], len(suite), suite)
    text = " ".join(md.read_text().split())
    assert "not faster on b, c (1 of these within 1 %" in text


def test_realistic_section_counts_by_hand(tmp_path):
    """The realistic suite's sections from a hand-made results file (tests/data): counts, fast_1
    over the problems run and over the suite, the geomean, a later file's row replacing an
    earlier one's, a problem without a row listed as not run and never counted as a pass."""
    import json

    from benchmarks.realistic_section import write

    first = json.loads((ROOT / "tests/data/realistic_results_fixture.json").read_text())
    gib = 1 << 30
    memory = {"p_fast": (5 * gib, 6 * gib, True), "p_slow": (7 * gib, 6 * gib, False)}
    for r in first["rows"]:
        if r["problem"] in memory:
            peak, bound, within = memory[r["problem"]]
            r["tune_memory"] = {"peak_bytes": peak, "bound_bytes": bound, "within_bound": within}
            if r["problem"] == "p_slow":
                r["tune_memory"]["verification"] = "host"
    second = {**first, "date": "2000-01-02", "commit": "fixture2", "rows": [
        {"problem": "p_timeout", "family": "conv", "status": "timeout", "verified": False,
         "message": "tune ran past 120 s"}]}
    manifest = [{"problem": n, "family": "f", "input_bytes": g << 30}
                for n, g in (("p_fast", 2), ("p_slow", 1), ("p_oom", 16), ("p_timeout", 1),
                             ("p_wrong", 3), ("p_notrun", 24))]
    md = tmp_path / "B.md"
    md.write_text("# Benchmarks\n\nMeasured on a GPU.\n\nMore text.\n\n## A table\n")
    s = write(md, [first, second], manifest)
    assert (s["suite"], s["run"], s["not_run"]) == (6, 5, ["p_notrun"])
    assert s["counts"] == {"ok": 2, "oom": 1, "timeout": 1, "wrong": 1, "unsupported": 0,
                           "error": 0}
    assert s["faster"] == ["p_fast"] and s["fast_1_run"] == 0.2
    assert abs(s["fast_1_suite"] - 1 / 6) < 1e-12
    assert abs(s["geomean_vs_compile"] - 1.0) < 1e-12  # 2x and 0.5x
    assert abs(s["geomean_vs_eager"] - 2 ** 0.5) < 1e-12  # 4x and 0.5x
    text = md.read_text()
    # the headline right after the opening paragraph, the table at the end
    assert text.index("<!-- realistic-summary:begin -->") < text.index("More text.")
    assert text.index("## A table") < text.index("<!-- realistic:begin -->")
    flat = " ".join(text.split())
    assert "**1 OOM, 1 time-outs, 1 wrong answers**" in flat
    assert "**1 of 5 run (20 %)**, 1 of the suite's 6 (17 %;" in flat
    assert "over the 2 verified and timed: **1.00x** (against eager 1.41x)" in flat
    assert "Not run yet: 1 problems." in flat and "1-24 GiB" in flat
    assert "| p_notrun | 24.0 | f | not run |" in text
    assert "| p_fast | 2.0 | softmax | ok | 40 | 3.0 | 5.0 / 6.0 | 4.0 | 1.000 |" in text
    assert "| 7.0 / 6.0 **over** (host) |" in text
    assert "passed the bound it states (eager's peak + 2 x output + allowance) on **1 of 2** " \
        "(p_slow)" in flat
    assert "| p_timeout | 1.0 | conv | timeout |" in text
    assert "| 2.0e-07 (1.0e-07) |" in text and "| skipped |" in text
    assert "commits fixture, fixture2" in flat and "not_in_manifest" not in text
    assert "atol=rtol=0.01 / max abs err 1" in text  # a '|' in a message kept out of the table
    # written again: replaced where they stand, not added twice
    write(md, [first, second], manifest)
    again = md.read_text()
    assert again.count("<!-- realistic-summary:begin -->") == 1 and again == text


def test_realistic_tf32_rows_are_a_column_and_a_sentence_not_the_headline(tmp_path):
    """Rows tuned with `--precision tf32` (a later results file) do not replace the strict
    rows: the headline's counts stay the strict ones; the TF32 kernels get a column and a
    sentence of their own, their run named apart."""
    import json

    from benchmarks.realistic_section import write

    first = json.loads((ROOT / "tests/data/realistic_results_fixture.json").read_text())
    args = ["--precision", "tf32"]
    tf32 = {**first, "commit": "tf32run", "settings": {**first["settings"], "tune_args": args},
            "rows": [{"problem": "p_fast", "family": "conv", "status": "ok", "verified": True,
                      "new_ms": 0.5, "compile_ms": 2.0, "tune_args": args},
                     {"problem": "p_slow", "family": "conv", "status": "ok", "verified": True,
                      "new_ms": 4.0, "compile_ms": 1.0, "tune_args": args},
                     {"problem": "p_wrong", "family": "conv", "status": "wrong",
                      "verified": False, "tune_args": args}]}
    manifest = [{"problem": n, "family": "f", "input_bytes": 1 << 30}
                for n in ("p_fast", "p_slow", "p_oom", "p_timeout", "p_wrong")]
    md = tmp_path / "B.md"
    md.write_text("# Benchmarks\n\nMeasured on a GPU.\n")
    s = write(md, [first, tf32], manifest)
    assert s["faster"] == ["p_fast"] and abs(s["geomean_vs_compile"] - 1.0) < 1e-12
    t = s["tf32"]
    assert (t["run"], t["verified"], t["timed"], t["faster"]) == (3, 2, 2, ["p_fast"])
    assert abs(t["geomean"] - 1.0) < 1e-12  # 4x and 0.25x
    assert abs(t["geomean_strict"] - 1.0) < 1e-12  # the same two problems strict: 2x, 0.5x
    flat = " ".join(md.read_text().split())
    assert "faster than default torch.compile on **1 of 3**, geomean **1.00x** over the 2 " \
        "timed (the same problems strict: 1.00x)" in flat
    assert "not verified: p_wrong (wrong)" in flat
    assert "TF32 kernel ms (vs compile) |" in flat and "| 0.500 (4.00x) |" in flat
    assert "| wrong |" in flat and "commits tf32run" in flat
    assert "`cuda-agent tune --budget 8 --time-limit 30.0` with the CLI's default strategy." \
        in flat, "the strict run's description does not take the TF32 run's flags"


def test_realistic_table_names_the_gpu_of_each_row_when_they_differ():
    from benchmarks.realistic_section import table_lines

    manifest = [{"problem": n, "family": "f", "input_bytes": 1 << 30} for n in "abc"]
    row = {"status": "ok", "new_ms": 1.0, "compile_ms": 2.0}
    one = table_lines({"a": {**row, "gpu": "NVIDIA H200"}, "b": {**row, "gpu": "NVIDIA H200"}},
                      manifest)
    assert "GPU" not in one[0]
    both = table_lines({"a": {**row, "gpu": "NVIDIA H200"},
                        "b": {**row, "gpu": "NVIDIA H100 80GB HBM3"}}, manifest)
    assert both[0].endswith(" GPU |") and both[2].endswith(" H200 |")
    assert both[3].endswith(" H100 |") and both[4].endswith("| |")  # c: not run
    assert all(line.count("|") == both[0].count("|") for line in both)


def test_realistic_section_with_nothing_run(tmp_path):
    from benchmarks.realistic_section import write

    md = tmp_path / "B.md"
    s = write(md, [], [{"problem": "a", "family": "f", "input_bytes": 1 << 30}])
    assert s["run"] == 0 and s["fast_1_run"] is None
    assert "none of its 1 problems run yet; nothing is counted" in md.read_text()


def test_the_live_learning_verdict_says_which_needs_fewer_and_whether_it_is_conclusive():
    from benchmarks.learning_live import MIN_PROBLEMS, verdict

    pair = {"a": "marl", "b": "prior", "a_fewer": 10, "a_more": 2, "sign_test_p": 0.039}
    assert verdict(pair, True) == "marl needs fewer than prior (p < 0.05)"
    assert verdict(pair, False).endswith(f"fewer than {MIN_PROBLEMS} problems: not conclusive")
    assert verdict({**pair, "a_fewer": 2, "a_more": 10}, True).startswith("prior needs fewer")
    assert verdict({**pair, "sign_test_p": 0.22}, True) == "no significant difference"
    assert verdict({**pair, "sign_test_p": None}, True) == "no significant difference"


def test_realistic_auto_rows_are_a_column_beside_the_strict_headline(tmp_path):
    """Rows tuned at `tune`'s default since 2026-12-07 (`--precision auto`, recorded as
    `precision_asked`) are a column and a sentence of their own, as the TF32 rows are: the
    strict rows stay the headline until the whole suite is run at the default."""
    from benchmarks.realistic_section import write

    manifest = [{"problem": n, "family": "conv", "input_bytes": 1 << 30} for n in "ab"]
    strict = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06", "commit": "old",
              "settings": {"budget": 32, "time_limit_s": 45, "tune_args": []},
              "rows": [{"problem": n, "status": "ok", "verified": True, "new_ms": 4.0,
                        "eager_ms": 3.0, "compile_ms": 2.0, "tune_args": []} for n in "ab"]}
    auto = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07", "commit": "new",
            "settings": {"budget": 64, "time_limit_s": 60, "tune_args": [],
                         "precision_asked": "auto"},
            "rows": [{"problem": "a", "status": "ok", "verified": True, "new_ms": 1.0,
                      "eager_ms": 3.0, "compile_ms": 2.0, "tune_args": [],
                      "precision_asked": "auto"}]}
    md = tmp_path / "B.md"
    md.write_text("# B\n")
    s = write(md, [strict, auto], manifest)
    assert s["run"] == 2 and s["faster"] == []  # the strict headline: 0.5x on both
    a = s["columns"]["auto"]
    assert a["run"] == 1 and a["faster"] == ["a"] and a["geomean"] == pytest.approx(2.0)
    text = md.read_text()
    assert "auto kernel ms (vs compile)" in text and "1.000 (2.00x)" in text
    assert "With `--precision auto`" in text and "commits new" in text
