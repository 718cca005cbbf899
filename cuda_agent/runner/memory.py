"""The GPU footprint of a tuning run: what a problem needs, the bound it is held to, and the plan
that keeps the worker within it (issue 33).

A user's eager run of the problem peaks at P bytes (measured: the model, its inputs, its
intermediates and its output). A tuning run holds one set of inputs (the timing set, into which
every verification case is drawn in turn), one output, and the references it has room for; its
transients are torch eager's own (the witness), a candidate's workspace, and one chunk of the
float64 reference at a time. The bound it is held to:

    bound = P + 2 x output + drawn parameters + ALLOWANCE

where the drawn parameters are the copy of the model's parameters and buffers that each case
draws afresh beside the model's own (zero for a problem without parameters), and ALLOWANCE is
fixed: the L2 flusher (2 x L2), SCRATCH_BYTES of working memory (draws, hashes, comparisons) and
HOLD_BYTES for holding small references. Where the bound is larger than the GPU has, the plan
shrinks what it holds to what is there.

The baselines, timed after the search, are torch's own runs of the problem (eager, and
torch.compile with its layout copies and autotuning): what they hold beyond the tuning run's own
is what the user's torch needs, measured and reported apart (`baselines_peak_bytes`), not held
to the bound; `--no-baselines` leaves them out.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from ..errors import DeviceError

GiB = 1 << 30

SCRATCH_BYTES = 256 << 20
"""working memory for one piece of a draw, a hash or a comparison (verify.PoolBudget)"""
HOLD_BYTES = 1 << 30
"""room for references beyond one output's worth: every reference of a small problem is held"""
SAFETY_BYTES = 1 << 30
"""what the plan leaves of the GPU's free memory unused: the allocator's rounding and
fragmentation, library workspaces (cuBLAS, cuDNN) outside torch's count"""
CHUNK_MARGIN = 1.25
"""a reference chunk's measured cost times this must fit its budget"""


class MemoryRefusal(DeviceError):
    """The problem cannot be tuned in the GPU memory there is: refused before any search."""


def dtype_size(dtype: str | torch.dtype) -> int:
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return torch.empty(0, dtype=torch_dtype).element_size()


def nbytes(shape: Sequence[int], dtype: str | torch.dtype) -> int:
    return math.prod(shape) * dtype_size(dtype)


def gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


