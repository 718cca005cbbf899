"""The tensor-core template's model (`sim_gemm.simulate_gemm_tc`): a lone block per SM and
the waits on spilled values, the two effects fitted on the recorded H200 measurements."""

from types import SimpleNamespace

import pytest

from cuda_agent.costmodel import gemm as sim_gemm
from cuda_agent.space.slots import Target

TARGET = Target()

#: the facts the template renders for fused_conv2d_relu_maxpool's convolution, 128 x 128 tiles
#: of eight warps (a 128 x 131072 x 576 product gathered through a table)
CONV_128X128 = {
    "family": "gemm", "mma": "tf32x3", "threads": 256, "bm": 128, "bn": 128, "bk": 16,
    "wm": 32, "wn": 64, "stages": 3, "vec_a": 4, "vec_b": 1, "split": 1, "raster": 1,
    "unroll": 2, "fresh_steps": 1, "M": 128, "N": 4096, "K": 576, "batch": 32,
    "smem": 56832, "computed_tiles": 1024, "gather_dims": 2, "gather": "table",
    "gather_transposed": 0}


def _ms(facts: dict, resources: dict) -> float:
    ms, _, err = sim_gemm.simulate_gemm_tc(SimpleNamespace(facts=facts), resources, TARGET)
    assert err is None
    return ms


def test_two_blocks_per_sm_beat_one_of_the_same_warps():
    """128 registers let two 256-thread blocks share an SM; 200 leave one, whose eight warps
    meet at every slice's barrier. The model charges the lone block for running in step: not
    for fewer warps (eight per SM keep the pipes overlapped when the blocks are independent)."""
    two = _ms(CONV_128X128, {"registers": 128})
    one = _ms(CONV_128X128, {"registers": 200})
    assert sim_gemm.resident_blocks(TARGET, 256, 128, CONV_128X128["smem"]) == 2
    assert sim_gemm.resident_blocks(TARGET, 256, 200, CONV_128X128["smem"]) == 1
    assert one > 1.05 * two, (one, two)


def test_lone_block_charge_follows_its_constant(monkeypatch):
    """The charge is the lost overlap: at full overlap a lone block costs what two do."""
    monkeypatch.setattr(sim_gemm, "TC_LONE_BLOCK_OVERLAP", 1.0)
    alike = _ms(CONV_128X128, {"registers": 200})
    monkeypatch.setattr(sim_gemm, "TC_LONE_BLOCK_OVERLAP", 0.25)
    assert _ms(CONV_128X128, {"registers": 200}) > alike


def test_spilled_values_stall_a_sm_of_few_warps():
    """Four warps per SM (one 128-thread block) wait on each spilled value themselves; sixteen
    (four such blocks) cover the same waits with each other's work."""
    few = {**CONV_128X128, "threads": 128, "wm": 64, "wn": 64, "smem": 200_000}
    many = {**few, "smem": 50_000}
    spills = {"spill_stores": 160, "spill_loads": 160, "stack": 160}
    for facts, blocks in ((few, 1), (many, 4)):
        assert sim_gemm.resident_blocks(TARGET, 128, 120, facts["smem"]) == blocks
    few_cost = _ms(few, {"registers": 120, **spills}) / _ms(few, {"registers": 120})
    many_cost = _ms(many, {"registers": 120, **spills}) / _ms(many, {"registers": 120})
    assert few_cost > 1.2, few_cost
    assert many_cost < few_cost


def test_spill_stall_is_zero_without_spills_and_grows_with_latency():
    none = sim_gemm.spill_stall_s({"registers": 64}, 128, 1, 10_000, TARGET)
    assert none == 0.0
    in_l1 = sim_gemm.spill_stall_s({"spill_loads": 64, "stack": 64}, 128, 1, 10_000, TARGET)
    in_l2 = sim_gemm.spill_stall_s({"spill_loads": 64, "stack": 4096}, 128, 1, 10_000, TARGET)
    assert 0 < in_l1 < in_l2
    assert in_l2 / in_l1 == pytest.approx(sim_gemm.L2_LATENCY_CLK / sim_gemm.L1_LATENCY_CLK,
                                          rel=0.05)
