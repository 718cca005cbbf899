"""Builder: rendered candidates in, cubins out, through a content-addressed cache and a pool of
compile processes. Batched like MetaSchedule's `Builder.build(list[BuilderInput])`."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

from .compiler import compile_source, resources_total, summarize_log, toolchain_id

CACHE_ENV = "CUDA_AGENT_CACHE"


def default_cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuda-agent")
    return Path(root) / "build"


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

    @property
    def ok(self) -> bool:
        return self.cubin_path is not None


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _build_one(args: tuple[str, str, tuple[str, ...], str, str, str]) -> dict[str, Any]:
    """Worker: compile one source and store it in the cache (runs in a compile process)."""
    source, arch, options, backend, key, cache_dir = args
    out = compile_source(source, arch, backend, options)
    meta = {"error_kind": out.error_kind,
            "error_msg": summarize_log(out.log) if out.error_kind else None,
            "seconds": out.seconds, "per_kernel": out.resources}
    base = Path(cache_dir) / key[:2] / key
    if out.cubin is not None:
        _atomic_write(base.with_suffix(".cubin"), out.cubin)
    # failures are cached too: a source that does not compile never will with this toolchain
    _atomic_write(base.with_suffix(".json"), json.dumps(meta).encode())
    return meta


CRASHED = "the compiler's process died compiling this source (a crash, or killed for memory)"


class Builder:
    """Compiles batches of candidates; compile errors come back as results, never raised.

    A compile process that dies (the compiler crashing on a source, or the kernel's OOM killer)
    breaks a process pool for every job in it: the batch's jobs not finished then are compiled
    again one at a time, each in a process of its own, so that only the source that kills its
    process fails (error kind "compile"; not cached, since the next attempt may live)."""

    _worker = staticmethod(_build_one)  # tests swap in a worker that dies

    def __init__(self, backend: str = "nvrtc", workers: int | None = None,
                 cache_dir: str | Path | None = None) -> None:
        self.backend = backend
        self.toolchain = toolchain_id(backend)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.workers = workers or max(1, (os.cpu_count() or 2))
        self._pool: ProcessPoolExecutor | None = None
        # several threads may build at once (the bench's concurrent strategies): one pool
        self._lock = threading.Lock()
        self.stats = {"compiled": 0, "cached": 0, "failed": 0, "compile_s": 0.0}

    def key(self, inp: BuildInput) -> str:
        blob = json.dumps([inp.source, inp.arch, list(inp.options), self.backend,
                           self.toolchain], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _cached(self, key: str) -> BuildResult | None:
        base = self.cache_dir / key[:2] / key
        meta_path = base.with_suffix(".json")
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        cubin = base.with_suffix(".cubin")
        if meta.get("error_kind") is None and not cubin.exists():
            return None
        return BuildResult(key, str(cubin) if cubin.exists() else None, meta.get("error_kind"),
                           meta.get("error_msg"), meta.get("seconds", 0.0), True,
                           resources_total(meta.get("per_kernel", {})),
                           meta.get("per_kernel", {}))

    def _pool_get(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # no max_tasks_per_child: on Python 3.11 retired workers are replaced only on
                # submit(), so a long map() could wait forever (CPython gh-115634)
                self._pool = ProcessPoolExecutor(self.workers, mp_context=get_context("spawn"))
            return self._pool

    def build(self, inputs: list[BuildInput],
              progress: Callable[[int], None] | None = None) -> list[BuildResult]:
        """Build a batch; identical sources compile once. Order of results = order of inputs."""
        keys = [self.key(i) for i in inputs]
        results: dict[str, BuildResult] = {}
        todo: dict[str, BuildInput] = {}
        for k, inp in zip(keys, inputs):
            if k in results or k in todo:
                continue
            hit = self._cached(k)
            if hit is not None:
                results[k] = hit
                with self._lock:
                    self.stats["cached"] += 1
            else:
                todo[k] = inp
        if progress:
            progress(len(inputs) - len(todo))
        if todo:
            jobs = [(i.source, i.arch, i.options, self.backend, k, str(self.cache_dir))
                    for k, i in todo.items()]
            # one job compiles here unless the pool is up already: then other threads'
            # compiles run beside it, not behind it on this process's interpreter lock
            if self.workers == 1 or (len(jobs) == 1 and self._pool is None):
                metas = [self._worker(job) for job in jobs]
            else:
                try:
                    metas = list(self._pool_get().map(self._worker, jobs, chunksize=1))
                except BrokenProcessPool:
                    self._drop_pool()
                    metas = [self._isolated(job) for job in jobs]
            for (k, _), meta in zip(todo.items(), metas):
                cubin = self.cache_dir / k[:2] / (k + ".cubin")
                res = BuildResult(k, str(cubin) if meta["error_kind"] is None else None,
                                  meta["error_kind"], meta["error_msg"], meta["seconds"], False,
                                  resources_total(meta["per_kernel"]), meta["per_kernel"])
                results[k] = res
                with self._lock:
                    self.stats["compiled"] += 1
                    self.stats["compile_s"] += meta["seconds"]
                    self.stats["failed"] += not res.ok
                if progress:
                    progress(1)
        return [results[k] for k in keys]

    def _isolated(self, job: tuple) -> dict[str, Any]:
        """One job in a process of its own, after a pool broke: its cached result if an
        earlier process finished it, else a fresh compile; a death here is this source's."""
        hit = self._cached(job[4])
        if hit is not None:
            return {"error_kind": hit.error_kind, "error_msg": hit.error_msg,
                    "seconds": hit.seconds, "per_kernel": hit.per_kernel}
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as one:
            try:
                return one.submit(self._worker, job).result()
            except BrokenProcessPool:
                return {"error_kind": "compile", "error_msg": CRASHED, "seconds": 0.0,
                        "per_kernel": {}}

    def _drop_pool(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(cancel_futures=True)
                self._pool = None

    def __enter__(self) -> "Builder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
