"""Multi-kernel programs: one stage of a partitioned problem tuned at a time.

A partitioned problem (`ir/partition.py`) runs its stages in order, each stage a kernel (or a
library step and a kernel) of its own template, the values between stages in workspace
buffers. Its search is coordinate-wise: `StageSpace` is the ordinary template space of one
stage, so every strategy and the agents search it unchanged, but each of its configurations
renders as the *whole* program, the other stages fixed at the configurations chosen for them,
so every candidate is verified and timed end to end against the problem's reference.

Composition: each stage's source goes into its own C++ namespace with its kernels renamed
(``s1_ca_row``), so templates and preludes never clash; each launch lists where its arguments
point (`Launch.args`: a program operand, the output, or a workspace offset), since stages read
and write different buffers. Workspace layout: the intermediate buffers, then each stage's own
scratch space, every region 256-byte aligned.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Collection

from ..errors import UnsupportedError
from ..ir.graph import Increment, RunningStats
from ..ir.partition import DEFERRABLE, ProgramPlan
# measurements a stage may go without progress: defined where the run's settings read it
# without importing this module
from ..limits import STAGE_PATIENCE  # noqa: F401
from .slots import ABSENT, Config, Launch, Rendered, Target, content_key
from .space import SCOPE_SLOT, Space
from .templates.library import KEPT_MO, KEPTS

#: the library template's slot whose values `KEPTS` store its stage's buffer channels-last
LAYOUT_SLOT = "memory.layout"

ALIGN = 256


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def stage_budget(budget: int, stages: int, stage: int) -> int:
    """Measurements of `budget` that stage `stage` of `stages` gets when no stage stops early:
    an even split, the remainder to the first stages. The schedule the program sweeps
    recorded before stages handed over followed (their records carry no stage, so
    `sim_cases` replays them by it)."""
    return budget // stages + (1 if stage < budget % stages else 0)


#: an improvement smaller than this fraction is timing noise, not progress
STAGE_GAIN = 0.01


def stage_share(remaining: int, stages_left: int) -> int:
    """The next stage's share of the `remaining` measurements when `stages_left` stages (it
    included) are still to be searched: what is left split evenly, so what an earlier stage
    did not spend goes to the later ones (the last takes it all). With no stage stopping early
    this is `stage_budget`'s split."""
    return -(-remaining // max(1, stages_left))


class StagePlateau:
    """Whether a stage's search has settled: `patience` measurements in a row without the
    program's best time falling by `gain` from where it stood at the last such fall (every
    strategy's coordinate search uses it, so that all of them hand over alike)."""

    def __init__(self, best_ms: float | None, patience: int = STAGE_PATIENCE,
                 gain: float = STAGE_GAIN) -> None:
        self.mark = best_ms if best_ms is not None else float("inf")
        self.patience, self.gain = patience, gain
        self.since = 0

    @property
    def settled(self) -> bool:
        return self.since >= self.patience

    def update(self, time_ms: float | None) -> bool:
        """Count one measurement (None: failed); True once the stage has settled."""
        if time_ms is not None and time_ms < self.mark * (1 - self.gain):
            self.mark, self.since = time_ms, 0
        else:
            self.since += 1
        return self.settled


def stage_spaces(plan: ProgramPlan, target: Target) -> list[Space]:
    _drop_empty_memory_order(plan, target)
    return [Space.for_plan(s.plan, target) for s in plan.program.stages]


def _drop_empty_memory_order(plan: ProgramPlan, target: Target) -> None:
    """Withdraw a producer's memory-order choice (`KernelPlan.nhwc_mo_out`) where some reader's
    memory-order plan has no configuration a template offers (BatchNorm's statistics over
    (N, H, W) with a few channels innermost are a column reduction of one column tile: the
    col template's lone block is masked on a large tensor)."""
    for st in plan.program.stages:
        if not st.plan.nhwc_mo_out:
            continue
        readers = [r for r in plan.program.stages if r.nhwc_buffer == st.writes]
        if all(_has_configs(r.nhwc_mo_plan, target) for r in readers):
            continue
        st.plan.nhwc_mo_out = False
        for r in readers:
            r.nhwc_mo_plan = None


def _has_configs(kplan: Any, target: Target) -> bool:
    try:
        sp = Space.for_plan(kplan, target)
    except UnsupportedError:
        return False
    return any(next(iter(sp._template_configs(t)), None) is not None for t in sp.templates)


@dataclass
class StageSpace(Space):
    """The space of stage `stage` of a program; `fixed` holds every stage's configuration
    (this stage's entry is replaced by the configuration being rendered)."""

    program: ProgramPlan | None = None  # always given (`of`): a default only as Space has some
    stage: int = 0
    spaces: list[Space] = field(default_factory=list)
    fixed: list[Config] = field(default_factory=list)

    @staticmethod
    def of(plan: ProgramPlan, stage: int, spaces: list[Space], fixed: list[Config]
           ) -> "StageSpace":
        """Stage `stage`'s space, the others at `fixed`: where `fixed` keeps a buffer this
        stage reads channels-last, the stage's channels-last variant (`ir/layout.py`)."""
        own = stage_choices(plan, spaces, fixed)[stage][0]
        return StageSpace(own.plan, own.target, own.templates, program=plan, stage=stage,
                          spaces=spaces, fixed=list(fixed))

    def program_plan(self) -> ProgramPlan:
        assert self.program is not None, "a stage space is made by StageSpace.of"
        return self.program

    def with_choice(self, cfg: Config) -> list[Config]:
        chosen = list(self.fixed)
        chosen[self.stage] = cfg
        return chosen

    def render(self, cfg: Config) -> Rendered:
        plan = self.program_plan()
        choices = stage_choices(plan, self.spaces, self.with_choice(cfg))
        chosen = [c for _, c in choices]
        return compose(plan, [sp.render(c) for sp, c in choices], kept_buffers(plan, chosen),
                       ordered_buffers(plan, chosen))

    def key(self, cfg: Config, toolchain: str) -> str:
        plan = self.program_plan()
        choices = stage_choices(plan, self.spaces, self.with_choice(cfg))
        return content_key("program", [sp.key(c, toolchain) for sp, c in choices],
                           plan.graph.fingerprint())

    @property
    def version(self) -> str:
        return "|".join(sp.version for sp in self.spaces)


def kept_buffers(plan: ProgramPlan, chosen: list[Config]) -> set[int]:
    """The intermediate buffers `chosen` (a configuration per stage) stores channels-last:
    those of the stages whose library call keeps its product so (`memory.layout` `KEPTS`)."""
    return {st.writes for st, c in zip(plan.program.stages, chosen)
            if st.writes is not None and st.plan.nhwc_out and c.get(LAYOUT_SLOT) in KEPTS}


def ordered_buffers(plan: ProgramPlan, chosen: list[Config]) -> set[int]:
    """Those of `kept_buffers` whose readers iterate in the buffer's memory order
    (`memory.layout` `KEPT_MO`: each reader runs its `Stage.nhwc_mo_plan`)."""
    return {st.writes for st, c in zip(plan.program.stages, chosen)
            if st.writes is not None and st.plan.nhwc_mo_out and c.get(LAYOUT_SLOT) == KEPT_MO}


def stage_plan(stage: Any, kept: Collection[int], ordered: Collection[int]) -> Any:
    """The plan stage `stage` renders from where buffers `kept` are stored channels-last,
    those of `ordered` read in their memory order."""
    if stage.nhwc_buffer is None or stage.nhwc_buffer not in kept:
        return stage.plan
    return stage.nhwc_mo_plan if stage.nhwc_buffer in ordered else stage.nhwc_plan


def stage_choices(plan: ProgramPlan, spaces: list[Space], chosen: list[Config]
                  ) -> list[tuple[Space, Config]]:
    """Each stage's space and configuration as `chosen` renders them: a stage that reads a
    buffer `chosen` keeps channels-last runs its channels-last variant's space, any other its
    own; a configuration that space does not hold follows it (`follow`)."""
    kept, ordered = kept_buffers(plan, chosen), ordered_buffers(plan, chosen)
    out = []
    for i, (st, sp, c) in enumerate(zip(plan.program.stages, spaces, chosen)):
        variant = stage_plan(st, kept, ordered)
        if variant is not st.plan:
            which = "nhwc_mo_space" if variant is st.nhwc_mo_plan else "nhwc_space"
            sp = plan.cached((which, i, sp.target),
                             lambda: Space.for_plan(variant, sp.target))
        out.append((sp, follow(sp, c)))
    return out


def follow(space: Space, cfg: Config) -> Config:
    """`cfg` in `space`, a stage's space in the other layout of what it reads: itself where
    `space` holds it; else the same with its vector widths 1 (a channels-last buffer read along
    its spatial dims is strided: no vector loads there); else its template's default there;
    else `space`'s default."""
    if space.contains(cfg):
        return cfg
    scalar = Config.of({k: 1 if k.startswith("memory.vec") and v != ABSENT else v
                        for k, v in cfg.items})
    if space.contains(scalar):
        return scalar
    name = cfg.get(SCOPE_SLOT)
    return next((c for c in space.template_defaults(fallback=True)
                 if name is None or space.template_of(c).name == name), space.default())


def buffer_offsets(plan: ProgramPlan, bare: Collection[int] = ()) -> tuple[list[int], int]:
    """Workspace offset of each intermediate buffer, and the bytes they take (aligned): the
    buffers come first, whatever the stages' configurations. A buffer that may be a bare
    library product (`_may_be_bare`: it holds a convolution's or matrix product's value) is
    laid out after the others, and one that is (`bare`: its stage is the library call alone,
    whose result its readers point at) takes no room: the others' offsets, the batch
    statistics' among them (`state_updates`, computed once per plan), do not depend on which
    stage configurations a candidate has, and a deferred product does not hold an unused
    copy of the activation in the workspace."""
    offsets = [0] * len(plan.program.buffers)
    ws = 0
    may_be_bare, sizes = _may_be_bare(plan), plan.buffer_bytes()
    for k in sorted(range(len(offsets)), key=lambda k: k in may_be_bare):
        offsets[k] = ws
        if k not in bare:
            ws = _aligned(ws + sizes[k])
    return offsets, ws


def _may_be_bare(plan: ProgramPlan) -> set[int]:
    """Buffers whose value is a product a library call alone may compute (`DEFERRABLE`)."""
    program = plan.program
    return {k for k, v in enumerate(program.values) if plan.graph[v].op in DEFERRABLE}


def bare_products(plan: ProgramPlan, parts: list[Rendered]) -> set[int]:
    """The buffers of a candidate (one rendering per stage) written by a stage that is a
    library call alone: its readers point at the call's result (["product", j])."""
    return {stage.writes for stage, r in zip(plan.program.stages, parts)
            if stage.writes is not None and not r.kernel_names
            and any(L.library is not None for L in r.launches)}


def state_updates(plan: Any) -> list[dict[str, Any]]:
    """The module-state updates (`graph.RunningStats`, `graph.Increment`) a candidate of `plan`
    applies after its kernels, as plain dicts for `launcher.update_state`: where in the
    workspace each statistic lies (byte offset, element count) and which buffers it updates."""
    updates = plan.graph.updates
    if not updates:
        return []
    offsets, _ = buffer_offsets(plan) if isinstance(plan, ProgramPlan) else ([], 0)
    out: list[dict[str, Any]] = []
    for u in updates:
        if isinstance(u, Increment):
            out.append({"op": "increment", "target": u.target, "by": u.by})
        elif isinstance(u, RunningStats):
            where = []
            for nid in (u.mean, u.var):
                k = plan.program.values.index(nid)  # kept values are always cut (`partition`)
                shape, _ = plan.program.buffers[k]
                where.append([offsets[k], math.prod(shape)])
            out.append({"op": "running_stats", "mean": where[0], "var": where[1],
                        "running_mean": u.running_mean, "running_var": u.running_var,
                        "momentum": u.momentum, "count": u.count})
        else:
            raise TypeError(f"unknown state update {u!r}")
    return out


def compose(plan: ProgramPlan, parts: list[Rendered], kept: Collection[int] = (),
            ordered: Collection[int] = ()) -> Rendered:
    """One candidate from one rendering per stage: sources, launches, workspace; `kept`, the
    buffers stored channels-last (`kept_buffers`; `ordered`, those of them read in memory
    order, `ordered_buffers`), in the facts of the stages that read them."""
    program = plan.program
    offsets, ws = buffer_offsets(plan, bare_products(plan, parts))
    sources, launches, facts = [], [], [("family", "program"), ("stages", len(parts))]
    zero = False
    # a stage reading a buffer kept channels-last was rendered from its variant's plan
    plans = [stage_plan(s, kept, ordered) for s in program.stages]
    # buffers that are a bare library product (the stage a library call alone): their
    # readers point at that call's result (["product", j], j counting the library steps)
    products: dict[int, int] = {}
    library_steps = 0
    for i, (stage, r) in enumerate(zip(program.stages, parts)):
        scratch = ws
        ws = _aligned(ws + r.workspace_bytes)
        zero = zero or r.zero_workspace
        names = r.kernel_names
        src = r.source
        for name in names:
            src = re.sub(rf"\b{re.escape(name)}\b", f"s{i}_{name}", src)
        sources.append(f"namespace cuda_agent_stage{i} {{\n{src}\n}}  // stage {i}\n")
        operands = [["product", products[src.index]]
                    if src.kind == "buffer" and src.index in products
                    else _source_arg(plan, src, offsets)
                    for src in (stage.sources[k] for k in plans[i].operands)]
        out_arg = ["out"] if stage.writes is None else _buffer_arg(plan, stage.writes, offsets)
        side_args = [_buffer_arg(plan, b, offsets) for b in stage.sides]
        after_library = False
        for L in r.launches:
            if L.library is not None:
                launches.append(Launch(L.kernel, L.grid, L.block, L.smem, library=L.library,
                                       args=tuple(operands)))
                after_library = True
                library_steps += 1
                continue
            ws_arg = ["product"] if after_library else ["buf", scratch, [], "uint8"]
            launches.append(Launch(f"s{i}_{L.kernel}", L.grid, L.block, L.smem,
                                   args=tuple(operands + [out_arg] + side_args + [ws_arg]),
                                   cluster=L.cluster))
        if not names and after_library:
            assert stage.writes is not None and not stage.sides, "a bare product feeds a stage"
            products[stage.writes] = library_steps - 1
        facts += [(f"s{i}.{k}", v) for k, v in r.facts]
        if stage.nhwc_buffer is not None and stage.nhwc_buffer in kept:
            # read in torch's order (strided: the model prices it), or in memory order
            fact = "reads_channels_last_ordered" if stage.nhwc_buffer in ordered \
                else "reads_channels_last"
            facts.append((f"s{i}.{fact}", stage.nhwc_buffer))
    return Rendered("\n".join(sources), tuple(launches), workspace_bytes=ws,
                    zero_workspace=zero, facts=tuple(facts), parts=tuple(zip(plans, parts)))


def _source_arg(plan: ProgramPlan, src: Any, offsets: list[int]) -> list:
    if src.kind == "input":
        return ["in", plan.operands.index(src.index)]
    return _buffer_arg(plan, src.index, offsets)


def _buffer_arg(plan: ProgramPlan, index: int, offsets: list[int]) -> list:
    shape, dtype = plan.program.buffers[index]
    return ["buf", offsets[index], list(shape), dtype]