@dataclass(frozen=True)
class Sizes:
    """A problem's tensors, from the captured graph's shapes (nothing allocated)."""

    forward_bytes: int
    """the forward arguments (what get_inputs returns)"""
    state_bytes: int
    """the parameters and buffers the graph reads: every case draws its own copy of them"""
    output_bytes: int
    model_bytes: int
    """all of the model's parameters and buffers, resident on the GPU"""

    @property
    def input_bytes(self) -> int:
        """One set of graph inputs: the forward arguments and the drawn parameters."""
        return self.forward_bytes + self.state_bytes

    @staticmethod
    def of(graph: Any, plan: Any, model: torch.nn.Module | None = None) -> "Sizes":
        fwd = sum(nbytes(g.shape, g.dtype) for g in graph.inputs if g.role == "input")
        state = sum(nbytes(g.shape, g.dtype) for g in graph.inputs if g.role != "input")
        out = nbytes(plan.out_shape, plan.out_dtype)
        held = 0 if model is None else sum(
            t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
        return Sizes(fwd, state, out, held)


def refuse_unless_inputs_fit(name: str, sizes: Sizes, free_bytes: int) -> None:
    """Before anything is allocated: the problem's inputs and output must fit at all."""
    need = sizes.forward_bytes + sizes.output_bytes
    if need > free_bytes:
        raise MemoryRefusal(
            f"{name} does not fit on the GPU: its inputs ({gib(sizes.forward_bytes)}) and "
            f"output ({gib(sizes.output_bytes)}) alone need {gib(need)}, and "
            f"{gib(free_bytes)} is free")


def timing_sets(input_bytes: int, l2_bytes: int, rotate: int) -> int:
    """How many input sets the timing rotates among. The rotation keeps a run from finding the
    previous run's inputs in L2; the flush before every timed run already evicts them, so sets
    beyond what spans a few times L2 only cost memory: inputs of several L2s get one set."""
    if rotate <= 1:
        return 1
    return max(1, min(rotate, math.ceil(4 * l2_bytes / max(input_bytes, 1))))


@dataclass
class MemoryPlan:
    """What one problem's worker may hold on the GPU, and what it did hold (`peak_bytes`)."""

    sizes: Sizes
    eager_peak_bytes: int
    """torch eager's peak for one forward, the model and its inputs resident (measured)"""
    capacity_bytes: int
    """what this worker can use: free memory at set-up plus what it already held, less
    SAFETY_BYTES"""
    flusher_bytes: int
    timing_sets: int
    scratch_bytes: int = SCRATCH_BYTES
    hold_bytes: int = HOLD_BYTES
    verification: str = "full"
    """how the float64 reference is computed and compared: "full" (whole, on the GPU),
    "chunked" (along a separable dimension, `chunk` says how), "accumulated" (summed or
    averaged over chunks of the batch, for an output reduced over it), "host" (whole, in host
    memory, for a problem that is not separable), "host-chunked" """
    chunk: str | None = None
    peak_bytes: int = 0
    """the most the worker had allocated, from the problem's set-up on (torch's count)"""

    @property
    def eager_transient_bytes(self) -> int:
        """Eager's peak beyond the model and the forward arguments: intermediates and output.
        A candidate's workspace and the witness are assumed to need no more than this."""
        s = self.sizes
        return max(self.eager_peak_bytes - s.model_bytes - s.forward_bytes, s.output_bytes)

    @property
    def bound_bytes(self) -> int:
        s = self.sizes
        return (self.eager_peak_bytes + 2 * s.output_bytes + s.state_bytes + self.flusher_bytes
                + self.scratch_bytes + self.hold_bytes)

    @property
    def limit_bytes(self) -> int:
        """The bound, or the GPU's capacity where that is less."""
        return min(self.bound_bytes, self.capacity_bytes)

    @property
    def shortfall_bytes(self) -> int:
        return self.bound_bytes - self.limit_bytes

    @property
    def lean_bytes(self) -> int:
        """The least a tuning run can hold: the model, one input set and one output, the
        flusher, eager's transient and the scratch memory, no reference kept."""
        s = self.sizes
        return (s.model_bytes + s.input_bytes + s.output_bytes + self.flusher_bytes
                + self.eager_transient_bytes + self.scratch_bytes)

    def hold_room(self) -> int:
        """What the case pool may hold on the GPU beyond the timing set and the output:
        timing sets beyond the first, case inputs, references. The bound leaves one output's
        worth plus HOLD_BYTES over the lean plan; less where the GPU has less."""
        s = self.sizes
        room = s.output_bytes + self.hold_bytes - self.shortfall_bytes
        return max(0, room - (self.timing_sets - 1) * s.input_bytes)

    def chunk_budget(self) -> int:
        """What one chunk of the float64 reference may use while it runs: eager's transient
        (the witness's answer is held meanwhile, no candidate runs) and the scratch memory."""
        spare = max(0, self.shortfall_bytes - self.sizes.output_bytes - self.hold_bytes)
        return max(0, self.eager_transient_bytes + self.scratch_bytes - spare)

    def full_reference_bytes(self) -> int:
        """An estimate of the float64 reference's transient run whole on the GPU: float64
        copies of every input and of eager's intermediates."""
        return 2 * self.sizes.input_bytes + 2 * self.eager_transient_bytes

    def refuse_unless_fits(self, name: str) -> None:
        if self.lean_bytes > self.capacity_bytes:
            s = self.sizes
            raise MemoryRefusal(
                f"{name} does not fit on the GPU: tuning needs at least {gib(self.lean_bytes)} "
                f"(inputs {gib(s.input_bytes)}, output {gib(s.output_bytes)}, eager peak "
                f"{gib(self.eager_peak_bytes)}), and {gib(self.capacity_bytes)} is usable")

    def as_dict(self) -> dict[str, Any]:
        s = self.sizes
        return {"peak_bytes": self.peak_bytes, "eager_peak_bytes": self.eager_peak_bytes,
                "bound_bytes": self.bound_bytes, "limit_bytes": self.limit_bytes,
                "verification": self.verification, "chunk": self.chunk,
                "input_bytes": s.input_bytes, "output_bytes": s.output_bytes,
                "state_bytes": s.state_bytes, "model_bytes": s.model_bytes,
                "allowance_bytes": self.flusher_bytes + self.scratch_bytes + self.hold_bytes,
                "timing_sets": self.timing_sets,
                "within_bound": self.peak_bytes <= self.bound_bytes if self.peak_bytes else None}


class PeakTracker:
    """torch's peak-memory counter, shared by the run and the sections that measure their own
    peak (a reference chunk's cost): resetting it for a section keeps the run's peak here."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.peak = 0

    def start(self) -> None:
        """Count from now on (after the copy-bandwidth probe, before the problem's tensors)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.peak = 0

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device) if self.cuda else 0

    def overall(self) -> int:
        if not self.cuda:
            return 0
        return max(self.peak, torch.cuda.max_memory_allocated(self.device))

    def section(self, fn: Callable[[], Any], count: bool = True, cap: int | None = None
                ) -> tuple[Any, int]:
        """(fn(), the most it allocated beyond what was allocated before it). With `count`
        False, what it allocated is not the run's peak (torch's own baselines: their peak is
        reported apart). With `cap`, fn may allocate about that much: beyond it, torch's
        allocator raises `torch.OutOfMemoryError` (a reference chunk measured to see whether
        it fits must not pass the bound while it is measured)."""
        if not self.cuda:
            return fn(), 0
        torch.cuda.synchronize(self.device)
        self.peak = self.overall()
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            with self._capped(base, cap):
                result = fn()
                torch.cuda.synchronize(self.device)
        finally:
            top = torch.cuda.max_memory_allocated(self.device)
            if count:
                self.peak = max(self.peak, top)
            else:
                torch.cuda.reset_peak_memory_stats(self.device)
        return result, top - base


    @contextlib.contextmanager
    def _capped(self, base: int, cap: int | None) -> Iterator[None]:
        """The caching allocator limited to `base` + `cap` bytes (its limit counts what it
        reserves, so the cached free blocks are given back first)."""
        if cap is None:
            yield
            return
        torch.cuda.empty_cache()
        # the fraction's setter and getter take an index, not torch.device("cuda") (a
        # ValueError otherwise: docs/journal.md, runner/memory.py)
        index = self.device.index if self.device.index is not None else \
            torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        limit = max(torch.cuda.memory_reserved(index), base + cap)
        before = (torch.cuda.get_per_process_memory_fraction(index)
                  if hasattr(torch.cuda, "get_per_process_memory_fraction") else 1.0)
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), index)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(before, index)


