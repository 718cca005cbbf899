"""The evaluator must not be hackable: adversarial stand-in kernels against `verify.cases`.

A "kernel" here is a torch function `run(inputs, out)` that writes into the poisoned `out`, as the
GPU worker's launcher does. Each cheat or bug must be rejected with the right error kind; exact
fp32 implementations must be accepted.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cuda_agent.runner.records import ERROR_KINDS
from cuda_agent.verify.cases import (DISTRIBUTIONS, POISON_BITS, CandidateError, Case, CasePool,
                                     Trial, ValueRange, check, compare, draw_like, make_case,
                                     perturbed, poisoned_output, verify)
from cuda_agent.verify.settings import VerifySettings

F32, I64 = torch.float32, torch.int64


# -- problems: reference (float64), examples, output shape and dtype -------------------------------

class Prob:
    def __init__(self, ref, examples, out_dtype=F32):
        self.ref = ref
        self.examples = examples
        self.out_dtype = out_dtype
        with torch.no_grad():
            self.out_shape = tuple(ref([e.clone() for e in examples]).shape)

    def verify(self, run, settings=None):
        return verify(run, self.ref, self.examples, self.out_shape, self.out_dtype, settings)

    def pool(self, settings=None):
        return CasePool(self.ref, self.examples, self.out_shape, self.out_dtype, settings)


def d(t):
    return t.double()


def layer_norm_ref(ts):
    x, w, b = ts
    return F.layer_norm(d(x), (x.shape[-1],), d(w), d(b), 1e-5)


def relu_chain_ref(ts):
    x, b = ts
    return torch.relu(d(x) + d(b)) * 2.0 - 0.5


PROBS = {
    "softmax": lambda: Prob(lambda ts: torch.softmax(d(ts[0]), -1), [torch.randn(33, 257)]),
    "log_softmax": lambda: Prob(lambda ts: F.log_softmax(d(ts[0]), -1), [torch.randn(17, 130)]),
    "layer_norm": lambda: Prob(layer_norm_ref,
                               [torch.randn(16, 204), torch.ones(204), torch.zeros(204)]),
    "sum": lambda: Prob(lambda ts: d(ts[0]).sum(1), [torch.randn(16, 300)]),
    "argmax": lambda: Prob(lambda ts: d(ts[0]).argmax(-1), [torch.randn(8, 77)], I64),
    "relu_chain": lambda: Prob(relu_chain_ref, [torch.randn(37, 103), torch.randn(103)]),
}

EXACT = {  # exact fp32 torch implementations: what a correct kernel computes
    "softmax": lambda ins, out: out.copy_(torch.softmax(ins[0], -1)),
    "log_softmax": lambda ins, out: out.copy_(F.log_softmax(ins[0], -1)),
    "layer_norm": lambda ins, out: out.copy_(
        F.layer_norm(ins[0], (ins[0].shape[-1],), ins[1], ins[2], 1e-5)),
    "sum": lambda ins, out: out.copy_(ins[0].sum(1)),
    "argmax": lambda ins, out: out.copy_(ins[0].argmax(-1)),
    "relu_chain": lambda ins, out: out.copy_(torch.relu(ins[0] + ins[1]) * 2.0 - 0.5),
}


def prob(name: str) -> Prob:
    return PROBS[name]()


def rejected(res, kind: str) -> None:
    assert not res.ok, "a bad kernel was accepted"
    assert res.kind == kind, (res.kind, res.msg)
    assert kind in ERROR_KINDS


# -- accepted ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_fp32_implementation_accepted(name):
    res = prob(name).verify(EXACT[name])
    assert res.ok, (res.kind, res.msg)
    assert res.kind is None and res.max_rel_err < 1e-5


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_implementation_accepted_for_every_candidate_index(name):
    p = prob(name)
    pool = p.pool()
    for i in range(7):
        res = check(EXACT[name], pool, pool.trials_for(i))
        assert res.ok, (i, res.kind, res.msg)


# -- rejected: output not (fully) written -----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EXACT))
def test_writes_nothing_is_unwritten(name):
    rejected(prob(name).verify(lambda ins, out: None), "unwritten")


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "sum", "relu_chain"])
def test_writes_zeros_is_wrong(name):
    rejected(prob(name).verify(lambda ins, out: out.zero_()), "wrong")


def test_argmax_writes_zeros_is_wrong():
    rejected(prob("argmax").verify(lambda ins, out: out.zero_()), "wrong")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "relu_chain"])
def test_returns_the_input_is_wrong(name):
    rejected(prob(name).verify(lambda ins, out: out.copy_(ins[0])), "wrong")


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "relu_chain"])
def test_first_half_of_rows_then_zeros_is_wrong(name):
    def half(ins, out):
        EXACT[name](ins, out)
        out[out.shape[0] // 2:] = 0.0
    rejected(prob(name).verify(half), "wrong")


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "sum", "argmax", "relu_chain"])
def test_first_half_of_rows_only_is_unwritten(name):
    def half(ins, out):
        full = torch.empty_like(out)
        EXACT[name](ins, full)
        n = out.shape[0] // 2
        out[:n] = full[:n]
    rejected(prob(name).verify(half), "unwritten")


@pytest.mark.parametrize("name", ["softmax", "sum", "argmax"])
def test_one_row_left_unwritten_is_unwritten(name):
    def skip_last_row(ins, out):
        full = torch.empty_like(out)
        EXACT[name](ins, full)
        out[:-1] = full[:-1]
    res = prob(name).verify(skip_last_row)
    rejected(res, "unwritten")
    per_row = math.prod(prob(name).out_shape[1:])
    assert f"{per_row} of" in res.msg


def test_single_element_unwritten():
    def skip_one(ins, out):
        full = torch.softmax(ins[0], -1)
        keep = out[5, 7].clone()
        out.copy_(full)
        out[5, 7] = keep
    rejected(prob("softmax").verify(skip_one), "unwritten")


def test_poison_is_a_distinctive_nan():
    out = poisoned_output((3, 4), F32, torch.device("cpu"))
    assert torch.isnan(out).all()
    assert bool((out.view(torch.int32) == POISON_BITS).all())
    computed_nan = torch.tensor([0.0]) / 0.0
    assert int(computed_nan.view(torch.int32)) != POISON_BITS


# -- rejected: numerics -----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_where_reference_is_finite_is_nan(value):
    def one_bad(ins, out):
        EXACT["softmax"](ins, out)
        out[3, 11] = value
    res = prob("softmax").verify(one_bad)
    rejected(res, "nan")
    assert "1 non-finite" in res.msg


def test_nan_everywhere_is_nan_not_unwritten():
    rejected(prob("sum").verify(lambda ins, out: out.fill_(float("nan"))), "nan")


@pytest.mark.parametrize("name,low", [
    ("softmax", lambda ins, out: out.copy_(torch.softmax(ins[0].half(), -1).float())),
    ("softmax", lambda ins, out: out.copy_(torch.softmax(ins[0].bfloat16(), -1).float())),
    ("layer_norm", lambda ins, out: out.copy_(F.layer_norm(
        ins[0].half(), (ins[0].shape[-1],), ins[1].half(), ins[2].half(), 1e-5).float())),
    ("relu_chain", lambda ins, out: out.copy_(
        (torch.relu(ins[0].half() + ins[1].half()) * 2.0 - 0.5).float())),
    ("log_softmax", lambda ins, out: out.copy_(F.log_softmax(ins[0].half(), -1).float())),
])
def test_reduced_precision_is_wrong(name, low):
    rejected(prob(name).verify(low), "wrong")


def test_small_relative_error_in_few_elements_is_wrong():
    """The elementwise bound catches an error the relative norm alone would hide."""
    def nudge(ins, out):
        EXACT["relu_chain"](ins, out)
        out[0, 0] = out[0, 0] + 0.05 * (out.abs().mean() + 1)
    rejected(prob("relu_chain").verify(nudge), "wrong")


def test_clamping_inputs_fails_on_heavy_tails():
    """Correct on moderate inputs, wrong on the heavy-tailed draw."""
    def clamped(ins, out):
        out.copy_(torch.softmax(ins[0].clamp(-3, 3), -1))
    res = prob("softmax").verify(clamped)
    rejected(res, "wrong")


def test_transposed_rows_are_wrong():
    def flipped(ins, out):
        out.copy_(torch.softmax(ins[0], -1).flip(0))
    rejected(prob("softmax").verify(flipped), "wrong")


def test_layer_norm_ignoring_weight_is_wrong():
    def no_weight(ins, out):
        x, w, b = ins
        out.copy_(F.layer_norm(x, (x.shape[-1],), None, b, 1e-5))
    rejected(prob("layer_norm").verify(no_weight), "wrong")


def test_layer_norm_plain_normalization_is_wrong():
    def plain(ins, out):
        out.copy_(F.layer_norm(ins[0], (ins[0].shape[-1],), eps=1e-5))
    rejected(prob("layer_norm").verify(plain), "wrong")


def test_layer_norm_ignoring_bias_is_wrong():
    def no_bias(ins, out):
        x, w, b = ins
        out.copy_(F.layer_norm(x, (x.shape[-1],), w, None, 1e-5))
    rejected(prob("layer_norm").verify(no_bias), "wrong")


def test_parameters_are_randomized():
    p = prob("layer_norm")
    pool = p.pool()
    for trial in pool.cases:
        x, w, b = trial.inputs
        assert not torch.equal(w, torch.ones_like(w)) and w.std() > 0.01
        assert not torch.equal(b, torch.zeros_like(b)) and b.std() > 0.01


# -- rejected: cheats -------------------------------------------------------------------------------

def test_mutating_an_input_is_caught_and_the_pool_restored():
    p = prob("softmax")
    pool = p.pool()
    trials = pool.trials_for(0)
    before = [t.inputs[0].clone() for t in trials]

    def mutate(ins, out):
        out.copy_(torch.softmax(ins[0], -1))
        ins[0].mul_(0.5)

    res = check(mutate, pool, trials)
    rejected(res, "mutated_input")
    assert "input 0" in res.msg
    for t, b in zip(trials, before):
        assert torch.equal(t.inputs[0], b)
    assert check(EXACT["softmax"], pool, trials).ok


def test_mutating_a_parameter_is_caught():
    def mutate_bias(ins, out):
        EXACT["layer_norm"](ins, out)
        ins[2][0] += 1.0
    res = prob("layer_norm").verify(mutate_bias)
    rejected(res, "mutated_input")
    assert "input 2" in res.msg


def test_in_place_on_input_scratch_is_caught():
    """Using an input as scratch space and restoring all but the sign bit of a zero is a
    mutation: the comparison is bit for bit."""
    def scratch(ins, out):
        x = ins[0]
        out.copy_(torch.softmax(x, -1))
        x[0, 0] = -x[0, 0] if x[0, 0] == 0 else x[0, 0] * (1 + 2 ** -20)
    rejected(prob("softmax").verify(scratch), "mutated_input")


def test_pool_restored_after_candidate_error_that_mutated():
    """A candidate that writes into an input and then fails must not poison the pool."""
    p = prob("softmax")
    pool = p.pool()
    trials = pool.trials_for(0)

    def mutate_then_fail(ins, out):
        ins[0].fill_(0.0)
        raise CandidateError("launch", "second launch refused")

    assert check(mutate_then_fail, pool, trials).kind == "launch"
    res = check(EXACT["softmax"], pool, trials)
    assert res.ok, (res.kind, res.msg)


class FirstCallCache:
    """Computes once, then returns the first result forever."""

    def __init__(self, exact):
        self.exact, self.saved = exact, None

    def __call__(self, ins, out):
        if self.saved is None:
            self.exact(ins, out)
            self.saved = out.clone()
        else:
            out.copy_(self.saved)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_cached_first_result_is_wrong_on_a_later_trial(name):
    res = prob(name).verify(FirstCallCache(EXACT[name]))
    rejected(res, "wrong")
    # the first trial run was computed honestly (index outputs start with the tie case)
    first = prob(name).pool().trials_for(0)[0].label
    assert not res.msg.startswith(first)


PERTURB_BUG = (
    "BUG: cuda_agent/verify/cases.py:232-236 (perturbed(), verify.py:123-125) the perturbed twin "
    "moves one element to +-(4|x| + 3) and is kept once its reference differs *bitwise* from "
    "the base's; for amin/argmin/argmax on heavy-tailed rows the move stays inside the row's "
    "range after all 6 attempts, and for softmax on lognormal rows it changes the output by "
    "less than the tolerance, so a kernel replaying the base case's answer passes the "
    "perturbed trial. Fix: move the element beyond the tensor's extremes (e.g. "
    "+-(4 max|x| + 3)) and keep a twin only when compare(twin.ref, base.ref) reports a failure")
@pytest.mark.parametrize("name", ["softmax", "sum", "layer_norm", "relu_chain"])
def test_cached_first_result_caught_by_the_perturbed_trial(name):
    """With a single random case, only the perturbed copy of it can catch the replay."""
    res = prob(name).verify(FirstCallCache(EXACT[name]), VerifySettings(trials=1))
    rejected(res, "wrong")
    assert "perturbed" in res.msg


class NearReplay:
    """Replays the stored output of any earlier input that differs in at most one element:
    what a kernel caching on a cheap input fingerprint does."""

    def __init__(self, exact):
        self.exact, self.seen = exact, []

    def __call__(self, ins, out):
        for old_ins, old_out in self.seen:
            if all(a.shape == b.shape for a, b in zip(old_ins, ins)) and \
                    sum(int((a != b).sum()) for a, b in zip(old_ins, ins)) <= 1:
                out.copy_(old_out)
                return
        self.exact(ins, out)
        self.seen.append(([t.clone() for t in ins], out.clone()))


@pytest.mark.parametrize("name", ["softmax", "sum", "log_softmax"])
def test_near_replay_caught_by_perturbed_trial(name):
    p = prob(name)
    pool = p.pool()
    for i in (0, 1):
        res = check(NearReplay(EXACT[name]), pool, pool.trials_for(i))
        rejected(res, "wrong")
        assert "perturbed" in res.msg


def _xf(*args):
    """Formerly xfail (PERTURB_BUG, fixed): kept as plain parameters, as regression tests."""
    return pytest.param(*args)


@pytest.mark.parametrize("name,ref,shape,dtype", [
    ("relu", lambda ts: torch.relu(d(ts[0])), (37, 129), F32),
    ("sum", lambda ts: d(ts[0]).sum(1), (16, 300), F32),
    ("layer_norm", layer_norm_ref, None, F32),
    _xf("softmax", lambda ts: torch.softmax(d(ts[0]), -1), (33, 257), F32),
    _xf("amin", lambda ts: d(ts[0]).amin(1), (16, 300), F32),
    _xf("argmin", lambda ts: d(ts[0]).argmin(1), (16, 300), I64),
    _xf("argmax", lambda ts: d(ts[0]).argmax(1), (16, 300), I64),
])
def test_perturbed_trial_changes_the_reference_beyond_tolerance(name, ref, shape, dtype):
    """Each perturbed twin's answer differs from its base's by more than the verifier
    tolerates, so replaying the base's answer fails the perturbed trial."""
    p = prob("layer_norm") if shape is None else Prob(ref, [torch.randn(*shape)], dtype)
    pool = p.pool()
    assert len(pool.perturbed) >= 1
    for pert in pool.perturbed:
        bases = [c for c in pool.cases
                 if sum(int((a != b).sum()) for a, b in zip(c.inputs, pert.inputs)) == 1]
        assert len(bases) == 1, "a perturbed twin is one element away from exactly one case"
        kind, _, _ = compare(bases[0].ref, pert.ref, pool.rtol, pool.settings.elem_factor)
        assert kind is not None, f"{pert.label}: replaying the base's answer passes"


