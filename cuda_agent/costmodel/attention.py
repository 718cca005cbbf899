"""The simulator's model of the attention template (family ``attention``): simulated figures only.

Attention is bound by arithmetic and shared memory, not DRAM, so like the GEMM it gets its own
small model. The main time is the slowest of

* issue: the tiles' multiply-adds (q . k and p * v over every key tile a block visits, padded
  rows and keys included) plus the shared-memory loads feeding them (a K element per q . k FMA,
  the q element too when the query row is not in registers, a V element per p * v FMA), the
  exps, loop control (less when unrolled) and the tile copies; divided by how well the resident
  warps' independent chains (keys, output dims per thread) hide the FMA latency;
* shared-memory wavefronts: bank conflicts when the G threads of a row read K rows of a pitch
  that maps them to few banks (padding breaks it), and the same for query rows;
* L2 traffic: every block re-reads its batch entry's K and V; DRAM: the operands and the output
  once,

scaled by the wave quantization of blocks over SMs. On top, per key tile: barriers (three with
one K/V buffer, two with two), the row-max combine (shuffles, or a barrier and a serial fold
through shared memory) and, with one buffer, the tile loads' latency that other resident warps
do not cover; these are exposed in proportion to 1 / resident blocks. The constants are
uncalibrated estimates, like `sim_gemm`'s.
"""

from __future__ import annotations

import math

from ..space.slots import Rendered, Target
from .gemm import MMA_SYNC_TF32_FLOPS, resident_blocks

FMA_LANES_PER_SM = 128
LDS_WAVEFRONTS_PER_CLK = 1.0  # shared-memory wavefronts per clock and SM
L2_BW = 10e12  # bytes/s
GLOBAL_LATENCY_CLK = 700
BARRIER_CLK = 24
SHFL_CLK = 24
SERIAL_STEP_CLK = 6
LATENCY_WARPS = 16  # warps x independent chains an SM needs to keep the FMA pipes busy
# warps x loads in flight an SM needs to cover a shared-memory load's latency (~30 cycles) when
# each FMA waits on its operands' loads (a loop the compiler did not unroll): 4 schedulers x
# 30 cycles / ~3 instructions a step
SMEM_LATENCY_WARPS = 40
EXP_INSTR = {0: 10.0, 1: 2.0}  # expf vs __expf
SOFTMAX_INSTR = 8.0  # per score: scale, mask test, max, subtract, store p, sum
LAUNCH_US = 4.0


