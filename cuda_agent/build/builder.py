"""Builder: rendered candidates in, cubins out, through a content-addressed cache and a pool of
compile processes (`pool.py`). Batched like MetaSchedule's `Builder.build(list[BuilderInput])`.

The cache holds, per key, `<key>.cubin` and `<key>.json`; the .json, written last, records the
cache's schema, the key, what the key was made of (source hash, arch, options, backend,
toolchain) and the cubin's sha256. A hit is used only when all of them check out
(`cache_check.py`); anything else is compiled again and replaced. Temporaries are written in the
cache's root, where the next run finds and removes those of killed runs (`tempfiles.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import tempfiles
from ..cache_check import default_cache_dir, digest, report_damage
from ..errors import HostError
from .compiler import HOST_FAILURE, compile_source, resources_total, summarize_log, toolchain_id
from .pool import CUT, CompilePool, PoolClosed

SCHEMA = 2
"""the build cache's entry format; an entry of another (or none: before 2) is compiled again"""
CACHE_NAME = "build cache"


@dataclass(frozen=True)
class BuildInput:
    source: str
    arch: str
    options: tuple[str, ...] = ()


@dataclass
class BuildResult:
    key: str
    cubin_path: str | None
    error_kind: str | None = None
    error_msg: str | None = None
    seconds: float = 0.0
    cached: bool = False
    resources: dict[str, Any] = field(default_factory=dict)  # worst case over kernels
    per_kernel: dict[str, dict[str, int]] = field(default_factory=dict)
    cubin_sha256: str | None = None  # the hash the cache entry records for the cubin

    @property
    def ok(self) -> bool:
        return self.cubin_path is not None


def claims(source: str, arch: str, options: tuple[str, ...], backend: str,
           toolchain: str) -> dict[str, Any]:
    """What a cache entry says its cubin was compiled from (the key's inputs, the source by
    its hash)."""
    return {"source_sha256": digest(source.encode()), "arch": arch, "options": list(options),
            "backend": backend, "toolchain": toolchain}


def compile_entry(source: str, arch: str, options: tuple[str, ...], backend: str, key: str,
                  toolchain: str) -> tuple[dict[str, Any], bytes | None]:
    """Compile one source: the cache entry's record and the cubin (None where it failed). Pure:
    writes nothing, so it can run on another machine (the Ray fleet's compile tasks)."""
    out = compile_source(source, arch, backend, options)
    meta = {"schema": SCHEMA, "key": key,
            "claims": claims(source, arch, options, backend, toolchain),
            "cubin_sha256": digest(out.cubin) if out.cubin is not None else None,
            "error_kind": out.error_kind,
            "error_msg": summarize_log(out.log) if out.error_kind else None,
            "seconds": out.seconds, "per_kernel": out.resources}
    return meta, out.cubin


def write_entry(cache_dir: str | Path, meta: dict[str, Any], cubin: bytes | None) -> None:
    """Store a compile's result in the cache under its key (the .json last: it makes the entry)."""
    root = Path(cache_dir)
    base = root / meta["key"][:2] / meta["key"]
    if cubin is not None:
        tempfiles.write_atomic(base.with_suffix(".cubin"), cubin, temp_dir=root)
    # a source the compiler rejected never compiles with this toolchain: cached too; a timeout
    # or a compiler that could not run says something about the moment, not the source
    if meta["error_kind"] in (None, "compile"):
        tempfiles.write_atomic(base.with_suffix(".json"), json.dumps(meta).encode(),
                               temp_dir=root)


def _build_one(args: tuple[str, str, tuple[str, ...], str, str, str, str]) -> dict[str, Any]:
    """Worker: compile one source and store it in the cache (runs in a compile process)."""
    source, arch, options, backend, key, cache_dir, toolchain = args
    meta, cubin = compile_entry(source, arch, options, backend, key, toolchain)
    write_entry(cache_dir, meta, cubin)
    return meta


