"""Pieces shared by the reduction templates: passes over a row, operand roles, online softmax."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...ir.plan import KernelPlan
from .. import codegen as cg
from .base import Reducer


@dataclass
class Pass:
    """One sweep over a row: the reductions it computes, or the output it writes."""

    reducers: list[Reducer]
    writes_output: bool = False
    # computed together in one sweep: softmax's (max node, sum node), or Welford's (sum node,
    # sum-of-squared-deviations node) whose deviations are taken from `shift` (the mean node)
    online: tuple[int, int] | None = None
    welford_shift: int | None = None


def online_softmax_pair(plan: KernelPlan, extras: bool = True) -> tuple[int, int, int] | None:
    """(max node, sum node, body A) when level 1 holds max(A) and level 2 is sum(exp(A - max)).

    Level 1 may hold other reductions besides the max (a cross-entropy's sum of p * x and of
    p): the online pass computes them alongside the pair (`Pass.extras`). `extras=False`
    accepts only a level 1 of the max alone, for templates whose online pass has no extras."""
    pair = plan.cached("online", lambda: _online_softmax_pair(plan))
    if pair and not extras and len(plan.levels[0]) > 1:
        return None
    return pair


def _second_level_sum(plan: KernelPlan):
    """The second level's reduction when it is alone there and a sum (both online pairs end
    in one), else None."""
    if len(plan.levels) < 2 or len(plan.levels[1]) != 1:
        return None
    n = plan.graph[plan.levels[1][0]]
    return n if n.attr("kind") == "sum" else None


def _online_softmax_pair(plan: KernelPlan) -> tuple[int, int, int] | None:
    s = _second_level_sum(plan)
    if s is None:
        return None
    g = plan.graph
    e = g[s.args[0]]
    if e.op != "exp":
        return None
    d = g[e.args[0]]
    if d.op != "sub" or d.args[1] not in plan.levels[0]:
        return None
    m = g[d.args[1]]
    if m.attr("kind") != "max" or d.args[0] != m.args[0]:
        return None
    return m.id, s.id, m.args[0]


def welford_pair(plan: KernelPlan) -> tuple[int, int, int, int] | None:
    """(sum node S, deviation-sum node V, body A, mean node M) when level 1 holds S = sum(A)
    and level 2 is V = sum((A - M)^2) with M = S * c (a mean): one Welford sweep computes both
    (other level-1 reductions ride along, as with the online softmax)."""
    return plan.cached("welford", lambda: _welford_pair(plan))


def _welford_pair(plan: KernelPlan) -> tuple[int, int, int, int] | None:
    v = _second_level_sum(plan)
    if v is None:
        return None
    g = plan.graph
    sq = g[v.args[0]]
    squares = (sq.op == "mul" and sq.args[0] == sq.args[1]) or \
        (sq.op == "pow_scalar" and sq.attr("exponent") == 2.0)
    if not squares:
        return None
    d = g[sq.args[0]]
    if d.op != "sub":
        return None
    m = g[d.args[1]]
    if m.op != "mul":
        return None
    consts = [a for a in m.args if g[a].op == "const"]
    sums = [a for a in m.args if a in plan.levels[0]]
    if len(consts) != 1 or len(sums) != 1:
        return None
    s = g[sums[0]]
    if s.attr("kind") != "sum" or s.args[0] != d.args[0] or \
            s.attr("dims") != v.attr("dims"):
        return None
    return s.id, v.id, d.args[0], m.id


def online_pair(plan: KernelPlan) -> bool:
    """Whether some pair of this plan's reductions can be computed in one online sweep."""
    return bool(online_softmax_pair(plan) or welford_pair(plan))


def make_passes(plan: KernelPlan, online: bool) -> list[Pass]:
    return plan.cached(("passes", online), lambda: _make_passes(plan, online))