def test_perturbed_base_is_among_the_candidates_trials():
    """Regression: the perturbed twin is of a case the same candidate runs first."""
    pool = prob("softmax").pool()
    for i in range(10):
        trials = pool.trials_for(i)
        last = trials[-1]
        bases = [t for t in trials[:-1] if int((t.inputs[0] != last.inputs[0]).sum()) == 1]
        assert bases, f"candidate {i}: the perturbed case's base is not one of its trials"


@pytest.mark.parametrize("name", ["sum", "relu_chain", "layer_norm", "softmax"])
def test_near_replay_rejected_for_every_candidate_index(name):
    pool = prob(name).pool()
    for i in range(len(pool.cases)):
        res = check(NearReplay(EXACT[name]), pool, pool.trials_for(i))
        assert not res.ok, f"candidate {i}: near-replay accepted"
        assert res.kind == "wrong" and "perturbed" in res.msg


def test_candidate_error_kind_is_reported():
    def crash(ins, out):
        raise CandidateError("illegal_address", "an illegal memory access was encountered",
                             sticky=True)
    res = prob("softmax").verify(crash)
    rejected(res, "illegal_address")
    assert "illegal memory access" in res.msg


def test_candidate_error_after_a_good_trial():
    calls = []

    def late_crash(ins, out):
        calls.append(1)
        if len(calls) == 2:
            raise CandidateError("misaligned", "misaligned address")
        EXACT["sum"](ins, out)
    rejected(prob("sum").verify(late_crash), "misaligned")


