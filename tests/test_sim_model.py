"""The simulated device's analytic model (CPU only). Every figure here is simulated.

Problems are tiny KernelBench-style files written into tmp_path; the properties are the ones a real
H200 shows and that the search relies on: vector width and occupancy matter, the best streaming
kernel sits just under copy bandwidth, time scales with bytes, launches dominate tiny problems,
re-reading rows that L2 cannot hold costs, and impossible launches fail as `resources`.
"""

from __future__ import annotations

import math
import random
import textwrap

import pytest

from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.costmodel.model import COUNTER_KEYS, SimConstants, SimResult, simulate
from cuda_agent.space.slots import Config, Launch, Rendered, Target
from cuda_agent.space.space import Space

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (the problems it tunes) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_sim_model")

TARGET = Target()
GIB = 1 << 30


def _problem(tmp_path, name: str, body: str, shape: tuple[int, ...]):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return {body}

        def get_inputs():
            return [torch.randn{shape}]

        def get_init_inputs():
            return []
        """))
    plan = make_plan(load_problem(path).graph())
    return plan, Space.for_plan(plan, TARGET)


def _sim(plan, space, cfg: Config, resources: dict | None = None, **kw) -> SimResult:
    return simulate(plan, space.render(cfg), resources or {}, TARGET, **kw)


def _with(space: Space, cfg: Config, **changes) -> Config:
    d = cfg.as_dict()
    for k, v in changes.items():
        d[k.replace("__", ".")] = v
    out = Config.of(d)
    assert space.check(out) is None, space.check(out)
    return out


@pytest.fixture(scope="module")
def tmp_mod(tmp_path_factory):
    return tmp_path_factory.mktemp("sim_problems")


@pytest.fixture(scope="module")
def relu_8k(tmp_mod):
    return _problem(tmp_mod, "relu_8k", "torch.relu(x)", (8192, 8192))


@pytest.fixture(scope="module")
def softmax_1g(tmp_mod):
    # 512 MiB in, 512 MiB out: a 1 GiB softmax over rows of 8192
    return _problem(tmp_mod, "softmax_1g", "torch.softmax(x, dim=1)", (16384, 8192))


# -- properties ------------------------------------------------------------------------------------

def test_vec4_beats_vec1_on_a_large_relu(relu_8k):
    plan, space = relu_8k
    base = space.default()
    for block in (128, 256, 512):
        for items in (1, 2):
            c1 = _with(space, base, config__block=block, config__items=items, memory__vec=1)
            c4 = _with(space, base, config__block=block, config__items=items, memory__vec=4)
            t1, t4 = _sim(plan, space, c1), _sim(plan, space, c4)
            assert t4.time_ms < t1.time_ms, (block, items, t1.time_ms, t4.time_ms)
            assert t4.counters["dram_throughput"] > t1.counters["dram_throughput"]
            assert t4.counters["sectors_per_request"] == 4 * t1.counters["sectors_per_request"]


def test_best_1gib_elementwise_sits_just_under_copy_bandwidth(tmp_mod):
    plan, space = _problem(tmp_mod, "relu_1g", "torch.relu(x)", (16384, 8192))
    assert plan.bytes_moved() == GIB
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    times = [_sim(plan, space, c).time_ms for c in space.configs]
    assert all(t > floor_ms for t in times), "never faster than bytes / copy bandwidth"
    best = min(times)
    frac = floor_ms / best  # achieved bandwidth as a fraction of copy bandwidth (simulated)
    print(f"\n[simulated] 1 GiB relu: best {best:.4f} ms = {frac:.1%} of copy bandwidth; "
          f"worst/best {max(times) / best:.2f}x over {len(times)} configs")
    assert 0.75 <= frac <= 1.0


def test_time_is_linear_in_size_for_large_problems(tmp_mod):
    times = []
    for rows in (4096, 8192, 16384, 32768):
        plan, space = _problem(tmp_mod, f"relu_lin_{rows}", "torch.relu(x)", (rows, 8192))
        cfg = _with(space, space.default(), memory__vec=4)
        times.append(_sim(plan, space, cfg).time_ms)
    ratios = [b / a for a, b in zip(times, times[1:], strict=False)]
    assert all(1.85 <= r <= 2.1 for r in ratios), ratios


def test_launch_overhead_dominates_a_tiny_problem(tmp_mod):
    plan, space = _problem(tmp_mod, "relu_tiny", "torch.relu(x)", (32, 32))
    launch_ms = SimConstants().launch_overhead_us * 1e-3
    times = {cfg: _sim(plan, space, cfg).time_ms for cfg in space.configs}
    # even a thread walking its items one dependent DRAM round trip at a time stays near it
    assert all(launch_ms < t < 3 * launch_ms for t in times.values())
    for t in (min(times.values()), times[space.default()]):
        assert launch_ms / t > 0.75, t
    plan4, space4 = _problem(tmp_mod, "relu_tiny4", "torch.relu(x)", (64, 64))
    t1 = _sim(plan, space, space.default()).time_ms
    t4 = _sim(plan4, space4, space4.default()).time_ms
    assert t4 < 1.2 * t1, "4x the bytes of a tiny problem costs next to nothing"


def test_reload_is_slower_than_registers_when_rows_outgrow_l2(tmp_mod):
    # rows of 128 KiB: the rows of all resident blocks together far exceed L2
    plan, space = _problem(tmp_mod, "softmax_32k", "torch.softmax(x, dim=1)", (4096, 32768))
    regs = [c for c in space.configs if c["memory.cache"] == "regs"]
    assert regs
    compared = 0
    for c in regs:
        for unroll in (1, 2, 4):
            reload = Config.of({**c.as_dict(), "memory.cache": "reload",
                                "compute.unroll": unroll})
            if space.check(reload) is not None:
                continue
            r_regs, r_reload = _sim(plan, space, c), _sim(plan, space, reload)
            assert r_reload.time_ms > r_regs.time_ms, (c.short(), unroll)
            compared += 1
    assert compared > 100
    # a specific pair with many rows in flight: the re-reads come from DRAM
    cfg = _with(space, space.default(), config__block=512, config__tpr=512, memory__vec=4,
                memory__cache="regs")
    t_regs = _sim(plan, space, cfg).time_ms
    t_reload = _sim(plan, space, _with(space, cfg, memory__cache="reload")).time_ms
    assert t_reload > 1.5 * t_regs, (t_regs, t_reload)


def test_registers_that_kill_occupancy_slow_a_memory_bound_kernel(relu_8k):
    plan, space = relu_8k
    for vec in (1, 4):
        cfg = _with(space, space.default(), memory__vec=vec)  # 256 threads per block
        lean = _sim(plan, space, cfg, {"registers": 32, "spill_stores": 0, "spill_loads": 0})
        fat = _sim(plan, space, cfg, {"registers": 255, "spill_stores": 0, "spill_loads": 0})
        assert lean.error_kind is None and fat.error_kind is None
        assert fat.counters["theoretical_occupancy"] == pytest.approx(0.125)
        assert lean.counters["theoretical_occupancy"] == pytest.approx(1.0)
        assert fat.time_ms > 1.5 * lean.time_ms, (vec, lean.time_ms, fat.time_ms)


def test_spills_cost_time(relu_8k):
    plan, space = relu_8k
    cfg = _with(space, space.default(), memory__vec=4)
    clean = _sim(plan, space, cfg, {"registers": 64})
    spilled = _sim(plan, space, cfg, {"registers": 64, "spill_stores": 256, "spill_loads": 256})
    assert spilled.counters["spills"] == 512
    assert spilled.time_ms > clean.time_ms


def test_impossible_launches_fail_as_resources(relu_8k):
    plan, space = relu_8k
    good = space.render(space.default())

    def with_launch(launch: Launch) -> Rendered:
        return Rendered(good.source, (launch,), facts=good.facts)

    too_many_threads = with_launch(Launch("ca_map", (64, 1, 1), (2048, 1, 1)))
    too_much_smem = with_launch(Launch("ca_map", (64, 1, 1), (256, 1, 1), 240 * 1024))
    for rendered, resources in [(too_many_threads, {}), (too_much_smem, {}),
                                (good, {"registers": 255, "smem_static": 0})]:
        if rendered is good:  # 255 registers x 1024 threads cannot fit a 64K register file
            rendered = with_launch(Launch("ca_map", (64, 1, 1), (1024, 1, 1)))
        res = simulate(plan, rendered, resources, TARGET)
        assert res.error_kind == "resources", res
        assert res.error_msg
        assert math.isinf(res.time_ms)
        assert set(res.counters) == set(COUNTER_KEYS)
    # static plus dynamic shared memory over the per-block limit
    res = simulate(plan, with_launch(Launch("ca_map", (64, 1, 1), (256, 1, 1), 200 * 1024)),
                   {"smem_static": 40 * 1024}, TARGET)
    assert res.error_kind == "resources"


def test_softmax_spread_over_200_configs(softmax_1g):
    plan, space = softmax_1g
    assert plan.bytes_moved() == GIB
    sample = space.sample(200, random.Random(0))
    results = [_sim(plan, space, c) for c in sample]
    assert all(r.error_kind is None for r in results)
    times = [r.time_ms for r in results]
    best, worst = min(times), max(times)
    default = _sim(plan, space, space.default()).time_ms
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    times.sort()
    print(f"\n[simulated] 1 GiB softmax, 200 sampled configs: best {best:.4f} ms "
          f"({floor_ms / best:.1%} of copy bandwidth), median {times[100] / best:.2f}x, "
          f"worst {worst / best:.1f}x; default config {default / best:.2f}x")
    assert worst / best > 3, "configurations must differ by several x, as on real GPUs"
    assert best > floor_ms


def test_short_rows_pay_for_barriers(tmp_mod):
    plan, space = _problem(tmp_mod, "softmax_short", "torch.softmax(x, dim=1)", (262144, 256))
    cfg = _with(space, space.default(), config__block=256, config__tpr=256, memory__vec=1,
                memory__cache="regs")
    shfl = _sim(plan, space, _with(space, cfg, reduction__combine="shfl"))
    tree = _sim(plan, space, _with(space, cfg, reduction__combine="smem_tree"))
    assert tree.time_ms > shfl.time_ms
    assert tree.counters["sync_stalls"] > shfl.counters["sync_stalls"] > 0


def test_smem_row_cache_bank_conflicts(tmp_mod):
    plan, space = _problem(tmp_mod, "softmax_mid", "torch.softmax(x, dim=1)", (8192, 1024))
    base = _with(space, space.default(), memory__cache="smem", memory__vec=1)
    narrow = _sim(plan, space, _with(space, base, config__tpr=8, config__block=256))
    wide = _sim(plan, space, _with(space, base, config__tpr=256, config__block=256))
    assert narrow.counters["bank_conflicts"] > 0  # 4 rows per warp start in the same bank
    assert wide.counters["bank_conflicts"] == 0


def test_fast_math_helps_transcendental_chains(tmp_mod):
    body = "torch.sin(torch.exp(x)) * torch.cos(torch.exp(-x)) / (torch.sin(x) + 2)"
    plan, space = _problem(tmp_mod, "trig", body, (4096, 4096))
    cfg = _with(space, space.default(), memory__vec=4)
    precise = _sim(plan, space, _with(space, cfg, compute__fastmath=0))
    fast = _sim(plan, space, _with(space, cfg, compute__fastmath=1))
    assert fast.time_ms < precise.time_ms
    assert fast.counters["issue_utilization"] < precise.counters["issue_utilization"]


# -- interface ---------------------------------------------------------------------------------

def test_counters_and_constants(relu_8k):
    plan, space = relu_8k
    res = _sim(plan, space, space.default())
    assert res.error_kind is None and res.time_ms > 0
    assert set(res.counters) == set(COUNTER_KEYS)
    assert 0 < res.counters["achieved_occupancy"] <= res.counters["theoretical_occupancy"] <= 1
    assert 0 < res.counters["dram_throughput"] < 1
    assert res.counters["registers"] == 32  # the assumption when the compiler did not report

    c = SimConstants()
    assert SimConstants.from_dict(c.to_dict()) == c
    assert SimConstants.from_dict({}) == c
    with pytest.raises(ValueError):
        SimConstants.from_dict({"no_such_constant": 1.0})
    slower = SimConstants.from_dict({"launch_overhead_us": 50.0})
    t_dict = _sim(plan, space, space.default(), constants={"launch_overhead_us": 50.0}).time_ms
    t_obj = _sim(plan, space, space.default(), constants=slower).time_ms
    assert t_dict == t_obj == pytest.approx(res.time_ms + 0.046)


def test_unknown_family_degrades_to_launches_and_plan(relu_8k):
    plan, space = relu_8k
    one = Rendered("", (Launch("k", (65536, 1, 1), (256, 1, 1)),),
                   facts=(("family", "mystery"), ("vec", 4)))
    two = Rendered("", (Launch("k1", (65536, 1, 1), (256, 1, 1)),
                        Launch("k2", (1, 1, 1), (32, 1, 1))),
                   workspace_bytes=4096, facts=(("family", "mystery"), ("vec", 4)))
    r1, r2 = simulate(plan, one, {}, TARGET), simulate(plan, two, {}, TARGET)
    assert r1.error_kind is None and r2.error_kind is None
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    assert floor_ms < r1.time_ms < 2 * floor_ms
    assert r2.time_ms > r1.time_ms  # a second launch costs at least its overhead


def test_col_template_if_present(tmp_mod):
    col = pytest.importorskip("cuda_agent.space.templates.col")
    plan = _problem(tmp_mod, "colsum", "x.sum(dim=1)", (16, 512, 1024))[0]
    space = Space(plan, TARGET, [col.ColTemplate()])
    results = [_sim(plan, space, c) for c in space.sample(300, random.Random(1))]
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    for r in results:
        assert r.error_kind is None, r.error_msg
        assert math.isfinite(r.time_ms) and r.time_ms > floor_ms
        assert set(r.counters) == set(COUNTER_KEYS)


def test_split_rows_if_present(tmp_mod):
    """One block cannot stream a whole tensor: splitting the row over the GPU must win."""
    plan, space = _problem(tmp_mod, "sum_all", "x.sum()", (8192, 8192))
    names = {t.name for t in space.templates}
    if not {"split", "row"} <= names:
        pytest.skip("the split template is not in the library")
    best: dict[str, float] = {}
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    for cfg in space.configs:
        res = _sim(plan, space, cfg)
        assert res.error_kind is None, res.error_msg
        assert res.time_ms > floor_ms
        name = space.template_of(cfg).name
        best[name] = min(best.get(name, math.inf), res.time_ms)
    assert best["split"] * 10 < best["row"], best
    assert floor_ms / best["split"] > 0.75


# -- pooling, scans and GEMM: the physics of their own models ----------------------------------------

@pytest.fixture(scope="module")
def avgpool_2x2(tmp_mod):
    # AvgPool2d(2) over (512, 512, 512): 512 MiB in, 128 MiB out
    return _problem(tmp_mod, "avgpool_2x2", "torch.nn.functional.avg_pool2d(x, 2)",
                    (512, 512, 512))


def _pool_cfg(space: Space, items: int, cache: str = "regs", **kw) -> Config:
    return _with(space, space.default(), config__items=items, memory__cache=cache,
                 compute__unroll="full", **kw)


def test_pool_strided_lanes_touch_more_lines_and_cost_time(avgpool_2x2):
    """Adjacent lanes start items x stride elements apart: each warp request touches more
    sectors and L1 lines, and once the warps' sectors outgrow L1 the reuse goes to L2."""
    plan, space = avgpool_2x2
    res = {items: _sim(plan, space, _pool_cfg(space, items, "regs" if items > 1 else "reload"))
           for items in (1, 2, 4, 8)}
    sectors = [res[i].counters["sectors_per_request"] for i in (1, 2, 4, 8)]
    assert sectors == sorted(sectors) and sectors[-1] > 2 * sectors[0], sectors
    assert res[8].time_ms > 1.3 * res[2].time_ms, {i: r.time_ms for i, r in res.items()}
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    assert all(r.time_ms > floor_ms for r in res.values())