def simulate_attention(rendered: Rendered, resources: dict | None, target: Target,
                       bytes_moved: int) -> tuple[float, dict[str, float], str | None]:
    """(modelled ms, counters, failure message or None) of one attention candidate."""
    f = dict(rendered.facts)
    threads, blocks, bq, g, bk = (int(f[k]) for k in ("threads", "blocks", "bq", "g", "bk"))
    D, DV, tiles, smem = int(f["D"]), int(f["DV"]), int(f["tiles"]), int(f["smem"])
    stages, vec, pad = int(f["stages"]), int(f["vec"]), int(f["pad"])
    regs = _registers(resources, int(f["registers_est"]))
    spills = _spills(resources)
    blocks_sm = resident_blocks(target, threads, regs, smem)
    if blocks_sm < 1:
        return math.inf, {}, "block does not fit on an SM"
    clk, sms = target.clock_hz, target.sm_count
    waves = blocks / (sms * blocks_sm)
    quant = math.ceil(waves) / waves
    warps_sm = blocks_sm * threads / 32
    # arithmetic: every visited tile is a BQ x BK block of scores and its share of p @ v
    pairs = tiles * bq * bk
    fma_qk, fma_pv = pairs * D, pairs * DV
    unroll = f.get("unroll")
    loop = 0.2 if unroll == "full" else 3.0 / (4.0 if unroll == "4" else 1.0)
    lds_qk = 1.0 + (0.0 if f.get("cache") == "regs" else 1.0)
    dpt = -(-DV // g)
    lds_pv = 1.0 + 1.0 / dpt
    copies = tiles * bk * (D + DV)
    instr_qk = fma_qk * (1.0 + lds_qk + loop)
    instr_pv = fma_pv * (1.0 + lds_pv + loop / dpt)
    instr_rest = (pairs * (EXP_INSTR[int(f.get("fast", 0))] + SOFTMAX_INSTR)
                  + copies * (1.0 + 4.0 / vec))
    # independent FMA chains a thread interleaves. q . k: one dot product per key the thread
    # scores, but a dot is one dependent chain over d, and only a fully unrolled d loop (the
    # query row in registers, or unroll "full") lets the compiler interleave the keys' dots;
    # a partly unrolled loop gets its loads ahead (about two chains' worth), a rolled one
    # waits on each shared-memory load. p * v: the thread's output dims are independent.
    kpt = max(1, bk // g)
    rolled = 1.0 if unroll == "1" else (4.0 if unroll == "4" else 0.0)  # 0: fully unrolled
    if f.get("cache") == "regs" or not rolled:
        hide_qk = min(1.0, warps_sm * min(kpt, 8) / LATENCY_WARPS)
    else:  # each step's FMA waits on its shared-memory loads, `rolled` steps' loads at once
        hide_qk = min(1.0, warps_sm * rolled / SMEM_LATENCY_WARPS)
    if rolled:  # the key loop of p * v: its V loads wait for the loop to come round
        hide_pv = min(1.0, warps_sm * rolled * max(1, min(dpt, 8)) / SMEM_LATENCY_WARPS)
    else:
        hide_pv = min(1.0, warps_sm * max(1, min(dpt, 8)) / LATENCY_WARPS)
    chains = max(1.0, min(kpt, dpt, 8))
    hide = min(1.0, warps_sm * chains / LATENCY_WARPS)
    issue_s = (instr_qk / hide_qk + instr_pv / hide_pv + instr_rest / hide) / (
        FMA_LANES_PER_SM * sms * clk)
    tensor_cores = f.get("mma") in ("tf32x3", "tf32")
    if tensor_cores:
        # tensor cores: three mma a 16 x 8 x 8 tile (both products; one in TF32 by the user's
        # choice) on the tensor pipe, and per tile the operand splits, fragment loads and
        # partial-sum adds on the FMA pipe (an estimate: the H200's mma.sync rate is
        # `gemm_tc`'s measured constant)
        terms = 3 if f.get("mma") == "tf32x3" else 1
        mma_s = terms * 2.0 * (fma_qk + fma_pv) / MMA_SYNC_TF32_FLOPS
        # per 16 x 8 x 8 tile (1024 multiply-adds) a lane splits its B fragment, loads it and
        # adds the partial: about 12 instructions, 384 lane operations (a TF32 rounding in
        # place of a split: about 8)
        side = ((fma_qk + fma_pv) * (0.375 if terms == 3 else 0.25) + instr_rest) / (
            FMA_LANES_PER_SM * sms * clk)
        issue_s = max(mma_s, side) + 0.3 * min(mma_s, side)
    # shared memory: one wavefront per warp request, times its bank conflicts
    k_ways = _conflict_ways(min(g, 32), D + pad)
    q_ways = 0 if f.get("cache") == "regs" else _conflict_ways(max(1, 32 // g), D + pad)
    wavefronts = (fma_qk * (k_ways + q_ways) + fma_pv * (1 + 1.0 / dpt) + copies) / 32
    if tensor_cores:  # fragment reads: about 3 wavefronts a 16 x 8 x 8 tile
        wavefronts = (fma_qk + fma_pv) / 1024 * 3 + copies / 32
    smem_s = wavefronts / (LDS_WAVEFRONTS_PER_CLK * sms * clk)
    l2_s = copies * 4.0 * (1.0 + 0.25 * (vec == 1)) / L2_BW
    dram_s = (bytes_moved + spills * blocks * threads) / target.dram_bw
    # per tile, per block: barriers, the row-max combine, uncovered load latency
    syncs = (3 if stages == 1 else 2) + (1 if f.get("combine") == "serial" and g > 1 else 0)
    combine = 0.0 if g == 1 else (math.log2(g) * SHFL_CLK if f.get("combine") == "shfl"
                                  else g * SERIAL_STEP_CLK)
    cover = min(1.0, warps_sm / (16.0 if stages == 1 else 6.0))
    tile_clk = syncs * BARRIER_CLK + combine + GLOBAL_LATENCY_CLK * (1.0 - cover)
    exposed_s = tiles / sms * tile_clk / blocks_sm / clk
    main_s = max(issue_s, smem_s, l2_s, dram_s) * quant + exposed_s
    total_s = main_s + LAUNCH_US * 1e-6
    occ = warps_sm / (target.max_threads_per_sm / 32)
    counters = {"achieved_occupancy": occ * min(1.0, waves), "theoretical_occupancy": occ,
                "waves": waves, "sectors_per_request": 4.0 * vec,
                "dram_throughput": dram_s / main_s,
                "bank_conflicts": max(0.0, k_ways - 1.0) + max(0.0, q_ways - 1.0),
                "registers": float(regs), "spills": float(spills),
                "issue_utilization": min(1.0, issue_s / main_s),
                "sync_stalls": exposed_s / total_s, "atomic_contention": 0.0}
    return total_s * 1e3, counters, None


def _conflict_ways(rows: int, pitch: int) -> float:
    """Wavefronts of a warp reading one word from each of `rows` rows of `pitch` words: rows a
    multiple of 32 / gcd(pitch, 32) apart fall on the same bank."""
    banks = 32 // math.gcd(pitch, 32)
    return float(math.ceil(rows / banks))


def _registers(resources: dict | None, estimate: int) -> int:
    """The compiler's registers (the builder's report, worst case over the candidate's one
    kernel), else the template's estimate."""
    return int((resources or {}).get("registers") or min(255, estimate))


def _spills(resources: dict | None) -> float:
    res = resources or {}
    return float(res.get("spill_stores", 0) or 0) + float(res.get("spill_loads", 0) or 0)
