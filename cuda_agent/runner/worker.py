"""The GPU worker process: the unit of isolation (STYLE lesson 3).

One worker per GPU holds the problem's model, reference and inputs on the device, and evaluates
candidates one at a time: verify, then time. A kernel fault that poisons the CUDA context makes
the worker answer and exit; a hang is killed from outside by the supervisor (`cuda_device.py`).
Messages are plain dicts over a multiprocessing pipe.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import hashlib
import os
import sys
import time
import traceback
from typing import Any, Callable

import torch

from .. import procs
from ..ir.graph import Graph
from ..ir.planning import make_plan
from ..problem import load_problem
from ..space.program import state_updates
from ..stopwatch import Phases
from ..verify.cases import (CandidateError, CasePool, IndexDomain, InputMeta, PoolBudget, Slack,
                            Split, ValueRange, VerifyResult, block_inputs, check, check_state,
                            draw_case_into, narrow_inputs, poison, witness_slack)
from ..verify.separable import (Accumulation, accumulation_dims, accumulation_of, is_separable,
                                part_weight, same_answer, separable_splits)
from ..verify.settings import VerifySettings
from ..verify.sliceable import channel_sliceable, has_depthwise
from . import launcher, memory
from .baselines import (CUDNN_BENCHMARK, DEFAULTS, MATCHED, contract_tf32, settings_record,
                        tf32_reads)
from .memory import MemoryPlan, MemoryRefusal, PeakTracker, Sizes
from .timing import PEAK_FLOPS, L2Flusher, TimingSettings, physical_floor_ms, time_runs

HOST_COPY_BPS = 10e9
"""host-to-device copy rate assumed when choosing between keeping a reference in host memory
and recomputing it (pinned memory on PCIe 5 copies faster; pageable memory slower)"""
TOO_LARGE = 1 << 62
"""a reference chunk's cost where measuring it ran out of the memory it was allowed"""


TORCH_DEFAULTS = launcher.tf32_flags()
"""PyTorch's TF32 flags as this process found them: read at import, before anything here sets
them. In a worker (a fresh spawned process) they are torch's own defaults, the flags a user's
process runs with, and the baselines at the defaults run under them (`ProblemState.baseline`)."""


def hopeless(probe_ms: float, best_ms: float | None) -> bool:
    """Whether a candidate whose run took `probe_ms` is abandoned before its verification:
    over a second, or over 20 times the best so far (and 5 ms): its timing would cost more
    than it could win."""
    return probe_ms > 1000.0 or bool(best_ms and probe_ms > max(20.0 * best_ms, 5.0))


def read_cubin(path: str, sha256: str | None) -> bytes | None:
    """The cubin at `path`, or None where `sha256` is given and the bytes differ: the file was
    replaced or garbled after the build cache checked it (a window of a few seconds, but the
    bytes loaded are exactly the bytes checked)."""
    with open(path, "rb") as f:
        image = f.read()
    if sha256 is not None and hashlib.sha256(image).hexdigest() != sha256:
        return None
    return image


def use_precision(precision: str) -> None:
    """The worker's flags, process-wide: the kernels' contract, which the witness, the
    verification and the candidates' library steps run under. Each product is strict fp32 or
    TF32 as the contract says (`--precision auto`: as torch's flags said in the tuning process,
    by default cuDNN's convolutions on TF32 and cuBLAS's products strict; `--precision tf32`:
    both on TF32). For fp16 and bf16 the products run under autocast (`precision_context`) and
    the rest stays fp32."""
    tf32 = contract_tf32(precision)
    launcher.set_tf32(tf32["conv"], tf32["matmul"])


def precision_context(precision: str) -> Any:
    """Where the witness and the matched baselines run: under `torch.autocast` in fp16 or bf16
    when the user opted into half-precision products (what a user of torch does to get them:
    matmuls and convolutions in that dtype, reductions and norms kept in fp32), else as they
    are."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    return (torch.autocast("cuda", dtype=dtype) if dtype is not None
            else contextlib.nullcontext())


def observed_flags() -> dict[str, Any]:
    """The TF32 flags and autocast in effect where a baseline runs (its reply says them)."""
    flags = launcher.tf32_flags()
    return {"conv_tf32": launcher.conv_tf32(flags), "matmul_tf32": launcher.matmul_tf32(flags),
            "autocast": str(torch.get_autocast_dtype("cuda")).replace("torch.", "")
            if torch.is_autocast_enabled("cuda") else None}


def fresh_compile() -> Any:
    """torch.compile's persistent caches off: a compiled graph's cache key leaves out cuDNN's
    TF32 flag, which max-autotune bakes into the convolution templates it generates and
    benchmarks, so a graph compiled under one setting must not be served under the other."""
    from torch._inductor import config

    off = {k: False for k in ("fx_graph_cache", "fx_graph_remote_cache", "autotune_local_cache",
                              "autotune_remote_cache", "bundled_autotune_remote_cache")
           if hasattr(config, k)}
    return config.patch(off)


def torch_defaults() -> Any:
    """Run under PyTorch's default TF32 settings as a fresh process has them (cuDNN
    convolutions may use TF32, matrix products may not, on torch 2.x), whatever contract the
    kernels are held to; restored after. Conformance mode's reference runs under them."""
    return launcher.tf32_mode(flags=TORCH_DEFAULTS)


def reference_copy(model: torch.nn.Module, graph: Any,
                   device: str | torch.device | None = None,
                   dtype: torch.dtype | None = torch.float64) -> torch.nn.Module:
    """A float64 (or `dtype`; None: as it is) copy of `model` for the reference, without copies
    of the parameters and buffers the graph supplies (`functional_call` replaces them on every
    call): a large weight is not held twice more on the GPU. Its depthwise convolutions take
    any slice of their channels (`sliceable`): on whole inputs it computes what `model` does."""
    supplied = {g.target for g in graph.inputs if g.role != "input"}
    memo: dict[int, Any] = {}
    for name, p in model.named_parameters():
        if name in supplied:
            memo[id(p)] = torch.nn.Parameter(torch.empty(0, dtype=p.dtype, device=p.device),
                                             requires_grad=False)
    for name, b in model.named_buffers():
        if name in supplied:
            memo[id(b)] = torch.empty(0, dtype=b.dtype, device=b.device)
    ref = copy.deepcopy(model, memo)
    channel_sliceable(ref)
    ref = ref.to(device) if device is not None else ref
    return ref.to(dtype) if dtype is not None else ref