def test_pool_smaller_l1_never_helps_and_hurts_strided_lanes(avgpool_2x2):
    """More re-reads that miss L1 cost more: shrinking L1 slows the strided (items=8)
    configuration and cannot speed up any."""
    plan, space = avgpool_2x2
    for items in (2, 8):
        cfg = _pool_cfg(space, items)
        times = [_sim(plan, space, cfg, constants={"l1_usable_bytes": kib * 1024}).time_ms
                 for kib in (512, 128, 32)]
        assert times == sorted(times), (items, times)
    strided = _pool_cfg(space, 8)
    big = _sim(plan, space, strided, constants={"l1_usable_bytes": 512 * 1024}).time_ms
    small = _sim(plan, space, strided, constants={"l1_usable_bytes": 32 * 1024}).time_ms
    assert small > 1.2 * big


def test_pool_row_loads_issued_together_share_their_sectors(avgpool_2x2):
    """A thread's loads of one window row are issued together, so L1 serves the rest of a
    sector the first one missed on: the more of that it serves, the cheaper 8-output threads
    (whose lanes are 64 bytes apart); 1-output threads, whose lanes read adjacent pairs, gain
    little. Without it the model priced 8-output threads of a 2x2 max pool 0.14 ms over
    1-output ones where the H200 took 0.017 more (fused_conv2d_relu_maxpool's sweep)."""
    plan, space = avgpool_2x2
    merged = [_sim(plan, space, _pool_cfg(space, 8), constants={"l1_inflight_merge": m}).time_ms
              for m in (0.0, 0.5, 0.8, 0.95, 1.0)]
    assert merged == sorted(merged, reverse=True) and merged[0] > 1.15 * merged[-1], merged
    one = [_sim(plan, space, _pool_cfg(space, 1, "reload"),
                constants={"l1_inflight_merge": m}).time_ms for m in (0.0, 1.0)]
    assert one[0] / one[1] < merged[0] / merged[-1]


