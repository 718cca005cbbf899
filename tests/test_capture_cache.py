"""The capture cache: a problem tuned again takes its graph from disk instead of torch.export
(whose first call imports Dynamo, about a second of each start); anything the graph depends on
changes the key; a damaged file is captured again."""

from __future__ import annotations

import sys

import pytest

from cuda_agent.ir import capture as capture_mod
from cuda_agent.ir import capture_cache
from cuda_agent.problem import load_problem


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(capture_cache.ENV, "1")
    traced: list[str] = []
    real = capture_mod.capture
    monkeypatch.setattr(capture_mod, "capture",
                        lambda cls, *a: traced.append(cls.__module__) or real(cls, *a))
    return traced


def _graph(path):
    return load_problem(path).graph()


def test_a_second_load_takes_the_graph_from_disk(cache, make_problem):
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    first = _graph(path)
    again = _graph(path)
    assert len(cache) == 1 and again.fingerprint() == first.fingerprint()
    assert len(list(capture_cache.cache_dir().glob("*.pkl"))) == 1


def test_what_the_graph_depends_on_changes_the_key(cache, make_problem, monkeypatch):
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    _graph(path)
    path.write_text(path.read_text().replace("torch.relu(x)", "torch.sigmoid(x)"))
    assert "sigmoid" in str(_graph(path).nodes) and len(cache) == 2
    path.write_text(path.read_text().replace("randn(64, 128)", "randn(64, 256)"))
    assert _graph(path).nodes[0].shape == (64, 256) and len(cache) == 3
    # a helper module next to the problem is part of the key too
    helper = path.parent / "helper_act.py"
    helper.write_text("import torch\ndef act(x):\n    return torch.relu(x)\n")
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.delitem(sys.modules, "helper_act", raising=False)
    path.write_text("import helper_act\n" + path.read_text().replace("torch.sigmoid(x)",
                                                                     "helper_act.act(x)"))
    _graph(path)
    helper.write_text("import torch\ndef act(x):\n    return torch.tanh(x)\n")
    del sys.modules["helper_act"]  # a new process imports the changed file
    assert "tanh" in str(_graph(path).nodes) and len(cache) == 5


def test_a_damaged_file_is_captured_again_and_replaced(cache, make_problem):
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    _graph(path)
    (kept,) = capture_cache.cache_dir().glob("*.pkl")
    kept.write_bytes(b"not a pickle")
    assert _graph(path).fingerprint() and len(cache) == 2
    assert capture_cache.load(kept.stem) is not None


def test_turned_off_it_always_captures(cache, make_problem, monkeypatch):
    monkeypatch.setenv(capture_cache.ENV, "0")
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    _graph(path)
    _graph(path)
    assert len(cache) == 2 and not capture_cache.cache_dir().exists()
