"""GPU tests: run on the GPU machine only (`pytest -m gpu tests/gpu`); skipped elsewhere."""

import pytest

from cuda_agent.run.devices import cuda_available


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        item.add_marker(pytest.mark.gpu)
        if not cuda_available():
            item.add_marker(skip)