def test_pool_overlapping_windows_in_flight(tmp_mod):
    """A stride-1 window re-reads what its neighbours read: loads of shared elements bring
    nothing new from DRAM, so one output per thread leaves the memory system idle, and loading
    the window one element at a time (no unroll) is slower still."""
    plan, space = _problem(tmp_mod, "maxpool1d_k5", "torch.nn.functional.max_pool1d(x, 5, 1, 2)",
                           (4096, 32768))
    one = _sim(plan, space, _pool_cfg(space, 1, "reload")).time_ms
    rolled = _sim(plan, space, _pool_cfg(space, 1, "reload").__class__.of(
        {**_pool_cfg(space, 1, "reload").as_dict(), "compute.unroll": "none"})).time_ms
    two = _sim(plan, space, _pool_cfg(space, 2)).time_ms
    assert two < one < rolled, (two, one, rolled)


def test_scan_vec4_not_slower_than_scalar_and_strided_items_cost(tmp_mod):
    """A row scan is a stream: 16-byte loads are never slower than 4-byte ones. Items put
    adjacent lanes items x vec elements apart, which costs lines per request and L2 traffic."""
    plan, space = _problem(tmp_mod, "cumsum_rows", "torch.cumsum(x, dim=1)", (4096, 65536))
    base = _with(space, space.default(), config__block=128, config__tpr=128,
                 reduction__split=1)
    for items in (1, 2):
        t = {vec: _sim(plan, space, _with(space, base, config__items=items, memory__vec=vec))
             for vec in (1, 4)}
        assert t[4].time_ms <= t[1].time_ms, (items, t[1].time_ms, t[4].time_ms)
    t1 = _sim(plan, space, _with(space, base, config__items=1, memory__vec=4))
    t8 = _sim(plan, space, _with(space, base, config__items=8, memory__vec=4))
    assert t8.counters["sectors_per_request"] > t1.counters["sectors_per_request"]
    assert t8.time_ms > 1.2 * t1.time_ms, (t1.time_ms, t8.time_ms)


