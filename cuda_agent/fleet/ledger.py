"""The fleet's shared memory: one actor every sampler asks before it compiles or measures.

The compile cache: the ledger starts each compile as a Ray task on the cluster's CPUs and keeps
a reference to its result (the entry's record and the cubin, in Ray's object store), so a source
any sampler asked for is compiled once for the whole fleet; the sampler writes the result into
its own machine's file cache as a checked entry (`build/builder.py`), which serves it from then
on. Experience dedupe: the measurements the samplers made, by the store's key (candidate,
device, GPU, toolchain and protocol), served to any sampler that proposes the same kernel, as
the store serves them within one process. Failures that say something about the moment, not the
candidate (`store.TRANSIENT_KINDS`), are neither kept nor served.

Both are bounded (`MAX_BUILDS`, `MAX_MEASURED`), the least recently asked for going first: a
training run of many iterations asks for tens of thousands of sources, and every build the
ledger still refers to keeps its cubin in the object store. What goes is cheap to lose: each
sampler's file cache still holds the cubins it wrote, and a measurement forgotten is measured
again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import ray

from ..build.builder import compile_entry
from ..runner.records import Measurement
from ..store import HOST_FAILURE_MESSAGES, TRANSIENT_KINDS

MAX_BUILDS = 4096
"""compiles the ledger refers to at most (a cubin is tens to hundreds of kB in the object
store: a few hundred MB at most)"""
MAX_MEASURED = 65536
"""measurements kept to serve at most (a few hundred bytes each)"""


@ray.remote(num_cpus=1)
def compile_task(source: str, arch: str, options: tuple[str, ...], backend: str, key: str,
                 toolchain: str) -> tuple[dict[str, Any], bytes | None]:
    """One compile on a CPU of the cluster (Ray retries it elsewhere if its node dies)."""
    return compile_entry(source, arch, tuple(options), backend, key, toolchain)


def reusable(m: Measurement) -> bool:
    """Whether another sampler may be served `m` instead of measuring (as `Store.lookup`)."""
    return m.ok or (m.error_kind not in TRANSIENT_KINDS
                    and m.error_msg not in HOST_FAILURE_MESSAGES)


class Ledger:
    """The compile cache and the experience dedupe of one training run's fleet."""

    def __init__(self, max_builds: int = MAX_BUILDS, max_measured: int = MAX_MEASURED) -> None:
        self.builds: OrderedDict[str, ray.ObjectRef] = OrderedDict()
        self.measured: OrderedDict[tuple[str, str, str, str], Measurement] = OrderedDict()
        self.max_builds, self.max_measured = max_builds, max_measured
        self.stats = {"compiles": 0, "compiles_shared": 0, "measurements": 0, "served": 0,
                      "builds_dropped": 0, "measurements_dropped": 0}

    def compile(self, jobs: list[tuple]) -> list[ray.ObjectRef]:
        """A reference to each job's (record, cubin), a compile started for the keys no
        sampler asked for before. `jobs`: `build.builder._build_one`'s arguments."""
        refs = []
        for source, arch, options, backend, key, _cache_dir, toolchain in jobs:
            ref = self.builds.get(key)
            if ref is None:
                ref = compile_task.remote(source, arch, tuple(options), backend, key, toolchain)
                self.builds[key] = ref
                self.stats["compiles"] += 1
                self._trim(self.builds, self.max_builds, "builds_dropped")
            else:
                self.builds.move_to_end(key)
                self.stats["compiles_shared"] += 1
            refs.append(ref)
        return refs

    def _trim(self, entries: OrderedDict, most: int, counter: str) -> None:
        """Drop the least recently asked-for entries past `most` (the caller's refs to a
        dropped build stay valid: Ray frees its object once no one refers to it)."""
        while len(entries) > most:
            entries.popitem(last=False)
            self.stats[counter] += 1

    def forget(self, key: str) -> None:
        """A compile that failed for the moment (its task lost, a timeout): the next asking
        compiles it again."""
        self.builds.pop(key, None)

    def lookup(self, key: str, device: str, gpu: str, toolchain: str) -> Measurement | None:
        m = self.measured.get((key, device, gpu, toolchain))
        if m is not None:
            self.measured.move_to_end((key, device, gpu, toolchain))
            self.stats["served"] += 1
        return m

    def record(self, key: str, device: str, gpu: str, toolchain: str, m: Measurement) -> None:
        if not m.reused and reusable(m):
            self.measured.setdefault((key, device, gpu, toolchain),
                                     replace(m, reused=True))
            self.stats["measurements"] += 1
            self._trim(self.measured, self.max_measured, "measurements_dropped")

    def report(self) -> dict[str, int]:
        return dict(self.stats)
