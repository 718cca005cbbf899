"""The Python API promised by the README: `cuda_agent.tune(...)`."""

from pathlib import Path

import cuda_agent

GOOD = Path(__file__).resolve().parent / "data" / "good"


def test_tune_from_python_writes_the_outputs(tmp_path):
    r = cuda_agent.tune(GOOD / "relu_small.py", out=tmp_path / "o", device="sim", budget=4,
                        store=":memory:", strategy="random")
    assert r.simulated and r.best is not None and len(r.trials) == 4
    assert {p.name for p in (tmp_path / "o").iterdir()} == {"model_new.py", "kernel.cu",
                                                             "report.json"}


def test_the_report_says_where_the_wall_time_went(tmp_path):
    """report.json's phases: the tuner's set-up steps, the search and the baselines, each a
    non-negative number of seconds, together no more than the process took."""
    import json
    import time

    t0 = time.perf_counter()
    r = cuda_agent.tune(GOOD / "relu_small.py", out=tmp_path / "o", device="sim", budget=4,
                        store=":memory:", strategy="random")
    took = time.perf_counter() - t0
    phases = json.loads((tmp_path / "o" / "report.json").read_text())["phases"]
    assert phases == r.phases
    assert list(phases) == ["plan", "open_device", "device_setup", "space", "strategy",
                            "search", "baselines"]
    assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= took
    assert phases["search"] <= r.wall_s + 1e-3
