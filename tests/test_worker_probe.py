"""A candidate is abandoned before its verification only when its run is slow twice: a
library call's first run in a new layout pays cuDNN's one-time set-up (27-637 ms where its
steady runs took ~1 ms on an H100), and such a candidate was recorded "slow", never measured.
The worker's `evaluate`, driven on the CPU with its kernels and probes stood in for."""

from __future__ import annotations

import pytest

from cuda_agent.runner import worker
from cuda_agent.runner.worker import ProblemState, hopeless


class _Kernels:
    closed = False

    def __init__(self, *args) -> None:  # noqa: ANN002
        pass

    def close(self) -> None:
        _Kernels.closed = True


class _Verified(Exception):
    """Raised where verification would start: the candidate was not abandoned."""


@pytest.fixture
def state(monkeypatch):
    monkeypatch.setattr(worker, "read_cubin", lambda path, sha: b"cubin")
    monkeypatch.setattr(worker.launcher, "LoadedKernels", _Kernels)

    def verify(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise _Verified

    monkeypatch.setattr(worker, "check", verify)
    st = ProblemState.__new__(ProblemState)
    st.device = "cpu"
    st.pool = type("Pool", (), {"trials_for": lambda self, n: 1})()
    st.evaluated = 0
    _Kernels.closed = False
    return st


def _evaluate(st: ProblemState, probes: list[float], best: float | None) -> tuple[dict | None,
                                                                                   int]:
    runs = iter(probes)
    calls = []
    st._probe = lambda kernels: calls.append(1) or next(runs)
    try:
        return st.evaluate({"cubin": "k.cubin", "launches": [], "best_ms": best}), len(calls)
    except _Verified:
        return None, len(calls)


def test_the_rule():
    assert hopeless(1001.0, None) and not hopeless(999.0, None)
    assert hopeless(27.0, 1.0) and not hopeless(19.0, 1.0)
    assert not hopeless(4.9, 0.1)  # under 5 ms: not worth abandoning


def test_a_slow_first_run_is_run_again_and_a_fast_second_one_is_verified(state):
    result, runs = _evaluate(state, [27.0, 1.0], best=1.0)
    assert result is None and runs == 2 and not _Kernels.closed


def test_a_candidate_slow_twice_is_abandoned(state):
    result, runs = _evaluate(state, [27.0, 26.0], best=1.0)
    assert runs == 2 and _Kernels.closed
    assert result["error_kind"] == "slow" and result["time_ms"] == 26.0


def test_a_fast_first_run_is_not_run_again(state):
    result, runs = _evaluate(state, [1.1, 99.0], best=1.0)
    assert result is None and runs == 1
