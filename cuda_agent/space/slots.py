"""Slots, configurations, targets and rendered candidates: the vocabulary of the search space.

A slot belongs to exactly one agent (config, memory, compute, reduction); its name carries the
owner as a prefix (``memory.vec``). A configuration assigns every slot of the space; slots that
the chosen template does not have hold ``"-"`` and are masked for the agents.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..precision import CONTRACTS, PRECISIONS  # noqa: F401 - re-exported
from ..precision import NOTES as PRECISION_NOTES  # noqa: F401 - re-exported

AGENTS = ("config", "memory", "compute", "reduction")
ABSENT = "-"


@dataclass(frozen=True)
class Slot:
    """One decision a template exposes. `choices` are in a meaningful order (small to large)."""

    name: str
    choices: tuple
    doc: str = ""

    @property
    def agent(self) -> str:
        return self.name.split(".", 1)[0]

    def __post_init__(self) -> None:
        if self.agent not in AGENTS:
            raise ValueError(f"slot {self.name}: owner must be one of {AGENTS}")


@dataclass(frozen=True)
class Config:
    """An assignment of every slot: hashable, ordered by slot name, JSON-friendly."""

    items: tuple[tuple[str, Any], ...]

    @staticmethod
    def of(values: dict[str, Any]) -> "Config":
        return Config(tuple(sorted(values.items())))

    def __getitem__(self, name: str) -> Any:
        for key, value in self.items:
            if key == name:
                return value
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items)

    def key(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    def present(self) -> dict[str, Any]:
        """The slots the chosen template really has (absent ones dropped)."""
        return {k: v for k, v in self.items if v != ABSENT}

    def short(self) -> str:
        return " ".join(f"{k.split('.', 1)[1]}={v}" for k, v in self.items if v != ABSENT)


def expand_short(short: str, names: Iterable[str]) -> dict[str, Any]:
    """The slot values written by `Config.short()`, under their full names (`names`: the slot
    names that may appear; short names are unique across agents). Integers come back as int."""
    full = {n.split(".", 1)[1]: n for n in names}
    out: dict[str, Any] = {}
    for item in short.split():
        k, v = item.split("=", 1)
        out[full.get(k, k)] = int(v) if v.lstrip("-").isdigit() else v
    return out


@dataclass(frozen=True)
class Target:
    """The GPU a candidate is built and laid out for. Defaults describe the H200 of DESIGN.md."""

    name: str = "NVIDIA H200"
    arch: str = "sm_90"
    sm_count: int = 132
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    smem_per_sm: int = 233472
    max_smem_per_block: int = 232448  # 227 KB with the opt-in attribute
    default_smem_per_block: int = 49152
    l2_bytes: int = 60 * 1024 * 1024
    dram_bw: float = 4.3e12  # bytes/s, device-to-device copy (read + write), measured
    fp32_flops: float = 50.5e12
    clock_hz: float = 1.98e9
    precision: str = "fp32"
    """the numeric contract the kernels are held to (`precision.CONTRACTS`): "fp32" holds every
    kernel to strict fp32 accuracy; "tf32" lets tensor-core products round their operands to
    TF32 once (verified against torch's own TF32 answer), "tf32:conv" and "tf32:matmul" only
    convolutions' or matrix products' ("auto" under torch's flags); "fp16" and "bf16" let them
    round to half precision (verified against torch's autocast answer in that dtype)"""

    def key(self) -> str:
        # a candidate rendered for another precision is another binary and another contract
        return f"{self.arch}/{self.sm_count}sm" + (
            "" if self.precision == "fp32" else f"/{self.precision}")


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a candidate. Every kernel takes (inputs..., out, workspace)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = 0
    # a vendor-library step instead of a kernel (`launcher.run_library`): its result is the
    # workspace argument of the kernels that follow it
    library: dict | None = field(default=None, hash=False, compare=False)
    # where each kernel argument points, when not (inputs..., out, workspace) as given: a stage
    # of a multi-kernel program (`space/program.py`); entries ["in", i], ["out"],
    # ["buf", byte offset, shape, dtype] into the workspace, ["product"] (the latest library
    # step's result), ["product", j] (the result of the program's j-th library step: a bare
    # product that is a stage's buffer, `templates/library.py`)
    args: tuple | None = field(default=None, hash=False, compare=False)
    # blocks per thread-block cluster: the kernel declares __cluster_dims__(cluster, 1, 1) and the
    # grid is a multiple of it (the CPU emulator runs a cluster's blocks together)
    cluster: int = 1

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass(frozen=True)
class Rendered:
    """A candidate ready to compile and run: CUDA C source plus how to launch it."""

    source: str
    launches: tuple[Launch, ...]
    workspace_bytes: int = 0
    zero_workspace: bool = False
    # analytic facts the simulator and the agents' observations use
    facts: tuple[tuple[str, Any], ...] = field(default=())
    # a multi-kernel program: (stage plan, stage rendering) per stage, for the simulator
    parts: tuple = field(default=(), hash=False, compare=False)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        seen: list[str] = []
        for launch in self.launches:
            if launch.library is None and launch.kernel not in seen:
                seen.append(launch.kernel)
        return tuple(seen)

    def fact(self, name: str, default: Any = None) -> Any:
        return dict(self.facts).get(name, default)



def content_key(*parts: Iterable[Any] | str) -> str:
    """SHA-256 over everything that changes a binary or its measurement (STYLE lesson 4)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()
