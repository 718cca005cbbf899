"""What every template shares: the Template interface, a code writer, and reduction algebra."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ...ir.plan import KernelPlan
from ..slots import ABSENT, Rendered, Slot, Target


class Template(ABC):
    """A kernel pattern with slots. `render` must produce compilable code for every config that
    `check` accepts; the all-combinations compile test holds templates to that."""

    name: str = "template"
    version: str = "1"
    # Slots added after version 1, with the value that reproduces the older kernel: recorded
    # sweeps of an older version are read as configurations of this one (versioned spaces).
    legacy: dict[str, Any] = {}
    # whether its kernels write a stage's side outputs (`Graph.sides`, per-row values into
    # side<j>[row]); a template that does not is not offered for a plan that has them
    writes_sides: bool = False
    # stores its output through `codegen.out_store`, so may take a plan whose output is stored
    # permuted (`KernelPlan.out_perm`); the others are not offered such a plan
    writes_permuted: bool = False
    # reads and writes tensors stored in fp16 or bf16 (loads through the prelude's `ca_ld*`
    # overloads, float arithmetic, stores through `ca_st*` or an assignment that rounds; its
    # kernels compile and match torch that way); the others are not offered a plan with them
    takes_half: bool = False

    @abstractmethod
    def applies(self, plan: KernelPlan) -> bool: ...

    @abstractmethod
    def slots(self, plan: KernelPlan, target: Target) -> list[Slot]: ...

    def check(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> str | None:
        """Why `cfg` is invalid for this plan, or None. Checked before anything is compiled."""
        return None

    def excluded(self, cfg: dict[str, Any]) -> bool:
        """Raw slot values that no canonical form makes valid, rejected before `canonical` and
        `check` run (enumeration speed only: `check` must reject them as well)."""
        return False

    prefix_slots: int = 0
    """how many of the first slots (in `slots` order) `prefix_excluded` reads"""

    def prefix_excluded(self, plan: KernelPlan, prefix: dict[str, Any], target: Target
                        ) -> bool:
        """Values of the first `prefix_slots` slots that no configuration extending them can
        take, whatever the others are: enumeration skips every combination under them (speed
        only: `check` must reject all of them as well). A template with no valid configuration
        on a problem is found out without walking its whole product."""
        return False

    def canonical(self, plan: KernelPlan, cfg: dict[str, Any], target: Target
                  ) -> dict[str, Any]:
        """Collapse slots that have no effect under `cfg` to one value, so that equal kernels
        are one configuration (the agents see these slots masked)."""
        return cfg

    @abstractmethod
    def default(self, plan: KernelPlan, target: Target) -> dict[str, Any]:
        """What an untuned compiler would emit: the baseline configuration."""

    def idles_the_gpu(self, plan: KernelPlan, target: Target) -> bool:
        """Whether this template's default leaves most of the GPU idle on `plan` for long, so
        that the space's untuned baseline is the next template's default instead (`Space.
        default`)."""
        return False

    @abstractmethod
    def render(self, plan: KernelPlan, cfg: dict[str, Any], target: Target) -> Rendered: ...


class Code:
    """A tiny indenting writer for generated C."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, *lines: str) -> "Code":
        for line in lines:
            for part in line.split("\n"):
                self.lines.append("  " * self.depth + part if part else "")
        return self

    def open(self, line: str) -> "Code":
        self(line + " {")
        self.depth += 1
        return self

    def close(self, tail: str = "") -> "Code":
        self.depth -= 1
        self("}" + tail)
        return self

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass(frozen=True)
class Reducer:
    """Accumulator algebra of one reduce node: identity, update and combine in C."""

    nid: int
    kind: str

    @property
    def is_arg(self) -> bool:
        return self.kind in ("argmax", "argmin")

    @property
    def acc(self) -> str:
        return f"acc{self.nid}"

    @property
    def idx(self) -> str:
        return f"aci{self.nid}"

    def declare(self) -> list[str]:
        init = {"sum": "0.f", "prod": "1.f", "max": "-CA_INF", "min": "CA_INF",
                "argmax": "-CA_INF", "argmin": "CA_INF"}[self.kind]
        lines = [f"float {self.acc} = {init};"]
        if self.is_arg:
            lines.append(f"int {self.idx} = 0x7fffffff;")
        return lines

    def reset(self) -> list[str]:
        """Set the accumulator back to the identity (it is already declared)."""
        return [f"{line.split(' ', 1)[1]}" for line in self.declare()]

    def _better(self, v: str, i: str, av: str, ai: str) -> str:
        cmp = ">" if self.kind == "argmax" else "<"
        # ties keep the first index, and NaN wins as in torch
        return (f"(({v}) {cmp} ({av}) || (({v}) == ({av}) && ({i}) < ({ai})) || "
                f"(({v}) != ({v}) && ({av}) == ({av})))")

    def update(self, value: str, index: str = "0") -> str:
        a = self.acc
        if self.kind == "sum":
            return f"{a} += {value};"
        if self.kind == "prod":
            return f"{a} *= {value};"
        if self.kind == "max":
            return f"{a} = ca_max({a}, {value});"
        if self.kind == "min":
            return f"{a} = ca_min({a}, {value});"
        return (f"{{ const float cv_ = {value}; const int ci_ = {index}; "
                f"if ({self._better('cv_', 'ci_', a, self.idx)}) {{ {a} = cv_; {self.idx} = ci_; }} }}")

    def combine_from(self, other_v: str, other_i: str = "0") -> str:
        """Fold another partial (value, index) into this accumulator."""
        return self.update(other_v, other_i)

    def shfl(self, width: int, mask: str = "0xffffffffu") -> list[str]:
        """Butterfly reduction within aligned groups of `width` lanes (all lanes end with it)."""
        lines = []
        off = width // 2
        while off >= 1:
            lines.append("{")
            lines.append(f"  const float ov_ = __shfl_xor_sync({mask}, {self.acc}, {off}, {width});")
            if self.is_arg:
                lines.append(f"  const int oi_ = __shfl_xor_sync({mask}, {self.idx}, {off}, "
                             f"{width});")
                lines.append("  " + self.combine_from("ov_", "oi_"))
            else:
                lines.append("  " + self.combine_from("ov_"))
            lines.append("}")
            off //= 2
        return lines

    def result(self) -> str:
        """The node's value once combined: the index for arg-reductions."""
        return f"(long long){self.idx}" if self.is_arg else self.acc


