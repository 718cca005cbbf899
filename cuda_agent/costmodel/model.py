"""The analytic model behind the simulated device: how long an H200-class GPU would take to run a
rendered candidate, and the hardware counters it would show.

The model reads what the space knows about a candidate (the plan's bytes and arithmetic, the
launches, the template's `facts`, the compiler's register report) and follows the physics of a
streaming kernel:

* occupancy: resident blocks per SM from threads, registers (allocated per warp) and shared memory
  (allocated per block), then waves of blocks over the SMs; a partial last wave runs with fewer
  warps, which is the tail effect;
* memory: bytes over bandwidth, and Little's law on the loads: a kernel only moves
  ``bytes in flight / latency``, and bytes in flight are resident warps x 32 lanes x vector width
  x independent loads per thread. Small vectors and low occupancy cannot saturate HBM; 16-byte
  loads with enough warps reach the ceiling. Re-read rows are served by L2 when the working set of
  the blocks in flight fits there, else by DRAM again; partial sectors, gathers and broadcasts cost
  extra requests;
* compute: lane-instructions (arithmetic, addressing, loop control) over the measured fp32 rate,
  transcendentals also over the special-function units, load/store requests over the LSU;
* combining partial results: barriers and shuffles per row group, partly hidden by the other
  blocks resident on the SM;
* spills: local-memory traffic; launches: a fixed overhead each.

A launch takes ``max(memory, compute) + sync + block scheduling + atomics (+ a serial tail)``,
each phase of full and partial waves separately, and a candidate the sum over its launches plus
their launch overheads. Every tunable number lives in `SimConstants`, so the model can be
calibrated by fitting them on recorded GPU measurements (`from_dict`/`to_dict`).

The templates' facts say how a launch touches memory: `map` (vectors of consecutive elements),
`row` (T threads per row, the row kept in registers, shared memory or re-read between passes),
`col` (2-D blocks over a middle dim, optional split with a fold kernel or atomics) and `split`
(several blocks per long row, a kernel per pass), `pool` (a thread per `items` outputs of a row:
adjacent lanes `items x stride` elements apart, so a warp request spans more sectors and lines,
and a sector's rest is reused only while L1 holds the warps' sectors) and `scan` (tiles of a row
scanned by a thread group, the same strided lanes for `items` > 1, a group scan per tile; or a
thread per column). Memory and instruction time overlap imperfectly (a soft maximum).
Unknown families degrade to what the launches
and the plan say (bytes, arithmetic, threads and blocks). Figures from here are simulated and must
be labelled so wherever they appear.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..ir import ops
from ..ir.conv import window_info
from ..ir.graph import HALF_DTYPES, INDEX_DTYPE, element_bytes
from ..ir.partition import ProgramPlan, as_program
from ..ir.plan import KernelPlan
from ..space.slots import Launch, Rendered, Target
from ..space.templates.pool import span
from .attention import simulate_attention
from .gemm import simulate_gemm, simulate_library

# Modelled counters, named and scaled like their Nsight Compute counterparts where there is one.
COUNTER_DOCS = {
    "achieved_occupancy": "resident warps / max warps per active SM, time-averaged",
    "theoretical_occupancy": "resident warps / max warps the limits allow (threads, registers, "
                             "shared memory, blocks)",
    "waves": "blocks / (resident blocks per SM x SMs) of the longest launch",
    "sectors_per_request": "32-byte sectors per warp load request (4 x vec when coalesced)",
    "dram_throughput": "DRAM bytes / device time, as a fraction of Target.dram_bw (copy bandwidth)",
    "bank_conflicts": "extra shared-memory wavefronts per request",
    "registers": "registers per thread (the compiler's, else the estimate)",
    "spills": "spill store + load bytes per thread",
    "issue_utilization": "time the issue slots, special-function units or LSU are busy / time",
    "sync_stalls": "exposed barrier and shuffle time / device time",
    "atomic_contention": "1 - 1 / atomics per address on the busiest address (0: none)",
}
COUNTER_KEYS = tuple(COUNTER_DOCS)


@dataclass
class SimConstants:
    """Every tunable constant of the model. Defaults describe an H200 (SXM, HBM3e) as seen by the
    kernels these templates write. Bandwidths not listed here come from `Target`."""

    # -- DRAM, L2, L1 ------------------------------------------------------------------------------
    #: Best fraction of `Target.dram_bw` (the measured device copy bandwidth) that a generated
    #: streaming kernel reaches with 16-byte accesses and plenty of bytes in flight.
    dram_peak_fraction: float = 0.95
    #: A read-only stream is faster than a copy (no read/write turnarounds): 4.45 vs 4.3 TB/s
    #: measured. Interpolated linearly down to 1.0 at half reads, half writes.
    read_only_bw_ratio: float = 1.035
    #: Loaded DRAM round trip seen by a load (ns): the latency in Little's law.
    dram_latency_ns: float = 650.0
    #: Round trip of a load that hits L2 (ns).
    l2_latency_ns: float = 270.0
    #: Round trip of a load that hits L1 (ns), about 35 cycles.
    l1_latency_ns: float = 18.0
    #: Bandwidth of L2 hits (bytes/s), all SMs together.
    l2_bw: float = 10.0e12
    #: Part of `Target.l2_bytes` that can hold re-read data (two partitions, output write-backs
    #: and other streams share it).
    l2_usable_fraction: float = 0.6
    #: Steepness of the L2 hit-rate cliff when the re-read working set outgrows the usable L2:
    #: hit = 1 / (1 + (working_set / usable) ** sharpness).
    l2_cliff_sharpness: float = 4.0
    #: Streaming (evict-first) loads keep lines in L2 for a shorter time: their re-reads see this
    #: fraction of the usable L2.
    stream_hint_l2_retention: float = 0.5
    #: L1 <-> L2 bytes per clock and SM: caps what few active SMs can move.
    sm_bytes_per_clk: float = 64.0
    #: L1 -> L2 requests (one per cache line a warp instruction touches, carrying the sectors it
    #: needs of that line) the L2 slices accept per clock, per SM's worth of slices. Coalesced
    #: accesses carry 128 bytes a request and never reach this limit; lanes that touch a line
    #: each (strided scans, pooling's stores) carry 4 to 16 bytes a request and do.
    l2_requests_per_clk_per_sm: float = 0.25
    #: Soft maximum between the latency-bound and the bandwidth-bound memory time:
    #: t = (t_bw ** k + t_latency ** k) ** (1 / k). Large k: a sharp roofline knee.
    saturation_sharpness: float = 3.0
    #: Soft maximum between a phase's memory time and its instruction (issue, LSU, MUFU) time:
    #: t = (t_mem ** k + t_compute ** k) ** (1 / k). Large k: perfect overlap.
    overlap_sharpness: float = 3.0
    #: Resident warps per SM at which memory and instruction time overlap as `overlap_sharpness`
    #: says; with fewer, a warp waiting on its loads has no other warp to issue in its place,
    #: and the two add up (the soft maximum's exponent falls linearly to 1 at one warp).
    overlap_warps: float = 16.0
    #: DRAM/L2 access granularity (bytes). Architectural.
    sector_bytes: int = 32
    #: L1 cache line, one LSU wavefront (bytes). Architectural.
    line_bytes: int = 128
    #: When a thread group reads less than a sector at a time, the fraction of the rest of the
    #: sector that a later load of the same group still finds in L1 (instead of DRAM).
    l1_sector_reuse: float = 0.8
    #: L1 bytes per SM that can hold sectors a thread will touch again (the 256 KB L1/shared
    #: memory less the carve-out and lines held by loads in flight). Sets where pooling's
    #: strided lanes lose their sector reuse.
    l1_usable_bytes: float = 128 * 1024
    #: Streaming (evict-first, `__ldcs`) loads are the first lines L1 evicts: of the L1 reuse a
    #: plain load would find (a sector's rest, a neighbouring window's elements), this fraction
    #: survives. Pooling's overlapping windows lose most of it.
    stream_hint_l1_retention: float = 0.5
    #: Of the rest of a sector that a thread's loads of one window row re-touch (pooling's
    #: lanes `items x stride` elements apart, each walking its own span), the share L1 serves
    #: whatever the footprint: the row's loads are unrolled and issued together, so the later
    #: ones find the sector the first one missed on already allocated (in flight or arrived).
    #: The footprint rule (`l1_usable_bytes`) still governs reuse across windows. Chosen on
    #: the suite's pooling sweeps: the best mean Spearman of the values tried, and better on
    #: the held-out conv+pool shape of benchmarks/validation (docs/journal.md:
    #: costmodel/model.py).
    l1_inflight_merge: float = 0.8
    #: Fraction of repeated reads of small broadcast operands (a norm's weight read for every
    #: row, a bias) that hit L1; the rest is L2 traffic.
    broadcast_l1_hit: float = 0.75
    #: LSU wavefronts (distinct lines touched) that one per-element gather request costs.
    gather_lines_per_request: float = 2.0

    # -- compute -------------------------------------------------------------------------------
    #: Scale of the lane-instruction rate `Target.fp32_flops / 2` (the measured fp32 FMA rate,
    #: already below the theoretical issue rate).
    issue_rate_scale: float = 1.0
    #: Special-function unit (MUFU: ex2, lg2, rcp, rsqrt, sin, cos) results per clock and SM.
    mufu_lanes_per_clk: float = 16.0
    #: Resident warps x independent instructions per warp an SM needs to hide dependent-issue
    #: latency (4 schedulers x ~4 cycles).
    alu_latency_warps: float = 16.0
    #: Issue slots of a precise libm transcendental (range reduction and polynomial around ex2/lg2).
    transcendental_instr: float = 10.0
    #: Issue slots of a fast intrinsic (__expf: a multiply and MUFU.EX2).
    fast_transcendental_instr: float = 2.0
    #: Issue slots of an IEEE division (reciprocal, Newton steps, slow-path test).
    div_instr: float = 8.0
    #: Issue slots of __fdividef.
    fast_div_instr: float = 2.0
    #: Issue slots of sqrtf/rsqrtf.
    sqrt_instr: float = 4.0
    #: Issue slots of one argmax/argmin update (compare, NaN test, two selects).
    arg_update_instr: float = 4.0
    #: Integer instructions to form one global address (32-bit indexing).
    addr_instr: float = 2.0
    #: Factor on address arithmetic with 64-bit indices.
    i64_addr_factor: float = 2.0
    #: Instructions of loop control per (unrolled) loop iteration: increment, compare, branch.
    loop_instr: float = 3.0
    #: LSU wavefronts (L1 lines) processed per clock and SM.
    l1_wavefronts_per_clk: float = 1.0
    #: Shared-memory wavefronts (128 bytes without conflicts) per clock and SM.
    smem_wavefronts_per_clk: float = 1.0

    # -- registers, shared memory, spills --------------------------------------------------------
    #: Registers per thread assumed when the compiler's report is missing (a floor).
    default_registers: int = 32
    #: Registers a kernel needs besides the data it keeps live (indices, pointers, accumulators),
    #: used to estimate registers when the compiler's report is missing.
    live_overhead_registers: int = 16
    #: Register allocation unit per warp. Architectural.
    reg_alloc_unit: int = 256
    #: Shared-memory allocation unit per block (bytes). Architectural.
    smem_alloc_unit: int = 128
    #: Shared memory the runtime reserves per block (bytes). Architectural.
    smem_reserved_per_block: int = 1024
    #: Fraction of spill (local-memory) traffic served by L1; the rest goes to L2.
    spill_l1_hit: float = 0.5

    # -- synchronisation and scheduling ------------------------------------------------------------
    #: Cycles of one __syncthreads() when the warps arrive together.
    barrier_cycles: float = 24.0
    #: Latency of a shared-memory load or store (cycles).
    smem_latency_cycles: float = 30.0
    #: One barrier.cluster arrive/wait over a thread-block cluster (cycles; published H100
    #: microbenchmarks put it near 190 ns, unmeasured here).
    cluster_sync_cycles: float = 380.0
    #: One dependent warp-shuffle step with its combine (cycles).
    shfl_cycles: float = 24.0
    #: One step of a serial fold by one thread (pipelined loads, dependent adds; cycles).
    serial_step_cycles: float = 6.0
    #: Exposed part of a block's sync time is 1 / resident_blocks ** exponent: the other blocks
    #: resident on the SM keep the memory system busy meanwhile.
    sync_overlap_exponent: float = 1.0
    #: Cycles an SM spends retiring a block and starting the next, hidden the same way.
    block_launch_cycles: float = 100.0
    #: The block scheduler hands each SM a new block at most once per this many nanoseconds,
    #: however many blocks are resident: a grid of millions of small blocks (a thread per
    #: short row, one item a thread) is bound by it (measured: ~80 ns a block and SM, the same
    #: for 32- to 256-thread blocks).
    block_dispatch_ns: float = 80.0
    #: SMs do not progress at one speed (their distance to the memory partitions, contention):
    #: blocks handed out as SMs free up even this out, except for the last wave, which ends
    #: when its slowest SM does. A launch of one wave (a persistent grid-stride grid) pays this
    #: fraction of its time; one of W waves about 1/W of it.
    sm_speed_spread: float = 0.05
    #: Atomic operations the L2 completes per clock, per SM's worth of slices.
    atomics_per_clk_per_sm: float = 2.0
    #: Atomics to one address serialise: nanoseconds each.
    atomic_serial_ns: float = 2.5

    # -- launches ----------------------------------------------------------------------------------
    #: Host launch plus the kernel's start and drain, per launch (microseconds).
    launch_overhead_us: float = 4.0
    #: Zeroing a workspace before the launches (a memset node), microseconds.
    memset_overhead_us: float = 2.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def shipped() -> "SimConstants":
        """The constants the `sim` device uses by default: those `benchmarks/sim_calibrate.py`
        fitted and wrote to `sim_constants_h200.json` (only when they ranked the held-out half
        of the sweeps better), else the defaults above."""
        return _shipped_constants()

    @staticmethod
    def from_dict(values: dict[str, Any] | None) -> "SimConstants":
        """Constants from a (possibly partial) dict; unknown names are an error (a typo in a
        calibration file must not pass silently)."""
        values = dict(values or {})
        known = {f.name: f for f in fields(SimConstants)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown simulator constants: {', '.join(unknown)}")
        out: dict[str, Any] = {}  # each value of its field's type
        for name, value in values.items():
            kind = known[name].type
            out[name] = int(value) if kind in ("int", int) else float(value)
        return SimConstants(**out)


SHIPPED_CONSTANTS = Path(__file__).with_name("sim_constants_h200.json")


@lru_cache(maxsize=1)
def _shipped_constants() -> SimConstants:
    if SHIPPED_CONSTANTS.exists():
        return SimConstants.from_dict(json.loads(SHIPPED_CONSTANTS.read_text())["constants"])
    return SimConstants()


@dataclass
class SimResult:
    """A simulated measurement: time including launch overheads, and modelled counters."""

    time_ms: float
    counters: dict = field(default_factory=dict)
    error_kind: str | None = None  # "resources" when the launch cannot run
    error_msg: str | None = None


# -- what a launch does, in the model's terms ---------------------------------------------------

@dataclass
class _Work:
    """Totals of one launch: traffic, instructions and the shape of its memory accesses."""

    dram_load_bytes: float = 0.0  # reads served by DRAM (first touch, over-fetch, L2 misses)
    l2_load_bytes: float = 0.0  # reads served by L2 (re-reads that hit, broadcasts, spills)
    store_bytes: float = 0.0
    dram_latency_ns: float = 0.0  # effective latency of DRAM-served loads (L1 sector reuse)
    access_bytes: float = 4.0  # bytes one lane asks for per load: the vector width
    loads_in_flight: float = 1.0  # independent loads a thread issues before it waits
    active_lanes: float = 1.0  # fraction of lanes with useful work in a load
    ilp: float = 1.0  # independent arithmetic per thread (vector lanes, items)
    issue_instr: float = 0.0  # lane-instruction slots, idle lanes included
    mufu_ops: float = 0.0
    lsu_wavefronts: float = 0.0
    smem_wavefronts: float = 0.0
    sectors_per_request: float = 4.0
    bank_conflicts: float = 0.0  # extra shared-memory wavefronts per request
    combine_events: float = 0.0  # block-level combines (each one barrier chain)
    combine_cycles: float = 0.0  # cycles of one such combine
    l2_requests: float = 0.0  # L1 -> L2 line requests (load misses and write-through stores)
    atomics: float = 0.0
    atomic_chain: float = 0.0  # atomics to the busiest address
    tail_s: float = 0.0  # serial work at the end of the launch that nothing overlaps
    registers: int = 32
    spill_bytes: float = 0.0  # per thread (the compiler's static spill stores + loads)
    local_bytes: float = 0.0  # executed local-memory traffic, all threads
    smem_static: int = 0


def simulate(plan: KernelPlan, rendered: Rendered, resources: dict | None, target: Target,
             constants: SimConstants | dict | None = None) -> SimResult:
    """Modelled time and counters of one candidate on `target` (simulated figures)."""
    if constants is None:
        c = SimConstants.shipped()
    else:
        c = constants if isinstance(constants, SimConstants) else SimConstants.from_dict(constants)
    resources = dict(resources or {})
    launches = rendered.launches
    if not launches:
        return _failure("launch", "the candidate has no launches")
    for L in launches:
        if min(L.grid) < 1 or min(L.block) < 1:
            return _failure("launch", f"{L.kernel}: empty grid or block {L.grid} x {L.block}")
        if L.grid[0] > 2**31 - 1 or L.grid[1] > 65535 or L.grid[2] > 65535:
            return _failure("launch", f"{L.kernel}: grid {L.grid} exceeds the grid limits")
    if rendered.parts:  # a multi-kernel program: its stages one after another
        # each stage with its own kernels' compile report (`per_kernel`, names `s<i>_...`
        # in the composed source) where the caller has it
        per_kernel = resources.get("per_kernel") or {}
        results = [simulate(p, r, stage_resources(per_kernel, i), target, c)
                   for i, (p, r) in enumerate(rendered.parts)]
        bad = next((r for r in results if r.error_kind), None)
        if bad is not None:
            return bad
        # a stage's plan alone (a stage space's) does not name the program's buffers: the
        # strided reads are priced where the program's plan is given
        strided_ms = (sum(_channels_last_reads_s(plan, b, target, c) for k, b in rendered.facts
                          if k.endswith(".reads_channels_last")
                          and isinstance(plan, ProgramPlan))
                      + sum(_permuted_store_s(p, target, c) for p, _ in rendered.parts
                            if p.out_perm is not None)) * 1e3
        return SimResult(sum(r.time_ms for r in results) + strided_ms,
                         {k: max(r.counters.get(k, 0.0) for r in results) for k in COUNTER_KEYS})
    if rendered.fact("family") == "gemm":  # arithmetic-bound: its own model
        ms, counters, err = simulate_gemm(rendered, resources, target)
        if err:
            return _failure("resources", err)
        return SimResult(ms, {**{k: 0.0 for k in COUNTER_KEYS}, **counters})
    if rendered.fact("family") == "lib":  # a library product, then a generated epilogue
        ms, counters = simulate_library(plan, rendered, target)
        return SimResult(ms, {**{k: 0.0 for k in COUNTER_KEYS}, **counters})
    if rendered.fact("family") == "attention":  # arithmetic and shared memory: its own model
        ms, counters, err = simulate_attention(rendered, resources, target, plan.bytes_moved())
        if err:
            return _failure("resources", err)
        return SimResult(ms, {**{k: 0.0 for k in COUNTER_KEYS}, **counters})
    works = _describe(plan, rendered, resources, target, c)

    per_launch = []
    for L, w in zip(launches, works, strict=True):
        occ, err = _occupancy(L, w, target, c)
        if err:
            return _failure("resources", f"{L.kernel}: {err}", registers=w.registers,
                            spills=w.spill_bytes)
        assert occ is not None  # an occupancy or an error
        per_launch.append(_time_launch(L, w, occ, target, c))

    device_s = sum(r["time"] for r in per_launch)
    overhead_s = len(launches) * c.launch_overhead_us * 1e-6
    if rendered.zero_workspace:
        overhead_s += c.memset_overhead_us * 1e-6
    total_s = device_s + overhead_s
    return SimResult(total_s * 1e3, _counters(per_launch, works, device_s, target))


def _channels_last_reads_s(plan: KernelPlan, buffer: int, target: Target, c: SimConstants
                           ) -> float:
    """Seconds a program stage spends beyond its own model reading intermediate buffer
    `buffer` stored channels-last (`ir/layout.py`) in torch's (N, C, *spatial) order: lanes
    along the spatial dims read elements C apart, so each request brings min(C, 8) times the
    bytes it uses into the SM (a 32-byte sector per 4-byte element); the rest of each sector
    is another channel's, found again in L2 while the buffer fits there, else read from DRAM
    again. The stage's own model priced the buffer as read once, coalesced."""
    shape, _ = as_program(plan).program.buffers[buffer]
    nbytes = 4.0 * math.prod(shape)
    waste = min(shape[1], c.sector_bytes // 4) - 1
    hit = _l2_hit(nbytes, False, target, c)
    return nbytes * waste * (hit / c.l2_bw + (1 - hit) / (target.dram_bw * c.dram_peak_fraction))


def _permuted_store_s(plan: KernelPlan, target: Target, c: SimConstants) -> float:
    """Seconds a stage computed in a channels-last buffer's memory order (`ir/layout.py`)
    spends beyond its own model storing its output in torch's (N, C, *spatial) order
    (`KernelPlan.out_perm`): a warp's 32 consecutive elements span min(C, 32) channel planes,
    each a run of 128 / planes bytes, so a request touches about planes * max(1, run / 32 +
    1/2) sectors where 4 would do. The partial sectors meet in L2 while the output fits
    there, else go to DRAM apart. Its reads are in memory order: coalesced, as the stage's
    model prices them. (A read of such a buffer in torch's order pays more: a request's lanes
    are C elements apart, `_channels_last_reads_s`.)"""
    value = plan.graph[plan.output].shape
    planes = min(value[-1], 32)
    sectors = planes * max(1.0, (128 / planes) / c.sector_bytes + 0.5)
    waste = sectors / (128 / c.sector_bytes) - 1
    if waste <= 0:
        return 0.0
    nbytes = 4.0 * math.prod(value)
    hit = _l2_hit(nbytes, False, target, c)
    return nbytes * waste * (hit / c.l2_bw + (1 - hit) / (target.dram_bw * c.dram_peak_fraction))


def stage_resources(per_kernel: dict, stage: int) -> dict:
    """Worst case over the kernels of one stage of a composed program."""
    mine = [r for name, r in per_kernel.items() if name.startswith(f"s{stage}_")]
    if not mine:
        return {}
    keys = ("registers", "spill_stores", "spill_loads", "stack", "smem_static")
    return {k: max(r.get(k, 0) for r in mine) for k in keys}


def _failure(kind: str, msg: str, **counters: float) -> SimResult:
    out = {k: 0.0 for k in COUNTER_KEYS}
    out.update(counters)
    return SimResult(math.inf, out, kind, msg)


# -- occupancy ------------------------------------------------------------------------------------

@dataclass
class _Occupancy:
    blocks_per_sm: int
    limiter: str
    smem_per_block: int


def _reg_cap(threads: int, c: SimConstants) -> int:
    """Most registers per thread a block of `threads` can have (what __launch_bounds__ enforces)."""
    warps = -(-threads // 32)
    per_warp = (65536 // warps) // c.reg_alloc_unit * c.reg_alloc_unit
    return max(0, min(255, per_warp // 32))


def _occupancy(L: Launch, w: _Work, target: Target, c: SimConstants
               ) -> tuple[_Occupancy | None, str | None]:
    threads = L.threads
    if threads > 1024 or L.block[0] > 1024 or L.block[1] > 1024 or L.block[2] > 64:
        return None, f"{threads} threads per block (block {L.block}; at most 1024)"
    smem = L.smem + w.smem_static
    if smem > target.max_smem_per_block:
        return None, (f"{smem} bytes of shared memory per block "
                      f"(at most {target.max_smem_per_block})")
    warps = -(-threads // 32)
    regs_warp = -(-w.registers * 32 // c.reg_alloc_unit) * c.reg_alloc_unit
    if regs_warp * warps > target.regs_per_sm:
        return None, (f"{w.registers} registers x {threads} threads need {regs_warp * warps} "
                      f"registers (an SM has {target.regs_per_sm})")
    limits = {"blocks": target.max_blocks_per_sm,
              "threads": (target.max_threads_per_sm // 32) // warps}
    if regs_warp:
        # registers are allocated per warp within each of the 4 SM sub-partitions
        limits["registers"] = (4 * ((target.regs_per_sm // 4) // regs_warp)) // warps
    smem_block = -(-(smem + c.smem_reserved_per_block) // c.smem_alloc_unit) * c.smem_alloc_unit
    limits["smem"] = target.smem_per_sm // smem_block
    limiter = min(limits, key=lambda k: limits[k])
    if limits[limiter] < 1:
        return None, f"no block fits on an SM ({limiter} limit)"
    return _Occupancy(limits[limiter], limiter, smem_block), None


# -- time of one launch -------------------------------------------------------------------------

def _time_launch(L: Launch, w: _Work, occ: _Occupancy, target: Target, c: SimConstants
                 ) -> dict[str, float]:
    S, clock = target.sm_count, target.clock_hz
    warps = -(-L.threads // 32)
    bps, blocks = occ.blocks_per_sm, L.blocks
    wave = bps * S
    full, rem = divmod(blocks, wave)
    # (fraction of the work, blocks per active SM, active SMs): full waves, then the tail
    phases = []
    if full:
        phases.append((full * wave / blocks, float(bps), S))
    if rem:
        active = min(S, rem)
        phases.append((rem / blocks, rem / active, active))

    lane_rate = target.fp32_flops / 2 / S * c.issue_rate_scale  # lane-instructions/s per SM
    t_total = t_mem_total = t_cmp_total = 0.0
    occ_time = 0.0
    dram_bytes = 0.0
    for frac, bpsm, active in phases:
        warps_sm = bpsm * warps
        bif = active * warps_sm * 32 * w.active_lanes * w.access_bytes * w.loads_in_flight
        t_mem = _mem_time(frac * w.dram_load_bytes, frac * (w.l2_load_bytes + _spill_l2(w, c)),
                          frac * w.store_bytes, bif, active, w.dram_latency_ns, target, c)
        # the L2 slices serve a limited number of requests per clock, whatever their size
        t_mem = max(t_mem, frac * w.l2_requests / (S * c.l2_requests_per_clk_per_sm * clock))
        hide = min(1.0, warps_sm * w.ilp / c.alu_latency_warps)
        t_issue = frac * w.issue_instr / (active * lane_rate * hide)
        t_mufu = frac * w.mufu_ops / (active * c.mufu_lanes_per_clk * clock)
        t_lsu = frac * ((w.lsu_wavefronts + w.local_bytes / c.line_bytes) / c.l1_wavefronts_per_clk
                        + w.smem_wavefronts / c.smem_wavefronts_per_clk) / (active * clock)
        t_cmp = max(t_issue, t_mufu, t_lsu)
        t_phase = _overlap(t_mem, t_cmp, c, warps_sm)
        t_total += t_phase
        t_mem_total += t_mem
        t_cmp_total += t_cmp
        occ_time += t_phase * warps_sm / (target.max_threads_per_sm // 32)
        dram_bytes += frac * (w.dram_load_bytes + w.store_bytes)

    # barriers and block turnover, hidden by the other blocks resident on the SM
    sms = min(S, blocks)
    resident = max(1.0, min(float(bps), blocks / S))
    exposed = resident ** c.sync_overlap_exponent
    t_sync = w.combine_events * w.combine_cycles / (sms * clock * exposed)
    t_sched = blocks * c.block_launch_cycles / (sms * clock * resident)
    t_atomic = 0.0
    if w.atomics:
        t_atomic = max(w.atomics / (S * c.atomics_per_clk_per_sm * clock),
                       w.atomic_chain * c.atomic_serial_ns * 1e-9)
    # the last wave waits for its slowest SM; earlier waves are balanced by block dispatch
    t_total *= 1 + c.sm_speed_spread / max(1.0, blocks / wave)
    t = t_total + t_sync + t_sched + t_atomic + w.tail_s
    # block dispatch is a throughput floor the rest overlaps with
    t = max(t, blocks * c.block_dispatch_ns * 1e-9 / sms)
    return {"time": t, "mem": t_mem_total, "compute": t_cmp_total, "sync": t_sync,
            "atomic": t_atomic, "dram_bytes": dram_bytes,
            "achieved": occ_time / t_total if t_total else 0.0,
            "theoretical": bps * warps / (target.max_threads_per_sm // 32),
            "waves": blocks / wave}


def _overlap(t_mem: float, t_cmp: float, c: SimConstants, warps_sm: float | None = None
             ) -> float:
    """Time of memory traffic and instruction work that overlap imperfectly: a soft maximum
    (a warp stalled on a load issues nothing, so near balance both show). With few resident
    warps (`warps_sm`) there is little to overlap with: the exponent falls towards 1 (a sum)."""
    hi, lo = max(t_mem, t_cmp), min(t_mem, t_cmp)
    if lo <= 0:
        return hi
    k = c.overlap_sharpness
    if warps_sm is not None and c.overlap_warps > 1:
        k = 1 + (k - 1) * min(1.0, max(0.0, warps_sm - 1) / (c.overlap_warps - 1))
    return hi * (1 + (lo / hi) ** k) ** (1 / k)


def _spill_l2(w: _Work, c: SimConstants) -> float:
    return w.local_bytes * (1 - c.spill_l1_hit)


def _mem_time(dram_loads: float, l2_loads: float, stores: float, bif: float, active: float,
              dram_latency_ns: float, target: Target, c: SimConstants) -> float:
    """Seconds to move the bytes: the bandwidth ceiling, softly maxed with Little's law."""
    dram = dram_loads + stores
    if dram + l2_loads <= 0:
        return 0.0
    write_frac = stores / dram if dram else 0.0
    ratio = c.read_only_bw_ratio - (c.read_only_bw_ratio - 1) * min(1.0, 2 * write_frac)
    t_bw = dram / (target.dram_bw * c.dram_peak_fraction * ratio) + l2_loads / c.l2_bw
    t_sm = (dram + l2_loads) / (active * c.sm_bytes_per_clk * target.clock_hz)
    ceiling = max(t_bw, t_sm)
    loads_ns = dram_loads * dram_latency_ns + l2_loads * c.l2_latency_ns
    t_lat = loads_ns * 1e-9 / bif if bif > 0 else 0.0
    k = c.saturation_sharpness
    return (ceiling ** k + t_lat ** k) ** (1 / k)


def _counters(per_launch: list[dict[str, float]], works: list[_Work], device_s: float,
              target: Target) -> dict[str, float]:
    weights = [r["time"] / device_s if device_s else 1 / len(per_launch) for r in per_launch]
    main = max(range(len(per_launch)), key=lambda i: per_launch[i]["time"])

    def avg(key: str) -> float:
        return sum(wt * r[key] for wt, r in zip(weights, per_launch, strict=True))

    w = works[main]
    busy = sum(r["compute"] for r in per_launch)
    atomics = sum(x.atomics for x in works)
    chain = max(x.atomic_chain for x in works)
    return {
        "achieved_occupancy": avg("achieved"),
        "theoretical_occupancy": avg("theoretical"),
        "waves": per_launch[main]["waves"],
        "sectors_per_request": w.sectors_per_request,
        "dram_throughput": (sum(r["dram_bytes"] for r in per_launch) / device_s / target.dram_bw
                            if device_s else 0.0),
        "bank_conflicts": w.bank_conflicts,
        "registers": max(x.registers for x in works),
        "spills": max(x.spill_bytes for x in works),
        "issue_utilization": min(1.0, busy / device_s) if device_s else 0.0,
        "sync_stalls": sum(r["sync"] for r in per_launch) / device_s if device_s else 0.0,
        "atomic_contention": (1 - 1 / chain) if atomics and chain >= 1 else 0.0,
    }


# -- reading the candidate ----------------------------------------------------------------------

def _describe(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
              c: SimConstants) -> list[_Work]:
    """One `_Work` per launch, from the template's facts where the family is known."""
    family = rendered.fact("family")
    if family is None:
        family = "map" if plan.kind == "map" else "row"
    if family == "map" and len(rendered.launches) == 1:
        works = [_map_work(plan, rendered, resources, target, c)]
    elif family == "row" and len(rendered.launches) == 1:
        works = [_row_work(plan, rendered, resources, target, c)]
        if rendered.fact("cross") == "last_block":  # a loss: the last block folds the totals
            _add_totals(works[0], rendered, None, resources, c, target)
    elif family == "row" and [L.kernel for L in rendered.launches[1:]] == ["ca_total"]:
        # a loss's totals over rows, two_pass: the row kernel writes a partial per block and a
        # one-block kernel folds them (not the row data: the generic split by threads would
        # hand it a share of the tensor)
        works = [_row_work(plan, rendered, resources, target, c), _Work()]
        _add_totals(works[0], rendered, works[1], resources, c, target)
    elif family == "col":
        works = _col_works(plan, rendered, resources, target, c)
    elif family == "split":
        works = _split_works(plan, rendered, resources, target, c)
    elif family == "pool":
        works = [_pool_work(plan, rendered, resources, target, c)]
    elif family == "scan":
        works = _scan_works(plan, rendered, resources, target, c)
    else:
        works = _generic_works(plan, rendered, resources, target, c)
    return works


@dataclass
class _Shape:
    """The parts of a candidate every family has."""

    vec: int
    fast: bool
    i64: bool
    unroll: int | None  # explicit unroll pragma of the main loop; None: fully unrolled
    stream: bool  # streaming (evict-first) loads
    n_full: int  # operands as large as the iteration space
    small: list[int]  # element counts of the other operands
    out_bytes: int
    elem: float = 4.0  # bytes of one element of the full-size operands (2 for fp16, bf16)


def _shape(plan: KernelPlan, rendered: Rendered) -> _Shape:
    src = rendered.source or ""
    vec = int(rendered.fact("vec", 1) or 1)
    unroll = rendered.fact("unroll")
    if unroll is None:
        explicit = [int(m) for m in re.findall(r"#pragma unroll (\d+)", src)]
        unroll = min(explicit) if explicit else None
    hint = rendered.fact("load")
    stream = hint == "stream" if hint is not None else bool(re.search(r"ca_ld\d?<2>", src))
    index = rendered.fact("index")
    i64 = index == "i64" if index is not None else "typedef long long idx_t" in src
    sizes = [math.prod(plan.operand_shapes[k]) for k in plan.operands]
    n_full = sum(1 for s in sizes if s == plan.numel)
    out_elems = math.prod(plan.out_shape) if plan.out_shape else 1
    out_bytes = out_elems * element_bytes(plan.out_dtype)
    # a vector of `vec` elements is vec * elem bytes: a half-precision operand's loads carry
    # half the bytes of a float32 one's
    full = [plan.graph.inputs[k].dtype for k, s in zip(plan.operands, sizes) if s == plan.numel]
    elem = 2.0 if full and all(d in HALF_DTYPES for d in full) else 4.0
    return _Shape(vec, bool(rendered.fact("fast", 0)), i64, unroll, stream, n_full,
                  [s for s in sizes if s != plan.numel], out_bytes, elem)


def _registers(resources: dict, live: float, threads: int, c: SimConstants
               ) -> tuple[int, float, float]:
    """(registers per thread, spill bytes per thread (static), spilled registers estimate).

    With the compiler's report, its numbers; without, the data the thread keeps live plus a fixed
    overhead, capped by what `__launch_bounds__` allows (the rest spills)."""
    regs = int(resources.get("registers") or 0)
    if regs > 0:
        spill = float(resources.get("spill_stores", 0) or 0) + float(
            resources.get("spill_loads", 0) or 0)
        return regs, spill, 0.0
    need = max(c.default_registers, int(math.ceil(c.live_overhead_registers + live)))
    cap = _reg_cap(threads, c)
    spilled = max(0, need - cap)
    return min(need, cap) if cap else need, 8.0 * spilled, float(spilled)


def _coalescing(run_elems: float, vec: int, groups: float, c: SimConstants,
                group_stride: float | None = None, reuse: float | None = None
                ) -> tuple[float, float, float, float]:
    """Access shape of a warp request made of `groups` runs of `run_elems` contiguous floats,
    `group_stride` bytes apart (None: far apart, each run in lines of its own).

    Returns (sectors per request, L1 lines per request, DRAM over-fetch factor, fraction of loads
    that L1 serves from a sector an earlier load of the same group brought in)."""
    run = max(4.0, run_elems * 4)
    sectors = groups * math.ceil(run / c.sector_bytes)
    lines = groups * math.ceil(run / c.line_bytes)
    if group_stride is not None and groups > 1:
        # runs of neighbouring rows share lines (and sectors) when the rows are short: a warp
        # of threads reading 8-element rows touches 8 lines, not 32
        span = (groups - 1) * group_stride + run
        sectors = min(sectors, math.ceil(span / c.sector_bytes))
        lines = min(lines, math.ceil(span / c.line_bytes))
    if run >= c.sector_bytes:
        return sectors, lines, 1.0, 0.0
    reuse = c.l1_sector_reuse if reuse is None else reuse
    waste = c.sector_bytes / run - 1
    overfetch = 1 + waste * (1 - reuse)
    l1_hits = (1 - run / c.sector_bytes) * reuse
    return sectors, lines, overfetch, l1_hits


def _rereads(rendered: Rendered, sh: _Shape, passes: int, cache: str, cached: int) -> float:
    """Extra global reads per element of the iteration space beyond the first: a row kept
    nowhere between passes is read again by each pass that needs it."""
    per_operand = rendered.fact("reads_per_elem")
    if per_operand is not None:
        return max(0.0, (float(per_operand) - 1.0) * max(1, sh.n_full))
    return float((passes - 1) * cached) if (cache == "reload" and passes > 1) else 0.0


def _l2_hit(working_set: float, stream: bool, target: Target, c: SimConstants) -> float:
    usable = target.l2_bytes * c.l2_usable_fraction
    if stream:
        usable *= c.stream_hint_l2_retention
    if working_set <= 0:
        return 1.0
    return 1 / (1 + (working_set / usable) ** c.l2_cliff_sharpness)


@lru_cache(maxsize=4096)
def _bank_wavefronts(words: tuple[int, ...], vec: int) -> tuple[int, int]:
    """(wavefronts, conflict-free wavefronts) of one warp's shared-memory access: lane i reads
    `vec` words from words[i]. 64- and 128-bit accesses are served a half/quarter warp a time."""
    per_phase = 32 // vec
    total = 0
    for p in range(0, len(words), per_phase):
        banks: dict[int, set[int]] = {}
        for w0 in words[p:p + per_phase]:
            for e in range(vec):
                banks.setdefault((w0 + e) % 32, set()).add(w0 + e)
        total += max(len(s) for s in banks.values())
    return total, -(-len(words) // per_phase)


def _op_cost(op: str, args: int, attrs: dict, fast: bool, c: SimConstants
             ) -> tuple[float, float]:
    """(issue slots, special-function ops) of one elementwise op, read off its C rendering."""
    try:
        expr = ops.render(op, ["a", "b", "d"][:max(1, args)], attrs, fast)
    except (KeyError, IndexError):
        return 1.0, 0.0
    issue: float = max(1, len(re.findall(r" [-+*] |[<>]=?|==|!=| \? |&&|\|\||ca_m(?:ax|in)\(",
                                         expr)))
    mufu = 0.0
    n_fast = len(re.findall(r"__(?:expf|logf|log2f|sinf|cosf|powf)\(", expr))
    n_precise = len(re.findall(r"\b(?:expf|logf|log2f|log1pf|expm1f|sinf|cosf|tanhf|erff|powf)\(",
                               expr))
    n_fdiv = expr.count("__fdividef(")
    n_div = len(re.findall(r"/\s*\(", expr))
    n_sqrt = len(re.findall(r"\b(?:sqrtf|rsqrtf)\(", expr))
    issue += (n_fast * c.fast_transcendental_instr + n_precise * c.transcendental_instr
              + n_fdiv * c.fast_div_instr + n_div * c.div_instr + n_sqrt * c.sqrt_instr)
    mufu += n_fast + n_precise + n_fdiv + n_div + n_sqrt
    return float(issue), mufu


def _arith(plan: KernelPlan, fast: bool, c: SimConstants) -> tuple[float, float, float, float]:
    """(issue, mufu) per element of the iteration space, counting every pass's recomputation,
    and (issue, mufu) per row for the values computed once per row."""
    key = ("sim_arith", fast, c.transcendental_instr, c.fast_transcendental_instr, c.div_instr,
           c.fast_div_instr, c.sqrt_instr, c.arg_update_instr)
    return plan.cached(key, lambda: _arith_uncached(plan, fast, c))


def _arith_uncached(plan: KernelPlan, fast: bool, c: SimConstants
                    ) -> tuple[float, float, float, float]:
    g = plan.graph
    reduces = [n for lv in plan.levels for n in lv]
    roots = [[g[r].args[0] for r in lv] for lv in plan.levels]
    if plan.kind == "map" or plan.classes.get(plan.output) == "full":
        roots.append([plan.output])
    cost: dict[int, tuple[float, float]] = {}

    def node_cost(nid: int) -> tuple[float, float]:
        if nid not in cost:
            n = g[nid]
            if n.op in ("input", "const", "view", "reduce"):
                cost[nid] = (0.0, 0.0)
            else:
                cost[nid] = _op_cost(n.op, len(n.args), dict(n.attrs), fast, c)
        return cost[nid]

    full_issue = full_mufu = 0.0
    for rs in roots:  # one pass per level, plus the output pass
        seen: set[int] = set()
        stack = list(rs)
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            if plan.classes.get(k) == "full":
                i, m = node_cost(k)
                full_issue, full_mufu = full_issue + i, full_mufu + m
            if g[k].op != "reduce":
                stack.extend(g[k].args)
    for r in reduces:
        kind = g[r].attr("kind")
        full_issue += c.arg_update_instr if kind in ("argmax", "argmin") else (
            3.0 if kind in ("max", "min") else 1.0)
    row_issue = row_mufu = 0.0
    for n in g.live():
        if plan.classes.get(n.id) == "row" and n.op not in ("reduce", "input", "const", "view"):
            i, m = node_cost(n.id)
            row_issue, row_mufu = row_issue + i, row_mufu + m
    return full_issue, full_mufu, row_issue, row_mufu


def _has_arg(plan: KernelPlan) -> bool:
    return any(plan.graph[r].attr("kind") in ("argmax", "argmin")
               for lv in plan.levels for r in lv)


def _reducers_per_level(plan: KernelPlan) -> float:
    return sum(len(lv) for lv in plan.levels) / max(1, len(plan.levels))


def _combine_cycles(T: int, mode: str, c: SimConstants) -> float:
    """Cycles of one combine of a reducer's partials over T threads."""
    if T <= 1:
        return 0.0
    steps = math.log2(T)
    if mode == "shfl":
        cyc = math.log2(min(T, 32)) * c.shfl_cycles
        if T > 32:  # warp leaders through shared memory, then every warp folds the T/32
            # values as a shuffle tree
            cyc += (3 * c.barrier_cycles + 2 * c.smem_latency_cycles
                    + math.log2(T // 32) * c.shfl_cycles)
        return cyc
    if mode == "serial":  # one thread folds the T partials, then broadcasts
        return (3 * c.barrier_cycles + 2 * c.smem_latency_cycles + T * c.serial_step_cycles)
    # smem_tree (and unknown modes): a barrier and a load/store round trip per halving
    return 3 * c.barrier_cycles + 2 * c.smem_latency_cycles + steps * (
        c.barrier_cycles + 2 * c.smem_latency_cycles)


def _addr(sh: _Shape, c: SimConstants) -> float:
    return c.addr_instr * (c.i64_addr_factor if sh.i64 else 1.0)


def _map_work(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
              c: SimConstants) -> _Work:
    sh = _shape(plan, rendered)
    L = rendered.launches[0]
    N, B, vec = plan.numel, L.threads, sh.vec
    items = int(rendered.fact("items", 1) or 1)
    unrolled = sh.unroll is None or sh.unroll >= items
    in_flight_items = items if unrolled else 1
    n_ops = max(1, sh.n_full)
    gathers = float(rendered.fact("gathers", 0) or 0) / max(1, in_flight_items)
    n_small = len(sh.small)
    vectors = N / vec
    threads_total = L.blocks * B
    steps = math.ceil(vectors / max(1, threads_total * items))

    w = _Work()
    w.access_bytes, w.ilp = vec * sh.elem, float(min(4, vec * in_flight_items))
    w.loads_in_flight = n_ops * in_flight_items if sh.n_full else in_flight_items
    w.active_lanes = min(1.0, vectors / max(1, threads_total * items * steps))
    sectors, lines, _, _ = _coalescing(32 * vec, vec, 1, c)
    w.sectors_per_request = sectors
    w.dram_load_bytes = float(plan.bytes_moved() - sh.out_bytes)
    w.store_bytes = float(sh.out_bytes)
    w.dram_latency_ns = c.dram_latency_ns
    # broadcast operands: read once per vector (or per element when gathered), mostly L1 hits
    small_reads = sum(min(s, N) for s in sh.small)
    w.l2_load_bytes = max(0.0, (n_small * vectors * 4 + gathers * N * 4) - small_reads) * (
        1 - c.broadcast_l1_hit)
    requests = vectors / 32
    w.lsu_wavefronts = requests * (lines * (sh.n_full + 1) + n_small + gathers * vec
                                   * c.gather_lines_per_request)
    a_issue, a_mufu, _, _ = _arith(plan, sh.fast, c)
    per_vector = (a_issue * vec + (sh.n_full + n_small + gathers * (vec - 1) + 1)
                  + _addr(sh, c) * (sh.n_full + n_small + gathers * vec + 1)
                  + c.loop_instr / in_flight_items + 2)
    w.issue_instr = vectors * per_vector / w.active_lanes
    w.mufu_ops = N * a_mufu
    live = vec * (n_ops + n_small + gathers) * in_flight_items + vec
    w.registers, w.spill_bytes, spilled = _registers(resources, live, B, c)
    w.local_bytes = threads_total * steps * _local_per_iteration(w, spilled, 1, c)
    w.smem_static = int(resources.get("smem_static", 0) or 0)
    return w


def _add_totals(w: _Work, rendered: Rendered, fold: _Work | None, resources: dict,
                c: SimConstants, target: Target) -> None:
    """A loss's totals over rows: each block of the row launch writes its partials to the
    workspace; one block folds them, either in a launch of its own (`fold`) or, last_block,
    at the end of the row launch (a ticket atomic per block, then a serial tail)."""
    L = rendered.launches[0]
    ws = float(rendered.workspace_bytes or 4 * L.blocks)
    w.store_bytes += ws
    T = rendered.launches[1].threads if fold is not None else L.threads
    per_thread = math.ceil(ws / 4.0 / max(1, T))
    # the fold: each thread's loads of the partials (in L2, just written), four in flight,
    # then a block combine
    fold_s = (math.ceil(per_thread / 4) * c.l2_latency_ns * 1e-9
              + _combine_cycles(T, rendered.fact("combine", "shfl"), c) / target.clock_hz)
    if fold is None:
        w.atomics += float(L.blocks)
        w.atomic_chain = max(w.atomic_chain, float(L.blocks))
        w.tail_s += 2 * c.l2_latency_ns * 1e-9 + fold_s  # the fence, the ticket, the fold
        return
    fold.l2_load_bytes = ws
    fold.store_bytes = 4.0
    fold.dram_latency_ns = c.dram_latency_ns
    fold.access_bytes = 4.0
    fold.loads_in_flight = 4.0
    fold.issue_instr = ws / 4.0 * (2 + c.addr_instr) + 32
    fold.lsu_wavefronts = ws / c.line_bytes
    fold.registers, fold.spill_bytes, _ = _registers(resources, 8, T, c)
    fold.tail_s = fold_s


def _local_per_iteration(w: _Work, spilled: float, accesses: float, c: SimConstants) -> float:
    """Executed local-memory bytes per thread and outer loop iteration: the compiler's static
    spill bytes, or each estimated spilled register stored once and loaded `accesses` times."""
    return max(w.spill_bytes, spilled * 4 * (1 + accesses))


def _row_work(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
              c: SimConstants) -> _Work:
    sh = _shape(plan, rendered)
    L = rendered.launches[0]
    B, vec = L.threads, sh.vec
    O = int(rendered.fact("rows", plan.O) or plan.O)
    R = int(rendered.fact("row_len", plan.R) or plan.R)
    CL = int(rendered.fact("cluster", 1) or 1)
    if CL > 1:  # a cluster's blocks each cover a segment: as many rows of a CL-th the length
        O, R = O * CL, -(-R // CL)
    T = max(1, min(B, int(rendered.fact("tpr", B) or B)))
    G = max(1, B // T)
    nch = max(1, -(-R // (T * vec)))
    passes = int(rendered.fact("passes", len(plan.levels) + (0 if plan.output_is_row else 1)))
    cache = rendered.fact("cache", "reload")
    cached = int(rendered.fact("cached_operands", sh.n_full if passes > 1 else 0) or 0)
    mode = rendered.fact("combine", "shfl")
    reduce_passes = max(0, passes - (0 if plan.output_is_row else 1))
    # async: the row group's copies are all issued before any is waited for
    full_unroll = cache in ("regs", "async") or nch <= 8 or sh.unroll is None
    chunks_in_flight = nch if full_unroll or sh.unroll is None else min(nch, max(1, sh.unroll))
    n_ops = max(1, sh.n_full)
    N = O * R
    reread = _rereads(rendered, sh, passes, cache, cached)
    iters = math.ceil(O / (L.blocks * G))

    w = _Work()
    w.access_bytes, w.loads_in_flight = vec * sh.elem, float(n_ops * chunks_in_flight)
    w.active_lanes = R / (nch * T * vec)
    w.ilp = float(min(4, vec * chunks_in_flight))
    groups = max(1, 32 // T)
    sectors, lines, overfetch, l1_hits = _coalescing(min(T, 32) * vec, vec, groups, c,
                                                     group_stride=4.0 * R)
    run_bytes = max(4.0, min(T, 32) * vec * 4.0)
    w.sectors_per_request = sectors
    w.dram_latency_ns = l1_hits * c.l1_latency_ns + (1 - l1_hits) * c.dram_latency_ns
    first = float(plan.bytes_moved() - sh.out_bytes)
    # a sector L1 dropped before the group's later load needs it is fetched again, from L2
    # (it was touched a moment ago), not DRAM
    w.dram_load_bytes = first
    w.l2_load_bytes = first * (overfetch - 1)
    w.store_bytes = float(sh.out_bytes)
    if cache == "regs":
        live = nch * vec * max(1, cached) + vec * n_ops
    elif cache == "async":  # cp.async copies need no staging registers
        live = vec * n_ops + vec
    else:
        live = chunks_in_flight * vec * n_ops + vec
    w.registers, w.spill_bytes, spilled = _registers(resources, live, B, c)
    static = resources.get("smem_static")
    if static is None:  # the combine buffer the template declares
        n = G * T if mode == "smem_tree" and T > 1 else (G * (T // 32) if T > 32 else 0)
        static = 4 * n * (2 if _has_arg(plan) else 1)
    w.smem_static = int(static or 0)
    # re-reads of the row on later passes: L2 when the rows in flight fit there
    occ, _ = _occupancy(L, w, target, c)
    if run_bytes < c.sector_bytes:
        # the rest of a sector waits in L1 for the group's next loads, issued right after
        # (so an evict-first hint does not matter): it is still there unless the sectors all
        # resident warps keep in use outgrow L1
        warps_sm = (occ.blocks_per_sm if occ else 1) * -(-B // 32)
        reuse = _l1_hit(warps_sm * sectors * c.sector_bytes * n_ops, c)
        _, _, overfetch, l1_hits = _coalescing(min(T, 32) * vec, vec, groups, c,
                                               group_stride=4.0 * R, reuse=reuse)
        w.dram_latency_ns = l1_hits * c.l1_latency_ns + (1 - l1_hits) * c.dram_latency_ns
        w.l2_load_bytes = first * (overfetch - 1)
    resident = (occ.blocks_per_sm if occ else 1) * target.sm_count
    rows_in_flight = min(O, min(L.blocks, resident) * G)
    hit = _l2_hit(rows_in_flight * R * 4.0 * max(1, cached), sh.stream, target, c)
    reread_bytes = reread * N * 4.0
    w.l2_load_bytes += reread_bytes * (hit + (1 - hit) * (overfetch - 1))
    w.dram_load_bytes += reread_bytes * (1 - hit)
    # broadcast operands (a weight along the row): re-read by every row
    small_reads = sum(s for s in sh.small if s != O)
    w.l2_load_bytes += (O - 1) * small_reads * 4.0 * (1 - c.broadcast_l1_hit)
    n_bcast = sum(1 for s in sh.small if s != O)  # broadcast along the row (a norm's weight)
    global_reads = (n_ops + reread + n_bcast) * N / vec  # lane loads, all passes
    w.lsu_wavefronts = (global_reads + (0 if plan.output_is_row else N / vec)) / 32 / \
        w.active_lanes * lines
    # L2 requests: a thread per long row puts every lane in lines of its own (a request per
    # lane and sector); a full output is stored the way the row is read, a row output is
    # one value per group, coalesced
    w.l2_requests = _l2_requests(
        w.dram_load_bytes + w.l2_load_bytes, sectors, lines,
        0.0 if plan.output_is_row else w.store_bytes, lines, 32 * vec * 4.0 * w.active_lanes, c)
    if plan.output_is_row:
        w.l2_requests += w.store_bytes / c.line_bytes
    if cache in ("smem", "async") and cached:
        q_stride = cached * R
        words = tuple((t // T) * q_stride + (t % T) * vec for t in range(32))
        wf, ideal = _bank_wavefronts(words, vec)
        w.bank_conflicts = (wf - ideal) / ideal
        smem_requests = cached * passes * N / vec / 32 / w.active_lanes
        w.smem_wavefronts = smem_requests * wf
    a_issue, a_mufu, r_issue, r_mufu = _arith(plan, sh.fast, c)
    per_elem = a_issue + (global_reads / N * vec + (0 if plan.output_is_row else 1)) / vec * (
        1 + _addr(sh, c)) + passes * (c.loop_instr / max(1, chunks_in_flight) + 2) / vec
    w.issue_instr = N * per_elem / w.active_lanes + O * (r_issue + 4 * passes)
    w.mufu_ops = N * a_mufu + O * r_mufu
    w.combine_events = math.ceil(O / G) * reduce_passes
    w.combine_cycles = _combine_cycles(T, mode, c) * _reducers_per_level(plan)
    if CL > 1:  # a cluster barrier per combine, and one per row before the slots are reused
        w.combine_cycles += c.cluster_sync_cycles * (1 + 1 / max(1, reduce_passes)) + \
            CL * c.smem_latency_cycles
    w.local_bytes = L.blocks * B * iters * _local_per_iteration(
        w, spilled, max(1, passes - 1), c)
    return w


def _col_works(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
               c: SimConstants) -> list[_Work]:
    """Reductions over a middle dim: (BX, BY) blocks, x along the columns i, y along r; an
    optional second launch folds split partials from the workspace."""
    sh = _shape(plan, rendered)
    launches = rendered.launches
    L = launches[0]
    vec = sh.vec
    O, R, I = plan.O, plan.R, plan.I
    BX = int(rendered.fact("bx", min(32, L.block[0])) or L.block[0])
    BY = int(rendered.fact("by", L.block[1]) or L.block[1])
    split = int(rendered.fact("split", L.grid[1]) or 1)
    passes = int(rendered.fact("passes", len(plan.levels) + (0 if plan.output_is_row else 1)))
    cache = rendered.fact("cache", "reload")
    cached = int(rendered.fact("cached_operands", sh.n_full if passes > 1 else 0) or 0)
    mode = rendered.fact("combine", "smem_tree")
    cross = rendered.fact("cross", "two_pass")
    reduce_passes = max(0, passes - (0 if plan.output_is_row else 1))
    CB = BX * vec
    NT = -(-I // CB)
    tiles = O * NT
    RC = -(-R // split)
    NJ = max(1, -(-RC // BY))
    chunks_in_flight = NJ if (cache == "regs" or sh.unroll is None) else min(NJ, max(1, sh.unroll))
    n_ops = max(1, sh.n_full)
    N = plan.numel
    reread = _rereads(rendered, sh, passes, cache, cached)
    nred = max(1, len(plan.levels[0])) if plan.levels else 1

    w = _Work()
    w.access_bytes, w.loads_in_flight = vec * 4.0, float(n_ops * chunks_in_flight)
    w.active_lanes = min(1.0, I / (NT * CB)) * (RC / (NJ * BY))
    w.ilp = float(min(4, vec * chunks_in_flight))
    groups = max(1, 32 // BX)
    run = min(CB, I)
    sectors, lines, overfetch, l1_hits = _coalescing(run, vec, groups, c)
    w.sectors_per_request = sectors
    w.dram_latency_ns = l1_hits * c.l1_latency_ns + (1 - l1_hits) * c.dram_latency_ns
    out_here = split == 1
    first = float(plan.bytes_moved() - sh.out_bytes)
    # a sector L1 dropped before the group's later load needs it is fetched again, from L2
    # (it was touched a moment ago), not DRAM
    w.dram_load_bytes = first
    w.l2_load_bytes = first * (overfetch - 1)
    w.store_bytes = float(sh.out_bytes) if out_here else 0.0
    live = (NJ * vec * max(1, cached) if cache == "regs" else chunks_in_flight * vec * n_ops) \
        + 2 * vec * nred
    w.registers, w.spill_bytes, spilled = _registers(resources, live, L.threads, c)
    static = resources.get("smem_static")
    if static is None:  # the combine buffers the template declares
        online = passes < len(plan.levels) + (0 if plan.output_is_row else 1)
        static = 0 if BY == 1 else BY * CB * 4 * (1 + int(_has_arg(plan)) + int(online))
    w.smem_static = int(static or 0)
    occ, _ = _occupancy(L, w, target, c)
    resident = (occ.blocks_per_sm if occ else 1) * target.sm_count
    tiles_in_flight = min(tiles, min(L.blocks, resident))
    hit = _l2_hit(tiles_in_flight * R * CB * 4.0 * max(1, cached), sh.stream, target, c)
    reread_bytes = reread * N * 4.0
    w.l2_load_bytes += reread_bytes * (hit + (1 - hit) * (overfetch - 1))
    w.dram_load_bytes += reread_bytes * (1 - hit)
    small_reads = sum(s for s in sh.small if s != O * I)
    w.l2_load_bytes += max(0.0, (N / max(1, small_reads) - 1) * small_reads * 4.0) * (
        1 - c.broadcast_l1_hit) if small_reads else 0.0
    n_bcast = sum(1 for s in sh.small if s != O * I)
    global_reads = (n_ops + reread + n_bcast) * N / vec
    stores_lane = (N / vec) if plan.classes.get(plan.output) == "full" else 0
    w.lsu_wavefronts = (global_reads + stores_lane) / 32 / w.active_lanes * lines
    # L2 requests: narrow column tiles (small BX) are runs of a sector or two, a line each
    w.l2_requests = _l2_requests(w.dram_load_bytes + w.l2_load_bytes, sectors, lines,
                                 w.store_bytes, lines, 32 * vec * 4.0 * w.active_lanes, c)
    if cache == "smem" and cached:
        words = tuple((t // BX) * CB + (t % BX) * vec for t in range(32))
        wf, ideal = _bank_wavefronts(words, vec)
        w.bank_conflicts = (wf - ideal) / ideal
        w.smem_wavefronts = cached * passes * N / vec / 32 / w.active_lanes * wf
    a_issue, a_mufu, r_issue, r_mufu = _arith(plan, sh.fast, c)
    per_elem = a_issue + (global_reads / N * vec + (stores_lane * vec / N)) / vec * (
        1 + _addr(sh, c)) + passes * (c.loop_instr / max(1, chunks_in_flight) + 2) / vec
    w.issue_instr = N * per_elem / w.active_lanes + O * I * (r_issue + 4 * passes)
    w.mufu_ops = N * a_mufu + O * I * r_mufu
    w.combine_events = tiles * split * reduce_passes
    w.combine_cycles = _combine_cycles(BY, mode, c) * _reducers_per_level(plan)
    iters = math.ceil(tiles * split / L.blocks)
    w.local_bytes = L.blocks * L.threads * iters * _local_per_iteration(
        w, spilled, max(1, passes - 1), c)
    works = [w]
    if split > 1:
        ws = float(rendered.workspace_bytes or nred * O * I * 4 * split)
        if cross == "atomic":
            w.atomics = nred * O * I * split
            w.atomic_chain = float(split)
        else:
            w.store_bytes += ws  # partials: written once, stay in L2 for the fold
        for Lf in launches[1:]:
            f = _Work()
            hit_ws = _l2_hit(ws, False, target, c)
            f.l2_load_bytes = ws * hit_ws
            f.dram_load_bytes = ws * (1 - hit_ws) + sum(4.0 * s for s in sh.small)
            f.store_bytes = float(sh.out_bytes)
            f.dram_latency_ns = c.dram_latency_ns
            f.loads_in_flight = float(min(4, split if cross != "atomic" else 1) * nred)
            f.issue_instr = O * I * (nred * (split if cross != "atomic" else 1)
                                     * (2 + _addr(sh, c)) + r_issue + 10)
            f.mufu_ops = O * I * r_mufu
            f.lsu_wavefronts = (ws + sh.out_bytes) / c.line_bytes
            f.sectors_per_request = 4.0
            f.registers, f.spill_bytes, _ = _registers(resources, 8, Lf.threads, c)
            f.smem_static = 0
            works.append(f)
    while len(works) < len(launches):
        works.append(_Work(registers=c.default_registers, dram_latency_ns=c.dram_latency_ns))
    return works


def _split_works(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
                 c: SimConstants) -> list[_Work]:
    """Few long rows: S blocks share a row. Each reduction level is a partial kernel over
    (S, O) blocks whose partials meet in a fold kernel (two_pass), in the row's last block
    (last_block) or through atomics; a full output is a last elementwise kernel. Each kernel
    reads the rows again: from L2 only if the whole tensor fits there."""
    sh = _shape(plan, rendered)
    O, R, N = plan.O, plan.R, plan.numel
    launches = rendered.launches
    S = int(rendered.fact("splits", launches[0].grid[0]) or 1)
    B = int(rendered.fact("threads", launches[0].threads) or launches[0].threads)
    CH = int(rendered.fact("chunk", -(-R // S)) or -(-R // S))
    vec = sh.vec
    passes = max(1, int(rendered.fact("passes", len(plan.levels) + (
        0 if plan.output_is_row else 1)) or 1))
    mode = rendered.fact("combine", "shfl")
    cross = rendered.fact("cross", "two_pass")
    n_ops = max(1, sh.n_full)
    nred = _reducers_per_level(plan)
    a_issue, a_mufu, r_issue, r_mufu = _arith(plan, sh.fast, c)
    tensor_hit = _l2_hit(N * 4.0 * n_ops, sh.stream, target, c)
    first_touch = float(plan.bytes_moved() - sh.out_bytes)
    trips = max(1, -(-CH // (B * vec)))
    chunks_in_flight = max(1, min(trips, sh.unroll or trips))
    clock = target.clock_hz
    works: list[_Work] = []
    streamed = 0
    for L in launches:
        w = _Work(dram_latency_ns=c.dram_latency_ns)
        name = L.kernel
        if name.startswith("ca_split_f") or (name == "ca_split_out" and plan.output_is_row):
            # a block (or a thread) per row folds S partials from the workspace (in L2)
            fold = name.startswith("ca_split_f")
            per_row = S * nred if fold else nred
            T = L.threads if fold else 1
            w.l2_load_bytes = O * per_row * 4.0
            w.dram_load_bytes = sum(4.0 * s for s in sh.small)
            w.store_bytes = float(sh.out_bytes if (plan.output_is_row and (
                not fold or L is launches[-1])) else O * nred * 4)
            w.loads_in_flight = nred
            w.active_lanes = min(1.0, per_row / max(1, T * nred)) if fold else 1.0
            w.issue_instr = O * (per_row * (2 + _addr(sh, c)) + r_issue + 10) / w.active_lanes
            w.mufu_ops = O * r_mufu
            w.lsu_wavefronts = O * (per_row / 32 + 1)
            if fold:
                w.combine_events = O
                w.combine_cycles = _combine_cycles(T, mode, c) * nred
            w.registers, w.spill_bytes, _ = _registers(resources, 8, L.threads, c)
            works.append(w)
            continue
        # a streaming kernel over the (S, O) grid: a reduction level, or the full output
        writes = name == "ca_split_out"
        reads = N * 4.0 * n_ops
        if streamed == 0:
            w.dram_load_bytes = first_touch
        else:
            w.l2_load_bytes = reads * tensor_hit
            w.dram_load_bytes = reads * (1 - tensor_hit)
        streamed += 1
        w.store_bytes = float(sh.out_bytes) if writes else 0.0
        w.access_bytes, w.loads_in_flight = vec * 4.0, float(n_ops * chunks_in_flight)
        w.ilp = float(min(4, vec * chunks_in_flight))
        w.active_lanes = min(1.0, R / (S * trips * B * vec))
        sectors, lines, _, _ = _coalescing(32 * vec, vec, 1, c)
        w.sectors_per_request = sectors
        lane_ops = (n_ops + (1 if writes else 0)) * N / vec
        w.lsu_wavefronts = lane_ops / 32 / w.active_lanes * lines
        per_elem = a_issue / passes + (n_ops + (1 if writes else 0)) / vec * (
            1 + _addr(sh, c)) + (c.loop_instr / chunks_in_flight + 2) / vec
        w.issue_instr = N * per_elem / w.active_lanes + S * O * (r_issue + 10)
        w.mufu_ops = N * a_mufu / passes + S * O * r_mufu
        if not writes:
            w.combine_events = S * O
            w.combine_cycles = _combine_cycles(B, mode, c) * nred
            if cross == "atomic":
                w.atomics, w.atomic_chain = S * O * nred, float(S)
            elif cross in ("two_pass", "last_block"):
                w.store_bytes += S * O * nred * 4.0
            if cross == "last_block":
                # a ticket per block; the last block of each row folds S partials at the end
                w.atomics, w.atomic_chain = float(S * O), float(S)
                w.tail_s = (2 * c.l2_latency_ns * 1e-9 + _combine_cycles(B, mode, c) * nred / clock
                            + -(-S // B) * c.l2_latency_ns * 1e-9)
        live = chunks_in_flight * vec * n_ops + vec + 2 * nred
        w.registers, w.spill_bytes, spilled = _registers(resources, live, L.threads, c)
        static = resources.get("smem_static")
        if static is None:
            static = 4 * (B if mode == "smem_tree" else B // 32) * (2 if _has_arg(plan) else 1)
        w.smem_static = int(static or 0)
        w.local_bytes = L.blocks * L.threads * _local_per_iteration(w, spilled, trips, c)
        works.append(w)
    return works


def _generic_works(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
                   c: SimConstants) -> list[_Work]:
    """An unknown family: the plan's bytes and arithmetic, re-reads from `passes`/`cache`, spread
    over the launches in proportion to their threads."""
    sh = _shape(plan, rendered)
    launches = rendered.launches
    vec = sh.vec
    passes = int(rendered.fact("passes", 1) or 1)
    cache = rendered.fact("cache", "reload")
    cached = int(rendered.fact("cached_operands", sh.n_full if passes > 1 else 0) or 0)
    reread = _rereads(rendered, sh, passes, cache, cached)
    N = plan.numel
    a_issue, a_mufu, r_issue, r_mufu = _arith(plan, sh.fast, c)
    rows = plan.O * plan.I
    sizes = [L.threads * L.blocks for L in launches]
    total_threads = sum(sizes)
    ws = float(rendered.workspace_bytes or 0)
    works = []
    for L, size in zip(launches, sizes, strict=True):
        share = size / total_threads
        w = _Work()
        w.access_bytes = vec * 4.0
        w.loads_in_flight = float(max(1, sh.n_full) * int(rendered.fact("items", 1) or 1))
        w.ilp = float(min(4, vec))
        w.dram_latency_ns = c.dram_latency_ns
        w.dram_load_bytes = share * (plan.bytes_moved() - sh.out_bytes)
        occ, _ = _occupancy(L, _Work(registers=c.default_registers), target, c)
        resident = (occ.blocks_per_sm if occ else 1) * target.sm_count
        hit = _l2_hit(N * 4.0 * max(1, cached) * min(1.0, resident / L.blocks), sh.stream,
                      target, c)
        w.l2_load_bytes = share * (reread * N * 4.0 * hit + ws)
        w.dram_load_bytes += share * reread * N * 4.0 * (1 - hit)
        w.store_bytes = share * (sh.out_bytes + ws)
        reads = (max(1, sh.n_full) + reread) * N / vec
        w.sectors_per_request = 4.0 * vec
        w.lsu_wavefronts = share * (reads + N / vec) / 32 * vec
        w.issue_instr = share * (N * (a_issue + (reads / N * vec + 1) / vec * (1 + _addr(sh, c))
                                      + passes * c.loop_instr / vec) + rows * r_issue)
        w.mufu_ops = share * (N * a_mufu + rows * r_mufu)
        T = int(rendered.fact("tpr", 1) or 1)
        w.combine_events = share * rows * max(0, passes - (0 if plan.output_is_row else 1)) / max(
            1, L.threads // T)
        w.combine_cycles = _combine_cycles(T, rendered.fact("combine", "smem_tree"), c)
        w.registers, w.spill_bytes, spilled = _registers(
            resources, vec * max(1, sh.n_full) + vec, L.threads, c)
        w.local_bytes = L.blocks * L.threads * _local_per_iteration(w, spilled, 1, c)
        w.smem_static = int(resources.get("smem_static", 0) or 0)
        if rendered.fact("cross") == "atomic":
            w.atomics = share * rows * int(rendered.fact("split", 1) or 1)
            w.atomic_chain = float(rendered.fact("split", 1) or 1)
        works.append(w)
    return works


def _l1_hit(footprint: float, c: SimConstants) -> float:
    """Fraction of repeated touches of a sector that L1 still serves when the sectors the
    resident warps keep in use span `footprint` bytes per SM (the L2 cliff's shape, at L1 size)."""
    if footprint <= 0:
        return 1.0
    return 1 / (1 + (footprint / c.l1_usable_bytes) ** c.l2_cliff_sharpness)


def _pool_work(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
               c: SimConstants) -> _Work:
    """Pooling: a thread computes `items` consecutive outputs of an output row, loading each
    window row's elements with scalar loads (registers: the span once; reload: per window).

    Adjacent lanes start `items x stride` elements apart, so one warp request touches that many
    times more sectors and L1 lines than a unit-stride one; the rest of each sector is used by
    the thread's later loads of the same window row, issued with the first (L1 serves most of
    them, `l1_inflight_merge`), and by other windows only if L1 still holds it, which depends
    on the sectors all resident warps keep in use. Misses go back to L2 (whole sectors), not
    DRAM: the input is read from DRAM once (overlapping windows of other threads hit L2)."""
    info = window_info(plan)
    sh = _shape(plan, rendered)
    L = rendered.launches[0]
    items = int(rendered.fact("items", 1) or 1)
    regs = rendered.fact("cache") == "regs"
    outer_rows = math.prod(info.kernel[:-1])  # window rows per output
    row_loads = span(info, items) if regs else items * info.kernel[-1]
    loads_item = row_loads * outer_rows  # lane loads per work item
    chunks = -(-info.out_spatial[-1] // items)
    work_items = info.planes * math.prod(info.out_spatial[:-1]) * chunks
    outputs = plan.numel
    lane_loads = float(work_items * loads_item)
    requests = lane_loads / 32

    # one request: runs of adjacent lanes in one output row, `gap` bytes apart
    gap = 4.0 * items * info.stride[-1]
    run_lanes = min(32, chunks)
    groups = -(-32 // run_lanes)
    # window offsets put a run anywhere in a line: on average it straddles one more boundary
    run = (run_lanes - 1) * gap + 4.0
    sectors = groups * min(run_lanes, (run - 4.0) / c.sector_bytes + 1)
    lines = groups * min(run_lanes, (run - 4.0) / c.line_bytes + 1)

    w = _Work()
    in_bytes = float(plan.bytes_moved() - sh.out_bytes)
    w.access_bytes = 4.0
    # loads in flight: the whole window when its loops unroll, else one window row (its loops
    # always unroll). Little's law counts distinct bytes: a load of an element that a
    # neighbouring window also reads fetches nothing new. 1-D windows kept nowhere load one
    # element at a time: a DRAM round trip for the new one, L1 round trips for the others
    new_elems = in_bytes / work_items / 4.0
    w.dram_latency_ns = c.dram_latency_ns
    if not re.search(r"#pragma unroll 1\b", rendered.source or ""):
        w.loads_in_flight = min(loads_item, new_elems)
    elif info.rank > 1:
        w.loads_in_flight = min(row_loads, new_elems * row_loads / loads_item)
    else:
        w.loads_in_flight = min(1.0, new_elems)
        w.dram_latency_ns += (loads_item - 1) * c.l1_latency_ns
    w.ilp = float(min(4, items))
    w.active_lanes = min(1.0, work_items / max(1, L.blocks * L.threads * math.ceil(
        work_items / max(1, L.blocks * L.threads))))
    w.sectors_per_request = float(sectors)
    w.dram_load_bytes = in_bytes
    w.store_bytes = float(sh.out_bytes)
    live = (row_loads if regs else 1) + items + 8
    w.registers, w.spill_bytes, spilled = _registers(resources, live, L.threads, c)
    w.smem_static = int(resources.get("smem_static", 0) or 0)
    occ, _ = _occupancy(L, w, target, c)
    warps_sm = (occ.blocks_per_sm if occ else 1) * -(-L.threads // 32)
    # sectors a warp keeps in use: the window row its loads walk, a run of sectors per lane
    warp_bytes = groups * c.sector_bytes * max(
        1.0, math.ceil(run_lanes * max(gap, span(info, items) * 4.0) / c.sector_bytes))
    keep = c.stream_hint_l1_retention if sh.stream else 1.0  # evict-first loads
    hit = _l1_hit(warps_sm * warp_bytes, c) * keep
    fetched = requests * sectors * c.sector_bytes  # sector fetches without reuse in L1
    w.l2_load_bytes = max(0.0, fetched - in_bytes) * (1 - max(hit, c.l1_inflight_merge)) + max(
        0.0, lane_loads * 4.0 - in_bytes) * (1 - hit * c.broadcast_l1_hit)
    # stores: lane i writes output items x i (+ item j), so they are strided the same way
    st_sectors, st_lines = _strided_request(run_lanes, 4.0 * items, 4.0, c)
    w.l2_load_bytes += _partial_store_bytes(outputs / 32, groups * st_sectors, outputs * 4.0, c)
    w.lsu_wavefronts = requests * lines + outputs / 32 * groups * st_lines
    w.l2_requests = _l2_requests(w.dram_load_bytes + w.l2_load_bytes, sectors, lines,
                                 outputs * 4.0, groups * st_lines, 32 * 4.0, c)
    a_issue, a_mufu, _, _ = _arith(plan, sh.fast, c)
    w.issue_instr = _pool_instr(rendered, info, lane_loads, outputs, work_items, a_issue, sh, c)
    w.mufu_ops = outputs * a_mufu + (outputs if info.kind == "avg" else 0)
    w.local_bytes = L.blocks * L.threads * _local_per_iteration(w, spilled, 1, c)
    return w


def _pool_instr(rendered: Rendered, info: Any, lane_loads: float, outputs: int,
                work_items: int, a_issue: float, sh: _Shape, c: SimConstants) -> float:
    """Lane-instructions of a pooling kernel: per load (the load, the combine; a bounds test
    predicates the load, nearly free), per output (avg's divisor and division, the epilogue,
    the store) and per work item (index decomposition)."""
    guarded = "const bool inside" not in (rendered.source or "")
    combine = 3.0 if info.kind == "max" else 1.0  # max: compare, NaN test, select
    per_load = 1 + combine
    per_output = a_issue + 1 + _addr(sh, c)
    if info.kind == "avg" and info.divisor_override is None and guarded:
        per_output += 6.0 * info.rank  # the clipped window's extent per dim
    if info.kind == "avg":
        per_output += c.fast_div_instr if sh.fast else c.div_instr
    per_item = (4.0 * info.rank + 6) * (c.i64_addr_factor if sh.i64 else 1.0) + c.loop_instr
    return lane_loads * per_load + outputs * per_output + work_items * per_item


def _l2_requests(load_bytes: float, load_sectors: float, load_lines: float, store_bytes: float,
                 store_lines: float, store_useful: float, c: SimConstants) -> float:
    """L1 -> L2 requests: a load miss asks for the sectors it needs of one line at a time
    (`load_sectors / load_lines` sectors a request); stores write through, one request per
    line a warp store touches, carrying the request's useful bytes over its lines."""
    per_load = c.sector_bytes * max(1.0, load_sectors / max(1.0, load_lines))
    per_store = max(4.0, store_useful / max(1.0, store_lines))
    return load_bytes / per_load + store_bytes / per_store


def _strided_request(lanes: int, gap: float, access: float, c: SimConstants
                     ) -> tuple[float, float]:
    """(sectors, L1 lines) of one warp request whose `lanes` adjacent lanes each access `access`
    bytes, `gap` bytes apart (gap == access: coalesced). The run starts anywhere in a line, so
    it straddles one more boundary on average than its length alone needs."""
    if gap <= access:
        run = lanes * access
        return (run - 4.0) / c.sector_bytes + 1, (run - 4.0) / c.line_bytes + 1
    per_lane_sectors = math.ceil(access / c.sector_bytes)
    run = (lanes - 1) * gap + access
    sectors = min(lanes * per_lane_sectors, (run - 4.0) / c.sector_bytes + 1)
    lines = min(lanes * math.ceil(access / c.line_bytes), (run - 4.0) / c.line_bytes + 1)
    return sectors, lines


def _partial_store_bytes(requests: float, sectors: float, useful: float, c: SimConstants
                         ) -> float:
    """L2 traffic beyond the useful bytes of store requests that touch `sectors` sectors each:
    a partially written sector still occupies a whole sector slot of L2 bandwidth."""
    return max(0.0, requests * sectors * c.sector_bytes - useful)


def _scan_works(plan: KernelPlan, rendered: Rendered, resources: dict, target: Target,
                c: SimConstants) -> list[_Work]:
    """Scans: rows (a group of `tpr` threads walks a row in tiles, each thread scanning
    `items` vectors of consecutive elements, the group scanning the thread totals, a barrier
    chain per tile) or columns (a thread per vector of columns walks the scanned dim, `items`
    steps in flight). With a split, a first launch reads everything for the chunk totals and
    the second reads it again (from L2 only if the tensor fits there)."""
    sh = _shape(plan, rendered)
    info = plan.info
    vec = sh.vec
    rows_mode = info.I == 1
    T = int(rendered.fact("tpr", 1) or 1)
    items = int(rendered.fact("items", 1) or 1)
    mode = rendered.fact("combine", "shfl")
    S = int(rendered.fact("splits", 1) or 1)
    N, n_ops = plan.numel, max(1, sh.n_full)
    first = float(plan.bytes_moved() - sh.out_bytes)
    a_issue, a_mufu, _, _ = _arith(plan, sh.fast, c)
    # rows: adjacent lanes are items x vec elements apart; columns: unit stride
    K = items * vec if rows_mode else vec
    sectors, lines = _strided_request(min(32, T) if rows_mode else 32, 4.0 * K, 4.0 * vec, c)
    works = []
    for idx, L in enumerate(rendered.launches):
        writes = L.kernel != "ca_scan_totals"
        w = _Work(dram_latency_ns=c.dram_latency_ns)
        w.access_bytes = vec * 4.0
        w.loads_in_flight = float(n_ops * items)
        w.ilp = float(min(4, vec * items))
        w.sectors_per_request = sectors
        if idx == 0:
            w.dram_load_bytes = first
        else:  # the second pass over the tensor
            hit = _l2_hit(first, sh.stream, target, c)
            w.l2_load_bytes, w.dram_load_bytes = first * hit, first * (1 - hit)
        w.store_bytes = float(sh.out_bytes) if writes else float(rendered.workspace_bytes)
        w.registers, w.spill_bytes, spilled = _registers(
            resources, (2 if writes else 1) * vec * items * n_ops + 8, L.threads, c)
        w.smem_static = int(resources.get("smem_static", 0) or (
            8 * L.threads if mode == "smem_tree" else 4 * (L.threads // 32)))
        requests = N / vec / 32 * (n_ops + (1 if writes else 0))
        w.lsu_wavefronts = requests * lines
        if writes:
            w.l2_load_bytes += _partial_store_bytes(N / vec / 32, sectors, N * 4.0, c)
        if K > vec:  # strided lanes: the rest of each sector only if L1 keeps it
            occ, _ = _occupancy(L, w, target, c)
            warps_sm = (occ.blocks_per_sm if occ else 1) * -(-L.threads // 32)
            hit_l1 = _l1_hit(warps_sm * 32 * K * 4.0 * n_ops, c) * (
                c.stream_hint_l1_retention if sh.stream else 1.0)
            fetched = N / vec / 32 * n_ops * sectors * c.sector_bytes
            w.l2_load_bytes += max(0.0, fetched - N * 4.0 * n_ops) * (1 - hit_l1)
        w.l2_requests = _l2_requests(
            w.dram_load_bytes + w.l2_load_bytes, sectors, lines,
            w.store_bytes if writes else 0.0, lines, 32 * 4.0 * vec, c)
        per_elem = a_issue + 2 + (n_ops + (1 if writes else 0)) * (1 + _addr(sh, c)) / vec
        w.issue_instr = N * per_elem
        w.mufu_ops = N * a_mufu
        if rows_mode and T > 1:  # the groups' scans of thread totals, once per tile of a chunk
            chunk = -(-info.L // S)
            w.combine_events = L.blocks * -(-chunk // (T * K))
            w.combine_cycles = _combine_cycles(T, mode, c) + c.shfl_cycles
        w.local_bytes = L.blocks * L.threads * _local_per_iteration(w, spilled, 1, c)
        works.append(w)
    return works
