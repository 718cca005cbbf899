"""The Python API promised by the README: `cuda_agent.tune(...)`."""

from pathlib import Path

import cuda_agent

GOOD = Path(__file__).resolve().parent / "data" / "good"


def test_tune_from_python_writes_the_outputs(tmp_path):
    r = cuda_agent.tune(GOOD / "relu_small.py", out=tmp_path / "o", device="sim", budget=4,
                        store=":memory:")
    assert r.simulated and r.best is not None and len(r.trials) == 4
    assert {p.name for p in (tmp_path / "o").iterdir()} == {"model_new.py", "kernel.cu",
                                                             "report.json"}
