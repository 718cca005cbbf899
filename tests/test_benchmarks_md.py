"""BENCHMARKS.md's generator (cuda_agent/experiments/benchmarks_md.py): the page from the
committed results is short, the same every time and the one committed; every figure of its
summary comes from a results file (a fake results tree with known numbers gives those numbers);
a missing family is said, a malformed file is a one-line error naming it, and the journal is
never touched."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from cuda_agent.experiments import benchmarks_md as bm
from cuda_agent.experiments import benchmarks_results as br

ROOT = Path(__file__).resolve().parents[1]


def section(text: str, heading: str) -> str:
    """The text of the `## heading...` section of a page, up to the next `## `."""
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 4)
    return text[start:end if end > 0 else len(text)]


def test_the_committed_results_make_a_short_page_the_same_twice_and_the_one_committed():
    first, second = bm.page(ROOT), bm.page(ROOT)
    assert first.text == second.text and first.images == second.images
    assert first.text.count("\n") <= bm.MAX_LINES
    heads = re.findall(r"^## (.*)$", first.text, flags=re.M)
    assert [h.split(":")[0] for h in heads] == [
        "Summary", "Realistic suite", "Whole models", "Convolution chains, tuned as a user runs "
        "`tune`", "cuda-agent against the peers, live", "Learning", "Learning",
        "Hardware counters and the agents' auxiliary terms", "Simulator", "GPU facts",
        "How to reproduce"]
    assert not any("issue" in h for h in heads), "no issue numbers as section keys"
    assert "(simulated)" in heads[8] and "(replay)" in heads[6]
    assert set(first.images) == {"realistic-speedup.png", "peers-evals.png", "sim-spearman.png",
                                 "learning-best-after.png"}
    assert all(len(png) < 100_000 for png in first.images.values())
    for name in first.images:
        assert f"]({bm.IMAGES}/{name})" in first.text
    committed = (ROOT / bm.OUT).read_text()
    assert committed == first.text, (
        f"BENCHMARKS.md is not what the results files give: run `{bm.REGENERATE}`")


def _gz(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def _json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def fake_results(root: Path) -> br.LiveSets:
    """A results tree with known numbers, one file per family; the live sets it holds."""
    res = root / br.RESULTS
    _json(root / br.MANIFEST, {"problems": [
        {"problem": p, "family": "f", "input_bytes": g << 30}
        for p, g in (("p1", 2), ("p2", 3), ("p3", 5))]})
    row = {"family": "f", "tune_args": [], "finished": "2031-01-01T00:00:00Z"}
    _json(res / "2031-01-01-h999-realistic" / "realistic.json", {
        "gpu": "NVIDIA H998", "date": "2031-01-01", "commit": "c0ffee1", "torch": "9.9",
        "copy_tbps": 7.77, "settings": {"budget": 8, "time_limit_s": 30.0, "tune_args": []},
        "rows": [{**row, "problem": "p1", "status": "ok", "verified": True, "new_ms": 1.0,
                  "compile_ms": 3.0, "eager_ms": 2.0},   # 3x compile, 2x eager
                 {**row, "problem": "p2", "status": "ok", "verified": True, "new_ms": 2.0,
                  "compile_ms": 1.0, "eager_ms": 4.0},   # 0.5x compile, 2x eager
                 {**row, "problem": "p3", "status": "oom", "verified": False}]})
    (root / br.PROBLEMS).mkdir(parents=True)
    (root / br.PROBLEMS / "q.py").write_text("")
    merged = {"live": "cuda", "date": "2031-01-04", "provenance": {"commit": "beef123"},
              "settings": {"budget": 40, "seeds": 1}, "trained_on": [], "skipped": {},
              "problems": {"q": {"family": "f", "best_ms": 1.0, "compile_ms": 2.5,
                                 "gpu": "NVIDIA H999"}},
              "summary": {"marl": {"evals_to_95": {"q": 3}},
                          "optuna": {"evals_to_95": {"q": 27}}},
              "runs": [{"problem": "q", "strategy": "marl", "times": [2.0, 1.25]},
                       {"problem": "q", "strategy": "optuna", "times": [5.0, "runtime"]}]}
    _json(res / "2031-01-04-h999-bench-live-merged" / "bench.json", merged)
    _json(res / "2031-01-05-learning-live.json", {
        "gpu": ["NVIDIA H999"], "date": "2031-01-05", "budget": [24], "seeds": [1],
        "commits": ["f00d123"], "problems": 21, "enough": True,
        "median_evals_to_95": {"marl": 1, "prior": 4},
        "pairs": [{"a": "marl", "b": "prior", "a_fewer": 17, "a_more": 4, "tied": 0,
                   "sign_test_p": 0.0123}]})
    _json(res / "2031-01-06-learning-replay.json", {
        "date": "2031-01-06", "commit": "aa11bb2", "budget": 40, "seeds": 3,
        "summary": {"problems": 99, "arms": {}, "pairs": [
            {"a": "trained+prior", "b": "prior", "a_fewer": 31, "a_more": 7, "tied": 61,
             "sign_test_p": 0.00042}]}})
    _json(res / "2031-01-07-sim-correlation.json", {
        "date": "2031-01-07", "median_spearman_by_family": {"f": 0.777, "g": 0.5},
        "rows": [{"problem": n, "family": fam, "spearman": v} for n, fam, v in
                 (("a", "f", 0.777), ("b", "f", 0.9), ("c", "g", 0.5))]})
    _json(res / "2031-01-08-sim-validation.json", {"date": "2031-01-08", "median": 0.654,
                                                   "median_before": 0.5, "rows": [{}, {}]})
    for k, bw in enumerate((5.55e12, 5.65e12, 5.45e12)):
        _gz(root / br.DATA / "nvidia-h999" / f"s{k}.json.gz", {
            "gpu": "NVIDIA H999", "device": "cuda", "copy_bw": bw, "date": "2031-01-02",
            "facts": {"sm_count": 7, "l2_bytes": 2 << 20, "memory_bytes": 3 << 30,
                      "sm_clock_mhz": 999, "torch": "9.9", "cuda": "99.0"}})
    return br.LiveSets(union=("2031-01-04-h999-bench-live-merged",), reruns=(),
                       samples=("2031-01-04-h999-bench-live-merged",))


def test_every_figure_of_the_summary_comes_from_the_results_files(tmp_path):
    sets = fake_results(tmp_path)
    journal = tmp_path / bm.JOURNAL
    journal.parent.mkdir(parents=True)
    journal.write_text("# Journal\n\nkept as it is\n")
    bm.write(tmp_path, live_sets=sets, plots=False)
    text = (tmp_path / bm.OUT).read_text()
    assert journal.read_text() == "# Journal\n\nkept as it is\n", "the journal is never touched"
    summary = " ".join(section(text, "Summary").split())
    expected = [
        "3 of 3 (2-5 GiB); 2 verified",                         # realistic: run, sizes
        "**1 OOM, 0 time-outs, 0 wrong answers**",
        "**1 of 3 (33 %)**; geomean **1.22x** (against eager 2.00x)",  # sqrt(3 * 0.5), 2
        "| live | H998 | 2031-01-01 |",
        "faster on **1 of 1** (fast_1 1.00), geomean **2.50x**",  # 2.5 / 1.0
        "optuna's 27 against the agents' 3: **9.0x fewer**",
        "fewer measurements on 17, more on 4 (p 0.012)", "| 2031-01-05 |",
        "fewer on 31, more on 7 (p 0.00042) | **replay** | H999 (recorded) | 2031-01-06 |",
        "median over 3 sweeps | 0.78 (family medians 0.50 to 0.78) | **simulated** |",
        "median 0.65 | **simulated**",
        "median of 3 runs | 5.55 TB/s | live | H999 | 2031-01-02 | sweeps under "
        "`benchmarks/data/nvidia-h999/` |",
        "median of 1 run | 7.77 TB/s | live | H998 | 2031-01-01 | 1 realistic run |",
    ]
    for figure in expected:
        assert figure in summary, figure
    for name in ("2031-01-05-learning-live.json", "2031-01-06-learning-replay.json",
                 "2031-01-07-sim-correlation.json", "2031-01-08-sim-validation.json"):
        assert f"`{br.RESULTS}/{name}`" in summary
    peers = section(text, "cuda-agent against the peers")
    # each strategy's fastest kernel against the run's torch.compile: 2.5/1.25, 2.5/5.0
    assert "| marl | 1.00 | 2.00x | 1 | 3 |" in peers
    assert "| optuna | 0.00 | 0.50x | 1 | 27 |" in peers
    assert "Commits: beef123." in peers
    assert "| p1 | 2.0 | f | ok |" in section(text, "Realistic suite")
    assert "* H999: 7 SMs, 2 MiB L2, 3 GiB, 999 MHz" in section(text, "GPU facts")


def test_the_best_after_k_section_reads_its_results_file(tmp_path):
    from cuda_agent.experiments import learning_metric as lm

    sets = fake_results(tmp_path)
    # the trained agents at the best by their 8th measurement, the prior alone 10 % off
    rows = [{"problem": f"p{i}", "best_ms": 1.0, "in_sample": [], "runs": {
        "trained+prior": [[2.0] * 7 + [1.0]] * 3, "prior": [[2.0] * 7 + [1.1]] * 3}}
        for i in range(24)]
    metric = lm.summarize(rows, arms=("trained+prior", "prior"),
                          pairs=(("trained+prior", "prior"),), ks=(4, 8, 16, 32))
    _json(tmp_path / br.RESULTS / "2031-01-09-learning-metric.json", {
        "date": "2031-01-09", "commit": "abc1234", "metric": metric,
        "source": {"share": "0/4", "budget": 32, "not_run": []},
        "transfer": {"measured": False, "why": "no H999 sweeps"}})
    text = bm.page(tmp_path, sets, plots=False).text
    body = " ".join(section(text, "Learning: the best time after").split())
    assert "**A**: 24 problems x 3 seeds, searches run for it (share 0/4" in body
    assert "**trained+prior** nearer the best after 8, 16 and 32" in body
    assert "| trained+prior | 2.000 | 1.000 | 1.000 | 1.000 | 100 % |" in body
    assert "| prior | 2.000 | 1.100 | 1.100 | 1.100 | 0 % |" in body
    assert "**not measured**: no H999 sweeps" in body
    summary = " ".join(section(text, "Summary").split())
    assert "trained+prior 1.000 / 1.000; prior 1.100 / 1.100 | **replay** |" in summary


def test_a_family_without_results_is_said_not_invented(tmp_path):
    (tmp_path / br.RESULTS).mkdir(parents=True)
    text = bm.page(tmp_path, br.LiveSets((), (), ()), plots=False).text
    assert "| no results files yet |" in text
    for missing in ("No realistic suite results", "No live bench results",
                    "No learning results", "No simulator results", "No GPU facts recorded"):
        assert missing in text


def test_the_whole_models_section_reads_its_results_files(tmp_path):
    """Not measured yet without a file; with one, its figures (a later file's row wins), every
    model a row, the page within its length."""
    from benchmarks import whole_models as wm

    sets = fake_results(tmp_path)
    text = bm.page(tmp_path, sets, plots=False).text
    assert "Not measured yet: no GPU results file of the" in section(text, "Whole models")
    models = wm.all_models()
    rows = [{"problem": m, "status": "ok", "gpu": "NVIDIA H999", "eager_ms": 2.0,
             "compile_ms": 1.0, "new_ms": 1.0, "speedup_vs_eager": 2.0,
             "speedup_vs_compile": 1.0, "eager_in_tuned": 0.9, "eager_in_generated": 0.5,
             "regions": 3, "kernel_regions": 2, "generated_regions": 2,
             "eager_graph_ms": 1.5, "new_graph_ms": 0.5} for m in models]
    _json(tmp_path / br.RESULTS / "2031-01-10-h999-models" / "models.json",
          {"gpu": "NVIDIA H999", "date": "2031-01-10", "rows": rows})
    later = dict(rows[0], status="wrong", message="seed 1: off", problem=models[0])
    _json(tmp_path / br.RESULTS / "2031-01-11-h999-models" / "models.json",
          {"gpu": "NVIDIA H999", "date": "2031-01-11", "rows": [later]})
    text = bm.page(tmp_path, sets, plots=False).text
    assert text.count("\n") <= bm.MAX_LINES
    summary = " ".join(section(text, "Summary").split())
    n = len(models)
    assert f"{n} of {n}; **{n - 1} ok, 1 wrong** | live | H999 | 2031-01-10, 2031-01-11 |" \
        in summary
    assert "**1.00x** / 2.00x; **90 %** / 50 %" in summary
    body = section(text, "Whole models")
    assert f"| {models[1]} | ok | 2/2/3 | 2.000 | 1.000 | 1.000 | 2.00x | 1.00x | " \
           "1.500 / 0.500 | 90 % | 50 % |" in body
    assert f"| {models[0]} | wrong: seed 1: off |" in body
    assert "Not measured yet" not in body


def test_a_malformed_results_file_is_one_line_naming_it_and_nothing_is_written(tmp_path,
                                                                               capsys):
    fake_results(tmp_path)
    bad = tmp_path / br.RESULTS / "2031-01-09-h999-realistic" / "realistic.json"
    bad.parent.mkdir()
    bad.write_text("{ not json")
    out = tmp_path / "B.md"
    assert bm.main(["--root", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "not a readable JSON" in err
    assert not out.exists() and not (tmp_path / bm.IMAGES).exists()


def test_a_listed_live_merge_that_is_missing_is_named(tmp_path):
    fake_results(tmp_path)
    with pytest.raises(br.ResultsError, match="2031-01-04-gone/bench.json: no such results"):
        bm.page(tmp_path, br.LiveSets(("2031-01-04-gone",), (), ()), plots=False)


def test_convolution_chains_and_counters_sections_read_their_files(tmp_path):
    """The chains' rows (a later file's row of a problem wins) with the share faster than
    torch.compile and the geomean; the counters' per-agent terms over the profiled records."""
    res = tmp_path / "benchmarks" / "results"
    for folder, rows in (("2031-01-01-h998-conv-chains", [("a", 2.0, 1.0), ("b", 2.0, 1.0)]),
                         ("2031-01-02-h998-conv-chains", [("a", 1.0, 4.0)])):
        (res / folder).mkdir(parents=True)
        (res / folder / "conv_chains.json").write_text(json.dumps({
            "gpu": "NVIDIA H998", "date": folder[:10], "problems": 31,
            "settings": {"time_limit_s": 120.0},
            "rows": [{"problem": p, "status": "ok", "new_ms": new, "compile_ms": comp,
                      "eager_ms": 3.0, "won_by": "library route", "evals": 64,
                      "new_iqr_ms": 0.25, "compile_max_ms": 5.0, "compile_max_iqr_ms": 0.5,
                      "finished": folder[:10]} for p, new, comp in rows]}))
    (res / "2031-01-03-h998-counters").mkdir()
    rec = [{"counters": {"profiled": True}, "aux": {"config": c, "memory": 0.5, "compute": -0.5,
                                                     "reduction": 0.0}} for c in (0.1, 0.3, 0.2)]
    (res / "2031-01-03-h998-counters" / "counters.json").write_text(json.dumps({
        "date": "2031-01-03", "gpu": "NVIDIA H998", "ncu": "Version 1.0 (build 1)",
        "problems": ["p"], "profile_every": 4, "measurements": 12, "profile_errors": [],
        "dropped_metrics": [], "records": rec + [{"counters": {}, "aux": {}}]}))
    mods = br.scripts()
    cc = br.conv_chains(tmp_path)
    assert [r["problem"] for r in cc["rows"]] == ["a", "b"] and cc["rows"][0]["new_ms"] == 1.0
    text = "\n".join(bm.conv_chain_lines(cc, mods))
    assert "**1 of 2**, geomean **1.41x**" in text and "29 chains are not measured" in text
    # each timing with its spread where the row has one; max-autotune beside default
    assert "| a | 1.00 ± 0.25 | 3.00 | 4.00 | 5.00 ± 0.50 | 4.00x | library route | 64 |" \
        in text
    text = "\n".join(bm.counter_lines(br.counters(tmp_path)))
    assert "profiled 3 of 12 measurements" in text and "| config | +0.10 | +0.20 | +0.30 |" in text
    assert "no hardware counters recorded" in "\n".join(bm.counter_lines(None)).lower()
