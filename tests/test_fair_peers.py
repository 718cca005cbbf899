"""Issue 34's fair comparison: the model's ranking alone as a strategy ("prior"), the classic
peers warm-started with its top picks (Optuna's enqueued trials, Kernel Tuner's first
measurements and start point), and the model's constants fitted per fold (out of sample)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers import Fn, good_space
from cuda_agent.costmodel.predict import simulated_times
from cuda_agent.bench import start_of, uses_model, versus_all
from cuda_agent.errors import SettingsError
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.costmodel import gemm as sim_gemm
from cuda_agent.runner.records import Measurement
from cuda_agent.costmodel.folds import (FITTED, FoldConstants, ModelConstants, applied, load,
                                        shipped_values)
from cuda_agent.search import make_strategy
from cuda_agent.search.prior_rank import (WARM_PICKS, first_of_each_template, model_order,
                                          top_picks)
from cuda_agent.space.slots import Config, Target
from cuda_agent.space.space import Space


def _ok(t: float) -> Measurement:
    return Measurement("k", "replay", True, t, 0.0, 1, True, False)


def test_prior_proposes_in_the_models_order_and_skips_what_was_measured():
    space = good_space("sum_small")
    configs = space.configs
    times = simulated_times(space, np.arange(len(configs)), configs)
    ok = np.isfinite(times)
    assert ok.sum() > 10
    order = model_order(space)
    assert len(order) == len(set(order)) == len(configs)
    modelled = [t for t in (times[configs.index(c)] for c in order) if np.isfinite(t)]
    assert modelled == sorted(modelled)  # fastest first, every modelled one before the rest
    assert not np.isfinite(times[[configs.index(c) for c in order[len(modelled):]]]).any()
    s = make_strategy("prior", space, seed=0)
    first = s.ask(3)
    assert first == order[:3]
    # measured elsewhere (the tuner's defaults): never proposed again
    s.tell([(order[3], _ok(1.0)), (order[4], _ok(1.0))])
    assert s.ask(2) == order[5:7]


def test_warm_optuna_measures_the_models_top_picks_first():
    pytest.importorskip("optuna")
    space = good_space("relu_small")
    picks = top_picks(space, WARM_PICKS)
    warm = make_strategy("optuna_warm", space, seed=1)
    got = warm.ask(WARM_PICKS)
    assert got == picks
    warm.tell([(c, _ok(1.0 + i)) for i, c in enumerate(got)])
    more = warm.ask(4)  # TPE goes on from there, never repeating
    assert len(more) == 4 and not set(more) & set(picks)
    cold = make_strategy("optuna", space, seed=1)
    assert cold.ask(WARM_PICKS) != picks  # the cold column is Optuna as shipped
    # after the tuner's untuned default, one of each template: the model's fastest for the
    # warm column (as the agents), each template's own default for the cold one
    assert make_strategy("optuna_warm", space, seed=1).template_picks() == \
        first_of_each_template(space, model_order(space))
    assert cold.template_picks() is None


def _configs() -> list[Config]:
    return [Config.of({"config.block": b, "memory.vec": v, "compute.unroll": u})
            for b in (64, 128, 256, 512) for v in (1, 2, 4) for u in (1, 2, 4)]


def _time(c: dict) -> float:
    return 1.0 + c["config.block"] / 512 + c["memory.vec"] / 7 + c["compute.unroll"] / 13


@pytest.mark.parametrize("strategy", ["genetic_algorithm", "simulated_annealing",
                                      "random_sample", "bayes_opt"])
def test_warm_kernel_tuner_measures_the_picks_first_then_searches(strategy):
    pytest.importorskip("kernel_tuner")
    from cuda_agent.search import kernel_tuner_sim

    configs = _configs()
    records = [{"config": c.as_dict(), "ok": True, "time_ms": _time(c.as_dict())}
               for c in configs]
    picks = [configs[7].as_dict(), configs[30].as_dict(), configs[2].as_dict()]
    order = kernel_tuner_sim.run(records, strategy, 20, 0, picks)
    assert [c.as_dict() for c, _ in order[:3]] == picks
    keys = [c.key() for c, _ in order]
    assert len(keys) == len(set(keys)) and len(order) <= 20
    cold = kernel_tuner_sim.run(records, strategy, 20, 0)
    assert [c.as_dict() for c, _ in cold[:3]] != picks
    # live: the picks are measured first, once; Kernel Tuner never asks for them again
    asked: list[Config] = []

    def measure(cfgs: list[Config]) -> list[dict]:
        asked.extend(cfgs)
        return [{"ok": True, "time_ms": _time(c.as_dict())} for c in cfgs]

    live = kernel_tuner_sim.run_live(configs, strategy, 12, 0, measure,
                                     [Config.of(p) for p in picks])
    assert [c.as_dict() for c in asked[:3]] == picks
    assert len(asked) == len(set(asked)) <= 12
    assert [c.as_dict() for c, _ in live[:3]] == picks


def test_kernel_tuner_starts_from_the_fastest_pick_where_it_takes_a_start():
    pytest.importorskip("kernel_tuner")
    from cuda_agent.search import kernel_tuner_sim

    seen: list = []
    real = kernel_tuner_sim._tune

    def spy(params, cache, strategy, budget, seed, x0=None):  # noqa: ANN001, ANN202
        seen.append(x0)
        return real(params, cache, strategy, budget, seed, x0)

    configs = _configs()
    records = [{"config": c.as_dict(), "ok": True, "time_ms": _time(c.as_dict())}
               for c in configs]
    picks = [configs[30].as_dict(), configs[2].as_dict()]  # the second is faster
    kernel_tuner_sim._tune = spy
    try:
        kernel_tuner_sim.run(records, "genetic_algorithm", 10, 0, picks)
    finally:
        kernel_tuner_sim._tune = real
    params = kernel_tuner_sim._Params([r["config"] for r in records])
    assert seen == [[picks[1][n.replace("__", ".")] for n in params.names]]


def test_bench_columns_name_their_start():
    assert start_of("optuna") == "cold" and start_of("kt:genetic_algorithm") == "cold"
    assert "warm" in start_of("optuna_warm") and "warm" in start_of("kt_warm:bayes_opt")
    assert start_of("prior") == "the model's ranking alone"
    assert "prior" in start_of("marl") and start_of("marl_noprior") == "policy alone"
    assert uses_model("kt_warm:random_sample") and not uses_model("optuna")
    assert not uses_model("marl_noprior")
    key = "median_evals_to_95_unseen"
    summary = {"marl": {key: 2}, "optuna": {key: 20}, "kt:genetic_algorithm": {key: 10},
               "optuna_warm": {key: 4}, "kt_warm:genetic_algorithm": {key: 3},
               "prior": {key: 3}}
    v = versus_all(summary)
    assert v["cold"]["best_peer"] == "kt:genetic_algorithm" and v["cold"]["start"] == "cold"
    assert v["warm"]["best_peer"] == "kt_warm:genetic_algorithm" and v["warm"]["ratio"] == 1.5
    assert v["prior"]["best_peer_median"] == 3


# -- the model's constants per fold -----------------------------------------------------------

def _gemm_space() -> Space:
    g = capture(Fn, [lambda a, b: a @ b], lambda: [torch.randn(256, 256),
                                                   torch.randn(256, 256)])
    return Space.for_plan(make_plan(g), Target())


def test_fold_constants_change_the_model_within_the_block_only():
    sp = _gemm_space()
    simt = [c for c in sp.configs if sp.template_of(c).name == "gemm"][:5]
    before = simulated_times(sp, np.arange(len(simt)), simt)
    assert np.isfinite(before).all()
    shipped = sim_gemm.SIMT_TIME_SCALE
    mc = ModelConstants({"SIMT_TIME_SCALE": 2 * shipped, "TRANSPOSED_CONV_EFFICIENCY[1]": 0.5})
    with applied(mc):
        assert sim_gemm.SIMT_TIME_SCALE == 2 * shipped
        assert sim_gemm.TRANSPOSED_CONV_EFFICIENCY[1] == 0.5
    assert sim_gemm.SIMT_TIME_SCALE == shipped  # restored
    assert sim_gemm.TRANSPOSED_CONV_EFFICIENCY[1] == shipped_values()[
        "TRANSPOSED_CONV_EFFICIENCY[1]"]
    after = simulated_times(sp, np.arange(len(simt)), simt, mc)
    assert (after > before).all()  # the SIMT kernels' time scaled up, launches not
    assert np.array_equal(simulated_times(sp, np.arange(len(simt)), simt), before)


def test_a_sim_constant_reaches_the_streaming_model():
    mc = ModelConstants({"l1_inflight_merge": 0.0})
    with applied(mc) as c:
        assert c is not None and c.l1_inflight_merge == 0.0
    with applied(None) as c:
        assert c is None


def test_unknown_constants_and_bad_files_are_settings_errors(tmp_path):
    with pytest.raises(SettingsError, match="NOT_A_CONSTANT"):
        ModelConstants({"NOT_A_CONSTANT": 1.0})
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SettingsError, match="bad.json"):
        load(bad)
    assert set(shipped_values()) == set(FITTED)


def test_each_problem_is_ranked_by_a_fold_fitted_without_it(tmp_path):
    for k, fitted in enumerate((["a", "b"], ["c", "d"])):
        (tmp_path / f"f{k}.json").write_text(json.dumps({"values": {}, "fitted_on": fitted}))
    folds = FoldConstants(f"{tmp_path / 'f0.json'},{tmp_path / 'f1.json'}")
    assert folds.pick("a") == str(tmp_path / "f1.json")
    assert folds.pick("c") == str(tmp_path / "f0.json")
    assert folds.pick("e") == str(tmp_path / "f0.json")  # neither saw it
    both = FoldConstants(str(tmp_path / "f0.json"))
    assert both.pick("a") is None  # only a fold that saw it: no out-of-sample constants
