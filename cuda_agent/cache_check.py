"""What the on-disk caches (the build cache's cubins, the capture cache's graphs) share when they
check an entry before using it: its content hash, and how a rejected entry is reported.

A cache entry is used only if it was written by this schema of the cache, for the key asked for,
and its content still hashes to what was recorded when it was written. Anything else (a garbled
file, one copied over another key's, one of another release) is made again and replaced. A
damaged entry is worth one warning per cache and process: the user learns that something
writes into the cache, without a line per entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any


class CacheWarning(UserWarning):
    """A cache entry failed its check and is being made again (it is never used)."""


_warned: set[str] = set()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(value: Any) -> bytes:
    """The bytes a JSON value is hashed by: key order and spacing fixed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def report_damage(cache: str, where: object, why: str) -> None:
    """Warn (once per `cache` and process) that an entry failed its check."""
    if cache in _warned:
        return
    _warned.add(cache)
    warnings.warn(f"{cache} entry {where} failed its check ({why}); it is made again and "
                  "replaced (further damaged entries are replaced without a warning)",
                  CacheWarning, stacklevel=3)


CACHE_ENV = "CUDA_AGENT_CACHE"


def default_cache_dir() -> Path:
    """The build cache's folder (the capture cache sits beside it): $CUDA_AGENT_CACHE/build,
    else $XDG_CACHE_HOME (~/.cache)/cuda-agent/build."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuda-agent")
    return Path(root) / "build"
