"""benchmarks/collect.py: the latest run per problem decides, and the suite's fast_p is computed
from it (hand-computed cases)."""

from __future__ import annotations

from benchmarks import collect


def row(problem, best, eager, compile_, verified=True):
    return {"problem": problem, "family": "gemm", "best_ms": best, "eager_ms": eager,
            "compile_ms": compile_, "verified": verified}


def test_kernel_kind_names_the_template():
    assert collect.kernel_kind("unroll=none bm=128 scope=gemm_tc split=1") == "3xTF32 tensor cores"
    assert collect.kernel_kind("block=128 items=2 vec=4 scope=lib") == "library + epilogue"
    assert collect.kernel_kind("tm=8 scope=gemm") == "SIMT fp32"
    assert collect.kernel_kind("block=256 vec=4") == "generated"
    assert collect.kernel_kind("block=256 cluster=8 cache=smem scope=row") == "row, 8-block cluster"
    assert collect.kernel_kind("block=256 cluster=1 cache=smem") == "generated"
    assert collect.kernel_kind(None) == "-"


def test_the_latest_search_replaces_the_sweep_row_whole():
    rows = [row("a", 3.0, 2.0, 2.0), row("b", 1.0, 2.0, 2.0)]
    latest = {"a": {"best_ms": 1.5, "eager_ms": 2.1, "compile_ms": 2.4, "date": "2026-11-30",
                    "best_config": "bm=128 scope=gemm_tc"},
              "b": {"best_ms": None, "eager_ms": 9.0, "compile_ms": 9.0}}  # found nothing
    a, b = collect.current(rows, latest)
    # a search from before issue 33 timed its baselines under strict fp32 only: read as such,
    # with no figure at PyTorch's defaults
    assert (a["best_ms"], collect.strict(a, "eager_ms"), collect.strict(a, "compile_ms")) == \
        (1.5, 2.1, 2.4)
    assert a["eager_ms"] is None and a["compile_ms"] is None
    assert a["kernel"] == "3xTF32 tensor cores" and not a["library"]
    assert b == rows[1]  # a search without a result leaves the sweep's comparison


def test_suite_section_fast_p_by_hand():
    # vs compile: 2x faster, 1.25x faster, slower, unverified
    rows = [row("a", 1.0, 1.0, 2.0), row("b", 1.0, 1.0, 1.25), row("c", 2.0, 1.0, 1.0),
            row("d", 0.5, 1.0, 1.0, verified=False)]
    text = "\n".join(collect.suite_section(rows))
    compile_line = next(l for l in text.splitlines()
                        if l.startswith("| torch.compile, strict fp32"))
    cells = [c.strip() for c in compile_line.strip("|").split("|")]
    # fast_0: 3 of 4 verified; fast_1: a, b; fast_1.5: a; fast_2: none (2.0 is not > 2)
    assert cells[1:5] == ["0.75", "0.50", "0.25", "0.00"]
    assert "0.50 (not met)" in text and "c 0.50x" in text


def test_suite_section_names_the_leads_within_timing_noise():
    # 1.5 % ahead counts for fast_1 but not beyond the 2 % noise band; 3 % does
    rows = [row("a", 1.0, 1.0, 1.015), row("b", 1.0, 1.0, 1.03), row("c", 1.0, 1.0, 0.9)]
    text = "\n".join(collect.suite_section(rows))
    assert "0.67 (not met)" in text
    assert "beyond timing noise): 0.33, the 1 between: a 1.015x" in text


def test_suite_section_against_torch_compile_at_the_defaults():
    """Rows of runs since issue 33 carry torch.compile at PyTorch's defaults beside the strict
    figure: the suite's table gives both, the defaults' over the problems that have it."""
    new = {"headline": "defaults", "same": False}
    rows = [{**row("a", 1.0, None, 0.5), "compile_matched_ms": 2.0, "eager_matched_ms": 1.0,
             "baseline_settings": new},
            row("b", 1.0, 1.0, 1.25)]  # an old row: strict only
    text = "\n".join(collect.suite_section(rows))
    strict = next(l for l in text.splitlines() if l.startswith("| torch.compile, strict"))
    defaults = next(l for l in text.splitlines() if l.startswith("| torch.compile at"))
    assert [c.strip() for c in strict.strip("|").split("|")][1:3] == ["1.00", "1.00"]
    cells = [c.strip() for c in defaults.strip("|").split("|")]
    assert "1 of 2 problems" in cells[0] and cells[1:3] == ["1.00", "0.00"]