def _make_passes(plan: KernelPlan, online: bool) -> list[Pass]:
    g = plan.graph
    passes = [Pass([Reducer(n, g[n].attr("kind")) for n in lv]) for lv in plan.levels]
    pair = online_softmax_pair(plan) if online else None
    welford = welford_pair(plan) if online and not pair else None
    if pair:
        m, s, _ = pair
        extras = [Reducer(n, g[n].attr("kind")) for n in plan.levels[0] if n != m]
        passes = [Pass([Reducer(m, "max"), Reducer(s, "sum")] + extras,
                       online=(m, s))] + passes[2:]
    elif welford:
        s, v, _, shift = welford
        extras = [Reducer(n, g[n].attr("kind")) for n in plan.levels[0] if n != s]
        passes = [Pass([Reducer(s, "sum"), Reducer(v, "sum")] + extras, online=(s, v),
                       welford_shift=shift)] + passes[2:]
    if not plan.output_is_row:
        passes.append(Pass([], writes_output=True))
    return passes


def pass_extras(p: Pass) -> list[Reducer]:
    """The reductions an online pass computes besides its (max, sum) pair; a pass's reducers
    otherwise."""
    return [r for r in p.reducers if not p.online or r.nid not in p.online]


def pass_roots(plan: KernelPlan, p: Pass) -> list[int]:
    if p.writes_output:
        return [plan.output]
    if p.online:
        return [plan.graph[p.online[0]].args[0]] + [plan.graph[r.nid].args[0]
                                                    for r in pass_extras(p)]
    return [plan.graph[r.nid].args[0] for r in p.reducers]