def test_scan_split_reads_twice(tmp_mod):
    """A split scan's first launch reads everything for the chunk totals: over a tensor that
    L2 cannot hold, it costs about a third more traffic than one pass."""
    plan, space = _problem(tmp_mod, "cumsum_rows_s", "torch.cumsum(x, dim=1)", (4096, 65536))
    base = _with(space, space.default(), config__block=128, config__tpr=128, config__items=1,
                 memory__vec=4)
    one = _sim(plan, space, _with(space, base, reduction__split=1)).time_ms
    two = _sim(plan, space, _with(space, base, reduction__split=2)).time_ms
    assert two > 1.2 * one, (one, two)


@pytest.fixture(scope="module")
def gemm_2k(tmp_mod):
    path = tmp_mod / "gemm_2k.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)

        def get_inputs():
            return [torch.randn(2048, 2048), torch.randn(2048, 2048)]

        def get_init_inputs():
            return []
        """))
    plan = make_plan(load_problem(path).graph())
    return plan, Space.for_plan(plan, TARGET)


def _gemm(space: Space, **kw) -> Config:
    base = dict(config__bm=128, config__bn=128, compute__tm=8, compute__tn=8,
                config__warp="4x8", memory__bk=8, memory__stages=1, memory__vec_a=1,
                memory__vec_b=1, memory__frag="split", reduction__split=1)
    return _with(space, space.default(), **{**base, **kw})


def test_gemm_double_buffering_hides_latency_with_few_blocks(gemm_2k):
    """One resident 128x128 block per SM (255 registers): with one buffer every K slice waits
    for its loads; with two the next slice arrives during the current one. With two resident
    blocks the other block covers the wait."""
    plan, space = gemm_2k
    regs = {"registers": 255}
    one = _sim(plan, space, _gemm(space, memory__stages=1), regs).time_ms
    two = _sim(plan, space, _gemm(space, memory__stages=2), regs).time_ms
    assert two < 0.9 * one, (one, two)
    pair = {"registers": 128}
    one2 = _sim(plan, space, _gemm(space, memory__stages=1), pair).time_ms
    two2 = _sim(plan, space, _gemm(space, memory__stages=2), pair).time_ms
    assert two2 == pytest.approx(one2) and one2 < one


def test_gemm_vector_loads_conflicts_and_spills(gemm_2k):
    """16-byte loads stage the tiles with fewer instructions; a contiguous 8-wide thread tile
    costs two-way shared-memory conflicts; spills cost time."""
    plan, space = gemm_2k
    regs = {"registers": 128}
    scalar = _sim(plan, space, _gemm(space), regs).time_ms
    vector = _sim(plan, space, _gemm(space, memory__vec_a=4, memory__vec_b=4), regs).time_ms
    assert vector < scalar
    contig = _sim(plan, space, _gemm(space, memory__frag="contig"), regs).time_ms
    assert contig > scalar
    spilled = _sim(plan, space, _gemm(space), {**regs, "spill_stores": 64,
                                               "spill_loads": 64}).time_ms
    assert spilled > scalar


def test_gemm_uses_the_compilers_registers(gemm_2k):
    """The compiler's register count sets the occupancy: 255 registers leave one block per SM
    where 64 allow several, and the pipeline without a second buffer then idles."""
    plan, space = gemm_2k
    cfg = _gemm(space, config__bm=64, config__bn=64, compute__tm=4, compute__tn=4,
                memory__frag="contig")
    lean = _sim(plan, space, cfg, {"registers": 64})
    fat = _sim(plan, space, cfg, {"registers": 255})
    assert fat.counters["registers"] == 255 and lean.counters["registers"] == 64
    assert fat.counters["theoretical_occupancy"] < lean.counters["theoretical_occupancy"]
    assert fat.time_ms > lean.time_ms


# -- 2026-11-30 physics: L2 requests, evict-first loads, block dispatch, last wave, overlap --------

def _sample(space: Space, n: int, seed: int = 0) -> list[Config]:
    configs = list(space.configs)
    return random.Random(seed).sample(configs, min(n, len(configs)))


def _pick(space: Space, **slots) -> Config:
    """The first configuration of the space with these slot values (the space keeps slots
    without effect canonical, so configurations are picked, not built)."""
    for cfg in space.configs:
        d = cfg.as_dict()
        if all(d.get(k) == v for k, v in slots.items()):
            return cfg
    pytest.skip(f"no configuration with {slots}")


def test_more_bytes_never_faster(tmp_mod):
    """Every configuration of a map, a row softmax, a row scan and a pooling kernel is about
    as slow or slower on twice the rows (the same configuration, twice the bytes)."""
    cases = [("relu", "torch.relu(x)", (4096, 8192)),
             ("softmax", "torch.softmax(x, dim=1)", (4096, 4096)),
             ("cumsum", "torch.cumsum(x, dim=1)", (1024, 16384)),
             ("maxpool", "torch.nn.functional.max_pool2d(x, 2)", (64, 256, 256))]
    for name, body, shape in cases:
        big = (shape[0] * 2,) + shape[1:]
        plan_a, space_a = _problem(tmp_mod, f"mb_{name}_a", body, shape)
        plan_b, space_b = _problem(tmp_mod, f"mb_{name}_b", body, big)
        for cfg in _sample(space_a, 40):
            if space_b.check(cfg) is not None:
                continue
            a, b = _sim(plan_a, space_a, cfg), _sim(plan_b, space_b, cfg)
            if a.error_kind or b.error_kind:
                continue
            if a.counters.get("waves", 1.0) < 0.5:
                # a grid of under half a wave (few warps on each SM, latency-bound) doubles its
                # parallelism with its bytes: the same time, give or take the overlap
                continue
            # within 2 %: twice the blocks of a grid under one wave also put more warps on
            # each SM, which overlap memory and instructions a little better
            assert b.time_ms >= a.time_ms * 0.98, (name, cfg, a.time_ms, b.time_ms)


def test_l2_request_rate_limits_strided_scans_only(tmp_mod):
    """Lanes 128 bytes apart carry 16 bytes an L2 request: a slower L2 request rate never
    helps, slows the strided scan, and leaves the coalesced one (128 bytes a request) alone."""
    plan, space = _problem(tmp_mod, "cumsum_req", "torch.cumsum(x, dim=1)", (4096, 65536))
    base = _with(space, space.default(), config__block=128, config__tpr=128,
                 reduction__split=1, memory__vec=4)
    strided, coalesced = (_with(space, base, config__items=i) for i in (8, 1))
    rates = (1.0, 0.25, 0.06)
    ts = [_sim(plan, space, strided, constants={"l2_requests_per_clk_per_sm": r}).time_ms
          for r in rates]
    assert ts == sorted(ts) and ts[-1] > 1.5 * ts[0], ts
    tc = [_sim(plan, space, coalesced, constants={"l2_requests_per_clk_per_sm": r}).time_ms
          for r in rates[:2]]
    assert tc[1] < 1.02 * tc[0], tc


def test_stream_hint_loses_pool_reuse(avgpool_2x2):
    """Evict-first loads keep less of the overlapping windows' reuse in L1: never faster than
    plain loads, and less retention never helps."""
    plan, space = avgpool_2x2
    for items in (1, 2, 8):
        cache = "regs" if items > 1 else "reload"
        plain = _sim(plan, space, _pool_cfg(space, items, cache, memory__load="default"))
        stream_cfg = _pool_cfg(space, items, cache, memory__load="stream")
        stream = _sim(plan, space, stream_cfg)
        assert stream.time_ms >= plain.time_ms, (items, plain.time_ms, stream.time_ms)
        ts = [_sim(plan, space, stream_cfg, constants={"stream_hint_l1_retention": k}).time_ms
              for k in (1.0, 0.5, 0.1)]
        assert ts == sorted(ts), (items, ts)


def test_block_dispatch_bounds_grids_of_tiny_blocks(tmp_mod):
    """A thread per 8-element row in 32-thread blocks is millions of blocks: the block
    scheduler's rate bounds it, and a slower dispatch never helps."""
    plan, space = _problem(tmp_mod, "prod_rows8", "torch.prod(x, dim=1)", (1 << 22, 8))
    tiny = _pick(space, **{"config.block": 32, "config.tpr": 1, "config.grid": "exact"})
    L = space.render(tiny).launches[0]
    ts = [_sim(plan, space, tiny, constants={"block_dispatch_ns": ns}).time_ms
          for ns in (0.0, 80.0, 160.0)]
    assert ts == sorted(ts), ts
    floor = L.blocks * 160e-9 / TARGET.sm_count * 1e3
    assert ts[-1] >= floor * 0.999, (ts, floor)