def test_wrong_output_shape_is_wrong():
    kind, msg, _ = compare(torch.zeros(3, 4), torch.zeros(4, 3), 1e-4, 10.0)
    assert kind == "wrong" and "shape" in msg


# -- index outputs: argmax ------------------------------------------------------------------------

def test_argmax_off_by_one_is_wrong():
    def off(ins, out):
        out.copy_((ins[0].argmax(-1) + 1) % ins[0].shape[-1])
    rejected(prob("argmax").verify(off), "wrong")


def test_argmax_one_row_off_is_wrong():
    def one_off(ins, out):
        out.copy_(ins[0].argmax(-1))
        out[3] = out[3] - 1 if out[3] > 0 else 1
    res = prob("argmax").verify(one_off)
    rejected(res, "wrong")
    assert "1 of 8 indices" in res.msg


def test_argmin_instead_of_argmax_is_wrong():
    rejected(prob("argmax").verify(lambda ins, out: out.copy_(ins[0].argmin(-1))), "wrong")


def _tie_trial(first: bool) -> tuple[CasePool, Trial]:
    """A pool for argmax over rows, and a hand-made trial whose rows hold exact ties."""
    p = prob("argmax")
    pool = p.pool()
    x = torch.randn(8, 77)
    x[:, 10] = 50.0
    x[:, 60] = 50.0  # two exact maxima per row: torch takes the first (10)
    x[0, 30] = 50.0  # three in row 0
    ref = d(x).argmax(-1)
    assert bool((ref == 10).all())
    return pool, Trial([x], ref, "tie trial")


