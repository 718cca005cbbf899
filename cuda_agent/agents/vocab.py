"""The agents' fixed action vocabulary, and fast validity masks over a space.

Policies are trained across operators whose spaces have different templates and slots, so every
head has a fixed list of values: the union over all templates, plus ``"-"`` for a slot the
chosen template does not have. `SpaceIndex` turns a `Space` into an integer matrix (one row per
valid configuration) so the mask of a slot under a partial assignment is one vectorized filter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..space.slots import ABSENT, AGENTS, Config
from ..space.space import SCOPE_SLOT, Space

# Every slot any template has, with every value it can take. Order within a slot is meaningful
# (small to large), which the observation encoding uses. Values are only ever appended to a
# slot, and slots only appended to an agent: checkpoints of a smaller vocabulary then load with
# their heads grown (`checkpoint.policy_from`).
VOCAB: dict[str, tuple[Any, ...]] = {
    "reduction.scope": ("map", "row", "col", "split", "gemm", "pool", "chan", "scan", "lib",
                        "attention", "gemm_tc", "attention_tc", "dwconv"),
    "config.block": (32, 64, 128, 256, 512, 1024),
    "config.items": (1, 2, 4, 8),
    "config.grid": ("exact", "persistent"),
    "config.tpr": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
    "config.bx": (8, 16, 32, 64, 128, 256),
    "config.by": (1, 2, 4, 8, 16, 32, 64, 128),
    "config.waves": (1, 2, 4, 8),
    "memory.vec": (1, 2, 4),
    "memory.load": ("default", "ldg", "stream", "keep"),
    "memory.store": ("default", "stream"),
    "memory.cache": ("regs", "smem", "reload", "async"),
    "compute.unroll": ("full", "none", 1, 2, 4, 8),
    "compute.fastmath": (0, 1),
    "compute.index": ("i32", "i64"),
    "compute.algo": ("passes", "online"),
    "compute.guard": ("all", "interior"),
    "reduction.combine": ("shfl", "smem_tree", "serial"),
    "reduction.split": (1, 2, 4, 8, 16, 32, 64, 128),
    "reduction.cross": ("two_pass", "last_block", "atomic"),
    # matrix products
    "config.bm": (16, 32, 64, 128, 256),
    "config.bn": (32, 64, 128, 256),
    "config.raster": (1, 8),
    "config.warp": ("row", "4x8", "32x32", "64x32", "32x64", "64x64"),
    "memory.bk": (8, 16, 32, 64),
    "memory.vec_a": (1, 4),
    "memory.vec_b": (1, 4),
    "memory.stages": (1, 2, 3, 4),
    "memory.pad": (0, 1, 4),
    "memory.frag": ("contig", "split"),
    "compute.tm": (4, 8),
    "compute.tn": (4, 8),
    "compute.minblocks": (1, 2),
    "config.out_grid": ("chunks", "tiles"),
    "compute.fresh": (8, 16),
    # the library step of a convolution; the kept values only in a program whose readers
    # follow a channels-last buffer (`ir/layout.py`)
    "memory.layout": ("as_given", "channels_last", "channels_last_kept",
                      "channels_last_kept_ordered"),
    # blocks of a thread-block cluster sharing a row or channel (row, chan)
    "config.cluster": (1, 2, 4, 8),
    # a strided transposed convolution: gathered GEMM or sub-convolutions per output phase
    "memory.tconv": ("gather", "phase"),
}
# Decision order: the template first (it decides which other slots exist), then by agent.
SLOT_ORDER: tuple[str, ...] = (SCOPE_SLOT,) + tuple(
    s for a in AGENTS for s in VOCAB if s.startswith(a + ".") and s != SCOPE_SLOT)


def values(slot: str) -> tuple[Any, ...]:
    """The head's values: the vocabulary plus the absent marker."""
    return VOCAB[slot] + (ABSENT,)


def owner(slot: str) -> str:
    return slot.split(".", 1)[0]


def agent_slots(agent: str) -> list[str]:
    return [s for s in SLOT_ORDER if owner(s) == agent]


@dataclass
class SpaceIndex:
    """A space as an integer matrix: row = valid configuration, column = slot (SLOT_ORDER)."""

    space: Space
    matrix: np.ndarray
    configs: list[Config]
    _pos: dict | None = None
    # each row's slot domains, cached by agents.decode.domain_masks
    _domains: np.ndarray | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(space: Space) -> "SpaceIndex":
        rows = []
        for cfg in space.configs:
            d = cfg.as_dict()
            if len(space.templates) == 1:
                d[SCOPE_SLOT] = space.templates[0].name
            unknown = d.keys() - set(SLOT_ORDER)
            if unknown:  # a slot the policies cannot see would make configurations alike
                raise KeyError(f"slot(s) {sorted(unknown)} not in the agents' vocabulary")
            row = []
            for slot in SLOT_ORDER:
                v = d.get(slot, ABSENT)
                vals = values(slot)
                if v not in vals:
                    raise KeyError(f"value {v!r} of {slot} is not in the agents' vocabulary")
                row.append(vals.index(v))
            rows.append(row)
        return SpaceIndex(space, np.asarray(rows, dtype=np.int16), list(space.configs))

    @property
    def position(self) -> dict[Config, int]:
        """Row of each configuration."""
        if self._pos is None:
            self._pos = {c: i for i, c in enumerate(self.configs)}
        return self._pos

    def rows_excluding(self, exclude: set[Config] | None) -> np.ndarray:
        """Rows of the configurations not in `exclude` (e.g. those already measured)."""
        if not exclude:
            return np.arange(len(self.configs))
        drop = [self.position[c] for c in exclude if c in self.position]
        keep = np.ones(len(self.configs), dtype=bool)
        keep[drop] = False
        return np.nonzero(keep)[0]

    def mask(self, rows: np.ndarray, slot: str) -> np.ndarray:
        """Values of `slot` some configuration among `rows` takes (bool per head value)."""
        j = SLOT_ORDER.index(slot)
        m = np.zeros(len(values(slot)), dtype=bool)
        m[np.unique(self.matrix[rows, j])] = True
        return m

    def select(self, rows: np.ndarray, slot: str, value_index: int) -> np.ndarray:
        j = SLOT_ORDER.index(slot)
        return rows[self.matrix[rows, j] == value_index]

    def config_of(self, indices: dict[str, int]) -> Config:
        """The configuration whose slot values are `indices` (must be a row of the matrix)."""
        rows = np.arange(len(self.configs))
        for slot, k in indices.items():
            rows = self.select(rows, slot, k)
        if len(rows) != 1:
            raise KeyError(f"{len(rows)} configurations match {indices}")
        return self.configs[int(rows[0])]

    def indices_of(self, cfg: Config) -> dict[str, int]:
        d = cfg.as_dict()
        if len(self.space.templates) == 1:
            d[SCOPE_SLOT] = self.space.templates[0].name
        return {s: values(s).index(d.get(s, ABSENT)) for s in SLOT_ORDER}