def test_one_wave_grid_pays_the_sm_speed_spread(relu_8k):
    """A persistent grid (one wave of grid-stride blocks) ends with its slowest SM; a grid of
    a hundred waves is rebalanced by dispatch and barely notices."""
    plan, space = relu_8k
    base = _with(space, space.default(), memory__vec=4, config__items=1)
    persistent = _with(space, base, config__grid="persistent")
    exact = _with(space, base, config__grid="exact")

    def ratio(cfg: Config) -> float:
        a = _sim(plan, space, cfg, constants={"sm_speed_spread": 0.0}).time_ms
        b = _sim(plan, space, cfg, constants={"sm_speed_spread": 0.1}).time_ms
        assert b >= a
        return b / a

    assert ratio(persistent) > 1.05 and ratio(exact) < 1.01, (ratio(persistent), ratio(exact))


def test_overlap_falls_to_a_sum_with_one_warp():
    from cuda_agent.costmodel.model import _overlap

    c = SimConstants()
    ts = [_overlap(1.0, 0.8, c, w) for w in (64, 16, 8, 4, 1)]
    assert ts == sorted(ts), ts
    assert ts[-1] == pytest.approx(1.8) and ts[0] < 1.2
    assert _overlap(1.0, 0.0, c, 1) == 1.0


