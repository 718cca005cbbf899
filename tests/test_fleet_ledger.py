"""The fleet's ledger keeps bounded memory: past its bounds the least recently asked-for
compiles and measurements go first, what is asked for again stays, and nothing it still serves
is wrong. The ledger's class, driven in this process (no cluster: its compile task is faked)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from cuda_agent.fleet import ledger as ledger_mod  # noqa: E402
from cuda_agent.fleet.ledger import Ledger  # noqa: E402
from cuda_agent.runner.records import Measurement  # noqa: E402


class _FakeTask:
    """`compile_task` without a cluster: each `.remote` call a fresh token for its key."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def remote(self, source, arch, options, backend, key, toolchain):  # noqa: ANN001, ANN201
        self.started.append(key)
        return f"ref:{key}:{len(self.started)}"


def _job(key: str) -> tuple:
    return (f"src {key}", "sm_90", [], "nvrtc", key, "/tmp/cache", "tc")


def test_compiles_past_the_bound_drop_the_least_recently_asked(monkeypatch):
    task = _FakeTask()
    monkeypatch.setattr(ledger_mod, "compile_task", task)
    led = Ledger(max_builds=2)
    first = led.compile([_job("a"), _job("b")])
    assert led.compile([_job("a")]) == first[:1]  # shared, and now the most recent
    led.compile([_job("c")])  # over the bound: "b" (least recently asked for) goes
    assert list(led.builds) == ["a", "c"]
    assert led.compile([_job("a")]) == first[:1]  # still shared, not compiled again
    led.compile([_job("b")])  # forgotten: compiled again
    assert task.started == ["a", "b", "c", "b"]
    assert led.report()["builds_dropped"] == 2 and len(led.builds) == 2


def test_measurements_past_the_bound_drop_the_least_recently_served():
    led = Ledger(max_measured=2)

    def m(key: str, t: float) -> Measurement:
        return Measurement(key, "sim", True, time_ms=t)

    led.record("a", "sim", "g", "tc", m("a", 1.0))
    led.record("b", "sim", "g", "tc", m("b", 2.0))
    assert led.lookup("a", "sim", "g", "tc").time_ms == 1.0  # "a" is now the most recent
    led.record("c", "sim", "g", "tc", m("c", 3.0))
    assert led.lookup("b", "sim", "g", "tc") is None  # dropped: measured again when asked
    served = led.lookup("a", "sim", "g", "tc")
    assert served.time_ms == 1.0 and served.reused
    assert led.lookup("c", "sim", "g", "tc").time_ms == 3.0
    assert led.report()["measurements_dropped"] == 1 and len(led.measured) == 2