def needed(plan: KernelPlan, roots: list[int], stop: set[int]) -> set[int]:
    """Nodes reachable from `roots` without passing through `stop` nodes."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in stop:
            continue
        stack.extend(plan.graph[k].args)
    return seen


@dataclass
class Roles:
    """How each operand is read by a reduction kernel."""

    full: list[tuple[int, int]]  # (input index, node) varying along the reduced dims
    row: list[tuple[int, int]]  # (input index, node) constant along them: read once per row
    per_pass: list[set[int]]  # full operand nodes each pass reads
    cached: list[int]  # full operand nodes read by two or more passes


def operand_roles(plan: KernelPlan, passes: list[Pass]) -> Roles:
    # first by the identity of `passes` (make_passes hands out one list per plan): building
    # the key below was a fifth of enumerating a row space
    hit = plan.memo.get(("roles_of", id(passes)))
    if hit is not None and hit[0] is passes:
        return hit[1]
    key = ("roles", tuple((tuple(r.nid for r in p.reducers), p.writes_output, p.online)
                          for p in passes))
    roles = plan.cached(key, lambda: _operand_roles(plan, passes))
    plan.memo[("roles_of", id(passes))] = (passes, roles)
    return roles


def _operand_roles(plan: KernelPlan, passes: list[Pass]) -> Roles:
    reduce_ids = {n for lv in plan.levels for n in lv}
    full, row = [], []
    for k in plan.operands:
        nid = cg.operand_node(plan, k)
        (full if cg.varies_along(plan, nid, plan.reduce_dims) else row).append((k, nid))
    full_ids = {nid for _, nid in full}
    per_pass = []
    for p in passes:
        reach = needed(plan, pass_roots(plan, p), reduce_ids)
        per_pass.append({n for n in reach if n in full_ids})
    counts: dict[int, int] = {}
    for s in per_pass:
        for n in s:
            counts[n] = counts.get(n, 0) + 1
    cached = [nid for _, nid in full if counts.get(nid, 0) >= 2]
    return Roles(full, row, per_pass, cached)


def row_values_after(plan: KernelPlan, done: set[int]) -> list[int]:
    """Row-class elementwise nodes computable from reductions in `done` (computed once per row)."""
    out = []
    for n in plan.graph.live():
        if plan.classes.get(n.id) != "row" or n.op in ("reduce", "input", "const", "view"):
            continue
        anc = needed(plan, [n.id], set())
        reds = {a for a in anc if plan.graph[a].op == "reduce"}
        if reds and reds <= done:
            out.append(n.id)
    return out


def side_stores(plan: KernelPlan, row_bound: dict[int, str], at: str = "o") -> list[str]:
    """Stores of a program stage's side outputs (`Graph.sides`: row values) for the row whose
    flat index is `at` (a column's `o * I + i` in the col template)."""
    missing = [nid for nid in plan.graph.sides if nid not in row_bound]
    assert not missing, f"side outputs {missing} are not row values of this kernel"
    return [f"side{j}[{at}] = {row_bound[nid]};" for j, nid in enumerate(plan.graph.sides)]


WELFORD_CHUNK = 32
"""elements a thread sums about one shift before folding them into its state: a channel of
8 M elements shared by 32 threads is 262144 a thread, too many to sum about a shift that is off
without losing precision (docs/journal.md: space/templates/rowcommon.py)"""


def welford_declare() -> str:
    """A thread's Welford state (count wf_n, mean wf_m, squared deviations wf_q) and its
    current chunk's shifted sums (count wf_c, shift wf_k, sums wf_1, wf_2)."""
    return ("float wf_n = 0.f, wf_m = 0.f, wf_q = 0.f;  // the thread's state\n"
            "float wf_c = 0.f, wf_k = 0.f, wf_1 = 0.f, wf_2 = 0.f;  // its chunk's shifted sums")


def _fold_chunk() -> str:
    """The chunk's shifted sums merged into the state (Chan's formula), the chunk emptied."""
    return ("{ const float r_ = wf_1 / wf_c; const float cm_ = wf_k + r_; "
            "const float cq_ = fmaxf(wf_2 - wf_1 * r_, 0.f); " + welford_merge("wf_c", "cm_", "cq_")
            + " wf_c = 0.f; wf_1 = 0.f; wf_2 = 0.f; }")


def welford_update(value: str) -> str:
    """One element into a thread's chunk: deviations from the chunk's first element (wf_k),
    so that the sum of squares does not cancel against a large mean; every WELFORD_CHUNK
    elements the chunk is folded into the state, so that no long sum loses precision."""
    return (f"{{ const float a_ = {value}; if (wf_c == 0.f) wf_k = a_; "
            "const float d_ = a_ - wf_k; wf_c += 1.f; wf_1 += d_; wf_2 = fmaf(d_, d_, wf_2); "
            f"if (wf_c == {WELFORD_CHUNK}.f) {_fold_chunk()} }}")


def welford_finish() -> str:
    """The thread's last, partial chunk folded into its (wf_n, wf_m, wf_q)."""
    return f"if (wf_c > 0.f) {_fold_chunk()}"


def welford_merge(on: str, om: str, oq: str) -> str:
    """Chan's merge of another part (on, om, oq) into (wf_n, wf_m, wf_q); empty parts are
    skipped."""
    return (f"{{ const float n_ = wf_n + {on}; if ({on} > 0.f) {{ const float dl_ = {om} - wf_m; "
            f"const float f_ = {on} / n_; wf_m += dl_ * f_; wf_q += {oq} + dl_ * dl_ * wf_n * f_; "
            "wf_n = n_; } }")


def bind_welford(c, plan: KernelPlan, p: Pass, row_bound: dict[int, str], done: set[int],
                 fast: bool) -> None:
    """Name a combined Welford state's results as the plan's two reductions (every thread
    holds wf_n, wf_m, wf_q): the sum S = n * mean, the row values that follow from it (the
    planned mean M among them), then V, the squared deviations from M, from those about the
    exact mean (they differ by n * (mean - M)^2, M rounded from S)."""
    sm, sv = p.online
    c(f"const float s{sm} = wf_n * wf_m;")
    row_bound[sm] = f"s{sm}"
    done.add(sm)
    emit_new_row_values(c, plan, row_bound, done, fast)
    mu = row_bound[p.welford_shift]
    c(f"const float s{sv} = wf_q + wf_n * (wf_m - {mu}) * (wf_m - {mu});")
    row_bound[sv] = f"s{sv}"
    done.add(sv)


def finish_welford(c, plan: KernelPlan, p: Pass, row_bound: dict[int, str], done: set[int],
                   fast: bool, T: int, CL: int, slot: int) -> int:
    """After a Welford pass: each thread's sums as a state, merged over the T threads of its
    row group and the CL blocks of its cluster, then named as the plan's two reductions
    (`bind_welford`). Returns the next free cluster slot."""
    c(welford_finish())
    combine_state(c, welford_state(), T)
    if CL > 1:
        slot = cluster_combine_state(c, welford_state(), CL, slot)
    bind_welford(c, plan, p, row_bound, done, fast)
    return slot


def welford_alone(plan: KernelPlan) -> bool:
    """Whether one Welford sweep computes the plan's first two levels with nothing riding
    along (the templates without extras in their online pass: chan, split)."""
    return welford_pair(plan) is not None and len(plan.levels[0]) == 1


def online_update(m: str, s: str, value: str, fast: bool) -> str:
    ex = "__expf" if fast else "expf"
    # a -inf element (a masked_fill'ed softmax) before any finite one would add
    # exp(-inf - -inf) = NaN; after one it adds exp(-inf) = 0 either way: skipped (a NaN is
    # not, so that it propagates as in torch)
    return (f"{{ const float a_ = {value}; if (a_ > {m}) {{ {s} = {s} * {ex}({m} - a_) + 1.f; "
            f"{m} = a_; }} else if (a_ != -CA_INF) {{ {s} += {ex}(a_ - {m}); }} }}")


def online_merge(m: str, s: str, om: str, os_: str, fast: bool) -> str:
    ex = "__expf" if fast else "expf"
    return (f"{{ const float nm_ = ca_max({m}, {om}); "
            f"{s} = ({m} == -CA_INF ? 0.f : {s} * {ex}({m} - nm_)) + "
            f"({om} == -CA_INF ? 0.f : {os_} * {ex}({om} - nm_)); {m} = nm_; }}")


@dataclass(frozen=True)
class PartialState:
    """A thread's partial result held in several floats with an associative, ordered merge:
    the online softmax's (max, sum of exponentials), Welford's (count, mean, squared
    deviations). `merge(other)` is code merging the part named `other` into `names`."""

    names: tuple[str, ...]
    reset: str  # the empty part
    merge: Callable[[tuple[str, ...]], str]


def welford_state() -> PartialState:
    return PartialState(("wf_n", "wf_m", "wf_q"), "wf_n = 0.f; wf_m = 0.f; wf_q = 0.f;",
                        lambda q: welford_merge(*q))


def online_state(fast: bool) -> PartialState:
    return PartialState(("om", "os"), "om = -CA_INF; os = 0.f;",
                        lambda q: online_merge("om", "os", q[0], q[1], fast))


def combine_state(c, st: PartialState, T: int) -> None:
    """Every thread of a row group (T lanes) ends with the group's merged state: shuffles
    within a warp, then the warps' parts through shared memory (ca_red, ca_red2, ...: one
    array per float of the state), merged as a shuffle tree in every warp."""
    if T == 1:
        return
    q = tuple(f"q{i}_" for i in range(len(st.names)))

    def butterfly(width: int) -> None:
        off = width // 2
        while off >= 1:
            c("{ " + " ".join(f"const float {t} = __shfl_xor_sync(0xffffffffu, {v}, {off}, "
                              f"{width});" for t, v in zip(q, st.names)) + " " + st.merge(q) +
              " }")
            off //= 2

    butterfly(min(T, 32))
    if T > 32:
        W = T // 32
        arrays = [f"ca_red{i + 1 if i else ''}" for i in range(len(st.names))]
        c("__syncthreads();")
        c("if ((lane & 31) == 0) { " + " ".join(f"{a}[grp * {W} + (lane >> 5)] = {v};"
                                                for a, v in zip(arrays, st.names)) + " }")
        c("__syncthreads();")
        # every warp merges the W warp parts as a shuffle tree (log2 W merges, each with a
        # division) rather than W serial merges per thread, which at 16 warps a row cost
        # more than the row's loads and arithmetic
        c(" ".join(f"{v} = {a}[grp * {W} + (lane & {W - 1})];"
                   for a, v in zip(arrays, st.names)))
        butterfly(W)
        c("__syncthreads();")


def cluster_combine_state(c, st: PartialState, CL: int, slot: int) -> int:
    """The state over the cluster's CL blocks, merged in rank order in every block (each
    publishes its part in shared-memory slots read through distributed shared memory).
    Returns the next free slot."""
    q = tuple(f"q{i}_" for i in range(len(st.names)))
    c("if (threadIdx.x == 0) { " + " ".join(f"ca_cl[{slot + i}] = {v};"
                                            for i, v in enumerate(st.names)) + " }",
      "ca_cluster_sync();", st.reset)
    c.open(f"for (unsigned r_ = 0; r_ < {CL}u; ++r_)")
    c("const float* p_ = ca_cluster_peer(ca_cl, r_); " +
      " ".join(f"const float {t} = p_[{slot + i}];" for i, t in enumerate(q)))
    c(st.merge(q))
    c.close()
    return slot + len(st.names)


def bind_reducers(c, reducers: list[Reducer], row_bound: dict[int, str], done: set[int]) -> None:
    """Name each combined reduction result (s<id>) and mark it computed."""
    for r in reducers:
        ctype = "long long" if r.is_arg else "float"
        c(f"const {ctype} s{r.nid} = {r.result()};")
        row_bound[r.nid] = f"s{r.nid}"
        done.add(r.nid)


def emit_new_row_values(c, plan: KernelPlan, row_bound: dict[int, str], done: set[int],
                        fast: bool) -> None:
    """Compute the per-row values that the reductions done so far make available."""
    new_rows = [n for n in row_values_after(plan, done) if n not in row_bound]
    if new_rows:
        stmts, names = cg.emit_values(plan, new_rows, dict(row_bound), fast, suffix="r")
        c(*stmts)
        for n in new_rows:
            row_bound[n] = names[n]


def cluster_combine(c, reducers: list[Reducer], CL: int, slot: int) -> None:
    """Fold the cluster's block partials (each block's combined value, in every thread): each
    block publishes its own in shared-memory slots, then every thread reads all CL of them
    through distributed shared memory in rank order, so all blocks hold the same result."""
    c.open("if (threadIdx.x == 0)")
    for k, r in enumerate(reducers):
        c(f"ca_cl[{slot + k}] = {r.acc};")
        if r.is_arg:
            c(f"ca_cl_i[{slot + k}] = {r.idx};")
    c.close()
    c("ca_cluster_sync();")
    for k, r in enumerate(reducers):
        c(*r.reset())
        c.open(f"for (unsigned r_ = 0; r_ < {CL}u; ++r_)")
        c(r.combine_from(f"ca_cluster_peer(ca_cl, r_)[{slot + k}]",
                         f"ca_cluster_peer(ca_cl_i, r_)[{slot + k}]" if r.is_arg else "0"))
        c.close()


def carve_dynamic(c, at: int, arrays: list[tuple[str, int, str]]) -> int:
    """Point each (name, words, C type) array of a cluster kernel at consecutive words of its
    dynamic shared memory `ca_dyn`, from word `at` (empty ones skipped); the word after."""
    for name, n, ctype in arrays:
        if n:
            c(f"{ctype}* {name} = reinterpret_cast<{ctype}*>(ca_dyn + {at});")
            at += n
    return at
