"""Captured graphs kept on disk, so that a problem tuned again skips the trace.

A capture's trace can import Dynamo (about a second of a `tune`'s start on a CPU: torch.export's
first call, where capture's own tracer leaves a module to it, or torch's Python meta kernels);
the graph depends only on the problem file, the modules it imports from outside the Python
installation, the shapes `get_inputs()` returns, torch's version and this package's capture
code. Those are the key (`capture_key`); the graph is pickled under the cache
root (`$CUDA_AGENT_CACHE`, else ~/.cache/cuda-agent) in `capture/`, written through a temporary
file renamed into place. A file that cannot be read is captured again and replaced.
`CUDA_AGENT_CAPTURE_CACHE=0` turns it off (the test suite does, where tests patch the capture).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .. import __version__
from .graph import Graph

ENV = "CUDA_AGENT_CAPTURE_CACHE"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def cache_dir() -> Path:
    from ..build.builder import default_cache_dir

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


def capture_key(source: str, module: ModuleType, init_inputs: list, inputs: list) -> str:
    h = hashlib.sha256()
    for part in (source.encode(), torch.__version__.encode(), _code_hash().encode(),
                 _describe(init_inputs).encode(), _describe(inputs).encode(),
                 *_local_sources(module)):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def load(key: str) -> Graph | None:
    path = cache_dir() / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            graph = pickle.load(f)
    except Exception:  # noqa: BLE001 - none yet, or damaged: captured again and replaced
        return None
    return graph if isinstance(graph, Graph) else None


def store(key: str, graph: Graph) -> None:
    """Keep `graph` under `key`; a cache that cannot be written is only not used."""
    folder = cache_dir()
    tmp = folder / f"{key}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, folder / f"{key}.pkl")
    except OSError:
        tmp.unlink(missing_ok=True)
