"""Scans: capture of cumsum/cumprod (reverse, exclusive, masked), the scan plan, the template's
space, NVRTC compiles of sampled configurations, execution of the generated code on the CPU
emulator against torch, and an end-to-end tune on the simulated device."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import cpu_exec
from helpers import Fn, nvrtc_available
from cuda_agent.errors import UnsupportedError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import Target
from cuda_agent.space.space import Space

ROOT = Path(__file__).resolve().parents[1]
SCAN_PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("scan_*.py"))


def plan_of(f, *shapes):
    return make_plan(capture(Fn, [f], lambda: [torch.randn(*s) for s in shapes]))


def scan_node(plan):
    return plan.graph[plan.anchor]


# -- capture and plan ------------------------------------------------------------------------------

@pytest.mark.parametrize("f,kind,dim,reverse,exclusive", [
    (lambda x: torch.cumsum(x, dim=1), "sum", 1, False, False),
    (lambda x: x.cumprod(-1), "prod", 2, False, False),
    (lambda x: torch.cumsum(x, 0, dtype=torch.float32), "sum", 0, False, False),
    (lambda x: torch.cumsum(x.flip(1), 1).flip(1), "sum", 1, True, False),
    (lambda x: torch.flip(torch.cumprod(torch.flip(x, [2]), 2), [2]), "prod", 2, True, False),
    (lambda x: torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x, 1)[:, :-1]], 1),
     "sum", 1, False, True),
    (lambda x: torch.cat([torch.ones_like(x[:1]), torch.cumprod(x, 0)[:-1]], 0),
     "prod", 0, False, True),
    (lambda x: torch.cat([torch.cumsum(x.flip(1), 1).flip(1)[:, 1:],
                          torch.zeros_like(x[:, :1])], 1), "sum", 1, True, True),
])
def test_capture_scan_forms(f, kind, dim, reverse, exclusive):
    p = plan_of(f, (3, 10, 6))
    n = scan_node(p)
    assert (p.kind, p.family) == ("scan", "scan")
    assert n.op == "scan" and n.shape == (3, 10, 6)
    assert (n.attr("kind"), n.attr("dim"), n.attr("reverse"), n.attr("exclusive")) == \
        (kind, dim, reverse, exclusive)
    info = p.info
    assert (info.O, info.L, info.I) == (
        (1, 3, 60) if dim == 0 else (3, 10, 6) if dim == 1 else (30, 6, 1))
    assert p.output == p.anchor and p.operands == [0]


def test_masked_prologue_and_exclusive_epilogue_are_planned():
    p = plan_of(lambda x, m: torch.cumsum(x * m, dim=-1) - x, (8, 100), (100,))
    g = p.graph
    arg = g[p.info.arg]
    assert arg.op == "mul" and p.fmaps[arg.id] == (0, 1)
    assert g[p.output].op == "sub" and p.operands == [0, 1]
    assert p.operand_shapes == {0: (8, 100), 1: (100,)}
    assert p.flops() >= 3 * 800  # the scan, the mask and the subtraction
    assert p.bytes_moved() == (800 + 100 + 800) * 4


@pytest.mark.parametrize("f,words", [
    (lambda x: torch.flip(x, [1]) + 1, ["flip"]),
    (lambda x: torch.cumsum(x, 1)[:, :-1], ["slice"]),
    (lambda x: torch.cat([x, x], 1), ["cat"]),
    (lambda x: torch.cumsum(x > 0, 1), ["bool"]),
])
def test_unsupported_scan_programs_say_why(f, words):
    with pytest.raises(UnsupportedError) as info:
        plan_of(f, (4, 8))
    msg = str(info.value)
    assert all(w in msg for w in words), msg
    assert "\n" not in msg


@pytest.mark.parametrize("f,families", [
    (lambda x: torch.cumsum(x.sum(1, keepdim=True) * x, 1), "norm+scan"),
    (lambda x: torch.cumsum(torch.cumsum(x, 1), 0), "scan+scan"),
    (lambda x: torch.cumsum(x, 1).sum(1), "scan+reduction"),
])
def test_scans_with_reductions_or_scans_around_them_become_programs(f, families):
    p = plan_of(f, (4, 8))
    assert p.kind == "program" and p.family == families


@pytest.mark.parametrize("path", SCAN_PROBLEMS, ids=lambda p: p.stem)
def test_benchmark_scan_problems_have_spaces(path):
    from cuda_agent.problem import load_problem
    from cuda_agent.agents.vocab import SpaceIndex

    sp = Space.for_plan(make_plan(load_problem(path).graph()), Target())
    assert [t.name for t in sp.templates] == ["scan"]
    assert 100 <= len(sp) <= 100_000
    assert sp.check(sp.default()) is None
    SpaceIndex.of(sp)  # every slot value is in the agents' vocabulary


def test_suite_covers_the_scan_forms():
    from cuda_agent.problem import load_problem

    infos = [make_plan(load_problem(p).graph()).info for p in SCAN_PROBLEMS]
    assert len(infos) >= 7
    assert {i.kind for i in infos} == {"sum", "prod"}
    assert any(i.reverse for i in infos) and any(i.exclusive for i in infos)
    assert any(i.I > 1 for i in infos) and any(i.I == 1 and i.O <= 16 for i in infos)


def test_long_few_rows_get_split_configurations():
    p = plan_of(lambda x: torch.cumsum(x, 1), (2, 1 << 20))
    sp = Space.for_plan(p, Target())
    splits = {c["reduction.split"] for c in sp.configs}
    assert {1, 8, 128} <= splits
    r = sp.render(next(c for c in sp.iter_configs() if c["reduction.split"] == 8))
    assert [L.kernel for L in r.launches] == ["ca_scan_totals", "ca_scan_rows"]
    assert r.workspace_bytes == 2 * 8 * 4


# -- the generated code, executed ------------------------------------------------------------------

EXEC_CASES = {
    "rows_incl": (lambda x: torch.cumsum(x, 1), [(5, 203)]),
    "rows_excl_rev": (lambda x: torch.cat([torch.cumsum(x.flip(1), 1).flip(1)[:, 1:],
                                           torch.zeros_like(x[:, :1])], 1), [(3, 64)]),
    "rows_masked": (lambda x, m: torch.cumsum(x * m, 1) - x, [(3, 96), (3, 96)]),
    "rows_prod": (lambda x: torch.cumprod(x, -1), [(4, 1, 45)]),
    "cols_prod": (lambda x: torch.cumprod(x, 1), [(3, 50, 20)]),
    "cols_rev_excl": (lambda x: torch.cumsum(x.flip(1), 1).flip(1) - x, [(2, 33, 12)]),
}


@pytest.mark.skipif(not cpu_exec.available(), reason="needs g++ for the CPU emulator")
@pytest.mark.parametrize("name", sorted(EXEC_CASES))
def test_generated_code_matches_torch(name):
    f, shapes = EXEC_CASES[name]
    plan = plan_of(f, *shapes)
    sp = Space.for_plan(plan, Target())
    gen = torch.Generator().manual_seed(7)
    xs = [torch.randn(*s, generator=gen) for s in shapes]
    if name == "rows_masked":
        xs[1] = (xs[1] > 0).float()
    want = f(*[x.double() for x in xs]).numpy()
    rng = random.Random(name)
    picked = [sp.default()] + rng.sample(sp.configs, 2)
    # a split one too where the space has it: the two-pass path
    split = [c for c in sp.configs if c["reduction.split"] > 1]
    picked += rng.sample(split, 1) if split else []
    cpu_exec.prebuild([(sp.render(c), len(plan.operands)) for c in picked])
    for cfg in picked:
        err = cpu_exec.max_rel_error(sp.render(cfg), [xs[k].numpy() for k in plan.operands],
                                     want)
        assert err < 1e-5, (cfg.short(), err)


# -- compile and tune ------------------------------------------------------------------------------

@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not available")
def test_sampled_configs_of_scan_problems_compile(tmp_path):
    from cuda_agent.build.builder import Builder, BuildInput

    items = []
    for path in SCAN_PROBLEMS:
        from cuda_agent.problem import load_problem

        sp = Space.for_plan(make_plan(load_problem(path).graph()), Target())
        for cfg in [sp.default()] + random.Random(path.stem).sample(sp.configs, 6):
            items.append((path.stem, cfg, sp.render(cfg)))
    with Builder("nvrtc", workers=2, cache_dir=tmp_path) as b:
        results = b.build([BuildInput(r.source, Target().arch) for _, _, r in items])
    bad = [f"{n} {c.short()}: {res.error_msg}" for (n, c, _), res in zip(items, results)
           if not res.ok]
    assert not bad, "\n".join(bad[:3])


def test_tune_a_scan_on_the_simulated_device(tmp_path):
    import cuda_agent

    r = cuda_agent.tune(ROOT / "benchmarks/problems/scan_cumsum_rows_odd.py", out=tmp_path / "o",
                        device="sim", budget=6, store=":memory:", strategy="random")
    assert r.simulated and r.best is not None and len(r.trials) == 6
    src = (tmp_path / "o" / "kernel.cu").read_text()
    assert "ca_scan_" in src
