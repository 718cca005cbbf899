"""`tune` without a strategy (issue 34, item 5): the best strategy on the measured evidence,
its policy shipped inside the package and found through importlib.resources."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

from helpers import GOOD
from cuda_agent.problem import load_problem
from cuda_agent.search import default as default_mod
from cuda_agent.search.default import DEFAULT, POLICY, default_strategy, shipped_policy
from cuda_agent.tuner import TuneSettings, Tuner

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_policy_is_package_data_trained_on_every_sweep():
    from cuda_agent.agents import checkpoint

    path = shipped_policy()
    assert path is not None and path.is_file()
    assert path.parent == ROOT / "cuda_agent" / "policies"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["cuda_agent"]
    assert any(fnmatch(f"policies/{POLICY}", p) for p in patterns), "not in the wheel"
    meta = checkpoint.load(path)["meta"]
    recorded = {p.name.removesuffix(".json.gz")
                for p in (ROOT / "benchmarks/data/nvidia-h200").glob("*.json.gz")}
    assert len(meta["trained_on"]) >= 100 and set(meta["trained_on"]) <= recorded
    assert meta["settings"]["prior_weight"] == 100.0 and meta["settings"]["agents"] == "multi"


def test_tune_without_a_strategy_runs_the_default_with_the_shipped_policy():
    tuner = Tuner(load_problem(GOOD / "sum_small.py"),
                  TuneSettings(device="sim", strategy="default", budget=4, baselines=False))
    try:
        assert tuner.settings.strategy == "default" and tuner.strategy_name == DEFAULT
        if DEFAULT == "marl":
            assert tuner.strategy_options["policy"] == str(shipped_policy())
            assert tuner.strategy.ranked_left == 3  # a trained policy's first picks
    finally:
        tuner.close()


def test_an_install_without_the_policy_falls_back_to_the_models_ranking(monkeypatch):
    monkeypatch.setattr(default_mod, "POLICY", "not-shipped.pt")
    assert shipped_policy() is None
    name, options = default_strategy(16)
    assert name == ("prior" if DEFAULT == "marl" else DEFAULT)
    assert "policy" not in options