def test_short_rows_share_lines(tmp_mod):
    """Threads reading 8-element rows of a contiguous tensor: neighbouring lanes' rows share
    lines, so a thread per row still streams near the bandwidth (no over-fetch from DRAM)."""
    plan, space = _problem(tmp_mod, "sum_rows8", "torch.sum(x, dim=1)", (1 << 24, 8))
    cfg = _pick(space, **{"config.block": 256, "config.tpr": 1, "config.grid": "exact",
                          "memory.vec": 1, "compute.unroll": 2})
    res = _sim(plan, space, cfg)
    floor_ms = plan.bytes_moved() / TARGET.dram_bw * 1e3
    assert res.time_ms < 1.6 * floor_ms, (res.time_ms, floor_ms)
    assert res.counters["dram_throughput"] < 1.05


def test_attention_rolled_loops_wait_on_shared_memory():
    """q . k over a rolled d loop and p * v over a rolled key loop wait on their loads: unroll
    1 is never faster than 4, nor 4 than a full unroll."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    plan = make_plan(load_problem(root / "benchmarks/problems/attention_sdpa.py").graph())
    space = Space.for_plan(plan, TARGET)
    base = space.default()
    times = {}
    for u in ("full", 4, 1):
        try:
            cfg = _with(space, base, compute__unroll=u)
        except AssertionError:
            continue
        times[u] = _sim(plan, space, cfg).time_ms
    assert len(times) >= 2
    order = [times[u] for u in ("full", 4, 1) if u in times]
    assert order == sorted(order), times


def test_an_uncompiled_simt_gemm_spills_past_its_launch_bounds():
    """Without a compile report the model estimates the registers (the agents' prior models
    whole spaces without compiling): `__launch_bounds__(256, 2)` leaves 128 per thread, an 8 x 8
    thread tile needs more, and the spills make it slower than the same tile at one block per
    SM, as the H200 measured (gemm_odd, 128 x 128 blocks of 256 threads: 472 us at two blocks
    per SM and a 448-byte stack of spills, 75 us at one)."""
    from cuda_agent.costmodel.gemm import estimated_resources, simulate_gemm

    path = "benchmarks/problems/gemm_odd.py"
    plan = make_plan(load_problem(path).graph())
    space = Space.for_plan(plan, Target())
    pair = {}
    # rendered (the facts checked) only where the slots already say the tile: rendering all of
    # the space's 54,796 gemm configurations was 20 CPU-s
    tile = {"compute.tm": 8, "compute.tn": 8, "config.bm": 128, "config.bn": 128, "memory.bk": 16}
    for c in space.configs:
        if space.template_of(c).name != "gemm" or any(
                c.present().get(k) != v for k, v in tile.items()):
            continue
        f = dict(space.render(c).facts)
        if (f["threads"], f["tm"], f["tn"], f["bm"], f["bn"], f["bk"]) == (256, 8, 8, 128, 128, 16):
            pair.setdefault(f["minblocks"], c)
    assert set(pair) == {1, 2}
    facts = {m: dict(space.render(c).facts) for m, c in pair.items()}
    tight = estimated_resources(facts[2])
    roomy = estimated_resources(facts[1])
    assert tight["registers"] == 128 and tight["spill_stores"] > 0 and tight["stack"] > 0
    assert roomy["registers"] > 128 and roomy["spill_stores"] == 0
    ms = {m: simulate_gemm(space.render(c), None, Target())[0] for m, c in pair.items()}
    assert ms[2] > 1.2 * ms[1]
    # a compile report, when there is one, is used as it is
    compiled = simulate_gemm(space.render(pair[2]), {"registers": 128}, Target())[0]
    assert compiled < ms[2]
