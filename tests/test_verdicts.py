"""A template whose candidates all fail verification is given up on (`search/verdicts.py`):
the search spends its measurements on the templates that can pass, as it did not on an H100
(55 of 64 measurements on tensor-core candidates all wrong, conv2d_relu_hardswish)."""

from __future__ import annotations

from collections import Counter

from helpers import TESTS
from cuda_agent.problem import load_problem
from cuda_agent.runner.devices import Candidate
from cuda_agent.runner.records import Measurement
from cuda_agent.runner.sim import SimDevice
from cuda_agent.search.verdicts import WRONG_BEFORE_ABANDON, TemplateVerdicts
from cuda_agent.store import Store
from cuda_agent.tuner import TuneSettings, Tuner

PROBLEM = TESTS.parent / "benchmarks" / "problems" / "gemm_rect.py"


class WrongTemplate(SimDevice):
    """The simulator, where every candidate of one template fails verification."""

    def __init__(self, bad: str) -> None:
        super().__init__()
        self.bad = bad
        self.tuner = None

    def evaluate(self, cand: Candidate, best_ms: float | None = None) -> Measurement:
        # (the tuner's space: a program's stage space while that stage is searched)
        if self.tuner.space.template_of(cand.config).name == self.bad:
            return Measurement.failure(cand.key, "sim", "wrong",
                                       "relative error 0.000311 > 0.0001")
        return super().evaluate(cand, best_ms)


def _tune(bad: str, strategy: str, budget: int, ask=None,  # noqa: ANN001, ANN202
          problem=PROBLEM):
    device = WrongTemplate(bad)
    notices: list[str] = []
    tuner = Tuner(load_problem(problem), TuneSettings(device="sim", budget=budget,
                                                      strategy=strategy, batch=8, seed=1),
                  device=device, store=Store(":memory:"), notify=notices.append)
    tuner.notices = notices
    device.tuner = tuner
    if ask is not None:
        tuner.strategy.ask = ask(tuner)
    result = tuner.run()
    tuner.close()
    return tuner, result


def _templates(tuner, result) -> Counter:  # noqa: ANN001
    return Counter(tuner.space.template_of(t.config).name for t in result.trials)


def test_the_verdicts_count_wrong_until_one_verifies():
    v = TemplateVerdicts(limit=2)
    A, B = (None, "gemm_tc", ()), (1, "gemm_tc", ())
    wrong = Measurement.failure("k", "cuda", "wrong", "x")
    slow = Measurement.failure("k", "cuda", "slow", "x")
    ok = Measurement("k", "cuda", True, 1.0, verified=True)
    v.note(A, wrong), v.note(A, slow)
    assert not v.abandoned(A)  # a slow candidate is no verdict on correctness
    v.note(A, wrong)
    assert v.abandoned(A) and v.given_up() == [A]
    v.note(B, ok), v.note(B, wrong), v.note(B, wrong), v.note(B, wrong)
    assert not v.abandoned(B)  # one verified candidate keeps it
    C = (None, "map", ())
    v.note(C, Measurement("k", "sim", True, 1.0)), v.note(C, wrong), v.note(C, wrong)
    assert not v.abandoned(C)  # the simulator claims no verification: a time is no verdict


def test_a_template_all_wrong_is_not_measured_again():
    tuner, result = _tune("gemm_tc", "random", 48)
    counts = _templates(tuner, result)
    assert counts["gemm_tc"] == WRONG_BEFORE_ABANDON  # batches asked ahead skip it too
    assert len(result.trials) == 48  # the budget went to the others
    assert tuner.verdicts.abandoned((None, "gemm_tc", ()))
    said = [n for n in tuner.notices if n.startswith("template gemm_tc: 3 candidates failed")]
    assert len(said) == 1 and "0.000311 > 0.0001" in said[0]


def test_a_strategy_that_keeps_to_the_abandoned_template_gets_others_drawn():
    """A policy with a strong prior for the failing template: its proposals are dropped and the
    batch is drawn from the templates still in the search, rather than the search ending."""
    def only_tc(tuner):  # noqa: ANN001, ANN202
        tc = tuner.space.configs_of("gemm_tc")

        def ask(n: int) -> list:
            return tc[:n * 4]
        return ask

    tuner, result = _tune("gemm_tc", "random", 40, only_tc)
    counts = _templates(tuner, result)
    assert counts["gemm_tc"] == WRONG_BEFORE_ABANDON
    assert len(result.trials) == 40 and sum(counts.values()) - counts["gemm_tc"] >= 28


def test_a_program_stage_gives_up_on_its_template_alone(tmp_path):
    """In a program the verdict is the stage's: the convolution stage's tensor-core template
    all wrong, the pooling stage searched as before; the fallback draws from the stage's
    space."""
    from test_program import CONV_POOL_SRC

    path = tmp_path / "conv_pool.py"
    path.write_text(CONV_POOL_SRC)

    def only_tc(tuner):  # noqa: ANN001, ANN202
        def ask(n: int) -> list:
            sp = tuner.space
            names = {t.name for t in sp.templates}
            return sp.configs_of("gemm_tc")[:n] if "gemm_tc" in names else \
                sp.sample(n, __import__("random").Random(0))
        return ask

    tuner, result = _tune("gemm_tc", "random", 40, only_tc, path)
    stage0 = [t for t in result.trials if t.stage == 0]
    tc = [t for t in stage0 if t.measurement.error_kind == "wrong"]
    assert len(tc) == WRONG_BEFORE_ABANDON
    assert [k[:2] for k in tuner.verdicts.given_up()] == [(0, "gemm_tc")]
    assert len(stage0) > len(tc) + 3 and any(t.stage == 1 for t in result.trials)


def test_the_last_template_is_never_given_up():
    """A failure that depends on one slot (fast math, say) in a problem of one template: three
    wrong candidates must not end the search with nothing (a review found it ending after 3)."""
    problem = TESTS.parent / "benchmarks" / "problems" / "elementwise_log_sqrt.py"
    tuner, result = _tune("map", "random", 12, problem=problem)
    assert len(result.trials) == 12 and result.stopped != "space"
    assert not [n for n in tuner.notices if n.startswith("template map")]


def test_a_stage_s_verdict_holds_only_beside_the_same_other_stages():
    """A program is verified whole: a wrong program may be the other stage's doing, so a
    verdict is kept per configuration of the other stages."""
    v = TemplateVerdicts(limit=1)
    wrong = Measurement.failure("k", "cuda", "wrong", "x")
    v.note((0, "gemm_tc", ("pool default",)), wrong)
    assert v.abandoned((0, "gemm_tc", ("pool default",)))
    assert not v.abandoned((0, "gemm_tc", ("pool tuned",)))
