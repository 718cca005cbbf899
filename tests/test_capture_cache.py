"""The capture cache: a problem tuned again takes its graph from disk instead of torch.export
(whose first call imports Dynamo, about a second of each start); anything the graph depends on
changes the key; an entry is checked (schema, key, claims, the graph's hash) and one that fails
is captured again; the graph round-trips through its plain-data encoding exactly."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from helpers import GOOD
from cuda_agent import cache_check
from cuda_agent.cache_check import CacheWarning
from cuda_agent.ir import capture as capture_mod
from cuda_agent.ir import capture_cache, graph_codec
from cuda_agent.ir.graph import Graph, GraphInput
from cuda_agent.problem import load_problem


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(capture_cache.ENV, "1")
    monkeypatch.setattr(cache_check, "_warned", set())  # one warning per process: each test's
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
    assert len(list(capture_cache.cache_dir().glob("*.json"))) == 1


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
    (kept,) = capture_cache.cache_dir().glob("*.json")
    kept.write_bytes(b"not json")
    with pytest.warns(CacheWarning, match="not readable JSON"):
        assert _graph(path).fingerprint() and len(cache) == 2
    assert capture_cache.load(kept.stem) is not None


def test_an_entry_records_its_key_claims_and_hash(cache, make_problem):
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    graph = _graph(path)
    (kept,) = capture_cache.cache_dir().glob("*.json")
    entry = json.loads(kept.read_text())
    assert entry["schema"] == capture_cache.SCHEMA and entry["key"] == kept.stem
    assert entry["claims"]["torch"] == torch.__version__
    assert entry["claims"]["inputs"] == "[T(64, 128)torch.float32]"
    assert entry["claims"]["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert graph_codec.decode(entry["graph"]) == graph


def test_a_garbled_graph_is_captured_again(cache, make_problem):
    """An entry whose graph no longer hashes to what it recorded (a flipped shape, here) is
    never used, though it is valid JSON that would decode."""
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    _graph(path)
    (kept,) = capture_cache.cache_dir().glob("*.json")
    entry = json.loads(kept.read_text())
    first_node = entry["graph"]["fields"]["nodes"][0]["fields"]
    assert first_node["shape"] == {"tuple": [64, 128]}
    first_node["shape"] = {"tuple": [32, 128]}
    kept.write_text(json.dumps(entry))
    with pytest.warns(CacheWarning, match="sha256"):
        assert _graph(path).nodes[0].shape == (64, 128) and len(cache) == 2


def test_an_entry_of_another_schema_is_captured_again_quietly(cache, make_problem, recwarn):
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    _graph(path)
    (kept,) = capture_cache.cache_dir().glob("*.json")
    entry = json.loads(kept.read_text())
    kept.write_text(json.dumps({**entry, "schema": capture_cache.SCHEMA + 1}))
    assert _graph(path).fingerprint() and len(cache) == 2
    assert json.loads(kept.read_text())["schema"] == capture_cache.SCHEMA
    assert not [w for w in recwarn if w.category is CacheWarning]


def test_turned_off_it_always_captures(cache, make_problem, monkeypatch):
    monkeypatch.setenv(capture_cache.ENV, "0")
    path = make_problem("relu", "torch.relu(x)", "torch.randn(64, 128)")
    _graph(path)
    _graph(path)
    assert len(cache) == 2 and not capture_cache.cache_dir().exists()


# -- the plain-data encoding: exact for every graph the suites capture --------------------------

ROOT = Path(__file__).resolve().parents[1]
SUITES = [ROOT / "benchmarks" / "problems", ROOT / "benchmarks" / "realistic", GOOD]
# a training-mode BatchNorm (state updates, train/eval modes), a convolution, a linear layer, a
# loss with int64 targets (an index bound and an ignored index), attention, a scan, a float
# input with a value range (binary cross-entropy)
SAMPLE = ["realistic/norm_batchnorm2d_train", "problems/conv2d_standard",
          "problems/fused_linear_relu", "problems/loss_cross_entropy",
          "problems/attention_sdpa", "problems/scan_cumsum_exclusive",
          "problems/loss_bce"]


def assert_round_trip(path: Path) -> Graph:
    graph = load_problem(path, check=False).graph()
    data = json.loads(json.dumps(graph_codec.encode(graph)))  # as it goes to disk and back
    back = graph_codec.decode(data)
    assert back == graph and back.fingerprint() == graph.fingerprint()
    assert back.modes == graph.modes and back.updates == graph.updates
    return graph


def test_the_sample_round_trips_exactly():
    graphs = [assert_round_trip(ROOT / "benchmarks" / f"{name}.py") for name in SAMPLE]
    assert any(g.updates for g in graphs) and any(g.modes for g in graphs)
    assert any(i.index_bound is not None for g in graphs for i in g.inputs)
    assert any(i.value_range is not None for g in graphs for i in g.inputs)


def test_every_suite_problem_round_trips_exactly():
    """All 187 problem files: about a second once torch is imported (4 s in a fresh process
    on the 2-core development machine), so it runs with the default set."""
    files = [f for d in SUITES for f in sorted(d.glob("*.py"))]
    assert len(files) >= 184
    for f in files:
        assert_round_trip(f)


def test_values_json_cannot_hold_are_encoded_explicitly():
    g = Graph()
    x = g.add_input(GraphInput("x", "input", (2, 3), "float32", 0, value_range=(0.0, 1.0)))
    inf = g.add("max", (x, g.const(float("-inf"))), (2, 3), "float32", nested=((1, 2), (3,)),
                flag=True, none=None, scale=-0.0)
    g.output = inf
    g.modes = (True, False)
    back = graph_codec.decode(json.loads(json.dumps(graph_codec.encode(g), allow_nan=False)))
    assert back == g and back.nodes[-2].attr("value") == float("-inf")
    assert back.nodes[-1].attr("nested") == ((1, 2), (3,)) and back.nodes[-1].attr("flag") is True


def test_anything_but_the_ir_is_refused_both_ways():
    import enum

    class Kind(enum.IntEnum):
        A = 1

    g = Graph()
    g.add("const", (), (), "float32", kind=Kind.A)
    with pytest.raises(TypeError, match="IntEnum|Kind"):
        graph_codec.encode(g)
    g = Graph()
    g.plan_notes = "set beside the fields"
    with pytest.raises(TypeError, match="plan_notes"):
        graph_codec.encode(g)
    for data in ({"class": "Popen", "fields": {"args": "true"}}, {"tuple": [1], "x": 2},
                 {"class": "Node", "fields": {"id": 0}}, [{"float": "1e3"}], 3):
        with pytest.raises(ValueError):
            graph_codec.decode(data)
