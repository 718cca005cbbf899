"""A sampler of the Ray fleet: an actor that compiles (through the ledger's compile tasks) and
measures (on its GPU, or the simulator) the episodes the learner sends it.

It runs the very job the local pool runs (`agents.train.run_episode`), on operators it loads
itself from their problem files (the paths must be readable on its machine), with a store and a
builder that ask the fleet's ledger first (`ledger.py`).
"""

from __future__ import annotations

import os
from pathlib import Path
import time
from typing import Any

import ray

from ..agents.train import Operator, TrainSettings, operator_tuner, run_episode, training_device
from ..build.builder import Builder, write_entry
from ..cache_check import digest
from ..runner.records import Measurement
from ..store import Store


class FleetStore(Store):
    """This sampler's store (in memory), with the fleet's measurements behind it: a candidate
    any sampler measured is served, not measured again; what this one measures is published."""

    def __init__(self, ledger: Any) -> None:
        super().__init__(":memory:")
        self.ledger = ledger
        self.served = 0

    def lookup(self, key: str, device: str, gpu: str, toolchain: str) -> Measurement | None:
        hit = super().lookup(key, device, gpu, toolchain)
        if hit is None:
            hit = ray.get(self.ledger.lookup.remote(key, device, gpu, toolchain))
            self.served += hit is not None
        return hit

    def record(self, problem_id: int, key: str, template: str, config: dict, m: Measurement,
               gpu: str, toolchain: str, *args: Any, **kw: Any) -> None:
        super().record(problem_id, key, template, config, m, gpu, toolchain, *args, **kw)
        if not m.reused:  # not waited for: the ledger takes calls in order
            self.ledger.record.remote(key, m.device, gpu, toolchain, m)


class RayBuilder(Builder):
    """Compiles through the ledger: each source once for the whole fleet, on the cluster's
    CPUs; each result written into this machine's file cache as a checked entry."""

    def __init__(self, ledger: Any, backend: str = "nvrtc") -> None:
        super().__init__(backend, workers=1)
        self.ledger = ledger

    def _compile(self, jobs: list[tuple], deadline: float | None) -> list[dict[str, Any]]:
        refs = ray.get(self.ledger.compile.remote(jobs))
        metas = []
        for job, ref in zip(jobs, refs):
            key = job[4]
            try:
                meta, cubin = ray.get(ref)
                if cubin is not None and digest(cubin) != meta["cubin_sha256"]:
                    raise ValueError("the cubin's bytes do not match its recorded sha256")
            except (ray.exceptions.RayError, ValueError) as exc:
                # its task was lost for good (Ray retries one whose node died): the moment's
                # failure, not the source's; the next asking compiles it again
                self.ledger.forget.remote(key)
                metas.append({"error_kind": "compile_crash", "per_kernel": {}, "seconds": 0.0,
                              "error_msg": f"the compile task failed: "
                                           f"{str(exc).splitlines()[0][:200]}"})
                continue
            if meta["error_kind"] not in (None, "compile"):
                self.ledger.forget.remote(key)  # a timeout, a compiler that could not run
            write_entry(self.cache_dir, meta, cubin)
            metas.append(meta)
        return metas


class Sampler:
    """One sampler actor (one per GPU; on the simulator as many as asked). Operators are loaded
    the first time an episode needs them."""

    def __init__(self, index: int, files: dict[str, str], settings: TrainSettings,
                 ledger: str) -> None:
        """`ledger`: the ledger actor's name (a handle as an argument would make Ray keep it
        in its object store for a restart, which it warns about)."""
        handle = ray.get_actor(ledger)
        self.index = index
        self.files = files
        self.settings = settings
        self.device = training_device(settings, lambda message: None)
        self.store = FleetStore(handle)
        self.builder = None if self.device.kind == "replay" else RayBuilder(handle)
        self.operators: dict[str, Operator] = {}

    def where(self) -> dict[str, Any]:
        """Its node and process (a test kills the process to lose a sampler)."""
        return {"index": self.index, "node": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid()}

    def _operator(self, name: str) -> Operator:
        op = self.operators.get(name)
        if op is None:
            tuner = operator_tuner(Path(self.files[name]), self.settings, self.device, self.store,
                                   self.builder, lambda message: None)
            op = self.operators[name] = Operator(name, tuner)
        return op

    def episode(self, weights: dict[str, Any], meta: dict[str, Any], name: str,
                episode_id: int, version: int, seed: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        served = self.store.served
        out = run_episode(weights, meta, self._operator(name), self.settings, episode_id,
                          version, seed)
        out.update(sampler=self.index, node=ray.get_runtime_context().get_node_id(),
                   seconds=time.perf_counter() - t0, served=self.store.served - served)
        return out

    def close(self) -> None:
        for op in self.operators.values():
            op.tuner.close()
        if self.builder is not None:
            self.builder.close()
        self.device.close()
        self.store.close()