def _last_tie_argmax(ins, out):
    x = ins[0]
    n = x.shape[-1]
    out.copy_(n - 1 - x.flip(-1).argmax(-1))


def test_argmax_tie_first_index_accepted():
    pool, trial = _tie_trial(True)
    res = check(EXACT["argmax"], pool, [trial])
    assert res.ok, res.msg


def test_argmax_tie_last_index_rejected():
    pool, trial = _tie_trial(True)
    probe = torch.empty(8, dtype=I64)
    _last_tie_argmax([trial.inputs[0]], probe)
    assert int(probe[0]) == 60 and int(probe[1]) == 60
    res = check(_last_tie_argmax, pool, [trial])
    rejected(res, "wrong")
    assert "8 of 8 indices" in res.msg


def test_last_tie_argmax_agrees_without_ties():
    """The tie-breaking cheat is otherwise correct (so the tie test above tests ties)."""
    x = torch.randn(8, 77)
    out = torch.empty(8, dtype=I64)
    _last_tie_argmax([x], out)
    assert torch.equal(out, x.argmax(-1))


def test_verify_rejects_last_tie_argmax():
    """The pool holds a quantized case (exact ties): some candidates are checked on it."""
    pool = prob("argmax").pool()
    assert any(bool((c.inputs[0].unsqueeze(-1) == c.inputs[0].unsqueeze(-2)).sum(-1).gt(1).any())
               for c in pool.cases), "no case with exact ties"
    assert any(not check(_last_tie_argmax, pool, pool.trials_for(i)).ok
               for i in range(len(pool.cases)))


