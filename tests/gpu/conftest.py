"""GPU tests: run on the GPU machine only (`pytest -m gpu tests/gpu`); skipped elsewhere."""

from pathlib import Path

import pytest

from cuda_agent.runner.devices import cuda_available

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    # collection hooks see every item of the session, not only this folder's
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if not cuda_available():
            item.add_marker(skip)
