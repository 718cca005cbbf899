"""The learner of a Ray fleet: this process updates the policy while the samplers keep sampling.

Each sampler has one episode in flight; as soon as one comes back the sampler is sent the next,
with the policy published last, and the learner updates as soon as an update's worth of
episodes has come back, in whatever order they came. A transition thus carries the policy
version that sampled it, one or two versions behind the learner's; PPO's ratio (the learner's
probability over the sampling policy's, clipped) corrects for that, as it does for the local
pool's one version of lag, and what is older than `max_staleness` is dropped (`stale_dropped`).

A sampler that dies (its process killed, its node lost) loses its episode in flight: the
learner goes on with the others' episodes and reports what was lost (`Trainer.fleet_report`,
`fleet.json` in the run's directory, `lost_episodes` in the curves). Ray restarts the actor
where resources allow; a sampler that loses `RETIRE_AFTER` episodes in a row is given no more,
and a fleet with none left, or none that answers for `STALL_S`, stops the run with a
`HostError`. A run resumed from a checkpoint goes on from its last update, but, unlike the
local pool's, is not the same run to the bit: which episodes feed an update depends on the
order the samplers finish in.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..agents.ppo import update
from ..errors import HostError, SettingsError
from .connect import connect
from .ledger import Ledger
from .sampler import Sampler

if TYPE_CHECKING:
    from ..agents.train import Trainer

RETIRE_AFTER = 3
"""episodes lost in a row after which a sampler is sent no more"""
STALL_S = 900.0
"""seconds without any episode coming back after which the fleet is taken for dead"""


@dataclass
class Lost:
    """An episode a sampler did not bring back."""

    job: tuple[int, int, int, int]
    sampler: int
    node: str | None
    error: str


class RayFleet:
    """The ledger and the sampler actors of one run, and the episodes in flight."""

    def __init__(self, files: dict[str, str], settings: Any, device_kind: str) -> None:
        self.settings = settings
        run = uuid.uuid4().hex[:8]
        here = ray.get_runtime_context().get_node_id()
        # on the driver's node: a lost worker node must not take the fleet's memory with it
        ledger = f"cuda-agent-{run}-ledger"
        # Ray's actor handles are typed by their class's methods, not by `.remote`: Any
        self.ledger: Any = ray.remote(Ledger).options(
            num_cpus=0, name=ledger,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        resources: dict[str, Any] = {"num_cpus": 1}
        if device_kind == "cuda":
            count = int(ray.cluster_resources().get("GPU", 0))
            if count < 1:
                raise SettingsError("--ray with --device cuda: the Ray cluster has no GPU")
            resources["num_gpus"] = 1
        else:
            count = settings.samplers
            cpus = ray.cluster_resources().get("CPU", 0)
            if device_kind != "replay" and cpus < count + 1:
                raise SettingsError(f"the Ray cluster has {cpus:g} CPUs: {count} samplers "
                                    "leave none for compiles; pass fewer --samplers")
        actor = ray.remote(max_restarts=-1, max_task_retries=0)(Sampler)
        self.samplers: list[Any] = [actor.options(name=f"cuda-agent-{run}-sampler-{i}",
                                       scheduling_strategy="SPREAD", **resources)
                         .remote(i, files, settings, ledger) for i in range(count)]
        self.nodes: dict[int, str] = {}
        self.in_flight: dict[ray.ObjectRef, tuple[int, tuple[int, int, int, int]]] = {}
        # a sampler that lost an episode is sent the next once it answers again (Ray restarts
        # it; an episode sent before would fail too): its probe, retried until it is back
        self.probing: dict[ray.ObjectRef, int] = {}
        self.losing = [0] * count  # episodes lost in a row, per sampler
        self.retired: set[int] = set()
        self.lost: list[Lost] = []
        self.episodes = 0
        self.measurements = 0
        self.served = 0
        self.names: list[str] = []

    @property
    def waiting(self) -> bool:
        return bool(self.in_flight or self.probing)

    def idle(self) -> list[int]:
        busy = {i for i, _ in self.in_flight.values()} | set(self.probing.values())
        return [i for i in range(len(self.samplers)) if i not in busy and i not in self.retired]

    def dispatch(self, i: int, job: tuple[int, int, int, int], weights: Any, meta: dict,
                 version: int) -> None:
        k, eid, _, seed = job
        ref = self.samplers[i].episode.remote(weights, meta, self.names[k], eid, version, seed)
        self.in_flight[ref] = (i, job)

    def wait(self, timeout: float) -> list[tuple[int, dict[str, Any] | Lost]]:
        """The episodes that came back (or were lost) once anything (an episode, a sampler
        back) came; a `HostError` if nothing did in `timeout` seconds."""
        refs = [*self.in_flight, *self.probing]
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if not ready:
            raise HostError(f"nothing came back from the Ray fleet in {timeout:g} s")
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)  # all done by now
        out: list[tuple[int, dict[str, Any] | Lost]] = []
        for ref in ready:
            if ref in self.probing:
                i = self.probing.pop(ref)
                try:
                    self.nodes[i] = ray.get(ref)["node"]
                except ray.exceptions.RayError:
                    self.retired.add(i)  # dead for good: Ray could not restart it
                continue
            i, job = self.in_flight.pop(ref)
            try:
                episode = ray.get(ref)
            except ray.exceptions.RayError as exc:
                lost = Lost(job, i, self.nodes.get(i),
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                self.lost.append(lost)
                self.losing[i] += 1
                if self.losing[i] >= RETIRE_AFTER:
                    self.retired.add(i)
                else:
                    probe = self.samplers[i].where.options(max_task_retries=-1).remote()
                    self.probing[probe] = i
                out.append((i, lost))
                continue
            self.losing[i] = 0
            self.nodes[i] = episode["node"]
            self.episodes += 1
            self.measurements += len(episode["curve"]) - episode["served"]
            self.served += episode["served"]
            out.append((i, episode))
        return out

    def report(self) -> dict[str, Any]:
        s = self.settings
        ledger: dict[str, Any]
        try:
            ledger = ray.get(self.ledger.report.remote(), timeout=30)
        except ray.exceptions.RayError:
            ledger = {}
        return {"samplers": len(self.samplers), "nodes": len(set(self.nodes.values())),
                "episodes": self.episodes, "measurements": self.measurements,
                "served_by_fleet": self.served, "ledger": ledger,
                "retired_samplers": sorted(self.retired),
                "lost_episodes": len(self.lost),
                # what a lost episode would have brought: its steps' batches, at most
                "lost_samples_at_most": len(self.lost) * s.steps * s.batch,
                "lost": [{"episode": x.job[1], "operator": self.names[x.job[0]],
                          "sampler": x.sampler, "node": x.node, "error": x.error}
                         for x in self.lost]}

    def close(self) -> None:
        # the episodes still in flight are not wanted: the actors go with them
        closing = [a.close.remote() for i, a in enumerate(self.samplers)
                   if i not in {j for j, _ in self.in_flight.values()}]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=30)
        except ray.exceptions.RayError:
            pass
        for a in [*self.samplers, self.ledger]:
            ray.kill(a)


def train_on_ray(trainer: "Trainer", progress: Callable[[dict[str, Any]], None] | None,
                 deadline: float | None) -> list[dict[str, Any]]:
    """`Trainer.train` on a Ray fleet: the remaining iterations, the checkpoint saved after
    each; `trainer.fleet_report` says what the fleet did and lost."""
    s = trainer.s
    assert s.ray is not None, "train_on_ray runs only with --ray"
    conn = connect(s.ray, local_cpus=s.samplers + 1)
    fleet = None
    try:
        # the samplers open the device the driver opened (`--device` unset: the driver's
        # choice, not each node's own)
        fleet = RayFleet(trainer.files, replace(s, run=replace(s.run, device=trainer.device.kind)),
                         trainer.device.kind)
        fleet.names = [op.name for op in trainer.operators]
        trainer.fleet = fleet
        return _learn(trainer, fleet, progress, deadline)
    finally:
        if fleet is not None:
            trainer.fleet_report = fleet.report()
            Path(s.out).mkdir(parents=True, exist_ok=True)
            (Path(s.out) / "fleet.json").write_text(
                json.dumps(trainer.fleet_report, indent=2) + "\n")
            fleet.close()
        trainer.fleet = None
        conn.close()


def _learn(trainer: "Trainer", fleet: RayFleet,
           progress: Callable[[dict[str, Any]], None] | None,
           deadline: float | None) -> list[dict[str, Any]]:
    s = trainer.s
    # a local run's episodes that were in flight at its checkpoint are sampled first
    queue = deque(trainer.pending_jobs)
    block = trainer.iteration

    def next_job() -> tuple[int, int, int, int]:
        nonlocal block
        if not queue:
            queue.extend(trainer._plan_jobs(block))
            block += 1
        return queue.popleft()

    meta = trainer.policy.describe()
    weights = ray.put(copy.deepcopy(trainer.policy.state_dict()))
    collected: list[dict[str, Any]] = []
    lost_before = 0
    t0 = time.perf_counter()
    while trainer.iteration < s.iterations:
        for i in fleet.idle():
            fleet.dispatch(i, next_job(), weights, meta, trainer.version)
        if not fleet.waiting:
            raise HostError(f"every sampler of the Ray fleet failed (lost {len(fleet.lost)} "
                            f"episodes; the last: {fleet.lost[-1].error if fleet.lost else '-'})")
        came = fleet.wait(STALL_S)
        collected.extend(ep for _, ep in came if not isinstance(ep, Lost))
        while len(collected) >= s.episodes and trainer.iteration < s.iterations:
            episodes, collected = collected[:s.episodes], collected[s.episodes:]
            fresh = [t for ep in episodes for t in ep["transitions"]
                     if t.version >= trainer.version - s.max_staleness]
            stale = sum(len(ep["transitions"]) for ep in episodes) - len(fresh)
            stats = update(trainer.policy, trainer.optimizer, fresh, s.ppo, trainer.generator)
            trainer.version += 1
            trainer.iteration += 1
            weights = ray.put(copy.deepcopy(trainer.policy.state_dict()))
            seconds = time.perf_counter() - t0
            row = trainer._curve_row(episodes, stats, stale, seconds)
            row["lost_episodes"] = len(fleet.lost) - lost_before
            row["served_by_fleet"] = sum(ep["served"] for ep in episodes)
            lost_before = len(fleet.lost)
            trainer.curves.append(row)
            # a resumed run plans its episodes afresh (see the module's docstring)
            trainer.sampler_state, trainer.pending_jobs = {}, []
            trainer.save()
            if progress:
                progress(row)
            t0 = time.perf_counter()
            if deadline is not None and time.time() + seconds >= deadline:
                return trainer.curves
    return trainer.curves