def test_every_candidate_is_checked_on_ties():
    pool = prob("argmax").pool()
    for i in range(len(pool.cases)):
        res = check(_last_tie_argmax, pool, pool.trials_for(i))
        assert not res.ok, f"candidate {i}: last-index tie breaking accepted"
    rejected(prob("argmax").verify(_last_tie_argmax), "wrong")


# -- degenerate checks ------------------------------------------------------------------------------

def test_always_zero_reference_is_degenerate():
    p = Prob(lambda ts: torch.relu(-d(ts[0]).abs()), [torch.randn(16, 64)])
    pool = p.pool()
    assert "zeros" in pool.weak
    res = p.verify(lambda ins, out: out.copy_(torch.relu(-ins[0].abs())))
    rejected(res, "degenerate")


def test_constant_reference_is_degenerate():
    p = Prob(lambda ts: torch.softmax(d(ts[0]), -1), [torch.randn(16, 1)])
    res = p.verify(lambda ins, out: out.copy_(torch.softmax(ins[0], -1)))
    rejected(res, "degenerate")
    assert "constant" in res.msg


def test_identity_reference_is_degenerate():
    """relu of an all-positive input is the input: returning it proves nothing."""
    p = Prob(lambda ts: torch.relu(d(ts[0])), [torch.rand(16, 64) + 0.5])
    rejected(p.verify(lambda ins, out: out.copy_(torch.relu(ins[0]))), "degenerate")
    assert "identity" in p.pool().weak


def test_index_reference_always_zero_is_degenerate():
    p = Prob(lambda ts: torch.zeros(ts[0].shape[0], dtype=I64), [torch.randn(8, 5)], I64)
    rejected(p.verify(lambda ins, out: out.zero_()), "degenerate")


