"""Verification within a memory budget (issue 33): cases regenerated from their seeds into
shared buffers, inputs hashed instead of copied, references kept by budget or recomputed, and
computed and compared in chunks along a separable direction. Every check must give the verdict
it gives with everything held: the adversarial kernels of test_verify run again under small
budgets, and new ones aim at the new paths (a mutation a plain checksum misses, an error only
in the last chunk, a problem that must not be chunked)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cuda_agent.verify import cases as V
from cuda_agent.verify.separable import (accumulation_dims, accumulation_of, candidate_splits,
                                         combine_parts, find_split, is_separable)
from cuda_agent.verify.cases import (Buffers, CasePool, Comparison, PoolBudget, RefStats, Split,
                                     SlackSum, check, compare, fingerprint, make_case,
                                     witness_slack)
from cuda_agent.verify.settings import VerifySettings
from test_verify import EXACT, PROBS, FirstCallCache, NearReplay, d, prob, rejected

F32 = torch.float32

# what each configuration keeps: everything; nothing (inputs drawn again, references
# recomputed, comparisons in pieces of 1024 elements); references in host memory; a little
SHARED = PoolBudget(device_bytes=0, host_bytes=0, scratch_bytes=4096)
HOST = PoolBudget(device_bytes=0, host_bytes=1 << 30, scratch_bytes=4096)
SOME = PoolBudget(device_bytes=6000, host_bytes=0, scratch_bytes=4096)
BUDGETS = {"held": None, "shared": SHARED, "host": HOST, "some": SOME}

# problems separable along their rows (output dim 0): split the forward input, keep the rest
ROW_SPLITS = {
    "softmax": Split(0, (0,)), "log_softmax": Split(0, (0,)), "sum": Split(0, (0,)),
    "argmax": Split(0, (0,)), "layer_norm": Split(0, (0, None, None)),
    "relu_chain": Split(0, (0, None)),
}


def pool_of(name: str, budget: PoolBudget | None, chunk_rows: int | None = None,
            settings: VerifySettings | None = None) -> CasePool:
    p = prob(name)
    split = ROW_SPLITS[name] if chunk_rows else None
    return CasePool(p.ref, p.examples, p.out_shape, p.out_dtype, settings, budget=budget,
                    split=split, chunk_rows=chunk_rows)


CONFIGS = [("shared", None), ("host", None), ("some", None), ("shared", 7), ("held", 4)]


def config_id(c):
    return f"{c[0]}-chunks{c[1]}" if c[1] else c[0]


def run_all(pool: CasePool, kernel, n: int = 5) -> list:
    return [check(kernel, pool, pool.trials_for(i)) for i in range(n)]


# -- the budget decides what is held ---------------------------------------------------------------

@pytest.mark.parametrize("cases", [5, 12])
def test_a_zero_budget_holds_one_set_of_inputs_and_no_reference(cases):
    """Whatever the number of cases: they share the one set, their references recomputed."""
    pool = pool_of("softmax", SHARED, settings=VerifySettings(pool=cases))
    assert len(pool.cases) == cases
    assert not pool.holds_inputs
    for t in pool.cases + pool.perturbed:
        assert t.inputs is pool.buffers and t.ref is None and t.stored is None
    assert pool.timing_set(0).inputs is pool.buffers


def test_no_budget_holds_everything_as_before():
    pool = pool_of("softmax", None)
    assert pool.holds_inputs and pool.buffers is None
    assert all(t.ref is not None for t in pool.cases + pool.perturbed)
    assert len({id(t.inputs) for t in pool.cases + pool.perturbed}) == 2 * len(pool.cases)


def test_references_go_to_the_host_when_the_device_has_no_room():
    pool = pool_of("softmax", HOST)
    assert all(t.ref is None and t.stored is not None for t in pool.cases + pool.perturbed)


def test_a_small_budget_holds_what_fits_and_recomputes_the_rest():
    pool = pool_of("softmax", SOME)  # out: 33 x 257 fp32 = 33924 bytes: none fits in 6000
    assert not pool.holds_inputs
    big = PoolBudget(device_bytes=2 * 33924 + 10, host_bytes=0, scratch_bytes=4096)
    pool = pool_of("softmax", big)
    held = [t for t in pool.cases + pool.perturbed if t.ref is not None]
    assert len(held) == 2, "room for two references: two held, the rest recomputed"


# -- every verdict is the same whatever is held ----------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_implementation_accepted_under_every_budget(name, config):
    pool = pool_of(name, BUDGETS[config[0]], config[1])
    for i, res in enumerate(run_all(pool, EXACT[name])):
        assert res.ok, (i, res.kind, res.msg)
        assert res.max_rel_err < 1e-5


def _half_rows_zero(name):
    def run(ins, out):
        EXACT[name](ins, out)
        out[out.shape[0] // 2:] = 0.0
    return run


def _skip_last_row(name):
    def run(ins, out):
        full = torch.empty_like(out)
        EXACT[name](ins, full)
        out[:-1] = full[:-1]
    return run


def _nudge_one(ins, out):
    EXACT["relu_chain"](ins, out)
    out[0, 0] = out[0, 0] + 0.05 * (out.abs().mean() + 1)


CHEATS = {
    "writes_nothing": ("softmax", lambda ins, out: None),
    "zeros": ("layer_norm", lambda ins, out: out.zero_()),
    "identity": ("relu_chain", lambda ins, out: out.copy_(ins[0])),
    "half_rows_zero": ("softmax", _half_rows_zero("softmax")),
    "last_row_unwritten": ("sum", _skip_last_row("sum")),
    "nan_one": ("softmax", lambda ins, out: (EXACT["softmax"](ins, out), out.view(-1)[100].fill_(
        float("nan")))),
    "half_precision": ("log_softmax", lambda ins, out: out.copy_(
        F.log_softmax(ins[0].half(), -1).float())),
    "nudge_one_element": ("relu_chain", _nudge_one),
    "clamped_inputs": ("softmax", lambda ins, out: out.copy_(torch.softmax(
        ins[0].clamp(-3, 3), -1))),
    "argmax_off_by_one": ("argmax", lambda ins, out: out.copy_(
        (ins[0].argmax(-1) + 1) % ins[0].shape[-1])),
    "mutates_input": ("softmax", lambda ins, out: (EXACT["softmax"](ins, out), ins[0].mul_(0.5))),
    "mutates_parameter": ("layer_norm", lambda ins, out: (EXACT["layer_norm"](ins, out),
                                                          ins[2].view(-1)[0].add_(1.0))),
}


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_cheat_gets_the_same_verdict_under_every_budget(cheat, config):
    name, kernel = CHEATS[cheat]
    held = run_all(pool_of(name, None), kernel, 3)
    small = run_all(pool_of(name, BUDGETS[config[0]], config[1]), kernel, 3)
    for a, b in zip(held, small):
        assert not a.ok and not b.ok
        assert (a.kind, a.msg.split(":")[0]) == (b.kind, b.msg.split(":")[0]), (a.msg, b.msg)
        if a.kind in ("unwritten", "nan") or "indices" in a.msg:
            assert a.msg == b.msg  # counts add up over pieces exactly


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@pytest.mark.parametrize("name", ["softmax", "sum", "layer_norm", "relu_chain"])
def test_replays_are_caught_by_the_perturbed_twin_under_every_budget(name, config):
    pool = pool_of(name, BUDGETS[config[0]], config[1], VerifySettings(trials=1))
    res = check(FirstCallCache(EXACT[name]), pool, pool.trials_for(0))
    rejected(res, "wrong")
    assert "perturbed" in res.msg
    for i in range(len(pool.cases)):
        res = check(NearReplay(EXACT[name]), pool, pool.trials_for(i))
        assert not res.ok and res.kind == "wrong" and "perturbed" in res.msg, (i, res.msg)


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_degenerate_problems_are_found_under_every_budget(config):
    from test_verify import Prob
    p = Prob(lambda ts: torch.relu(-d(ts[0]).abs()), [torch.randn(16, 64)])
    pool = CasePool(p.ref, p.examples, p.out_shape, F32, budget=BUDGETS[config[0]],
                    split=Split(0, (0,)) if config[1] else None, chunk_rows=config[1])
    assert "zeros" in pool.weak
    useful = pool_of("softmax", BUDGETS[config[0]], config[1])
    assert not useful.weak


# -- shared buffers: drawn again from seeds, twins one element from their base ---------------------

def test_a_case_drawn_again_has_the_values_it_was_verified_on():
    held, shared = pool_of("layer_norm", None), pool_of("layer_norm", SHARED)
    for a, b in zip(held.cases + held.perturbed, shared.cases + shared.perturbed):
        got = shared.materialize(b)
        assert all(torch.equal(x, y) for x, y in zip(a.inputs, got)), b.label


def test_a_twin_and_its_base_differ_by_one_element_in_the_shared_buffers():
    pool = pool_of("softmax", SHARED)
    for base, twin in zip(pool.cases, pool.perturbed):
        x = pool.materialize(base)[0].clone()
        y = pool.materialize(twin)[0].clone()
        assert int((x != y).sum()) == 1
        assert torch.equal(pool.materialize(base)[0], x)  # put back, not drawn afresh


def test_the_timing_set_is_drawn_again_after_the_cases():
    pool = pool_of("relu_chain", SHARED)
    p = prob("relu_chain")
    want = make_case(p.examples, 0, 1234).tensors
    check(EXACT["relu_chain"], pool, pool.trials_for(0))
    got = pool.materialize(pool.timing_set(0))
    assert got is pool.buffers
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_mutating_candidate_cannot_poison_the_shared_buffers():
    pool = pool_of("softmax", SHARED)

    def scribble(ins, out):
        ins[0].fill_(0.0)
        raise V.CandidateError("launch", "refused after writing its input")

    assert check(scribble, pool, pool.trials_for(0)).kind == "launch"
    assert check(lambda ins, out: (EXACT["softmax"](ins, out), ins[0].zero_()), pool,
                 pool.trials_for(1)).kind == "mutated_input"
    for i in range(5):
        res = check(EXACT["softmax"], pool, pool.trials_for(i))
        assert res.ok, (i, res.msg)


# -- the hash that replaced the copy ---------------------------------------------------------------

def test_fingerprint_sees_one_flipped_bit_a_swap_and_a_negative_zero():
    x = torch.randn(1000)
    key = 12345
    h = fingerprint(x, key)
    assert fingerprint(x.clone(), key) == h
    y = x.clone()
    y.view(torch.int32)[500] ^= 1
    assert fingerprint(y, key) != h
    z = x.clone()
    z[3], z[700] = x[700], x[3]  # a checksum of the bit patterns misses a swap
    assert int(z.view(torch.int32).long().sum()) == int(x.view(torch.int32).long().sum())
    assert fingerprint(z, key) != h
    zero = torch.zeros(8)
    neg = zero.clone()
    neg[5] = -0.0
    assert fingerprint(neg, key) != fingerprint(zero, key)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16,
                                   torch.bool, torch.int32])
def test_fingerprint_is_the_same_in_chunks_and_whole(dtype):
    """Whole and in chunks of a row (HASH_ROW) or more: one hash; in smaller chunks (rows as
    long as the chunk), the same from one call to the next."""
    x = (torch.randn(3, 1001) * 100).to(dtype)
    assert fingerprint(x, 99, chunk=None) == fingerprint(x, 99, chunk=1 << 20)
    assert fingerprint(x, 99, chunk=7) == fingerprint(x.clone(), 99, chunk=7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16,
                                   torch.bool, torch.int32])
def test_fingerprint_over_whole_rows_is_the_same_in_any_chunks_and_leaves_x_alone(dtype):
    """Past a row (HASH_ROW elements) the hash sums rows at once: any chunking, whole rows
    or not, gives the same hash, and `x` is untouched (an int64 input's bits are its own
    tensor: multiplying them in place would change the input)."""
    from cuda_agent.verify.cases import HASH_ROW

    x = (torch.randn(2 * 3 * HASH_ROW + 123) * 100).to(dtype)
    kept = x.clone()
    whole = fingerprint(x, 7)
    for chunk in (HASH_ROW, HASH_ROW + 5, 2 * HASH_ROW, 3 * HASH_ROW - 1, 1 << 30):
        assert fingerprint(x, 7, chunk=chunk) == whole, chunk
    for chunk in (7, HASH_ROW - 1):
        assert fingerprint(x, 7, chunk=chunk) == fingerprint(x, 7, chunk=chunk)
    assert torch.equal(x, kept)


@pytest.mark.parametrize("chunk", [4096, 7])
@pytest.mark.parametrize("where", [0, 4095, 4096, 5000, 3 * 4096 + 122])
def test_fingerprint_over_whole_rows_sees_one_changed_element_and_swaps(where, chunk):
    x = torch.randn(3 * 4096 + 123)
    h = fingerprint(x, 31337, chunk=chunk)
    y = x.clone()
    y.view(torch.int32)[where] ^= 1 << 30
    assert fingerprint(y, 31337, chunk=chunk) != h
    for other in (1, 4, 5, 4096, 4097):  # same row; same column; neither (rows of 4 or 4096)
        z = x.clone()
        o = (where + other) % x.numel()
        z[where], z[o] = x[o], x[where]
        assert fingerprint(z, 31337, chunk=chunk) != h, (where, o)
    assert fingerprint(x, 31338, chunk=chunk) != h, "the key changes the hash"


def test_a_swap_of_two_input_elements_is_a_mutation():
    def swap(ins, out):
        EXACT["sum"](ins, out)
        x = ins[0].view(-1)
        a, b = x[10].clone(), x[2000].clone()
        x[10], x[2000] = b, a
    for budget in (None, SHARED):
        pool = pool_of("sum", budget)
        rejected(check(swap, pool, pool.trials_for(0)), "mutated_input")


def test_a_permuted_row_is_a_mutation_though_every_row_sum_is_kept():
    def permute(ins, out):
        EXACT["softmax"](ins, out)
        ins[0][4].copy_(ins[0][4].flip(0))
    pool = pool_of("softmax", SHARED)
    rejected(check(permute, pool, pool.trials_for(2)), "mutated_input")


# -- chunked references and comparisons ------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax", "layer_norm", "relu_chain"])
def test_an_error_only_in_the_last_chunk_is_caught(name):
    def last_row_off(ins, out):
        EXACT[name](ins, out)
        out[-1] += 0.01 * (out[-1].abs().mean() + 1e-3)
    pool = pool_of(name, SHARED, chunk_rows=7)
    assert len(pool._blocks()) > 2
    rejected(check(last_row_off, pool, pool.trials_for(0)), "wrong")


def test_one_wrong_element_at_the_very_end_is_caught_in_pieces():
    def last_elem(ins, out):
        EXACT["softmax"](ins, out)
        out.view(-1)[-1] += 0.05
    pool = pool_of("softmax", SHARED, chunk_rows=8)
    res = check(last_elem, pool, pool.trials_for(0))
    rejected(res, "wrong")
    assert "1 elements off" in res.msg or "relative error" in res.msg


WITNESS = {  # torch's fp32 answer, as the GPU worker's witness gives it
    "softmax": lambda ts: torch.softmax(ts[0], -1),
    "layer_norm": lambda ts: F.layer_norm(ts[0], (ts[0].shape[-1],), ts[1], ts[2], 1e-5),
}


@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_a_twin_computes_only_the_chunk_the_moved_element_is_in(name, monkeypatch):
    """A perturbed twin differs from its base in one element: along a separable split only
    that chunk's reference differs, so only it is computed, for the twin's stats and slack
    and for the replay check; the rest are the base's. The twins kept, their stats and their
    slack are what computing every chunk gives, and a kernel replaying the base's answer
    still fails."""
    p = prob(name)

    def pool() -> CasePool:
        return CasePool(p.ref, p.examples, p.out_shape, p.out_dtype, budget=SHARED,
                        split=ROW_SPLITS[name], chunk_rows=7, witness=WITNESS[name])

    lean = pool()
    monkeypatch.setattr(CasePool, "_holds_element", lambda self, block, change: True)
    full = pool()
    monkeypatch.undo()
    blocks = len(lean._blocks())
    assert blocks > 2
    assert [t.change for t in lean.perturbed] == [t.change for t in full.perturbed]
    for a, b in zip(lean.perturbed, full.perturbed):
        assert a.stats.finite == b.stats.finite and a.stats.first == b.stats.first
        assert a.stats.sum_sq == pytest.approx(b.stats.sum_sq, rel=1e-12)
        assert a.stats.total == pytest.approx(b.stats.total, rel=1e-9, abs=1e-9)
        assert a.slack.rel == pytest.approx(b.slack.rel, rel=1e-9)
        assert a.slack.abs == pytest.approx(b.slack.abs, rel=1e-9)
    # every chunk a twin's measure and its replay check would run: 3 a chunk; now 3 a twin
    saved = full.setup_seconds["reference_runs"] - lean.setup_seconds["reference_runs"]
    assert saved >= len(lean.perturbed) * 3 * (blocks - 1)
    for twin in lean.perturbed:
        answer = torch.cat([lean._ref_block(twin.base, b) for b in lean._blocks()])

        def replay(ins, out, answer=answer):
            out.copy_(answer)
        rejected(check(replay, lean, [twin]), "wrong")


def test_the_chunked_reference_is_the_whole_reference():
    whole, chunked = pool_of("layer_norm", None), pool_of("layer_norm", HOST, chunk_rows=5)
    for a, b in zip(whole.cases, chunked.cases):
        assert torch.allclose(a.ref, b.stored, rtol=0, atol=1e-12)
        assert a.slack == b.slack


def test_comparison_in_pieces_matches_the_whole():
    torch.manual_seed(3)
    ref = torch.randn(37, 129).double()
    ref[3, 4] = math.inf
    ref[5, 6] = math.nan
    for trial in range(6):
        out = ref.float().clone()
        out += 1e-3 * torch.randn_like(out) * (trial % 2)
        out.view(-1)[trial * 500] = [0.0, math.nan, 7.0, math.inf, -1.0, 3.0][trial]
        if trial == 4:
            out.view(torch.int32)[10, 10] = V.POISON_BITS
        whole = compare(out, ref, 1e-4, 10.0)
        for limit in (7, 129, 1000):
            assert compare(out, ref, 1e-4, 10.0, limit=limit)[:2] == whole[:2], (trial, limit)


def test_witness_slack_in_pieces_matches_the_whole():
    torch.manual_seed(4)
    ref = torch.randn(64, 100)
    wit = ref + 1e-4 * torch.randn_like(ref)
    acc = SlackSum()
    acc.add(wit, ref, limit=37)
    a, b = witness_slack(wit, ref, 4.0), acc.slack(4.0)
    assert math.isclose(a.rel, b.rel, rel_tol=1e-9) and a.abs == b.abs
    # elements not finite in either are left out, in pieces as whole
    wit[10, 3], ref[40, 50] = math.nan, math.inf
    acc = SlackSum()
    acc.add(wit, ref, limit=37)
    a, b = witness_slack(wit, ref, 4.0), acc.slack(4.0)
    assert math.isfinite(b.rel) and math.isclose(a.rel, b.rel, rel_tol=1e-9) and a.abs == b.abs


class Allclose:
    """What conformance mode passes as `tolerance` (verify.Tolerance on main)."""

    def __init__(self, atol, rtol):
        self.atol, self.rtol = atol, rtol

    def describe(self):
        return f"allclose(atol={self.atol:g}, rtol={self.rtol:g})"


def test_an_allclose_tolerance_adds_up_over_pieces_like_torch_allclose():
    torch.manual_seed(5)
    ref = torch.randn(64, 50).double()
    tol = Allclose(1e-2, 1e-2)
    for scale in (1e-3, 3e-2):
        out = (ref + scale * torch.randn_like(ref)).float()
        want_ok = torch.allclose(out.double(), ref.float().double(), atol=1e-2, rtol=1e-2)
        for limit in (None, 77):
            kind, msg, _ = compare(out, ref, 1e-4, 10.0, tolerance=tol, limit=limit)
            assert (kind is None) == want_ok, (scale, limit, msg)
            if kind:
                assert "elements fail allclose(atol=0.01, rtol=0.01)" in msg


def test_ref_stats_count_only_finite_elements():
    r = torch.tensor([1.0, math.inf, 2.0, math.nan, -2.0])
    s = RefStats.of(r, F32, limit=2)
    assert s.finite == 3 and math.isclose(s.norm, 3.0) and math.isclose(s.mean, 1 / 3)
    c = Comparison(1e-4, 10.0, V.NO_SLACK, s)
    c.add(r.clone(), r)
    assert c.result()[0] is None


# -- separability: found empirically, refused where it does not hold -------------------------------

def _fn(f):
    return lambda ts: f(*ts)


def _prepare(shapes, seed=0):
    def prepare():
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=g) for s in shapes]
    return prepare


def test_elementwise_and_row_ops_are_separable_along_the_batch():
    assert find_split(_fn(lambda x: torch.relu(x) * 2), _prepare([(64, 33)]), ["input"],
                      (64, 33)) == Split(0, (0,))
    ln = _fn(lambda x, w, b: F.layer_norm(x, (33,), w, b))
    assert find_split(ln, _prepare([(64, 33), (33,), (33,)]), ["input", "parameter",
                                                                "parameter"],
                      (64, 33)) == Split(0, (0, None, None))


def test_batch_norm_in_training_mode_is_not_chunked_along_the_batch():
    def bn_train(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True)
    roles = ["input", "parameter", "parameter"]
    shapes = [(64, 8, 20), (8,), (8,)]
    batch = Split(0, (0, None, None))
    assert not is_separable(_fn(bn_train), _prepare(shapes)(), batch, (64, 8, 20))
    split = find_split(_fn(bn_train), _prepare(shapes), roles, (64, 8, 20))
    # per channel it is separable: statistics over (batch, length) of one channel
    assert split is not None and split.out_dim == 1 and split.in_dims == (1, 0, 0)


def test_a_global_normalization_is_not_separable_at_all():
    f = _fn(lambda x: x / x.norm())
    assert find_split(f, _prepare([(64, 32)]), ["input"], (64, 32)) is None


def test_a_softmax_over_the_batch_is_chunked_along_the_other_dimension():
    f = _fn(lambda x: torch.softmax(x, 0))
    assert find_split(f, _prepare([(64, 48)]), ["input"], (64, 48)) == Split(1, (1,))


def test_a_module_that_hard_codes_its_batch_is_not_chunked_along_it():
    f = _fn(lambda x: x.reshape(64, -1).sum(1, keepdim=True) * x)
    assert not is_separable(f, _prepare([(64, 16)])(), Split(0, (0,)), (64, 16))


def test_a_dependence_on_one_far_row_is_found():
    f = _fn(lambda x: x + x[-1:])  # every row reads the last one
    assert not is_separable(f, _prepare([(64, 16)])(), Split(0, (0,)), (64, 16))


def test_a_convolution_splits_by_batch_and_by_output_channel():
    conv = _fn(lambda x, w: F.conv1d(x, w, padding=1))
    shapes = [(16, 8, 40), (8, 8, 3)]  # C_in == C_out: slicing x's channels would be wrong
    roles = ["input", "parameter"]
    assert candidate_splits(shapes, roles, (16, 8, 40))[0] == Split(0, (0, None))
    assert is_separable(conv, _prepare(shapes)(), Split(0, (0, None)), (16, 8, 40))
    assert not is_separable(conv, _prepare(shapes)(), Split(1, (1, 0)), (16, 8, 40))
    assert is_separable(conv, _prepare(shapes)(), Split(1, (None, 0)), (16, 8, 40))


def test_a_transposed_convolution_splits_its_weight_on_the_output_channels_dim():
    """ConvTranspose's weight is (C_in, C_out, k...): its output channels are its dim 1. Also
    where C_in == C_out, where slicing dim 0 runs but computes another function."""
    convt = _fn(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2))
    for c_in in (6, 8):
        shapes = [(4, c_in, 9, 7), (c_in, 8, 3, 3), (8,)]
        roles = ["input", "parameter", "parameter"]
        out = (4, 8, 19, 15)
        assert Split(1, (None, 1, 0)) in candidate_splits(shapes, roles, out)
        assert is_separable(convt, _prepare(shapes)(), Split(1, (None, 1, 0)), out), c_in
    shapes = [(4, 8, 9, 7), (8, 8, 3, 3), (8,)]
    assert not is_separable(convt, _prepare(shapes)(), Split(1, (None, 0, 0)), (4, 8, 19, 15))


def test_a_square_matrix_product_splits_the_left_operand_alone():
    f = _fn(lambda a, b: a @ b)
    shapes = [(48, 48), (48, 48)]
    assert find_split(f, _prepare(shapes), ["input", "input"], (48, 48)) == Split(0, (0, None))
    assert Split(0, (0, 0)) in candidate_splits(shapes, ["input", "input"], (48, 48))


def test_a_reduction_over_the_batch_splits_the_other_dimension():
    f = _fn(lambda x: x.amax(0))
    assert find_split(f, _prepare([(64, 48)]), ["input"], (48,)) == Split(0, (1,))
    assert find_split(_fn(lambda x: x.t() * 2), _prepare([(64, 48)]), ["input"],
                      (48, 64)) == Split(0, (1,))


def test_a_pool_chunked_along_a_split_that_is_wrong_would_be_wrong():
    """Why separability is tested: chunking batch-norm training along the batch gives
    another answer, which would fail a correct kernel."""
    def ref(ts):
        x, = ts
        return F.batch_norm(d(x), None, None, training=True)
    ex = [torch.randn(32, 4, 10)]
    whole = CasePool(ref, ex, (32, 4, 10), F32)
    wrong = CasePool(ref, ex, (32, 4, 10), F32, budget=HOST, split=Split(0, (0,)), chunk_rows=8)
    assert not torch.allclose(whole.cases[0].ref, wrong.cases[0].stored, atol=1e-3)


# -- drawing in chunks -----------------------------------------------------------------------------

def test_draws_in_chunks_are_deterministic_and_keep_the_domain(monkeypatch):
    monkeypatch.setattr(V, "DRAW_CHUNK", 1000)
    ex = [torch.rand(3, 2500) + 0.5, torch.randn(7, 900)]
    a = make_case(ex, 1, 0).tensors
    b = make_case(ex, 1, 0).tensors
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert float(a[0].min()) > 0  # positive example: positive draws, in every chunk
    assert float(a[1].min()) < 0
    bufs = Buffers(torch.empty_like(t) for t in ex)
    V.draw_case_into(bufs, [V.InputMeta.of(t) for t in ex], 1, 0)
    assert all(torch.equal(x, y) for x, y in zip(a, bufs))


@pytest.mark.parametrize("dtype,work", [(torch.float32, torch.float32),
                                        (torch.float16, torch.float32),
                                        (torch.float64, torch.float64)])
def test_a_small_tensor_draws_the_whole_tensor_draw_in_its_own_float_type(dtype, work):
    """One chunk: the same values as a whole-tensor draw of the distribution, computed in
    the input's float type (float32 for narrower ones) and cast (fixed seeds stay
    meaningful)."""
    g = torch.Generator().manual_seed(7)
    x = V.draw_like(torch.randn(40, 50, dtype=dtype), 1, g, signed=True)
    g = torch.Generator().manual_seed(7)
    z = torch.randn((40, 50), generator=g, dtype=work)
    chi = sum(torch.randn((40, 50), generator=g, dtype=work) ** 2 for _ in range(3))
    want = (z / torch.sqrt(chi / 3.0 + 1e-12)).to(dtype)
    assert x.dtype == dtype
    torch.testing.assert_close(x, want, rtol=1e-6 if work == torch.float32 else 1e-12, atol=0)


# -- accumulation: an output that adds up over chunks of the batch ----------------------------------

def _double(f):
    return lambda ts: f(*[t.double() if t.is_floating_point() else t for t in ts])


@pytest.mark.parametrize("f, combine", [
    (lambda p, t: F.mse_loss(p, t), "mean"),
    (lambda x: x.sum(), "sum"),
    (lambda x: x.abs().sum(0), "sum"),  # a reduction over the batch to a vector
    (lambda p, t: F.smooth_l1_loss(p, t, reduction="sum"), "sum"),
    (lambda p, t: F.kl_div(p.log_softmax(1), t.softmax(1), reduction="batchmean"), "mean"),
    (lambda p, t: (1 - F.cosine_similarity(p, t)).mean(), "mean"),
])
def test_losses_and_totals_add_up_over_chunks_of_the_batch(f, combine):
    shapes = [(48, 20), (48, 20)][:f.__code__.co_argcount]
    dims, n = accumulation_dims(shapes, ["input"] * len(shapes))
    assert dims == (0,) * len(shapes) and n == 48
    assert accumulation_of(_double(f), _prepare(shapes)(), dims, 24) == combine


def test_cross_entropy_with_class_indices_adds_up_as_a_mean():
    g = torch.Generator().manual_seed(0)
    ts = [torch.randn(40, 7, generator=g), torch.randint(0, 7, (40,), generator=g)]
    f = _double(lambda x, y: F.cross_entropy(x, y))
    assert accumulation_of(f, ts, (0, 0), 40) == "mean"


@pytest.mark.parametrize("f", [
    lambda x: x.std(),  # of iid rows it is close to the mean of the parts' (not once moved)
    lambda x: x.var(0),
    lambda x: x.amax(),  # a maximum combines, but not as a sum or a mean
    lambda x: x.median(),
    lambda x: x.norm(),
    lambda x: x.sum() / x.numel() ** 0.5,  # scaled by the size it sees
    lambda x: x.reshape(48, -1).sum(),  # hard-codes its batch: the parts raise
    lambda x: x[:10].mean(),  # hard-codes a slice of its batch
])
def test_statistics_that_do_not_add_up_are_not_accumulated(f):
    dims, n = accumulation_dims([(48, 20)], ["input"])
    assert accumulation_of(_double(f), _prepare([(48, 20)])(), dims, 48) is None


def test_accumulation_needs_one_batch_size_and_a_floating_input_to_move():
    assert accumulation_dims([(48, 20), (32, 20)], ["input", "input"]) is None
    assert accumulation_dims([(2, 20)], ["input"]) is None
    assert accumulation_dims([(48, 20), (20,)], ["input", "parameter"]) == ((0, None), 48)
    ints = [torch.randint(0, 5, (48, 3))]
    assert accumulation_of(lambda ts: ts[0].double().sum(), ints, (0,), 48) is None


def test_an_accumulated_reference_is_the_whole_reference():
    g = torch.Generator().manual_seed(3)
    p, t = torch.randn(50, 9, generator=g), torch.randn(50, 9, generator=g)
    whole = F.mse_loss(p.double(), t.double())
    parts = [F.mse_loss(p[a:b].double(), t[a:b].double()) for a, b in ((0, 16), (16, 32),
                                                                          (32, 48), (48, 50))]
    got = combine_parts(parts, [16, 16, 16, 2], "mean")
    torch.testing.assert_close(got, whole, rtol=1e-13, atol=0)


@pytest.mark.parametrize("dim", [0, 1])
def test_rows_outside_are_moved_a_piece_at_a_time(monkeypatch, dim):
    """The separability and accumulation tests move the rows outside the middle of a whole
    input (7/8 of it): all at once, the expression's temporaries came to 1.3x the input and
    took realistic reductions past the memory bound. In pieces, the values are the same."""
    from cuda_agent.verify import separable

    monkeypatch.setattr(separable, "SCRAMBLE_PIECE", 96)
    t = torch.randn(40, 24)
    want = t.clone()
    size, lo, rows = t.shape[dim], 10, 5
    for a, b in ((0, lo), (lo + rows, size)):
        p = want.narrow(dim, a, b - a)
        p.copy_(3.0 * p + p.abs() + 1.0)
    pieces = [p for (p,) in separable._pieces(t.narrow(dim, lo + rows, size - lo - rows))]
    assert len(pieces) > 1 and max(p.numel() for p in pieces) <= 96
    assert separable._scramble_outside(t, dim, lo, rows, None)
    assert torch.equal(t, want)
    inside = [slice(None)] * 2
    inside[dim] = slice(lo, lo + rows)
    assert torch.equal(t[tuple(inside)], want[tuple(inside)])


def test_answers_are_compared_a_piece_at_a_time(monkeypatch):
    """The separability test's comparison, in pieces of 96 elements (non-contiguous views
    included), judges as the whole comparison did: a relative norm over the finite elements,
    and the same non-finite pattern."""
    from cuda_agent.verify import separable

    monkeypatch.setattr(separable, "SCRAMBLE_PIECE", 96)
    a = torch.randn(3, 40, 24)
    b = a + 1e-3 * torch.randn(3, 40, 24)
    rel = float((a.double() - b.double()).norm() / b.double().norm())
    assert separable._close(a, b, rel * 1.01) and not separable._close(a, b, rel * 0.99)
    assert separable._close(a[:, :, 3:17], b[:, :, 3:17], 1e-2)  # views, not contiguous
    a[2, 39, 23] = b[2, 39, 23] = float("inf")  # same pattern, in the last piece: finite rest
    assert separable._close(a, b, rel * 1.01)
    b[2, 39, 23] = 1.0
    assert not separable._close(a, b, 1.0)
    assert separable._close(torch.full((300,), float("nan")), torch.full((300,), float("nan")),
                            0.0)


def test_a_pool_says_what_its_set_up_spent_its_seconds_on():
    """Drawing the cases, the witness and the reference's chunks, timed, and how many chunks
    ran (a large problem's cases took 29-55 s of its set-up on the H100; which step, nothing
    said)."""
    x = torch.randn(64, 32)
    pool = CasePool(lambda ins: torch.softmax(ins[0].double(), -1), [x], (64, 32),
                    torch.float32, witness=lambda ins: torch.softmax(ins[0], -1))
    s = pool.setup_seconds
    assert {"draw", "witness", "reference", "stats", "slack", "trivial", "replay"} <= set(s)
    # a case and its perturbed twin, each measured, the weak check and the replay check:
    # at least two reference runs a case
    assert s["reference_runs"] >= 2 * max(VerifySettings().trials, VerifySettings().pool)


def test_a_check_times_the_reference_apart_from_the_comparison():
    """Where the references are not held, a check recomputes them: those seconds are the
    check's "reference" step, not its comparison's (16 GiB, H100: 3-3.8 s a candidate in one
    step with the comparison, and nothing said which), and the pool's set-up seconds stay as
    they were."""
    import time

    from cuda_agent.verify.cases import _StepClock

    pool = pool_of("softmax", SHARED, chunk_rows=7)
    before = dict(pool.setup_seconds)
    slow, real = [], pool.reference

    def reference(ins):
        time.sleep(0.01)
        slow.append(1)
        return real(ins)

    pool.reference = reference
    res = check(lambda ins, out: out.copy_(torch.softmax(ins[0], -1)), pool, pool.trials_for(0))
    assert res.ok and slow
    assert res.seconds["reference"] >= 0.01 * len(slow)
    assert res.seconds["compare"] < res.seconds["reference"]
    assert pool.setup_seconds == before

    clock = _StepClock(torch.device("cpu"))  # nested steps: each counts its own seconds
    clock("outer", lambda: (time.sleep(0.02), clock("inner", time.sleep, 0.05)))
    assert 0.05 <= clock.seconds["inner"] and 0.02 <= clock.seconds["outer"] < 0.05


def test_a_comparison_reads_its_sums_back_once_however_many_pieces(monkeypatch):
    """On a GPU each value read back is a synchronisation: the comparison, the reference's
    stats and the witness's slack sum their pieces where they are and read the sums once (two
    to seven reads a piece of about 5 M elements before); non-finite values still counted."""
    from cuda_agent.verify.cases import Comparison, RefStats

    reads = []
    for name in ("tolist", "item", "__float__", "__int__", "__bool__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, _name=name, **k):
            reads.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    torch.manual_seed(5)
    ref = torch.randn(64, 100).double()
    out = ref.float() + 1e-6 * torch.randn(64, 100)
    stats = RefStats()
    stats.add(ref.float(), limit=100)
    assert len(reads) == 2  # the first element, then the sums of 64 pieces
    reads.clear()
    slack = SlackSum()
    slack.add(out, ref.float(), limit=100)
    comparison = Comparison(1e-4, 10.0, slack.slack(4.0), stats, limit=100)
    comparison.add(out, ref)
    assert len(reads) == 2 and comparison.result()[0] is None
    out[7, 7] = math.nan  # one piece with a NaN: its counts read back on their own
    reads.clear()
    again = Comparison(1e-4, 10.0, slack.slack(4.0), stats, limit=100)
    again.add(out, ref)
    assert again.result()[0] == "nan" and len(reads) < 10