def block_combine(code: Code, reducers: list[Reducer], T: int, G: int, mode: str,
                  lane: str = "lane", grp: str = "grp", buf: str = "ca_red") -> None:
    """Combine per-thread accumulators over groups of T consecutive threads (G groups a block).

    Afterwards every thread of a group holds the group's result. `mode` is the reduction
    agent's choice: ``shfl`` (warp shuffles, shared memory only across warps) or ``smem_tree``
    (a shared-memory tree with a barrier per step). Uses `buf`: G*T floats (+ ints for args).
    """
    if T == 1:
        return
    for red in reducers:
        if mode == "shfl":
            code(*red.shfl(min(T, 32)))
            if T > 32:
                W = T // 32
                code("__syncthreads();")
                code.open(f"if (({lane} & 31) == 0)")
                code(f"{buf}[{grp} * {W} + ({lane} >> 5)] = {red.acc};")
                if red.is_arg:
                    code(f"{buf}_i[{grp} * {W} + ({lane} >> 5)] = {red.idx};")
                code.close()
                code("__syncthreads();")
                # every warp folds the W warp parts as a shuffle tree (log2 W steps) rather
                # than W serial steps per thread: at 16-32 warps a row the serial fold cost
                # more instructions than the row's own loads and arithmetic
                code(f"{red.acc} = {buf}[{grp} * {W} + ({lane} & {W - 1})];")
                if red.is_arg:
                    code(f"{red.idx} = {buf}_i[{grp} * {W} + ({lane} & {W - 1})];")
                code(*red.shfl(W))
        else:  # smem_tree
            code("__syncthreads();")
            code(f"{buf}[threadIdx.x] = {red.acc};")
            if red.is_arg:
                code(f"{buf}_i[threadIdx.x] = {red.idx};")
            code("__syncthreads();")
            code.open(f"for (int s_ = {T // 2}; s_ > 0; s_ >>= 1)")
            code.open(f"if ({lane} < s_)")
            if red.is_arg:
                code(f"float {red.acc}_t = {buf}[threadIdx.x]; int {red.idx}_t = "
                     f"{buf}_i[threadIdx.x];")
                code(f"const float ov_ = {buf}[threadIdx.x + s_]; const int oi_ = "
                     f"{buf}_i[threadIdx.x + s_];")
                better = red._better("ov_", "oi_", f"{red.acc}_t", f"{red.idx}_t")
                code(f"if ({better}) {{ {buf}[threadIdx.x] = ov_; {buf}_i[threadIdx.x] = oi_; }}")
            else:
                tmp = Reducer(red.nid, red.kind)
                code(f"float {tmp.acc}_t = {buf}[threadIdx.x];")
                op = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "ca_max({a}, {b})",
                      "min": "ca_min({a}, {b})"}[red.kind]
                code(f"{buf}[threadIdx.x] = " +
                     op.format(a=f"{tmp.acc}_t", b=f"{buf}[threadIdx.x + s_]") + ";")
            code.close()
            code("__syncthreads();")
            code.close()
            code(f"{red.acc} = {buf}[{grp} * {T}];")
            if red.is_arg:
                code(f"{red.idx} = {buf}_i[{grp} * {T}];")
    code("__syncthreads();")


def smem_for_combine(reducers: list[Reducer], T: int, G: int, mode: str) -> tuple[int, bool]:
    """(floats needed in the combine buffer, whether an int buffer is needed too)."""
    if T == 1 or not reducers:
        return 0, False
    n = G * (T // 32) if mode == "shfl" and T > 32 else (G * T if mode == "smem_tree" else 0)
    return n, any(r.is_arg for r in reducers)


def absent(slots: list[Slot], have: set[str]) -> dict[str, Any]:
    return {s.name: ABSENT for s in slots if s.name not in have}


def pow2_ceil(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (max(1, n) - 1).bit_length())


def pow2_choices(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)


def wave_blocks(threads: int, target: Target) -> int:
    """Blocks in one full wave, assuming thread-limited occupancy."""
    return target.sm_count * max(1, min(target.max_blocks_per_sm,
                                        target.max_threads_per_sm // threads))


def persistent_grid(exact_blocks: int, block: int, sm_count: int, max_threads: int) -> int:
    """Blocks of a persistent (one full wave, thread-limited occupancy) grid-stride launch:
    the exact grid when that is no larger (then `grid=persistent` is the same kernel)."""
    return min(exact_blocks, sm_count * max(1, max_threads // block))
