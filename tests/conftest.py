"""Shared fixtures for the CPU test suite: every session gets a private compile cache and
cuda-agent home (CUDA_AGENT_CACHE, CUDA_AGENT_HOME), so tests never touch ~/.cache/cuda-agent,
and no capture cache.
Helpers live in `helpers.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import torch

from helpers import write_problem


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items) -> None:
    """Make `--dist loadgroup` group again (pyproject's addopts): pytest-xdist marks a test's
    `xdist_group` by appending "@group" to `item._nodeid`, which pytest 9.2 no longer reads (its
    node ids are structured, `item._id`), so every grouped test was scheduled on its own
    (pytest-dev/pytest-xdist#1386). Runs after xdist's hook; a no-op where xdist's write took."""
    for item in items:
        legacy = vars(item).get("_nodeid")
        if legacy is not None and legacy != item.nodeid and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(legacy)


@pytest.fixture(scope="session", autouse=True)
def _private_cuda_agent_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda-agent-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("CUDA_AGENT_CACHE", str(root / "cache"))
    mp.setenv("CUDA_AGENT_HOME", str(root / "home"))
    # tests patch the capture; a graph kept by an earlier test would stand in for theirs
    # (tests/test_capture_cache.py turns it on where it is the subject)
    mp.setenv("CUDA_AGENT_CAPTURE_CACHE", "0")
    yield root
    mp.undo()


@pytest.fixture
def make_problem(tmp_path) -> Callable[..., Path]:
    def make(name: str, expr: str, inputs: str, **kw) -> Path:
        return write_problem(tmp_path / "problems", name, expr, inputs, **kw)
    return make


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(1234)
