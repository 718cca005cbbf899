"""Captured graphs kept on disk, so that a problem tuned again skips the trace.

A capture's trace can import Dynamo (about a second of a `tune`'s start on a CPU: torch.export's
first call, where capture's own tracer leaves a module to it, or torch's Python meta kernels);
the graph depends only on the problem file, the modules it imports from outside the Python
installation, the shapes `get_inputs()` returns, torch's version and this package's capture
code. Those are the key's claims (`capture_key`), and the key is their hash.

An entry is one JSON file, `<key>.json` under the cache root (`$CUDA_AGENT_CACHE`, else
~/.cache/cuda-agent) in `capture/`: the cache's schema, the key, its claims, the graph as plain
data (`graph_codec.py`: decoding it runs no code, unlike a pickle) and the sha256 of that data.
It is used only if all of them check out (`cache_check.py`); a damaged entry, one copied over
another key's, or one of another schema is captured again and replaced. Entries are written
through temporaries renamed into place; those of killed runs are removed (`tempfiles.py`).
`CUDA_AGENT_CAPTURE_CACHE=0` turns it off (the test suite does, where tests patch the capture).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .. import tempfiles
from ..cache_check import canonical, default_cache_dir, digest, report_damage
from ..version import __version__
from . import graph_codec
from .graph import Graph

ENV = "CUDA_AGENT_CAPTURE_CACHE"
SCHEMA = 2
"""the entry format; 1 was a pickle (`<key>.pkl`), which is never read"""
CACHE_NAME = "capture cache"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def cache_dir() -> Path:
    return default_cache_dir().parent / "capture"


@lru_cache(maxsize=1)
def _code_hash() -> str:
    """This package's IR sources (capture, plan, ...): a change to them is a new graph."""
    h = hashlib.sha256(__version__.encode())
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def _installed(path: str) -> bool:
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.startswith(r) for r in roots if r)


def _local_sources(module: ModuleType) -> list[bytes]:
    """The files of the modules the problem uses from outside the Python installation (a
    helper next to it, say): what they define can change the graph."""
    files = set()
    for value in vars(module).values():
        mod = value if isinstance(value, ModuleType) else sys.modules.get(
            getattr(value, "__module__", "") or "")
        path = getattr(mod, "__file__", None)
        if path and mod is not module and not _installed(os.path.realpath(path)):
            files.add(path)
    out = []
    for path in sorted(files):
        try:
            out.append(path.encode() + Path(path).read_bytes())
        except OSError:
            out.append(path.encode())
    return out


def _describe(values: Any) -> str:
    """Init or forward arguments as the key sees them: tensors by shape and dtype."""
    if isinstance(values, torch.Tensor):
        return f"T{tuple(values.shape)}{values.dtype}"
    if isinstance(values, (list, tuple)):
        return "[" + ",".join(_describe(v) for v in values) + "]"
    return repr(values)


class CaptureKey(str):
    """A capture cache key: the sha256 of its claims, carrying the claims themselves (which
    `store` writes into the entry, and `load` checks against the key)."""

    claims: dict[str, Any]

    def __new__(cls, claims: dict[str, Any]) -> "CaptureKey":
        key = super().__new__(cls, digest(canonical(claims)))
        key.claims = claims
        return key


def capture_key(source: str, module: ModuleType, init_inputs: list, inputs: list) -> CaptureKey:
    return CaptureKey({
        "source_sha256": digest(source.encode()), "torch": torch.__version__,
        "capture_code": _code_hash(), "init_inputs": _describe(init_inputs),
        "inputs": _describe(inputs),
        "local_sources_sha256": [digest(s) for s in _local_sources(module)]})


def _path(key: str) -> Path:
    return cache_dir() / f"{key}.json"


def load(key: str) -> Graph | None:
    """The graph kept under `key` if its entry checks out; else None (capture it again)."""
    tempfiles.sweep_once(cache_dir())  # temporaries of killed runs
    path = _path(key)
    try:
        entry = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        report_damage(CACHE_NAME, path, "not readable JSON")
        return None
    if not isinstance(entry, dict) or entry.get("schema") != SCHEMA:
        return None  # another release's entry: replaced quietly
    claims = entry.get("claims")
    if entry.get("key") != key or not isinstance(claims, dict) or \
            digest(canonical(claims)) != key:
        report_damage(CACHE_NAME, path, "written for another key")
        return None
    try:
        if digest(canonical(entry.get("graph"))) != entry.get("sha256"):
            report_damage(CACHE_NAME, path, "its graph does not match the sha256 it records")
            return None
    except ValueError:  # a NaN where JSON allows none: not what `store` wrote
        report_damage(CACHE_NAME, path, "its graph is not plain JSON")
        return None
    try:
        return graph_codec.decode(entry["graph"])
    except (ValueError, TypeError) as exc:
        report_damage(CACHE_NAME, path, f"its graph does not decode: {exc}")
        return None


def store(key: CaptureKey, graph: Graph) -> None:
    """Keep `graph` under `key`; a cache that cannot be written, or a graph the codec cannot
    encode, is only not used."""
    claims = getattr(key, "claims", None)
    if claims is None:  # a bare key string: what it claims is unknown, so no entry
        return
    try:
        data = graph_codec.encode(graph)
    except TypeError:
        return
    entry = {"schema": SCHEMA, "key": str(key), "claims": claims, "graph": data,
             "sha256": digest(canonical(data))}
    try:
        tempfiles.write_atomic(_path(key), json.dumps(entry).encode())
    except OSError:
        pass