@pytest.mark.parametrize("ref,run,shape,dtype", [
    (lambda ts: d(ts[0]).sum(), lambda ins, out: out.copy_(ins[0].sum()), (100, 37), F32),
    (lambda ts: d(ts[0]).sum(1), lambda ins, out: out.copy_(ins[0].sum(1)), (1, 37), F32),
    (lambda ts: torch.norm(d(ts[0])), lambda ins, out: out.copy_(torch.norm(ins[0])),
     (64, 9), F32),
    (lambda ts: d(ts[0]).argmax(), lambda ins, out: out.copy_(ins[0].argmax()), (64, 9), I64),
], ids=["sum_all", "one_row", "norm_all", "argmax_all"])
def test_single_element_output_can_be_verified(ref, run, shape, dtype):
    """Regression: a one-element output must not count as a trivially passing constant."""
    p = Prob(ref, [torch.randn(*shape)], dtype)
    res = p.verify(run)
    assert res.ok, (res.kind, res.msg)


def test_constant_cheat_on_a_scalar_problem_is_never_accepted():
    p = Prob(lambda ts: d(ts[0]).sum(), [torch.randn(100, 37)])
    res = p.verify(lambda ins, out: out.fill_(3.0))
    assert not res.ok and res.kind in ("wrong", "degenerate")


def test_naive_sequential_fp32_sum_of_long_rows_is_accepted():
    """A correct kernel accumulating 16384 floats one by one in fp32 is within tolerance."""
    def sequential(ins, out):
        x = ins[0]
        acc = torch.zeros(x.shape[0])
        for j in range(x.shape[1]):
            acc += x[:, j]
        out.copy_(acc)
    p = Prob(lambda ts: d(ts[0]).sum(1), [torch.randn(4, 16384)])
    res = p.verify(sequential)
    assert res.ok, (res.kind, res.msg)


def test_useful_problems_are_not_degenerate():
    for name in EXACT:
        assert prob(name).pool().weak == [], name


# -- inputs: sign domain, distributions, rotation --------------------------------------------------

@pytest.mark.parametrize("trial", range(len(DISTRIBUTIONS)))
def test_draw_like_respects_positive_domain(trial):
    gen = torch.Generator().manual_seed(trial)
    x = draw_like(torch.rand(64, 64) + 0.1, trial, gen)
    assert x.shape == (64, 64) and x.dtype == F32
    assert bool((x > 0).all())


@pytest.mark.parametrize("trial", range(len(DISTRIBUTIONS)))
def test_draw_like_respects_nonnegative_domain(trial):
    gen = torch.Generator().manual_seed(trial)
    ex = torch.rand(64, 64)
    ex[0, 0] = 0.0
    x = draw_like(ex, trial, gen)
    assert bool((x >= 0).all()) and bool((x > 0).any())


@pytest.mark.parametrize("trial", range(len(DISTRIBUTIONS)))
def test_draw_like_signed_example_gives_both_signs(trial):
    gen = torch.Generator().manual_seed(trial)
    x = draw_like(torch.randn(64, 64), trial, gen)
    assert bool((x < 0).any()) and bool((x > 0).any())
    assert bool(torch.isfinite(x).all())


def test_draws_differ_by_distribution_and_ignore_example_values():
    ex = torch.randn(32, 32)
    gen = torch.Generator().manual_seed(0)
    a = draw_like(ex, 0, gen)
    b = draw_like(ex, 1, gen)
    assert not torch.equal(a, b) and not torch.equal(a, ex)
    heavy = draw_like(torch.randn(4096), 1, torch.Generator().manual_seed(1))
    normal = draw_like(torch.randn(4096), 0, torch.Generator().manual_seed(1))
    assert heavy.abs().max() > normal.abs().max()  # Student-t(3) has far tails


def test_make_case_is_deterministic_per_seed():
    ex = [torch.randn(8, 9), torch.rand(9) + 1]
    a, b = make_case(ex, 2, 0), make_case(ex, 2, 0)
    assert all(torch.equal(x, y) for x, y in zip(a.tensors, b.tensors))
    c = make_case(ex, 2, 1)
    assert not torch.equal(a.tensors[0], c.tensors[0])
    assert bool((a.tensors[1] > 0).all())


def test_perturbed_differs_in_exactly_one_element_of_the_largest_input():
    case = make_case([torch.randn(4), torch.randn(16, 16)], 0, 0)
    p = perturbed(case, 3)
    assert torch.equal(p.tensors[0], case.tensors[0])
    assert int((p.tensors[1] != case.tensors[1]).sum()) == 1
    assert int((case.tensors[1] != make_case([torch.randn(4), torch.randn(16, 16)], 0,
                                             0).tensors[1]).sum()) == 0  # base untouched


