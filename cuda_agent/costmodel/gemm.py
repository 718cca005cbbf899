"""The simulator's model of the tiled GEMM template (family ``gemm``): simulated figures only.

A matrix product is bound by arithmetic, not bandwidth, so it gets its own small model instead
of the streaming one in `sim_model`. The time of the main kernel is a soft maximum of

* FMA issue: the padded tiles' multiply-adds over the measured fp32 rate, divided by the inner
  loop's issue efficiency (TM x TN FMAs per (TM + TN) / 4 vector shared-memory loads and loop
  overhead, plus staging the A and B tiles: scalar loads take 4x the instructions of 16-byte
  ones) and by the K-slice pipeline's efficiency: a block computes a slice while its next one
  is in flight (two buffers) or only after it arrived (one), and the other resident blocks
  (from the compiler's register count) cover the wait;
* shared-memory bandwidth: the wavefronts of the fragment loads per K step and of the tile
  stores per K slice, counted bank by bank from the template's addresses (`smem_wavefronts`:
  broadcasts, the two wavefronts of a contiguous 8-wide thread tile, the conflicts of
  transposed stores without padding);
* L2 traffic: every block re-reads its A and B panels; grouped rasters and L2 reuse cut it;
* DRAM: the operands once and the output once (twice its bytes where contiguous 8-wide
  thread tiles half-write each sector a store touches);
* spills: the compiler's spill bytes move per thread and K slice, through L1 while the stack
  frames of the resident threads fit there, else through L2,

scaled by the wave quantization of tiles over SMs. Split-K adds partial sums through memory and
a second launch. Most constants are uncalibrated estimates (the fitted ones say on what data);
the model's rank correlation with the GPU is measured like the others'
(`benchmarks/sim_correlation.py`).

The tensor-core template (`gemm_tc`, facts ``mma=tf32x3``) has its own model,
`simulate_gemm_tc`: the tensor pipe against the operand splits and partial-sum adds per warp
and 8-deep step (overlapping less when a lone block's warps run in step), the cp.async tile
fill from L2, a barrier per K slice, the waits on spilled values, and the tail counted in
blocks per SM. Its first constants came from the H200 searches' trials; the overlap of a lone
block and the fill rate were fitted on every recorded measurement of the template (live runs
and convolution sweeps, `benchmarks/sim_tc_fit.py`).

A transposed convolution run as sub-convolutions per output phase (facts ``tconv=phase``,
``phase_k``) is priced by what its blocks really do: every phase's tiles, each reducing its
own K (`blocks_k`), B read through tables without the gathered zeros.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..space.slots import Rendered, Target
from ..space.templates.library import epilogue_bytes

# The library's product is a black box to the model: its rate per kind of call, in strict fp32,
# as the H200 sweeps' library records measured it (the best record of each problem, its epilogue
# pass taken out; set from the records the correlation is then judged on, so in-sample):
#: cuBLAS matmul, of the measured fp32 FMA rate (the large products reached 50.4 to 51.5 TFLOP/s,
#: about that rate; kept below it, as before)
LIBRARY_FP32_EFFICIENCY = 0.95
#: cuDNN, a dense convolution (0.75 to 0.83 over nine problems)
CONV_EFFICIENCY = 0.82
#: cuDNN, grouped (more than one group, several channels each): 0.39 at 8 groups
GROUPED_CONV_FACTOR = 0.45
#: cuDNN, depthwise (one input channel per group): bound by memory, at this share of the DRAM
#: bandwidth for the input read and the product written (0.2 measured)
DEPTHWISE_BW_SHARE = 0.2
#: cuDNN, transposed convolution, by spatial dims 1, 2, 3 (0.39, 0.21, 0.13 measured)
TRANSPOSED_CONV_EFFICIENCY = (0.4, 0.22, 0.12)
#: host and library overhead of the call beyond its kernels' launches (the odd-sized problems'
#: records: about 30 us for a convolution whose arithmetic takes none)
LIBRARY_CALL_US = 25.0

SMEM_BYTES_PER_CLK = 128
L2_BW = 10e12  # bytes/s, an H100/H200-class estimate
GLOBAL_LATENCY_CLK = 700
LAUNCH_US = 4.0
#: Lane-instructions per staged vector of A or B per K slice: the load, its bounds test and
#: select, the shared-memory store.
TILE_LOAD_INSTR = 4.0
#: L1 bytes per SM that can hold spilled stack frames (the streaming model's l1_usable_bytes).
L1_BYTES = 128 * 1024
#: Lane-instructions per gathered element of a convolution's B, beyond the load itself:
#: division chains by constants and a bounds test per spatial dim (0 for a plain product).
#: The same estimate as the tensor-core template's division chains; with it the SIMT template's
#: median modelled/measured time over the recorded convolution sweeps went from about 0.55 to
#: 0.78 (the tensor-core template's: 0.85), and the convolutions' median rank correlation (both
#: templates and cuDNN in one space) from 0.69 to 0.8.
def GATHER_INSTR(dims: int) -> float:  # noqa: N802 - a constant of the model, by dimension
    return 12.0 + 8.0 * dims if dims else 0.0


#: Lane-instructions per gathered element of the tensor-core template's B: a constant-table
#: lookup and a compare per spatial dim, or division chains (`gemm_tc`'s arithmetic gather),
#: plus, for a transposed convolution, `TRANSPOSED_GATHER_INSTR` per dim: the stride's
#: exactness test and division of `gemm._transposed_coord`, and the zero-filled copies of the
#: taps that miss: an effective cost (the cp.async copies are 4-byte and predicated; the
#: instructions alone would be a few per dim). Set from the live runs (in-sample): on the five
#: transposed convolutions' sampled configurations the tensor-core template's modelled/measured
#: time was 0.60 to 0.70 against 0.94 to 1.03 on the tabled dense ones; with
#: `SIMT_TIME_SCALE` 1.25, 32 per dim (tried 8 to 64) ranks them best (median Spearman of
#: the five 0.62; 8: 0.36, 64: 0.58).
TRANSPOSED_GATHER_INSTR = 32.0


#: Lane-instructions per gathered element of a transposed convolution's phase (`memory.tconv`
#: = "phase", `tconv_phases.py`) beyond the direct table gather's: k's channel and tap (a
#: division by a constant) and the tap-table read. An estimate, not fitted: no phased kernel has
#: been measured yet.
PHASE_TAP_INSTR = 4.0


def TC_GATHER_INSTR(dims: int, table: bool, transposed: bool) -> float:  # noqa: N802
    if table:
        return 8.0 + 3.0 * dims
    return 12.0 + 8.0 * dims + (TRANSPOSED_GATHER_INSTR * dims if transposed else 0.0)


#: The SIMT template's modelled time against the tensor-core template's: at 1.0 its
#: modelled/measured time on the live runs' configurations was 0.65 to 0.87 per problem against
#: 1.0 to 1.15 for the tensor-core template's, so the model ranked SIMT configurations above
#: tensor-core ones that beat them. A plain factor on the SIMT kernel's time, which leaves the
#: order among SIMT configurations as it was (the recorded single-GEMM sweeps, SIMT only, rank
#: the same). Set from the live runs' configurations of 43 GEMM and convolution problems:
#: 1.25 raises the GEMMs' median Spearman on either half of the problems alone
#: (docs/journal.md: costmodel/gemm.py).
SIMT_TIME_SCALE = 1.25

#: Clocks of an SM's shared-memory pipe per wavefront of the SIMT template's fragment loads and
#: tile stores (`smem_wavefronts` counts the wavefronts bank by bank; the data sheet's 128 bytes
#: per clock would be 1.0). Fitted to the recorded H200 sweeps of the gemm family: 1.5 ranks
#: the SIMT-only sweeps best, and the convolution sweeps prefer 1.0 to 1.5 (docs/journal.md:
#: costmodel/gemm.py). The excess over 1.0 stands for what the
#: count leaves out: LDS.128 issue through the MIO queue, the K slice's barrier.
SMEM_CLK_PER_WAVEFRONT = 1.5
#: DRAM cost of the output tile, relative to its bytes, where a thread's 8 columns are
#: contiguous (`frag=contig`, TN=8): the lanes of a float4 store are 32 bytes apart, so every
#: 32-byte sector a warp instruction touches is only half written by it (twice the sectors per
#: request; the other half comes from the thread's next store). 2: twice the write traffic.
#: Matters where the output dominates the traffic (gemm_tall_skinny, K=16, a 1 GiB output:
#: contiguous 8-wide tiles measured up to 5x slower than split ones; docs/journal.md,
#: costmodel/gemm.py); the other sweeps barely move.
CONTIG_STORE_COST = 2.0


#: Sharpness of the soft maximum over the SIMT kernel's limits (FMA issue, shared memory, L2,
#: DRAM, spills; large: a plain maximum). At 2 more of the smaller limits shows through (a
#: warp stalled on a shared-memory wavefront or a barrier issues no FMA meanwhile); fitted on
#: the same sweeps (docs/journal.md: costmodel/gemm.py).
OVERLAP_SHARPNESS = 2.0


def simulate_gemm(rendered: Rendered, resources: dict | None, target: Target
                  ) -> tuple[float, dict[str, float], str | None]:
    """(modelled ms, counters, failure message or None) of one GEMM candidate."""
    f = dict(rendered.facts)
    if f.get("mma") in ("tf32x3", "tf32", "f16", "bf16"):
        return simulate_gemm_tc(rendered, resources, target)
    bm, bn, bk, tm, tn = (int(f[k]) for k in ("bm", "bn", "bk", "tm", "tn"))
    M, N, K, batch = (int(f[k]) for k in ("M", "N", "K", "batch"))
    split, stages = int(f["split"]), int(f["stages"])
    threads = int(f["threads"])
    smem = int(f["smem"])
    if resources is None or not resources.get("registers"):
        # not compiled (the agents' prior): estimated
        resources = {**(resources or {}), **estimated_resources(f)}
    regs = int(resources["registers"])
    blocks_sm = resident_blocks(target, threads, regs, smem)
    if blocks_sm < 1:
        return math.inf, {}, "block does not fit on an SM"
    clk = target.clock_hz
    tiles = -(-M // bm) * -(-N // bn) * batch * int(f.get("phases", 1))
    if f.get("skips_zero_tiles"):
        tiles = max(1, int(tiles * 0.53))
    blocks = tiles * split
    slots = target.sm_count * blocks_sm
    waves = blocks / slots
    quant = math.ceil(waves) / waves if waves > 0 else 1.0
    # K (whole slices) summed over the blocks: a transposed convolution's phases each their own
    block_k = blocks_k(f, K, split, bk, tiles)
    fma = block_k * bm * bn
    warps_sm = blocks_sm * threads / 32
    # inner loop: TM*TN FMAs per (TM+TN)/4 LDS.128 and ~2 instructions of loop/address work;
    # per K slice every thread also loads its share of the A and B tiles and stores it to
    # shared memory (load, guard, store per vector: scalar loads issue 4x more)
    issue_eff = tm * tn / (tm * tn + (tm + tn) / 4 + 2)
    stage_instr = TILE_LOAD_INSTR * (bm / int(f.get("vec_a", 1)) + bn / int(f.get("vec_b", 1)))
    # a convolution's B is gathered element by element: channel, kernel offset and output
    # pixel by division chains, a bounds test per spatial dim (`GemmTemplate.gather_index`)
    stage_instr += bn * GATHER_INSTR(int(f.get("gather_dims", 0)))
    issue_eff *= bm * bn / (bm * bn + stage_instr)
    # the measured fp32 rate (as the library's model and the streaming model use), below the
    # 128 FMA lanes per clock and SM of the data sheet
    fma_per_clk = target.fp32_flops / 2 / (target.sm_count * clk)
    fma_s = fma / (fma_per_clk * target.sm_count * clk) / issue_eff
    # shared memory: the wavefronts of a block's fragment loads per K step and of its tile
    # stores per K slice, counted bank by bank from the template's addresses (a contiguous
    # 8-wide thread tile puts lanes 32 bytes apart, two wavefronts per quarter warp; a
    # transposed store without padding hits one bank per column)
    contig = f.get("frag") != "split"
    frag_wf, store_wf = smem_wavefronts(bm, bn, bk, tm, tn, str(f.get("warp", "row")),
                                        not contig, int(f.get("pad", 0)), stages,
                                        str(f.get("a_along")), str(f.get("b_along")),
                                        int(f.get("vec_a", 1)), int(f.get("vec_b", 1)))
    smem_s = (block_k / bk * (bk * frag_wf + store_wf) * SMEM_CLK_PER_WAVEFRONT
              / (target.sm_count * clk))
    transposed = (f.get("a_along") == "k") + (f.get("b_along") == "k")
    # global traffic: each block reads its panels; vector loads issue 4x fewer requests
    panel = block_k * (bm + bn) * 4.0
    reuse = 0.6 if int(f.get("raster", 1)) > 1 else 1.0
    vec_pen = 1.0 + 0.25 * ((int(f.get("vec_a", 1)) == 1) + (int(f.get("vec_b", 1)) == 1))
    l2_s = panel * reuse * vec_pen / L2_BW
    out_bytes = batch * M * N * 4.0 * int(f.get("phases", 1))
    dram_s = main_dram_s(*dram_shape(f, batch, M, N, K), split, target)
    if contig and tn == 8:  # half-written sectors per store request
        dram_s += out_bytes * (CONTIG_STORE_COST - 1) / target.dram_bw
    # latency: a block's K step computes for `step_clk`; its next slice arrives after the
    # global latency, during the step with two buffers, after it with one. The other resident
    # blocks compute meanwhile, so the SM idles only when they cannot cover the wait.
    step_clk = bm * bn * bk / fma_per_clk / issue_eff
    # a cp.async pipeline (3 or 4 stages) keeps stages - 1 slices in flight: each extra one
    # hides another step of the latency
    wait_clk = (GLOBAL_LATENCY_CLK + step_clk if stages == 1 else
                max(0.0, GLOBAL_LATENCY_CLK - max(0, stages - 2) * step_clk))
    pipe_eff = min(1.0, blocks_sm * step_clk / max(wait_clk, 1.0))
    spill_s = _spill_time(resources, threads, blocks_sm, block_k / bk, target)
    limits = (fma_s / pipe_eff, smem_s, l2_s, dram_s, spill_s)
    main_s = _soft_max(limits, OVERLAP_SHARPNESS) * quant * SIMT_TIME_SCALE
    latency_s = (fma_s / pipe_eff - fma_s) * quant  # exposed waits for K slices
    total_s = main_s + LAUNCH_US * 1e-6
    total_s += split_sum_s(split, out_bytes, target)
    occ = warps_sm / (target.max_threads_per_sm / 32)
    counters = _counters(occ, waves, vec_pen, dram_s, main_s, regs, resources,
                         bank=1.0 if transposed and not int(f.get("pad", 0)) else 0.0,
                         issue=fma_s, sync=(latency_s / total_s) if total_s else 0.0)
    return total_s * 1e3, counters, None


#: split-K's workspace traffic over its bytes at the copy bandwidth: partial tiles written
#: raw from the accumulators' layout (scattered sectors) and read back by a second kernel.
#: Measured: split 16 cost 0.07 ms over split 1 on gemm_odd's 1001 x 997 output, 2.3x its
#: workspace bytes at the copy bandwidth; 3 ranks the live bench's split-K configurations
#: better than 1 (docs/journal.md: costmodel/gemm.py).
SPLIT_PARTIAL_COST = 3.0

#: mma.sync TF32 rate the template reaches on the H200, flop/s for the whole GPU: fitted to the
#: measured prototype (3xTF32 at 54 TFLOP/s of fp32 work; wgmma reaches ~384; docs/journal.md:
#: costmodel/gemm.py)
MMA_SYNC_TF32_FLOPS = 170e12
#: the fp16/bf16 m16n8k8 mma against the TF32 one, per flop: the tensor core's dense half rate
#: is twice its TF32 rate (H200 datasheet); an estimate until the half path is measured
MMA_SYNC_HALF_SPEEDUP = 2.0
#: L2 -> shared memory copy rate of the cp.async tile loads, bytes/s for the whole GPU: smaller
#: block tiles copy more per flop and slow down by it. Fitted with `TC_LONE_BLOCK_OVERLAP` by
#: `benchmarks/sim_tc_fit.py` on every recorded H200 measurement of the template (2,900
#: configurations of 60 problems, live runs and convolution sweeps; see that constant)
TC_TILE_FILL_BW = 3e12
#: cp.async copies run beside the tensor pipe (no staging registers, no issue slots taken from
#: the mma): the limits overlap almost fully (the same searches: 128 x 128 tiles, whose copies
#: take 70 % of the mma time, run as fast as 128 x 256 ones)
TC_OVERLAP_SHARPNESS = 8.0
#: warps per SM from which the tensor pipe and the ALU work (operand splits, partial-sum adds)
#: of an unrolled step overlap fully (twice as many for a rolled step)
TC_OVERLAP_WARPS = 4.0
#: clocks a block waits at the end of each K slice (cp.async wait and barrier): the searches'
#: 16-deep slices ran 1-4 % slower than 32-deep ones
SLICE_SYNC_CLK = 100.0
#: The share of the tensor/ALU overlap left when an SM holds a single block: its warps meet at
#: every K slice's barrier and run the slice in step (all issue mma, then all split operands),
#: where two or more blocks drift apart and fill each other's gaps. On the recorded H200
#: measurements the model underpriced one-block configurations by 8 % (median log residual
#: within a problem; two or more blocks: -2 % to -12 %), e.g. fused_conv2d_relu_maxpool's
#: 128 x 128 tiles of 256 threads measured 0.53-0.57 ms against 0.47 for 128 x 64 tiles
#: of 128 threads, two per SM. Fitted with `TC_TILE_FILL_BW` (`benchmarks/sim_tc_fit.py`,
#: grid 0-1 x 2.5e12-5e12, the best median Spearman over 60 problems, that problem held out):
#: median 0.88 -> 0.90, and each of six cross-validation halves gains on the half it did not
#: see; the held-out problem's sweep 0.61 -> 0.80 (0.86 with the pooling model's
#: `l1_inflight_merge` of the same day).
TC_LONE_BLOCK_OVERLAP = 0.25
#: load-to-use latency of a local (spilled) value, clocks, from L1 and from L2 (H100-class
#: microbenchmark figures)
L1_LATENCY_CLK = 35.0
L2_LATENCY_CLK = 260.0


def simulate_gemm_tc(rendered: Rendered, resources: dict | None, target: Target
                     ) -> tuple[float, dict[str, float], str | None]:
    """The 3xTF32 tensor-core template: three mma per 16 x 8 x 8 tile on the tensor pipe
    against the operand splits, partial-sum adds and fragment loads on the others, per warp and
    8-deep step; shared-memory, L2 and DRAM traffic and wave quantization as the SIMT model."""
    f = dict(rendered.facts)
    bm, bn, bk, wm, wn = (int(f[k]) for k in ("bm", "bn", "bk", "wm", "wn"))
    M, N, K, batch = (int(f[k]) for k in ("M", "N", "K", "batch"))
    split, threads, smem = int(f["split"]), int(f["threads"]), int(f["smem"])
    regs = int((resources or {}).get("registers") or min(255, wm * wn // 32 + 40 + wm // 2))
    blocks_sm = resident_blocks(target, threads, regs, smem)
    if blocks_sm < 1:
        return math.inf, {}, "block does not fit on an SM"
    clk = target.clock_hz
    tiles = int(f.get("computed_tiles") or -(-M // bm) * -(-N // bn) * batch)
    blocks = tiles * split
    waves = blocks / (target.sm_count * blocks_sm)
    # co-resident blocks share an SM's tensor pipe, so the tail is counted in blocks per SM,
    # not in waves of resident slots (a lone block in the last wave runs at the full rate)
    per_sm = blocks / target.sm_count
    quant = math.ceil(per_sm) / per_sm if per_sm > 0 else 1.0
    # K (whole slices) summed over the blocks: a transposed convolution's phases each their own
    block_k = blocks_k(f, K, split, bk, tiles)
    mt, nt = wm // 16, wn // 8
    warp_steps = block_k * (bm // wm) * (bn // wn) / 8
    # per warp and step: 3 mma per tile on the tensor pipe; splits (2 cvt + 1 sub per
    # fragment value), 4 partial-sum adds per tile per fresh partial (one partial spans
    # `fresh_steps` 8-deep steps) and the fragment loads on the others
    # (TF32 by the user's choice: one mma per tile and one cvt per fragment value)
    # (fp16/bf16 by the user's choice: one mma at the half rate, one cvt per pair of values)
    half = f.get("mma") in ("f16", "bf16")
    terms = 3 if f.get("mma") == "tf32x3" else 1
    rate = MMA_SYNC_TF32_FLOPS * (MMA_SYNC_HALF_SPEEDUP if half else 1.0)
    mma_clk = terms * mt * nt * 2048 / (rate / (target.sm_count * clk))
    fresh = int(f.get("fresh_steps", 1))
    cvt = (2 * mt + nt) if half else terms * (4 * mt + 2 * nt)
    alu_instr = cvt + 4 * mt * nt / fresh + (4 * mt + 2 * nt) + 6
    alu_clk = alu_instr / 4  # four schedulers per SM, one warp-instruction per clock each
    warps_sm = blocks_sm * threads // 32
    # the tensor and ALU pipes overlap across warps; few warps (or a rolled step) expose both
    overlap = min(1.0, warps_sm / (TC_OVERLAP_WARPS if f.get("unroll") == "full" else
                                   2 * TC_OVERLAP_WARPS))
    if blocks_sm == 1:
        overlap *= TC_LONE_BLOCK_OVERLAP
    step_clk = max(mma_clk, alu_clk) * overlap + (mma_clk + alu_clk) * (1 - overlap)
    compute_s = warp_steps * step_clk / (target.sm_count * clk)
    # each K slice ends in a cp.async wait and a barrier; another resident block covers it
    slices = block_k / bk
    compute_s += slices * SLICE_SYNC_CLK / blocks_sm / (target.sm_count * clk)
    gather_dims = int(f.get("gather_dims", 0))
    if gather_dims:  # a convolution's B: index arithmetic per gathered element (estimate)
        # division chains per element, or a constant-table lookup and a compare per dim
        per_elem = TC_GATHER_INSTR(gather_dims, f.get("gather") == "table",
                                   bool(int(f.get("gather_transposed", 0))))
        if f.get("tconv") == "phase":  # the tap and channel of k, both operands' tables
            per_elem += PHASE_TAP_INSTR
        compute_s += slices * bn * bk * per_elem / 32 / 4 / (target.sm_count * clk)
    smem_s = warp_steps * (4 * mt + 2 * nt) * 128 / (SMEM_BYTES_PER_CLK * target.sm_count * clk)
    panel = block_k * (bm + bn) * 4.0
    vec_pen = 1.0 + 0.25 * ((int(f.get("vec_a", 1)) == 1) + (int(f.get("vec_b", 1)) == 1))
    # every block copies its A and B panels from L2 into shared memory, raster or not (a
    # raster saves DRAM traffic, not these copies): measured, the rate tops out near
    # TC_TILE_FILL_BW (64 x 64 tiles of fused_linear_relu, 17.2 GB of tiles in 7.0 ms)
    l2_s = panel * vec_pen / TC_TILE_FILL_BW
    out_bytes = batch * M * N * 4.0 * int(f.get("phases", 1))
    dram_s = main_dram_s(*dram_shape(f, batch, M, N, K), split, target)
    spill_s = _spill_time(resources, threads, blocks_sm, slices, target)
    # a warp waits for its spilled values (local loads) itself; the scheduler's other warps
    # cover the wait only while they have work: with one or two warps per scheduler the waits
    # add to the warp's share of the compute instead of hiding under it (the throughput term
    # alone underpriced spilling configurations of 4 and 8 warps per SM 3x and 1.9x; with
    # the waits the mean Spearman of the 60 problems went 0.838 -> 0.853)
    stall_s = spill_stall_s(resources, threads, blocks_sm, slices, target)
    waits_s = compute_s / max(1.0, warps_sm / 4) + stall_s if stall_s > 0 else 0.0
    main_s = _soft_max((compute_s, smem_s, l2_s, dram_s, spill_s, waits_s),
                       TC_OVERLAP_SHARPNESS) * quant
    total_s = main_s + LAUNCH_US * 1e-6
    total_s += split_sum_s(split, out_bytes, target)
    occ = warps_sm / (target.max_threads_per_sm / 32)
    counters = _counters(occ, waves, vec_pen, dram_s, main_s, regs, resources, bank=0.0,
                         issue=compute_s, sync=0.0)
    return total_s * 1e3, counters, None


def main_dram_s(batch: int, M: int, N: int, K: float, split: int, target: Target) -> float:
    """The main GEMM kernel's DRAM time: A and B once, and the output, or with split-K each
    block's raw partial tile to the workspace (split partials per output element, read back
    by the summing kernel, `split_sum_s`)."""
    out = batch * M * N * 4.0 * split * (SPLIT_PARTIAL_COST if split > 1 else 1.0)
    return (batch * (M * K + K * N) * 4.0 + out) / target.dram_bw


def split_sum_s(split: int, out_bytes: float, target: Target) -> float:
    """Split-K's summing kernel: it reads the `split` partials of every output element and
    writes the sum through the epilogue (0 without split-K)."""
    if split <= 1:
        return 0.0
    return (split + 1) * out_bytes * SPLIT_PARTIAL_COST / target.dram_bw + LAUNCH_US * 1e-6


def blocks_k(f: dict, K: int, split: int, bk: int, tiles: float) -> float:
    """K (padded to whole slices) summed over the main kernel's blocks: `tiles` tiles of
    `split` parts each. A transposed convolution's phases (facts ``phase_k``; `tiles` counts
    every phase's) each reduce their own K, the parts sized for the largest, so a smaller
    phase's later parts reduce less or nothing: the multiply-adds each really does."""
    ks = f.get("phase_k")
    if not ks:
        return tiles * split * (-(-(-(-K // split)) // bk) * bk)
    kc = -(-(-(-max(ks) // bk)) // split) * bk  # the kernel's K per part
    per_tile = sum(-(-max(0, min(kc, k - s * kc)) // bk) * bk for k in ks for s in range(split))
    return tiles / len(ks) * per_tile


def dram_shape(f: dict, batch: int, M: int, N: int, K: int) -> tuple[int, int, int, float]:
    """(batch, M, N, K) of `main_dram_s` for the whole product: a transposed convolution's
    phases read their K of B over their N columns each and write all the phases' outputs
    (their weights, a small part, are counted at the mean phase's)."""
    ks = f.get("phase_k")
    if not ks:
        return batch, M, N, K
    return batch, M, N * len(ks), sum(ks) / len(ks)


def _counters(occ: float, waves: float, vec_pen: float, dram_s: float, main_s: float,
              regs: int, resources: dict | None, bank: float, issue: float, sync: float
              ) -> dict[str, float]:
    """The modelled hardware counters both GEMM models report (the agents' local metrics)."""
    res = resources or {}
    return {"achieved_occupancy": occ * min(1.0, waves), "theoretical_occupancy": occ,
            "waves": waves, "sectors_per_request": 4.0 if vec_pen == 1.0 else 2.0,
            "dram_throughput": dram_s / main_s if main_s else 0.0,
            "bank_conflicts": bank, "registers": float(regs),
            "spills": float(res.get("spill_stores", 0) or 0) + float(res.get("spill_loads", 0) or 0),
            "issue_utilization": min(1.0, issue / main_s) if main_s else 0.0,
            "sync_stalls": sync, "atomic_contention": 0.0}


def resident_blocks(target: Target, threads: int, regs: int, smem: int) -> int:
    """Blocks of a kernel one SM holds at once (0: one block does not fit)."""
    if regs * threads > target.regs_per_sm or smem > target.max_smem_per_block:
        return 0
    return min(target.max_blocks_per_sm, target.max_threads_per_sm // threads,
               target.regs_per_sm // max(1, _alloc(regs) * threads),
               target.smem_per_sm // max(1, smem + 1024))


def _soft_max(times: tuple[float, ...], sharpness: float = OVERLAP_SHARPNESS) -> float:
    """FMA issue, shared-memory, L2 and DRAM time overlap imperfectly: every LDS wavefront
    that stalls a warp also delays its FMAs, so near balance both show."""
    hi = max(times)
    if hi <= 0:
        return 0.0
    return hi * sum((t / hi) ** sharpness for t in times) ** (1 / sharpness)


def _spill_time(resources: dict | None, threads: int, blocks_sm: int, slices: float,
                target: Target) -> float:
    """Seconds of local-memory traffic: the spill stores and loads (the compiler's static
    bytes, worst over the kernels: the main kernel's) sit in the unrolled K-slice loop, so
    every thread moves them once per slice. L1 serves them while the resident threads' stack
    frames fit there; beyond, they go to L2."""
    res = resources or {}
    per_thread = float(res.get("spill_stores", 0) or 0) + float(res.get("spill_loads", 0) or 0)
    if per_thread <= 0:
        return 0.0
    frames = float(res.get("stack", 0) or 0) * threads * blocks_sm
    hit = 1 / (1 + (frames / L1_BYTES) ** 4) if frames > 0 else 1.0
    moved = per_thread * threads * slices
    l1_bw = SMEM_BYTES_PER_CLK * target.sm_count * target.clock_hz
    return moved * hit / l1_bw + moved * (1 - hit) / L2_BW


def spill_stall_s(resources: dict | None, threads: int, blocks_sm: int, slices: float,
                  target: Target) -> float:
    """Seconds one warp spends waiting on its spilled values over the kernel: its local loads
    per K slice (the compiler's static spill-load bytes, 4 per load) times their latency (L1
    while the resident stack frames fit there, else L2), over the slices the warp runs one
    after another (its block's, times the blocks an SM runs in turn)."""
    res = resources or {}
    loads = float(res.get("spill_loads", 0) or 0) / 4.0
    if loads <= 0:
        return 0.0
    frames = float(res.get("stack", 0) or 0) * threads * blocks_sm
    hit = 1 / (1 + (frames / L1_BYTES) ** 4) if frames > 0 else 1.0
    latency = hit * L1_LATENCY_CLK + (1 - hit) * L2_LATENCY_CLK
    warp_slices = slices / (target.sm_count * blocks_sm)
    return warp_slices * loads * latency / target.clock_hz


def _alloc(regs: int) -> int:
    return -(-regs // 8) * 8


#: Register demand of the SIMT template per thread, before the launch bounds cap it: a fit to the
#: compiler's counts (sm_90, nvcc 13) of 52 configurations of gemm_odd and gemm_square's spaces
#: that did not hit their cap (residual sd 24 registers; the estimate it replaces, accumulators
#: plus fragments plus 24, was off by 33).
REG_PER_ACC, REG_PER_FRAG, REG_PER_STAGED, REG_PER_STAGE, REG_BASE = 1.67, -1.03, 2.52, 2.48, 41.8
#: Registers over the cap that the compiler absorbs (rematerialisation, reuse) before spilling,
#: and the static spill bytes (stores and loads) per register spilled beyond that: from the
#: same 80 compiles (28 spilled: 24 to 5,172 bytes; the excess explains the order of magnitude,
#: not the spread).
SPILL_SLACK_REGS, SPILL_BYTES_PER_REG = 20.0, 12.0


def estimated_resources(facts: dict) -> dict:
    """A compile report's registers, spill bytes and stack frame for a SIMT GEMM candidate
    that was not compiled: the demand (`REG_*`) capped by `__launch_bounds__(threads,
    minblocks)`, the excess spilled."""
    tm, tn, bm, bn, bk = (int(facts[k]) for k in ("tm", "tn", "bm", "bn", "bk"))
    threads, stages = int(facts["threads"]), int(facts.get("stages", 1))
    demand = (REG_PER_ACC * tm * tn + REG_PER_FRAG * (tm + tn)
              + REG_PER_STAGED * (bm + bn) * bk / threads + REG_PER_STAGE * stages + REG_BASE)
    cap = min(255, 65536 // (threads * int(facts.get("minblocks", 1))) // 8 * 8)
    excess = max(0.0, demand - cap - SPILL_SLACK_REGS)
    spill = SPILL_BYTES_PER_REG * excess
    return {"registers": int(min(demand, cap)), "spill_stores": spill / 2,
            "spill_loads": spill / 2, "stack": 4 * excess}



#: the library's half-precision products against its fp32 ones: cuBLAS under autocast runs the
#: 4096^3 product at about 580 TFLOP/s with its casts against ~40 for strict fp32
#: (docs/journal.md: costmodel/gemm.py); a flat ratio of the rates (an estimate; convolutions
#: were not measured in half)
LIBRARY_HALF_FLOPS = 600e12

#: how much faster the library's product runs with TF32 allowed (a call the contract lets use it,
#: `--precision auto` for a convolution): convolutions, the geomean of cuDNN's TF32 over its
#: strict fp32 time on the 13 realistic convolutions (1.26-4.37x on the H100; docs/journal.md,
#: costmodel/gemm.py); matrix products,
#: DESIGN.md's 8192^3 rates (TF32 384 against fp32 50.5 TFLOP/s, H200)
LIBRARY_TF32_SPEEDUP = {"conv": 2.23, "matmul": 7.6}

def simulate_library(plan, rendered: Rendered, target: Target) -> tuple[float, dict[str, float]]:
    """(modelled ms, counters) of a library product followed by a generated epilogue pass
    (none where the product is bare, `templates/library.py`)."""
    f = dict(rendered.facts)
    call = next((la.library for la in rendered.launches if la.library), {})
    product_s = float(f["library_flops"]) / (_library_efficiency(plan, call) * target.fp32_flops)
    if call.get("tf32"):
        product_s /= LIBRARY_TF32_SPEEDUP["matmul" if call.get("op") == "matmul" else "conv"]
    if call.get("dtype") in ("fp16", "bf16"):
        # half-precision products (opted in): the operands cast (read 4 bytes, write 2) and
        # the product cast back (read 2, write 4) around a product at the half rate
        casts = 1.5 * float(f.get("library_in_bytes", 0)) + 1.5 * float(f["product_bytes"])
        product_s = product_s * target.fp32_flops / LIBRARY_HALF_FLOPS + casts / target.dram_bw
    if f.get("library_dtype") in ("float16", "bfloat16"):
        # a product of half-precision tensors runs in their type (no casts: they are stored so)
        product_s = product_s * target.fp32_flops / LIBRARY_HALF_FLOPS
    if _depthwise(plan, call):
        product_s = max(product_s, (float(f["product_bytes"]) + float(f.get("library_in_bytes", 0)))
                        / (DEPTHWISE_BW_SHARE * target.dram_bw))
    vec = int(f.get("vec", 1))
    # a streaming pass: full bandwidth with 16-byte accesses, a little less with 4-byte ones;
    # none for a bare product (a program's readers apply the epilogue as they load it)
    epilogue_s = 0.0 if f.get("bare") else \
        epilogue_bytes(plan) / (target.dram_bw * (0.92 if vec == 4 else 0.85))
    if str(f.get("library_layout", "")).startswith("channels_last"):  # converted, or kept
        # the operands converted to channels-last and the product back: each read and written
        # once more; a product kept channels-last (a program's next stages read it so) is not
        # converted back, and those stages' strided reads are priced with them
        # (`model._channels_last_reads_s`). How cuDNN's algorithms differ by layout the model
        # does not know: it prices them alike.
        back = 2 * float(f["product_bytes"]) if f["library_layout"] == "channels_last" else 0.0
        product_s += (back + 2 * float(f.get("library_in_bytes", 0))) / target.dram_bw
    launches = 1 if f.get("bare") else 2
    ms = (product_s + epilogue_s + (launches * LAUNCH_US + LIBRARY_CALL_US) * 1e-6) * 1e3
    return ms, {"dram_throughput": epilogue_s / (product_s + epilogue_s)}


def _depthwise(plan, call: dict) -> bool:
    """A convolution with one input channel per group."""
    groups = int(call.get("groups", 1))
    if call.get("op") != "conv" or groups == 1 or call.get("x") is None:
        return False
    return plan.graph[plan.operands[call["x"]]].shape[1] == groups


def _library_efficiency(plan, call: dict) -> float:
    """The share of the fp32 rate the library's product reaches, by kind of call."""
    op, groups = call.get("op"), int(call.get("groups", 1))
    if op == "conv_transpose":
        dims = int(call.get("dims", 2))
        eff = TRANSPOSED_CONV_EFFICIENCY[min(max(dims, 1), 3) - 1]
    elif op == "conv":
        eff = CONV_EFFICIENCY
    else:
        return LIBRARY_FP32_EFFICIENCY
    return eff * (GROUPED_CONV_FACTOR if groups > 1 else 1.0)


def _instruction_wavefronts(words: np.ndarray) -> int:
    """Shared-memory wavefronts of many warp instructions: one instruction per row of `words`
    (the 4-byte words its lanes ask for, -1 where a lane asks for none). Each of the 32 banks
    serves one distinct word per wavefront (lanes reading the same word share it, a
    broadcast); an instruction takes at least one."""
    n = words.shape[0]
    if n == 0:
        return 0
    s = np.sort(words, axis=1)
    distinct = np.ones(s.shape, dtype=bool)
    distinct[:, 1:] = s[:, 1:] != s[:, :-1]
    distinct &= s >= 0
    row = np.broadcast_to(np.arange(n)[:, None], s.shape)[distinct]
    per_bank = np.bincount(row * 32 + s[distinct] % 32, minlength=n * 32).reshape(n, 32)
    return int(np.maximum(per_bank.max(axis=1), 1).sum())


def _warp_instructions(words: np.ndarray, nt: int) -> np.ndarray:
    """(..., nt threads, k words) -> one row per warp instruction (32 x k words), -1 for the
    lanes a last partial warp lacks."""
    warps = -(-nt // 32)
    if warps * 32 > nt:
        widths = [(0, 0)] * words.ndim
        widths[-2] = (0, warps * 32 - nt)
        words = np.pad(words, widths, constant_values=-1)
    return words.reshape(-1, 32 * words.shape[-1])


@functools.lru_cache(maxsize=4096)
def smem_wavefronts(bm: int, bn: int, bk: int, tm: int, tn: int, warp: str, split_frag: bool,
                    pad: int, stages: int, a_along: str, b_along: str, vec_a: int, vec_b: int
                    ) -> tuple[float, float]:
    """(fragment-load wavefronts per K step, tile-store wavefronts per K slice) of one block,
    counted lane by lane from the template's layout (`gemm._GemmWriter.fragment`,
    `tile_stores`, `tile_async`), so conflicts of contiguous 8-wide tiles and of transposed
    stores come out of the addresses instead of rules. Every instruction's addresses at once
    (numpy): the agents' prior models thousands of layouts per convolution space."""
    wn, wm = bn // tn, bm // tm
    nt = wn * wm
    lda, ldb = bm + pad, bn + pad
    tid = np.arange(nt)
    if warp == "4x8":
        if wn < 8:
            raise ValueError(f"a 4x8 warp needs 8 threads along N, not {wn}")
        w, lane = tid >> 5, tid & 31
        xs = (w % (wn // 8)) * 8 + (lane & 7)
        ys = (w // (wn // 8)) * 4 + (lane >> 3)
    else:
        xs, ys = tid % wn, tid // wn

    def starts(idx: np.ndarray, count: int, whole: int) -> np.ndarray:
        """(quads, threads): the first word of each 4-word quad of a thread's fragment."""
        if split_frag and count == 8:
            return np.stack([idx * 4, whole // 2 + idx * 4])
        return np.stack([idx * count + 4 * q for q in range(count // 4)])

    quad = np.arange(4)
    frag = sum(_instruction_wavefronts(_warp_instructions(
        starts(idx, count, whole)[:, :, None] + quad, nt))
        for idx, count, whole in ((ys, tm, bm), (xs, tn, bn)))
    store = 0
    for row_dim, along, vec, rows, ld in (("m", a_along, vec_a, bm, lda),
                                          ("n", b_along, vec_b, bn, ldb)):
        if stages >= 3 and not (along == row_dim and vec == 4):
            vec_eff, per_elem = 1, True  # cp.async element by element
        else:
            vec_eff, per_elem = vec, False
        total = rows * bk // vec_eff
        idx = tid[None, :] + np.arange(max(1, total // nt))[:, None] * nt  # (rounds, threads)
        if per_elem:
            r, kk = (idx % rows, idx // rows) if along == row_dim else (idx // bk, idx % bk)
        elif along == row_dim:
            r, kk = (idx % (rows // vec)) * vec, idx // (rows // vec)
        else:
            r, kk = idx // (bk // vec), (idx % (bk // vec)) * vec
        if along == row_dim and vec_eff == 4:
            store += _instruction_wavefronts(_warp_instructions((kk * ld + r)[..., None] + quad,
                                                                nt))
        else:  # scalar stores, one per element of the vector
            store += sum(_instruction_wavefronts(_warp_instructions(
                ((kk + q) * ld + r)[..., None], nt)) for q in range(vec_eff))
    return float(frag), float(store)