class Builder:
    """Compiles batches of candidates; compile errors come back as results, never raised.

    With `timeout_s` (the tuner's), every compile runs in a process of the pool (`pool.py`):
    one that outlives the timeout is stopped (`compile_timeout`), one whose process dies twice
    is a `compile_crash` (neither is cached: the next attempt may finish), and what `deadline`
    cuts comes back `CUT`. A compile process that cannot start, or a compiler that cannot run,
    raises `HostError`: the machine failed, not the candidate."""

    _worker = staticmethod(_build_one)  # tests swap in a worker that dies

    def __init__(self, backend: str = "nvrtc", workers: int | None = None,
                 cache_dir: str | Path | None = None, timeout_s: float | None = None) -> None:
        self.backend = backend
        self.toolchain = toolchain_id(backend)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.workers = workers or max(1, (os.cpu_count() or 2))
        self.timeout_s = timeout_s
        self._pool: CompilePool | None = None
        self._closed = False
        # several threads may build at once (the bench's concurrent strategies): one pool
        self._lock = threading.Lock()
        # "rebuilt": cache entries that failed their check and were compiled again
        self.stats = {"compiled": 0, "cached": 0, "failed": 0, "compile_s": 0.0, "rebuilt": 0}

    def key(self, inp: BuildInput) -> str:
        blob = json.dumps([inp.source, inp.arch, list(inp.options), self.backend,
                           self.toolchain], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _claims(self, inp: BuildInput) -> dict[str, Any]:
        return claims(inp.source, inp.arch, inp.options, self.backend, self.toolchain)

    def _damaged(self, where: Path, why: str) -> None:
        with self._lock:
            self.stats["rebuilt"] += 1
        report_damage(CACHE_NAME, where, why)

    def _cached(self, key: str, inp: BuildInput) -> BuildResult | None:
        """The entry under `key` if it checks out (schema, key, claims, the cubin's hash); else
        None, and it is compiled again."""
        base = self.cache_dir / key[:2] / key
        meta_path = base.with_suffix(".json")
        try:
            meta = json.loads(meta_path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._damaged(meta_path, "not readable JSON")
            return None
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
            return None  # another release's entry: replaced quietly
        if meta.get("key") != key or meta.get("claims") != self._claims(inp):
            self._damaged(meta_path, "written for another key")
            return None
        cubin = base.with_suffix(".cubin")
        if meta.get("error_kind") is None:
            try:
                data = cubin.read_bytes()
            except OSError:
                self._damaged(cubin, "missing")
                return None
            if digest(data) != meta.get("cubin_sha256"):
                self._damaged(cubin, "its bytes do not match the sha256 its entry records")
                return None
        ok = meta.get("error_kind") is None
        return BuildResult(key, str(cubin) if ok else None, meta.get("error_kind"),
                           meta.get("error_msg"), meta.get("seconds", 0.0), True,
                           resources_total(meta.get("per_kernel", {})),
                           meta.get("per_kernel", {}), meta.get("cubin_sha256") if ok else None)

    def cubin(self, inp: BuildInput) -> bytes | None:
        """The cubin of `inp` (from the cache, or compiled), read once and checked against the
        sha256 its entry records: what `emit` ships. A file replaced since the entry was
        checked is compiled again; None where it does not compile, or its bytes still do not
        match (then the emitted module compiles the source itself on first use)."""
        for _ in range(2):
            [res] = self.build([inp])
            if res.cubin_path is None:  # not `ok`
                return None
            try:
                data = Path(res.cubin_path).read_bytes()
            except OSError:
                data = b""
            if digest(data) == res.cubin_sha256:
                return data
            self._damaged(Path(res.cubin_path), "changed after its check")
        return None

    def _pool_get(self) -> CompilePool:
        with self._lock:
            if self._closed:  # a build still running in another thread as the run ends
                raise PoolClosed
            if self._pool is None:
                self._pool = CompilePool(self.workers, self._worker)
            return self._pool

    def build(self, inputs: list[BuildInput], progress: Callable[[int], None] | None = None,
              deadline: float | None = None) -> list[BuildResult]:
        """Build a batch; identical sources compile once. Order of results = order of inputs.
        `deadline` (a `time.monotonic()` instant): what is not compiled by then is `CUT`."""
        tempfiles.sweep_once(self.cache_dir)  # temporaries of killed runs
        keys = [self.key(i) for i in inputs]
        results: dict[str, BuildResult] = {}
        todo: dict[str, BuildInput] = {}
        for k, inp in zip(keys, inputs):
            if k in results or k in todo:
                continue
            hit = self._cached(k, inp)
            if hit is not None:
                results[k] = hit
                with self._lock:
                    self.stats["cached"] += 1
            else:
                todo[k] = inp
        if progress:
            progress(len(inputs) - len(todo))
        if todo:
            jobs = [(i.source, i.arch, i.options, self.backend, k, str(self.cache_dir),
                     self.toolchain) for k, i in todo.items()]
            metas = self._compile(jobs, deadline)
            for meta in metas:
                if meta["error_kind"] == HOST_FAILURE:
                    raise HostError(f"the {self.backend} compiler could not run: "
                                    f"{meta['error_msg']}")
            for (k, _), meta in zip(todo.items(), metas):
                cubin = self.cache_dir / k[:2] / (k + ".cubin")
                res = BuildResult(k, str(cubin) if meta["error_kind"] is None else None,
                                  meta["error_kind"], meta["error_msg"], meta["seconds"], False,
                                  resources_total(meta["per_kernel"]), meta["per_kernel"],
                                  meta.get("cubin_sha256"))
                results[k] = res
                if res.error_kind == CUT:
                    continue  # never compiled: no statistic, no progress
                with self._lock:
                    self.stats["compiled"] += 1
                    self.stats["compile_s"] += meta["seconds"]
                    self.stats["failed"] += not res.ok
                if progress:
                    progress(1)
        return [results[k] for k in keys]

    def _compile(self, jobs: list[tuple], deadline: float | None) -> list[dict[str, Any]]:
        """Compile the jobs (`_build_one`'s arguments), each result written to the cache: its
        record, in order. Where the compiles run is this method's business (the Ray fleet's
        builder sends them to the cluster's CPUs)."""
        # without a timeout, one job compiles here unless the pool is up already (then
        # other threads' compiles run beside it, not behind it on this interpreter's lock);
        # a timeout or a deadline needs a process that can be stopped
        pool_up = self._pool is not None and self._pool.started
        if self.timeout_s is None and deadline is None and (
                self.workers == 1 or (len(jobs) == 1 and not pool_up)):
            return [self._worker(job) for job in jobs]
        return self._pool_get().run(jobs, self.timeout_s, deadline)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> "Builder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