@pytest.mark.parametrize("i", range(6))
def test_trials_rotate_and_end_with_a_perturbed_case(i):
    s = VerifySettings()
    pool = prob("softmax").pool(s)
    trials = pool.trials_for(i)
    assert len(trials) == s.trials + 1
    rand, last = trials[:-1], trials[-1]
    for a in range(len(rand)):  # distinct random cases
        for b in range(a + 1, len(rand)):
            assert not torch.equal(rand[a].inputs[0], rand[b].inputs[0])
    assert "perturbed" in last.label
    diffs = [int((c.inputs[0] != last.inputs[0]).sum()) for c in pool.cases]
    assert 1 in diffs, "the perturbed case is not one element away from a pool case"
    # rotation: the next candidate starts from a different case
    nxt = pool.trials_for(i + 1)
    assert not torch.equal(nxt[0].inputs[0], rand[0].inputs[0])


def test_pool_draws_are_reused_not_redrawn():
    """The float64 reference runs when the pool is drawn, never again per candidate."""
    calls = []

    def ref(ts):
        calls.append(1)
        return torch.softmax(d(ts[0]), -1)

    p = Prob(ref, [torch.randn(4, 8)])
    calls.clear()
    pool = p.pool(VerifySettings(trials=3, pool=5))
    n = len(calls)
    assert n >= 5 + 1  # every case and at least one perturbed copy
    for i in range(6):
        assert check(EXACT["softmax"], pool, pool.trials_for(i)).ok
    assert len(calls) == n


def test_rtol_setting_is_respected():
    p = prob("softmax")
    half = lambda ins, out: out.copy_(torch.softmax(ins[0].half(), -1).float())  # noqa: E731
    assert not p.verify(half).ok
    assert p.verify(half, VerifySettings(rtol=1e-2)).ok


# -- non-finite references -----------------------------------------------------------------------

def _inf_ref(ts):
    x = d(ts[0])
    return torch.where(x > 1.0, torch.full_like(x, math.inf), x)


def test_matching_infinities_accepted():
    p = Prob(_inf_ref, [torch.randn(16, 32)])
    res = p.verify(lambda ins, out: out.copy_(
        torch.where(ins[0] > 1.0, torch.full_like(ins[0], math.inf), ins[0])))
    assert res.ok, res.msg


def test_finite_where_reference_is_infinite_is_wrong():
    p = Prob(_inf_ref, [torch.randn(16, 32)])
    res = p.verify(lambda ins, out: out.copy_(ins[0].clamp(max=1e30)))
    rejected(res, "wrong")
    assert "infinities" in res.msg


# -- the fp32 witness: ill-conditioned problems ----------------------------------------------------

def _clamped_matmul_ref(ts):
    x, w = ts
    return torch.clamp(d(x) @ d(w), -0.05, 0.05)


def _sequential_fp32(x, w, reverse=False):
    """x @ w accumulated one k at a time in fp32, as a SIMT GEMM thread does (BLAS on the CPU
    sums in blocks and is far more accurate than a GPU kernel's long running sum)."""
    ks = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
    acc = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float32)
    for k in ks:
        acc += x[:, k:k + 1] * w[k]
    return acc


def _clamped_matmul_fp32(ts):
    """The witness: an fp32 answer, summed in one order."""
    return torch.clamp(_sequential_fp32(*ts), -0.05, 0.05)


def _chunked_fp32(ins, out):
    """A correct fp32 kernel with another summation order."""
    out.copy_(torch.clamp(_sequential_fp32(*ins, reverse=True), -0.05, 0.05))


CLAMPED = dict(ref=_clamped_matmul_ref, examples=[torch.randn(64, 4096), torch.randn(4096, 128)])


def test_ill_conditioned_problem_needs_the_witness():
    """A long fp32 sum under a tight clamp: the fixed elementwise bound fails even an fp32 answer
    (the clamp shrinks rms(ref), not the sum's rounding error); the witness's slack accepts a
    kernel as accurate as the witness."""
    p = Prob(CLAMPED["ref"], CLAMPED["examples"])
    assert not p.verify(lambda ins, out: out.copy_(_clamped_matmul_fp32(ins))).ok
    res = verify(_chunked_fp32, p.ref, p.examples, p.out_shape, F32,
                 witness=_clamped_matmul_fp32)
    assert res.ok, res.msg


