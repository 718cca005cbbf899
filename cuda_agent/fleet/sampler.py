"""A sampler of the Ray fleet: an actor that compiles (through the ledger's compile tasks) and
measures (on its GPU, or the simulator) the episodes the learner sends it.

It runs the very job the local pool runs (`agents.train.run_episode`), on operators it loads
itself from their problem files (the paths must be readable on its machine), with a store and a
builder that ask the fleet's ledger first (`ledger.py`).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import ray

from ..agents.train import Operator, TrainSettings, operator_tuner, run_episode, training_device
from ..build.builder import Builder, write_entry
from ..build.pool import CUT
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
    CPUs; each result written into this machine's file cache as a checked entry. The compile
    timeout (`timeout_s`, the run's `compile_timeout_s`) and the deadline hold as in the local
    pool: a batch waits at most a timeout per compile slot it needs on the cluster's CPUs
    (queued tasks wait their turn), and what is not back then is cancelled, a
    `compile_timeout` (or `CUT` where the run's deadline came first), neither cached."""

    def __init__(self, ledger: Any, backend: str = "nvrtc", timeout_s: float | None = None
                 ) -> None:
        super().__init__(backend, workers=1, timeout_s=timeout_s)
        self.ledger = ledger

    def _wait_until(self, jobs: int, started: float, deadline: float | None
                    ) -> tuple[float | None, str]:
        """When to stop waiting for a batch of `jobs` compiles started at `started`, and what
        a compile not back by then is (`compile_timeout` or `CUT`)."""
        timeout_at = None
        if self.timeout_s is not None:
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            timeout_at = started + self.timeout_s * math.ceil(jobs / cpus)
        if deadline is not None and (timeout_at is None or deadline <= timeout_at):
            return deadline, CUT
        return timeout_at, "compile_timeout"

    def _compile(self, jobs: list[tuple], deadline: float | None) -> list[dict[str, Any]]:
        started = time.monotonic()
        refs = ray.get(self.ledger.compile.remote(jobs))
        until, late_kind = self._wait_until(len(jobs), started, deadline)
        ready = set(refs)
        if until is not None:
            done, _ = ray.wait(refs, num_returns=len(refs),
                               timeout=max(0.0, until - time.monotonic()))
            ready = set(done)
        metas = []
        for job, ref in zip(jobs, refs):
            key = job[4]
            if ref not in ready:  # stopped, not cached: the next asking compiles it again
                ray.cancel(ref, force=True)
                self.ledger.forget.remote(key)
                metas.append({"error_kind": late_kind, "per_kernel": {}, "seconds": 0.0,
                              "error_msg": "the time limit came first" if late_kind == CUT
                              else f"no compile result within {self.timeout_s:.0f} s on the "
                                   "cluster"})
                continue
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
        self.builder = None if self.device.kind == "replay" else RayBuilder(
            handle, timeout_s=settings.run.compile_timeout_s)
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