def compact(t: torch.Tensor) -> torch.Tensor:
    """`t` itself, or a copy of it where it keeps a larger storage alive than its own elements
    need: torch's mse_loss returns its 0-d mean in the storage of the whole elementwise loss
    (an input's worth, held with every answer kept, beyond the memory bound: docs/journal.md,
    runner/memory.py); an output that is a slice of an input would hold the input."""
    if t.untyped_storage().nbytes() > 2 * max(t.numel(), 1) * t.element_size() + 4096:
        return t.clone()
    return t


def chunk_rows(cost: Callable[[int], int], rows: int, budget: int) -> int | None:
    """Rows per chunk of the reference whose cost (bytes, measured by `cost(k)` for k rows)
    fits `budget` with CHUNK_MARGIN: measured at 1 and 2 rows, extrapolated linearly, then the
    chosen size measured and shrunk while it does not fit. None: not even one row fits."""
    c1 = cost(1)
    if c1 * CHUNK_MARGIN > budget:
        return None
    if rows < 2:
        return 1
    c2 = cost(2)
    per_row = max(c2 - c1, 1)
    fixed = max(c1 - per_row, 0)
    k = max(1, min(rows, int((budget / CHUNK_MARGIN - fixed) // per_row)))
    for _ in range(4):
        if k <= 2:
            return k
        c = cost(k)
        if c * CHUNK_MARGIN <= budget:
            return k
        k = max(2, int(k * budget / (c * CHUNK_MARGIN * 1.1)))
    return k if cost(k) * CHUNK_MARGIN <= budget else 2


def describe(mem: dict[str, Any] | None) -> str | None:
    """One line for a run's footprint (a report's `memory`), None where none was planned."""
    if not mem or not mem.get("bound_bytes"):
        return None
    how = mem.get("verification") or "full"
    if mem.get("chunk"):
        how += f" ({mem['chunk']})"
    line = (f"GPU memory: peak {gib(mem.get('peak_bytes') or 0)}, eager's peak "
            f"{gib(mem['eager_peak_bytes'])}, bound {gib(mem['bound_bytes'])}; float64 "
            f"reference {how}")
    if mem.get("baselines_peak_bytes"):
        line += f"; torch's baselines peaked at {gib(mem['baselines_peak_bytes'])}"
    return line