@contextlib.contextmanager
def refusing(name: str, doing: str) -> Any:
    """CUDA running out of memory while setting a problem up is a refusal, in one line."""
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        free, total = torch.cuda.mem_get_info()
        raise MemoryRefusal(f"{name} does not fit on the GPU: out of memory while {doing} "
                            f"({memory.gib(free)} of {memory.gib(total)} free)") from None


class ProblemState:
    """Everything about one problem that lives on the GPU between candidates.

    The model is held as `Model(*get_init_inputs())` leaves it (training mode unless its
    constructor says otherwise), as the user and the field's harness hold it. Where forward()
    updates module state (BatchNorm's running statistics in training mode), each reference run
    updates copies, never a case's tensors, and a candidate's timed runs include its update.

    Its footprint is planned (`memory.MemoryPlan`): one set of inputs, into which the timing
    set and every verification case are drawn in turn where they do not all fit, one output,
    the references there is room for, and the float64 reference computed in chunks where it
    cannot run whole. A problem that cannot fit is refused (`MemoryRefusal`) before any search.
    """

    def __init__(self, path: str, device: torch.device, timing: TimingSettings,
                 verify_settings: VerifySettings, tracker: PeakTracker | None = None,
                 graph: Graph | None = None) -> None:
        self.device = device
        self.timing = timing
        self.verify_settings = verify_settings
        self.precision = verify_settings.precision
        # where the set-up's time went (the tune's report), and its peak memory by each step's end
        self.phases = phases = Phases(mark=lambda: self.tracker.overall()
                                      if getattr(self, "tracker", None) else 0,
                                      on_end=slow_step_notice)
        with phases("capture"):
            # `graph`: the parent's capture of this file (it checked the file too); traced
            # here only where none came
            self.problem = load_problem(path, check=graph is None)
            if graph is not None:
                self.problem._graph = graph
            self.graph = self.problem.graph()
            self.plan = make_plan(self.graph)
        self.tracker = tracker or PeakTracker(device)
        memory.refuse_unless_inputs_fit(self.problem.name, Sizes.of(self.graph, self.plan),
                                        torch.cuda.mem_get_info(device)[0])
        with phases("model"):
            self.model = self.problem.make_model(device)
            self.ref_model = reference_copy(self.model, self.graph)
        self.ref_host: torch.nn.Module | None = None  # the float64 reference in host memory
        # False where the reference's chunks took the GPU room references would be kept in
        # (`_reference_plan`): the pool keeps them in host memory
        self.device_refs = True
        # a reference accumulated over chunks of the batch (a loss reduced to one number),
        # and the rows per chunk (`_accumulation_plan`)
        self.accumulation: Accumulation | None = None
        self.accumulate_rows = 0
        self.conformance = verify_settings.tolerance is not None
        # module state forward() updates in place, applied after a candidate's kernels
        self.updates = state_updates(self.plan)
        self.mutable = {u[k] for u in self.updates for k in ("target", "running_mean",
                                                            "running_var") if k in u}
        buffers = dict(self.model.named_buffers())
        self.timing_state = {name: buffers[name].detach().clone() for name in self.mutable}
        self._state_want: dict[str, torch.Tensor] | None = None  # `check_state`'s reference
        self._state_slack: dict[str, Slack] = {}  # and torch's own error in it (the floor)
        props = torch.cuda.get_device_properties(device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 60 * 1024 * 1024))
        self.flusher = L2Flusher(device, self.l2_bytes)
        # before the problem's tensors, and not counted in its footprint: the probe's buffers
        # are sized to what is free and gone before the inputs are allocated
        with phases("copy_bandwidth"):
            self.copy_bw = copy_bandwidth(device, self.flusher)
        self.tracker.start()
        with refusing(self.problem.name, "allocating the example inputs"), phases("inputs"):
            example_args = self.problem.make_inputs(device)
        params: dict[str, torch.Tensor] = dict(self.model.named_parameters())
        params.update(dict(self.model.named_buffers()))
        # graph inputs, in graph order: forward args by position, parameters by state_dict name;
        # only what a draw needs of them is kept (shape, dtype, sign domain)
        self.metas: list[InputMeta] = [
            InputMeta.of((example_args[gin.position()] if gin.role == "input"
                          else params[gin.state_name()]).detach()) for gin in self.graph.inputs]
        with refusing(self.problem.name, "running torch eager once"), phases("eager_peak"):
            eager_peak = self._eager_peak(example_args)
        del example_args, params  # the examples are freed: every set is drawn
        torch.cuda.empty_cache()
        out_dtype = {"float32": torch.float32, "int64": torch.int64, "float16": torch.float16,
                     "bfloat16": torch.bfloat16}[self.plan.out_dtype]
        self.out_shape, self.out_dtype = tuple(self.plan.out_shape), out_dtype
        self.domains = [IndexDomain(gin.index_bound, gin.index_ignore)
                        if gin.index_bound is not None else ValueRange(*gin.value_range)
                        if gin.value_range is not None else None for gin in self.graph.inputs]
        # parameters and buffers are drawn signed whatever their initial values
        self.signed = [gin.role != "input" for gin in self.graph.inputs]
        sizes = Sizes.of(self.graph, self.plan, self.model)
        capacity = (torch.cuda.mem_get_info(device)[0] + self.tracker.allocated()
                    - memory.SAFETY_BYTES)
        self.memory = MemoryPlan(sizes, eager_peak, capacity, self.flusher.buf.numel() * 4,
                                 memory.timing_sets(sizes.input_bytes, self.l2_bytes,
                                                    timing.rotate),
                                 memory.SCRATCH_BYTES, memory.HOLD_BYTES)
        self.memory.refuse_unless_fits(self.problem.name)
        # one set of inputs: timing set 0, and where the cases do not all fit, the buffers
        # each case is drawn into when it is used
        self.buffers = [torch.empty(m.shape, dtype=m.dtype, device=device) for m in self.metas]
        with refusing(self.problem.name, "planning the float64 reference"), \
                phases("reference_plan"):
            split, rows, host_bytes = self._reference_plan()
        budget = PoolBudget(self.memory.hold_room() if self.device_refs else 0, host_bytes,
                            memory.SCRATCH_BYTES)
        with refusing(self.problem.name, "drawing the verification cases"), phases("cases"):
            # conformance mode checks against the module itself in fp32: no witness needed
            self.pool = CasePool(self.reference, self.metas, self.out_shape, self.out_dtype,
                                 verify_settings, self.signed,
                                 witness=None if self.conformance else self.witness,
                                 domains=self.domains, budget=budget, buffers=self.buffers,
                                 split=split, chunk_rows=rows)
        # rotated input sets for timing: fresh draws, so no run finds its data in cache
        with phases("timing_sets"):
            self.sets = [self.pool.timing_set(k) for k in range(self.memory.timing_sets)]
        self.bytes = self.plan.bytes_moved()
        self.flops = self.plan.flops()
        self.evaluated = 0
        torch.cuda.empty_cache()
        self.memory.peak_bytes = self.tracker.overall()

    # -- memory --------------------------------------------------------------------------------
    def _eager_peak(self, args: list[Any]) -> int:
        """torch eager's peak for one forward, as a user's process holds it: the model and the
        example inputs resident (the flusher, which the user does not hold, left out)."""
        saved = {k: b.clone() for k, b in self.model.named_buffers()}
        base = max(0, self.tracker.allocated() - self.flusher.buf.numel() * 4)

        def forward() -> Any:
            with torch.no_grad(), precision_context(self.precision):
                return self.model(*args)

        try:
            _, transient = self.tracker.section(forward)
        finally:  # a training-mode norm updates its running statistics: put them back
            for k, b in self.model.named_buffers():
                b.copy_(saved[k])
        return base + transient

    def _draw_first_case(self) -> list[torch.Tensor]:
        draw_case_into(self.buffers, self.metas, 0, self.verify_settings.seed, self.signed,
                       self.domains)
        return self.buffers

    def _chunk_cost(self, split: Split, rows: int, cap: int | None = None) -> int:
        """What the float64 reference allocates for `rows` rows along `split`, measured (and
        how long it took, in `_chunk_seconds`); past `cap` bytes it stops (out of memory) and
        counts as TOO_LARGE."""
        # the first chunk (an accumulation's split is of its inputs: no output dim to count)
        block = split.blocks(self.out_shape, rows)[0] if split.inner else \
            ((split.out_dim, 0, rows),)

        def run() -> torch.Tensor:
            sliced = block_inputs(self.buffers, split, block)
            return self._reference_run(sliced)[0].to(self.out_dtype)

        t0 = time.perf_counter()
        try:
            cost = self.tracker.section(run, cap=cap)[1]
        except torch.OutOfMemoryError:
            return TOO_LARGE
        self._chunk_seconds[rows] = time.perf_counter() - t0
        return cost

    def _host_room(self, split: Split, rows: int, host: int) -> int:
        """Host memory for references where recomputing one costs more than copying it back
        (a float64 convolution, say; an elementwise reference is recomputed faster)."""
        chunks = len(split.blocks(self.out_shape, rows))
        seconds = self._chunk_seconds.get(rows, 0.0) * chunks
        return host // 4 if seconds > self.memory.sizes.output_bytes / HOST_COPY_BPS else 0

    def _chunked_plan(self, split: Split, host: int) -> tuple[Split, int, int] | None:
        """The reference in chunks along `split` on the GPU: (split, rows per chunk, host bytes
        for references), or None where not one row fits the GPU's budget. Each chunk size's
        cost is measured once, capped at the largest budget asked (a row too large fails to
        allocate instead of passing the bound)."""
        mem = self.memory
        n = self.out_shape[split.rows_dim]
        cost = functools.lru_cache(maxsize=None)(functools.partial(
            self._chunk_cost, split, cap=mem.chunk_budget() + mem.hold_room()))
        rows = memory.chunk_rows(cost, n, mem.chunk_budget())
        if rows is None and mem.hold_room() > 0:
            # a chunk with a large fixed part (a matrix product's other operand, whole in
            # float64: 2 GiB for 16k x 16k) may take the room the GPU would keep references
            # in; they go to host memory. Else the reference goes to the CPU: a float64 16k^3
            # product per case, minutes of set-up (docs/journal.md: runner/worker.py)
            rows = memory.chunk_rows(cost, n, mem.chunk_budget() + mem.hold_room())
            self.device_refs = rows is None
        if rows is None:
            return None
        mem.verification = "chunked"
        mem.chunk = f"{rows} of {n} along output dim {split.rows_dim}" + (
            f", each row of output dim {split.out_dim} apart" if split.inner else "")
        if not self.device_refs:
            mem.chunk += ", references in host memory"
            return split, rows, host // 4
        # a chunked reference is recomputed per check unless kept in host memory
        return split, rows, self._host_room(split, rows, host)

    def _reference_plan(self) -> tuple[Split | None, int | None, int]:
        """How the float64 reference runs: (split, rows per chunk, host bytes for references).

        Whole on the GPU where that fits the chunk budget (small problems); else in chunks
        along a direction the problem is separable in, each chunk's cost measured; else, for a
        problem whose output adds up over chunks of its batch (a loss reduced to one number),
        accumulated chunk by chunk on the GPU; else, for a problem that is not separable,
        whole in host memory; else refused."""
        mem, name = self.memory, self.problem.name
        host = procs.host_available_bytes()
        self._chunk_seconds: dict[int, float] = {}
        # conformance mode's reference is the module in fp32: whole, it needs what the witness
        # (eager) needs, which the plan always has room for
        if self.conformance or mem.full_reference_bytes() <= mem.chunk_budget():
            return None, None, 0
        roles = [g.role for g in self.graph.inputs]
        # the separability test runs torch's fp32 module; a copy of it where depthwise
        # convolutions must take a chunk of their channels (the float64 reference's can)
        probe = self.witness
        if has_depthwise(self.model):
            probe = functools.partial(self.witness,
                                      model=reference_copy(self.model, self.graph, dtype=None))
        host_need = mem.full_reference_bytes() + mem.sizes.input_bytes
        # the separable directions in order; one whose row is too large for the GPU's budget
        # (attention's batch rows: 4.5 GB of float64 scores each) gives way to the next along
        # another output dim, whose rows may fit
        found: list[Split] = []
        too_large: set[int] = set()
        for split in separable_splits(_on_heuristics(probe), self._draw_first_case,
                                      roles, self.out_shape, self.domains, skip=too_large):
            found.append(split)
            planned = self._chunked_plan(split, host)
            if planned is not None:
                return planned
            too_large.add(split.out_dim)
        planned = self._two_level_plan(found, _on_heuristics(probe), host)
        if planned is not None:
            return planned
        first = found[0] if found else None
        if first is not None:
            # not one row fits the GPU's budget: chunks in host memory
            n, where = self.out_shape[first.out_dim], f"along output dim {first.out_dim}"
            rows = min(n, int(n * host * 0.5 / host_need))
            if rows >= 1:
                self.ref_host = reference_copy(self.model, self.graph, "cpu")
                mem.verification, mem.chunk = "host-chunked", f"{rows} of {n} {where}"
                return first, rows, host // 4
            why = f"one row {where} does not fit"
        elif self._accumulation_plan(roles):
            acc = self.accumulation
            assert acc is not None
            mem.verification = "accumulated"
            mem.chunk = f"{self.accumulate_rows} of {acc.rows} rows, {acc.describe()}"
            # each case's reference is one full pass: kept in host memory where the GPU has
            # no room for it rather than recomputed per check
            return None, None, host // 4
        elif host_need <= host * 0.5:
            self.ref_host = reference_copy(self.model, self.graph, "cpu")
            mem.verification = "host"
            return None, None, host // 4
        else:
            why = "the problem is not separable along its output's dims"
        raise MemoryRefusal(
            f"{name}: its float64 reference needs about {memory.gib(host_need)} and {why}; "
            f"{memory.gib(mem.chunk_budget())} of the GPU and {memory.gib(host * 0.5)} of host "
            "memory are available for it")

    def _two_level_plan(self, found: list[Split], probe: Callable[[list[torch.Tensor]], Any],
                        host: int) -> tuple[Split, int, int] | None:
        """Chunks along two separable directions, where one row of each alone is too large
        for the GPU's budget (`Split.inner`: attention's batch rows, then its heads; else its
        float64 reference goes to the CPU, a minute of set-up: docs/journal.md,
        runner/worker.py). The inner direction is tested on one row of the outer one, as the
        outer was on the whole (each row is then a problem of its own). Not for a module
        whose forward updates its state (its running statistics are chunked along one
        direction only)."""
        if self.mutable:
            return None
        for outer in found[:2]:  # the batch or the channels: a few tests, each a fresh draw
            for inner in found:
                if inner.out_dim == outer.out_dim:
                    continue
                n = self.out_shape[outer.out_dim]
                row = narrow_inputs(self._draw_first_case(), outer.in_dims, n // 2, 1)
                shape = [1 if d == outer.out_dim else m for d, m in enumerate(self.out_shape)]
                if not is_separable(probe, row, inner, shape, self.domains):
                    continue
                del row
                planned = self._chunked_plan(Split(outer.out_dim, outer.in_dims, inner), host)
                if planned is not None:
                    return planned
        return None

    def _accumulation_plan(self, roles: list[str]) -> bool:
        """Whether the float64 reference can be accumulated over chunks of the batch (a
        problem reduced to one number, which no output direction splits): the output the sum
        or the row-weighted mean of the chunks' (`separable.accumulation_of`, on a slice the
        chunk budget holds), and, so accumulated, within torch's own accuracy of torch's
        answer on a whole case. Sets `accumulation` and `accumulate_rows` where it can."""
        if self.mutable:  # forward() updates module state: every chunk would update it once
            return False
        found = accumulation_dims([m.shape for m in self.metas], roles)
        if found is None:
            return False
        dims, n = found
        case = self._draw_first_case()  # measuring chunks reads it and leaves it as drawn
        try:
            rows = memory.chunk_rows(lambda k: self._chunk_cost(Split(0, dims), k), n,
                                     self.memory.chunk_budget())
        except RuntimeError:
            # leading dims of equal size that are not a batch (a product's rows and the
            # other operand's contracted dim, gemm_tril's 4096 and 4096): a chunk of them is
            # not a problem the module runs (torch raises shape errors as RuntimeError; an
            # error of this code's own is not taken for that)
            return False
        if rows is None or rows < 3:
            return False
        combine = accumulation_of(lambda ts: self._reference_run(ts)[0], case, dims, rows,
                                  self.domains)
        if combine is None:
            return False
        self.accumulation, self.accumulate_rows = Accumulation(dims, combine, n), rows
        case = self._draw_first_case()  # (the probe moved rows of the buffers)
        with torch.no_grad():
            trusted = same_answer(self.reference(case), self.witness(case))
        if not trusted:  # a size the module hard-codes, say: the whole case disagrees
            self.accumulation, self.accumulate_rows = None, 0
        return trusted

    # -- reference -----------------------------------------------------------------------------
    def reference(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        if self.accumulation is not None:
            return self._accumulated(tensors)
        return self._reference_run(tensors)[0]

    def _accumulated(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The float64 reference, accumulated over chunks of `accumulate_rows` rows."""
        acc, step = self.accumulation, self.accumulate_rows
        assert acc is not None
        total: torch.Tensor | None = None
        for lo in range(0, acc.rows, step):
            k = min(step, acc.rows - lo)
            sliced = narrow_inputs(tensors, acc.in_dims, lo, k)
            part = self._reference_run(sliced)[0].double()
            weight = part_weight(acc.combine, k, acc.rows)
            total = part * weight if total is None else total.add_(part, alpha=weight)
            del sliced, part
        assert total is not None
        return total

    def _reference_run(self, tensors: list[torch.Tensor]
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The reference's output and the state it updated: a float64 copy of the module
        (strict protocol; in host memory for a problem whose float64 reference the GPU cannot
        hold), or the module itself in fp32 at PyTorch's default settings (conformance
        mode)."""
        if self.conformance:
            args, state = self._split(tensors, None)
            with torch.no_grad(), torch_defaults():
                out = torch.func.functional_call(self.model, state, tuple(args))
            return memory.compact(out), {k: v for k, v in state.items() if k in self.mutable}
        model = self.ref_model
        if self.ref_host is not None:
            model, tensors = self.ref_host, [t.cpu() for t in tensors]
        args, state = self._split(tensors, torch.float64)
        # the float64 reference keeps to cuDNN's heuristics (fp32 shapes' choices are not
        # affected)
        with torch.no_grad(), cudnn_heuristics():
            out = torch.func.functional_call(model, state, tuple(args))
        # (a host reference's updated state stays on the CPU: `check_state` compares it where
        # the candidate's update is)
        return memory.compact(out), {k: v for k, v in state.items() if k in self.mutable}

    def witness(self, tensors: list[torch.Tensor],
                model: torch.nn.Module | None = None) -> torch.Tensor:
        """torch eager's own answer under the kernels' contract (fp32, TF32 or autocast): the
        accuracy a kernel can be held to. (`model`: a copy of the module to run instead.)"""
        args, state = self._split(tensors, None)
        with torch.no_grad(), precision_context(self.precision):
            out = memory.compact(torch.func.functional_call(
                self.model if model is None else model, state, tuple(args)))
        return out.float() if out.dtype in (torch.float16, torch.bfloat16) else out

    def _split(self, tensors: list[torch.Tensor], dtype: torch.dtype | None
               ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        n_args = sum(1 for g in self.graph.inputs if g.role == "input")
        args: list[Any] = [None] * n_args
        state: dict[str, torch.Tensor] = {}
        for gin, t in zip(self.graph.inputs, tensors):
            t = t.to(dtype) if dtype is not None and t.is_floating_point() else t
            if gin.role == "input":
                args[gin.position()] = t
            else:
                # forward() updates these in place: a copy, so a case's tensors never change
                state[gin.state_name()] = t.clone() if gin.target in self.mutable else t
        return args, state

    def kernel_inputs(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [tensors[k] for k in self.plan.operands]

    def run_candidate(self, kernels: launcher.LoadedKernels, inputs: list[torch.Tensor],
                      out: torch.Tensor, state: dict[str, torch.Tensor] | None = None) -> None:
        """One run as the emitted module makes it: the kernels, then the module-state update
        (on `state`, default the timing copies), so that a timed run costs what it costs
        in `model_new.py`."""
        kernels(inputs, out)
        if self.updates:
            assert kernels.workspace is not None  # the run allocated it
            launcher.update_state(self.updates, kernels.workspace,
                                  (self.timing_state if state is None else state).__getitem__)

    def _reference_state(self, case: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """The state the reference's forward() leaves on `case`, chunk by chunk where the
        reference is chunked (a running statistic per channel is separable along the channels
        it is split on, as the output is); whole where a floating state is not split."""
        pool = self.pool
        blocks = pool._blocks()
        if blocks == [None]:
            return self._reference_run(case)[1]
        split = pool.split
        assert split is not None  # the blocks are its chunks
        dims = {gin.target: d for gin, d in zip(self.graph.inputs, split.in_dims)
                if gin.role != "input"}
        held = dict(self.model.named_buffers())
        if any(dims.get(name) is None for name in self.mutable
               if held[name].is_floating_point()):
            return self._reference_run(case)[1]
        want: dict[str, torch.Tensor] = {}
        # a two-level split is planned only for problems without state (`_two_level_plan`)
        assert split.inner is None
        for block in blocks:
            assert block is not None  # [None] only where the reference is whole
            ((_, lo, rows),) = block
            sliced = narrow_inputs(case, split.in_dims, lo, rows)
            for name, value in self._reference_run(sliced)[1].items():
                d = dims.get(name)
                if d is None:  # a counter: every chunk counts the one forward once
                    want[name] = value.clone()
                    continue
                if name not in want:
                    want[name] = torch.empty(held[name].shape, dtype=value.dtype,
                                             device=value.device)
                want[name].narrow(d, lo, rows).copy_(value)
        return want

    def check_state(self, kernels: launcher.LoadedKernels) -> VerifyResult:
        """Where forward() updates module state: the candidate's update on the first case
        against the reference's (a running mean is taken from statistics only the program's
        buffers hold; the output checks them only through the normalisation)."""
        if not self.mutable:
            return VerifyResult(True)
        case = self.pool.materialize(self.pool.cases[0])
        if self._state_want is None:  # the reference's update, once per problem
            self._state_want = self._reference_state(case)
            self._state_slack = self._witness_state_slack(case, self._state_want)
        want = self._state_want
        _, start = self._split(case, None)
        buffers = dict(self.model.named_buffers())
        got = {name: (start[name] if name in start else buffers[name]).detach().clone()
               for name in self.mutable}
        out = self.pool.output()  # the one output buffer (its answer was checked already)
        poison(out)
        try:
            self.run_candidate(kernels, self.kernel_inputs(case), out, got)
            launcher.synchronize(self.device)
        except launcher.KernelLaunchError as exc:
            return VerifyResult(False, exc.kind, str(exc))
        kernels.release_workspace()  # its statistics were applied to `got`
        floats = {k: v for k, v in want.items() if v.is_floating_point()}
        return check_state({k: got[k] for k in floats}, floats, self.pool, self._state_slack)

    def _witness_state_slack(self, case: list[torch.Tensor], want: dict[str, torch.Tensor]
                             ) -> dict[str, Slack]:
        """Each updated state's floor, as the output's: `witness_factor` times torch's own
        error in it under the kernels' contract (its fp32 module run with the worker's TF32
        flags, or under autocast) against the float64 reference's update. Without it a
        running mean computed from a TF32 convolution's output failed the fixed 1e-4 bound
        that torch's own TF32 run fails too (2.1e-4 on a ConvTranspose2d-BatchNorm chain on an
        H100), so every candidate at `--precision auto` was wrong and only strict fp32 kernels
        were left. Conformance mode compares against the fp32 module itself: no floor."""
        if self.conformance:
            return {}
        args, state = self._split(case, None)  # the mutable state is cloned: the case stays
        with torch.no_grad(), precision_context(self.precision):
            torch.func.functional_call(self.model, state, tuple(args))
        factor = self.verify_settings.witness_factor
        return {name: witness_slack(state[name], ref.to(device=state[name].device), factor)
                for name, ref in want.items() if name in state and ref.is_floating_point()}

    # -- candidates ----------------------------------------------------------------------------
    def evaluate(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        image = read_cubin(msg["cubin"], msg.get("cubin_sha256"))
        if image is None:
            return {"ok": False, "error_kind": "cache_damaged",
                    "error_msg": f"{msg['cubin']}: its bytes no longer match the sha256 the build "
                                 "cache checked"}
        try:
            kernels = launcher.LoadedKernels(image, msg["launches"], msg.get("workspace_bytes", 0),
                                             msg.get("zero_workspace", False), self.device)
        except launcher.KernelLaunchError as exc:
            return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                    "sticky": exc.sticky}

        # One timed run first: it warms up, surfaces faults early, and lets a hopeless
        # candidate be abandoned before the (costly) verification.
        try:
            probe_ms = self._probe(kernels)
        except launcher.KernelLaunchError as exc:
            return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                    "sticky": exc.sticky}
        best = msg.get("best_ms")
        if hopeless(probe_ms, best):
            # a library call's first run in a new layout pays cuDNN's one-time set-up (its
            # plan, the kernels' lazy loading): 27-637 ms where its steady runs took ~1 ms on
            # an H100 (conv chains, 2026-12-07), so one more run decides
            try:
                probe_ms = self._probe(kernels)
            except launcher.KernelLaunchError as exc:
                return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                        "sticky": exc.sticky}
        if hopeless(probe_ms, best):
            kernels.close()
            return {"ok": False, "error_kind": "slow",
                    "error_msg": f"one run took {probe_ms:.2f} ms (best so far "
                                 f"{best and round(best, 4)} ms)", "time_ms": probe_ms,
                    "wall_s": time.perf_counter() - t0}

        def run(tensors: list[torch.Tensor], out: torch.Tensor) -> None:
            try:
                kernels(self.kernel_inputs(tensors), out)
                launcher.synchronize(self.device)
            except launcher.KernelLaunchError as exc:
                raise CandidateError(exc.kind, str(exc), exc.sticky) from None
            # the comparison after the run recomputes reference chunks: not beside it
            kernels.release_workspace()

        t_probe = time.perf_counter()
        result = check(run, self.pool, self.pool.trials_for(self.evaluated))
        check_seconds = result.seconds
        if result.ok:
            result = self.check_state(kernels)
        self.evaluated += 1
        t_check = time.perf_counter()
        if not result.ok:
            sticky = result.kind in ("illegal_address", "misaligned", "timeout")
            if not sticky:
                kernels.close()
            return {"ok": False, "error_kind": result.kind, "error_msg": result.msg,
                    "max_rel_err": result.max_rel_err, "sticky": sticky,
                    "wall_s": time.perf_counter() - t0}
        # the timing sets drawn again where the cases were drawn into their buffers
        inputs_by_set = [self.kernel_inputs(self.pool.materialize(s)) for s in self.sets]
        out = self.pool.output()

        def timed(k: int) -> None:
            self.run_candidate(kernels, inputs_by_set[k], out)

        try:
            timing = time_runs(timed, len(self.sets), self.timing, self.flusher,
                               msg.get("best_ms"))
            launcher.synchronize(self.device)
        except launcher.KernelLaunchError as exc:
            return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                    "sticky": exc.sticky}
        kernels.close()
        floor = physical_floor_ms(self.bytes, self.flops, self.copy_bw, self.l2_bytes,
                                  PEAK_FLOPS[self.precision])
        if timing.median_ms < floor:
            return {"ok": False, "error_kind": "timing_floor",
                    "error_msg": f"{timing.median_ms:.4f} ms is below the physical floor "
                                 f"{floor:.4f} ms", "verified": True,
                    "wall_s": time.perf_counter() - t0}
        done = time.perf_counter()
        return {"ok": True, "verified": True, "time_ms": timing.median_ms,
                "spread_ms": timing.spread_ms, "samples": timing.samples,
                "early_stopped": timing.early_stopped, "max_rel_err": result.max_rel_err,
                "wall_s": done - t0,
                # where a candidate's seconds go (seconds each on problems of many GiB:
                # docs/journal.md, runner/worker.py)
                "seconds": {"load_and_probe": t_probe - t0, "checks": t_check - t_probe,
                            "timing": done - t_check,
                            **{f"check_{k}": v for k, v in check_seconds.items()}},
                "counters": {"achieved_bw_fraction": self.bytes / (timing.median_ms * 1e-3)
                             / self.copy_bw,
                             # timed runs the host may have delayed (`TimingSettings.lead_us`)
                             **({"timing_host_bound": timing.host_bound}
                                if timing.host_bound else {})}}

    def _probe(self, kernels: launcher.LoadedKernels) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.run_candidate(kernels, self.kernel_inputs(self.pool.materialize(self.sets[0])),
                           self.pool.output())
        end.record()
        launcher.synchronize(self.device)
        return start.elapsed_time(end)

    # -- baselines -----------------------------------------------------------------------------
    def baseline_settings(self) -> dict[str, Any]:
        """What the two settings of the baselines are for this problem (`settings_record`)."""
        defaults = {"conv": launcher.conv_tf32(TORCH_DEFAULTS),
                    "matmul": launcher.matmul_tf32(TORCH_DEFAULTS)}
        return settings_record(defaults, self.precision,
                               tf32_reads({n.op for n in self.graph.live()}))

    def baseline(self, which: str, settings: str = DEFAULTS) -> dict[str, Any]:
        """Time torch eager or torch.compile on the same inputs, with the same protocol, under
        `settings`: DEFAULTS, PyTorch's own flags as a fresh process has them and no autocast
        (a user's process); MATCHED, the kernels' contract (the worker's flags, autocast in
        fp16/bf16). The flags are process-wide: they are put in place for this call only."""
        if settings not in (DEFAULTS, MATCHED):
            return {"ok": False, "error_msg": f"unknown baseline settings {settings!r}"}
        if which == CUDNN_BENCHMARK:
            # eager as it is, in a worker set up in that mode (`CudaDevice.baselines`)
            if not torch.backends.cudnn.benchmark:
                return {"ok": False, "error_msg": "the worker was not set up in cuDNN's "
                        "benchmark mode"}
        elif torch.backends.cudnn.benchmark:
            # eager and torch.compile are timed as a user's process runs them: on the heuristics
            return {"ok": False, "error_msg": f"baseline {which!r} asked of a worker set up in "
                    "cuDNN's benchmark mode"}
        # the candidates' output buffer is not needed while torch runs: its room goes to torch's
        # own output (and torch.compile's autotuning copy of it), inside the run's bound
        self.pool.release_output()
        torch.cuda.empty_cache()
        tf32 = contract_tf32(self.precision)
        flags = (launcher.tf32_mode(flags=TORCH_DEFAULTS) if settings == DEFAULTS
                 else launcher.tf32_mode(tf32["conv"], tf32["matmul"]))
        numerics = (contextlib.nullcontext() if settings == DEFAULTS
                    else precision_context(self.precision))
        compiled = which.startswith("compile")
        with flags, fresh_compile() if compiled else contextlib.nullcontext():
            reply = self._time_baseline(which, numerics)
        out = reply.pop("output", None)
        room = self.memory.limit_bytes - torch.cuda.memory_allocated(self.device)
        if reply.get("ok") and room < self.memory.eager_transient_bytes:
            # the witness beside the held output would pass the run's memory bound
            reply["rel_diff"], reply["rel_diff_error"] = None, "skipped: memory bound"
        elif reply.get("ok"):
            # its output beside the witness's (the contract's answer, under the worker's own
            # flags again): how far this setting's numerics are from the contract's
            try:
                reply["rel_diff"] = self._rel_diff(out)
            except Exception as exc:  # noqa: BLE001 - informative only: the time stands
                reply["rel_diff"], reply["rel_diff_error"] = None, f"{type(exc).__name__}"
            del out
            torch.cuda.empty_cache()
        return reply

    def _time_baseline(self, which: str, numerics: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        model: Callable[..., Any] = self.model
        if which.startswith("compile"):
            # a fresh compile under the flags in effect: dynamo's cache would serve a graph
            # compiled under the other setting, whose decisions may depend on the flags
            torch._dynamo.reset()
            mode = None if which == "compile" else which.split(":", 1)[1]
            model = torch.compile(self.model, mode=mode)
        arg_sets = []
        for s in self.sets:
            args, state = self._split(self.pool.materialize(s), None)
            arg_sets.append(args)
        # parameters stay the model's own: baselines compute the same function on the same data
        with torch.no_grad(), numerics:
            try:
                model(*arg_sets[0])
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a failing baseline is reported, not fatal
                return {"ok": False, "error_msg": f"{type(exc).__name__}: {exc}"[:300]}
            compile_s = time.perf_counter() - t0
            seen = observed_flags()  # where the timed runs run, checked, not assumed
            timing = time_runs(lambda k: model(*arg_sets[k]), len(arg_sets), self.timing,
                               self.flusher)
            out = model(*arg_sets[0])
            if not isinstance(out, torch.Tensor):
                out = None
            elif which in ("compile:max-autotune", "compile:reduce-overhead"):
                out = out.clone()  # CUDA-graph modes hand out a buffer the next replay reuses
            else:
                out = memory.compact(out)  # (a 0-d loss would hold its elementwise storage)
        if which.startswith("compile"):
            torch._dynamo.reset()  # its graphs, compiled under this call's flags, go with it
        return {"ok": True, "time_ms": timing.median_ms, "spread_ms": timing.spread_ms,
                "samples": timing.samples, "setup_s": compile_s, "flags": seen, "output": out}

    def _rel_diff(self, out: torch.Tensor | None) -> float | None:
        """Relative-norm difference of a baseline's output from the witness's on the same
        input set (None for an integer output), summed in float64 a slice at a time: no more
        than the two outputs on the device."""
        if out is None or not out.is_floating_point():
            return None
        # the model's own parameters, as the baseline ran: the set's drawn ones are the cases'
        args, _ = self._split(self.pool.materialize(self.sets[0]), None)
        with torch.no_grad(), precision_context(self.precision):
            ref = memory.compact(self.model(*args))
        ref = ref.float() if ref.dtype in (torch.float16, torch.bfloat16) else ref
        if tuple(ref.shape) != tuple(out.shape) or not ref.is_floating_point():
            return None
        o, r = out.reshape(-1), ref.reshape(-1)
        num = den = 0.0
        step = 1 << 24
        for i in range(0, r.numel(), step):
            rs = r[i:i + step].double()
            den += float(rs.square().sum())
            num += float((o[i:i + step].double() - rs).square().sum())
        return (num / den) ** 0.5 if den > 0 else num ** 0.5


_COPY_BW: dict[str, float] = {}


@contextlib.contextmanager
def cudnn_heuristics() -> Any:
    """cuDNN's benchmark mode off inside: shapes no candidate runs (the separability test's
    slices, the float64 reference's chunks) would each time every algorithm, with workspaces
    outside what is measured."""
    saved, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def _on_heuristics(fn: Any) -> Any:
    """`fn` run under `cudnn_heuristics`."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with cudnn_heuristics():
            return fn(*args, **kwargs)
    return run


SLOW_STEP_S = 5.0
"""a set-up step taking this long is announced as it ends"""


def slow_step_notice(step: str, seconds: float, peak: int | None) -> None:
    """One line on stderr (the tune's own output) for a slow set-up step: a problem of tens of
    GiB spends a minute in set-up, and a tune cut during it would leave no word of where
    (docs/journal.md: runner/worker.py)."""
    if seconds >= SLOW_STEP_S:
        held = f", GPU peak so far {memory.gib(peak)}" if peak else ""
        print(f"set-up: {step} took {seconds:.1f} s{held}", file=sys.stderr, flush=True)


def copy_bandwidth(device: torch.device, flusher: L2Flusher) -> float:
    """Copy bandwidth, measured once per worker: the best of three measurements, after a long
    warm-up, so that an idle GPU's clock ramp does not lower the physical floor."""
    key = str(device)
    if key not in _COPY_BW:
        _COPY_BW[key] = max(measure_copy_bandwidth(device, flusher) for _ in range(3))
    return _COPY_BW[key]


def measure_copy_bandwidth(device: torch.device, flusher: L2Flusher,
                           nbytes: int | None = None) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted), same protocol; on
    buffers of 2 GiB, or a quarter of what is free where that is less (the two of them take
    half), so the probe never needs more than there is."""
    if nbytes is None:
        nbytes = max(64 << 20, min(2 << 30, torch.cuda.mem_get_info(device)[0] // 4))
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    t = time_runs(lambda k: dst.copy_(src), 1, TimingSettings(warmup=10, reps=10), flusher)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / (t.median_ms * 1e-3)


def gpu_facts(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    facts = {"gpu": props.name, "sm_count": props.multi_processor_count,
             "capability": f"{props.major}.{props.minor}",
             "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
             "memory_bytes": int(props.total_memory), "torch": torch.__version__,
             "cuda": torch.version.cuda}
    try:
        facts["sm_clock_mhz"] = torch.cuda.clock_rate(device)
    except Exception:  # noqa: BLE001 - pynvml may be missing; the clock is informative only
        facts["sm_clock_mhz"] = None
    return facts


def worker_main(conn: Any, device_index: int, timing: TimingSettings,
                verify_settings: VerifySettings) -> None:
    """Serve requests until told to quit; exit after a sticky CUDA error."""
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    # before the first allocation: segments that grow in place instead of a cached block per
    # size. The worker allocates many sizes in turn (reference chunks, cases, candidates'
    # outputs); with fixed segments the process holds up to 16 GiB more than torch's own count
    # at its peak (docs/journal.md: runner/worker.py)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    use_precision(verify_settings.precision)
    device = torch.device("cuda", device_index)
    torch.cuda.set_device(device)
    state: ProblemState | None = None
    tracker = PeakTracker(device)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        op = msg.get("op")
        try:
            if op == "quit":
                conn.send({"ok": True})
                return
            if op == "facts":
                conn.send({"ok": True, **gpu_facts(device)})
            elif op == "setup":
                state = None
                gc.collect()  # the previous problem's tensors, even if a cycle holds them
                torch.cuda.empty_cache()
                # before the reference first runs: the mode that meets a convolution's shape
                # first decides its algorithm for the process's life (CUDNN_BENCHMARK)
                torch.backends.cudnn.benchmark = bool(msg.get("cudnn_benchmark", False))
                try:
                    state = ProblemState(msg["path"], device, timing, verify_settings, tracker,
                                         graph=msg.get("graph"))
                except MemoryRefusal as exc:  # the worker is sound: only this problem is refused
                    state = None
                    gc.collect()
                    torch.cuda.empty_cache()
                    conn.send({"ok": False, "error_kind": "memory", "error_msg": str(exc),
                               "refused": True})
                    continue
                conn.send({"ok": True, "copy_bw": state.copy_bw, **gpu_facts(device),
                           "cudnn_benchmark": torch.backends.cudnn.benchmark,
                           "baseline_settings": state.baseline_settings(),
                           "memory": {**state.memory.as_dict(),
                                      "peak_by_setup_step": state.phases.marks},
                           "setup_phases": state.phases.as_dict(),
                           # within the cases step: drawing, the witness, the reference
                           # chunks and the sums, trivial-output and replay checks over them
                           "cases_seconds": state.pool.setup_seconds})
            elif op == "eval":
                assert state is not None, "setup first"
                reply = state.evaluate(msg)
                conn.send({**reply, "peak_bytes": tracker.overall()})
                if reply.get("sticky"):
                    return  # the context is poisoned: the supervisor starts a fresh worker
            elif op == "baseline":
                assert state is not None, "setup first"
                # torch's own run (torch.compile's layout copies and autotuning included):
                # its peak is reported apart from the tuning run's, which the bound holds
                base = tracker.allocated()
                reply, used = tracker.section(
                    lambda: state.baseline(msg["which"], msg.get("settings", DEFAULTS)),
                    count=False)
                conn.send({**reply, "peak_bytes": tracker.overall(),
                           "baseline_peak_bytes": base + used})
            else:
                conn.send({"ok": False, "error_kind": "cuda", "error_msg": f"unknown op {op}"})
        except Exception as exc:  # noqa: BLE001 - report and carry on (or die if sticky)
            text = f"{type(exc).__name__}: {exc}"
            sticky = "illegal memory access" in text or "misaligned" in text or \
                "unspecified launch failure" in text
            kind = "illegal_address" if sticky else "cuda"
            conn.send({"ok": False, "error_kind": kind, "error_msg": text[:500],
                       "trace": traceback.format_exc()[-2000:], "sticky": sticky})
            if sticky:
                return
