"""The simulated device: the analytic model of `costmodel/model.py` behind the Device interface.

It cannot execute kernels, so it never claims correctness (`verified=None`) and every figure it
produces is labelled simulated. Candidates are still compiled, so compile errors and the
assembler's register and spill counts are real.
"""

from __future__ import annotations

from typing import Any

from ..costmodel import model
from ..ir.plan import KernelPlan
from ..problem import Problem
from ..space.slots import Target
from .devices import Candidate, Device
from .records import Measurement


class SimDevice(Device):
    kind = "sim"
    simulated = True

    def __init__(self, target: Target | None = None, constants: Any = None) -> None:
        self._target = target or Target()
        self.constants = constants
        self.plan: KernelPlan | None = None

    def target(self) -> Target:
        return self._target

    def gpu_name(self) -> str:
        return f"{self._target.name} (simulated)"

    def facts(self) -> dict[str, Any]:
        return {"gpu": self.gpu_name(), "device": "sim", "simulated": True,
                "copy_bw": self._target.dram_bw}

    def setup(self, problem: Problem, plan: KernelPlan) -> None:
        self.plan = plan

    def copy_bandwidth(self) -> float | None:
        return self._target.dram_bw

    def evaluate(self, cand: Candidate, best_ms: float | None = None) -> Measurement:
        assert self.plan is not None, "setup first"
        res = model.simulate(self.plan, cand.rendered, cand.resources, self._target, self.constants)
        counters = dict(res.counters)
        counters.update({f"compile_{k}": v for k, v in cand.resources.items()})
        if res.error_kind:
            m = Measurement.failure(cand.key, "sim", res.error_kind, res.error_msg or "",
                                    counters=counters)
            m.simulated = True
            return m
        return Measurement(cand.key, "sim", True, res.time_ms, 0.0, 1, None, True,
                           counters=counters)