def test_witness_slack_does_not_admit_real_errors():
    """Errors well beyond the witness's own still fail: one element off by 50 times the
    witness's largest error, a half-precision product, and the weak outputs."""
    p = Prob(CLAMPED["ref"], CLAMPED["examples"])

    def run(fn):
        return verify(fn, p.ref, p.examples, p.out_shape, F32, witness=_clamped_matmul_fp32)

    def one_off(ins, out):
        _chunked_fp32(ins, out)
        ref = p.ref(ins).float()
        err = float((_clamped_matmul_fp32(ins) - ref).abs().max())
        i = int((ref.abs() < 0.04).nonzero()[0, 0])  # an unsaturated element
        out[i, 0] += 50 * max(err, 1e-6)

    rejected(run(one_off), "wrong")
    rejected(run(lambda ins, out: out.copy_(
        torch.clamp((ins[0].half() @ ins[1].half()).float(), -0.05, 0.05))), "wrong")
    rejected(run(lambda ins, out: out.zero_()), "wrong")


def test_witness_keeps_well_conditioned_bounds_tight():
    """On softmax the witness's error is tiny, so the usual bound stands: the nudge that the
    fixed bound rejects is rejected with a witness too."""
    p = prob("softmax")

    def nudge(ins, out):
        out.copy_(torch.softmax(ins[0], -1))
        out[0, 0] += 0.002 * float(out.abs().mean())

    res = verify(nudge, p.ref, p.examples, p.out_shape, F32,
                 witness=lambda ts: torch.softmax(ts[0], -1))
    rejected(res, "wrong")


# -- value ranges: an op that only accepts [lo, hi] (binary cross-entropy's probabilities) ----------

def bce_ref(ts):
    return F.binary_cross_entropy(d(ts[0]), d(ts[1]), reduction="none")


def test_value_range_draws_stay_inside_for_every_distribution():
    rng = ValueRange(0.0, 1.0)
    ex = torch.rand(64, 257)
    for trial in range(len(DISTRIBUTIONS)):
        x = draw_like(ex, trial, torch.Generator().manual_seed(trial), value_range=rng)
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
        assert float(x.std()) > 0.05  # not collapsed to a constant


def test_perturbation_keeps_a_ranged_input_inside_and_prefers_a_free_one():
    rng = ValueRange(0.0, 1.0)
    base = make_case([torch.rand(8, 64), torch.rand(8, 64)], 0, 0, domains=[rng, None])
    for attempt in range(4):
        twin = perturbed(base, 3, attempt, [rng, None])
        assert torch.equal(twin.tensors[0], base.tensors[0])  # the free input moved instead
        assert not torch.equal(twin.tensors[1], base.tensors[1])
        only = perturbed(Case([base.tensors[0]]), 3, attempt, [rng])
        assert float(only.tensors[0].min()) >= 0.0 and float(only.tensors[0].max()) <= 1.0
        assert not torch.equal(only.tensors[0], base.tensors[0])


def test_bce_is_verified_inside_its_domain_and_still_rejects_a_missing_clamp():
    examples = [torch.rand(32, 4096) * 0.98 + 0.01, torch.rand(32, 4096)]
    out_shape = (32, 4096)
    domains = [ValueRange(0.0, 1.0), ValueRange(0.0, 1.0)]

    def exact(ins, out):  # torch clamps each log at -100
        out.copy_(F.binary_cross_entropy(ins[0], ins[1], reduction="none"))

    def unclamped(ins, out):  # log(0) where a draw rounds to exactly 0 or 1: inf, not 100
        x, t = ins
        out.copy_(-(t * torch.log(x) + (1 - t) * torch.log1p(-x)))

    ok = verify(exact, bce_ref, examples, out_shape, F32, domains=domains)
    assert ok.ok, ok.msg
    bad = verify(unclamped, bce_ref, examples, out_shape, F32, domains=domains)
    assert not bad.ok


def test_bce_capture_marks_the_probabilities_input():
    from cuda_agent.problem import load_problem
    from pathlib import Path
    g = load_problem(Path(__file__).parents[1] / "benchmarks/problems/loss_bce.py").graph()
    assert [gin.value_range for gin in g.inputs] == [(0.0, 1.0), (0.0, 1.0)]


def test_a_check_says_where_its_seconds_went():
    """Each step of the checks is timed, summed over the trials (the report's per-candidate
    seconds show which step a large problem's checks spend their time in)."""
    import time

    def slow_run(ins, out):
        time.sleep(0.05)
        out.copy_(torch.relu(ins[0]))

    x = torch.randn(64, 64)
    res = verify(slow_run, lambda ins: torch.relu(ins[0].double()), [x], (64, 64),
                 torch.float32)
    assert res.ok
    assert set(res.seconds) <= {"draw", "hash", "run", "reference", "compare"}
    trials = VerifySettings().trials + 1  # the random cases and the perturbed one
    assert res.seconds["run"] >= 0.05 * trials
    assert all(0 <= v < res.seconds["run"] for k, v in res.seconds.items() if k != "run")
