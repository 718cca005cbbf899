"""Faults injected into the caches (issue 47): a cache entry is used only if it checks out.

The build cache's cubins overwritten with random bytes, a capture cache entry of one problem
copied over another's, a capture entry crafted to run code when unpickled: each through the real
entry points (a tune on the simulated device, a problem's `graph()`), each must be caught,
made again and replaced, with one warning, and never used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path

import pytest

import cuda_agent
from helpers import GOOD
from cuda_agent import cache_check
from cuda_agent.cache_check import CacheWarning
from cuda_agent.ir import capture_cache
from cuda_agent.problem import load_problem
from cuda_agent.tuner import TuneResult


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache root, the capture cache on, and no damage reported yet."""
    root = tmp_path / "cache"
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(root))
    monkeypatch.setenv(capture_cache.ENV, "1")
    monkeypatch.setattr(cache_check, "_warned", set())
    return root


def shipped_cubin(out: Path) -> bytes:
    text = (out / "model_new.py").read_text()
    return base64.b64decode(re.search(r"^CUBIN_B64 = '([^']*)'$", text, re.M).group(1))


def tune(out: Path, problem: Path = GOOD / "relu_small.py") -> TuneResult:
    return cuda_agent.tune(problem, out=out, device="sim", budget=4, batch=4,
                           strategy="random", store=":memory:", notify=lambda s: None,
                           baselines=False, workers=1, compile_timeout_s=None)


def test_garbled_cubins_are_rebuilt_and_never_shipped(cache, tmp_path):
    tune(tmp_path / "first")
    cubins = sorted((cache / "build").rglob("*.cubin"))
    assert cubins and shipped_cubin(tmp_path / "first")[:4] == b"\x7fELF"
    garbage = {}
    for path in cubins:
        garbage[path] = os.urandom(path.stat().st_size)
        path.write_bytes(garbage[path])

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = tune(tmp_path / "again")
    shipped = shipped_cubin(tmp_path / "again")
    assert shipped not in garbage.values() and shipped[:4] == b"\x7fELF"
    # every garbled entry it met was compiled again and replaced: the bytes on disk match the
    # hash their entry records, and the shipped cubin is one of them
    on_disk = {}
    for path in cubins:
        meta = json.loads(path.with_suffix(".json").read_text())
        if path.read_bytes() != garbage[path]:
            assert hashlib.sha256(path.read_bytes()).hexdigest() == meta["cubin_sha256"]
            on_disk[path] = path.read_bytes()
    assert shipped in on_disk.values()
    assert result.build_stats["rebuilt"] == len(on_disk) >= 1
    report = json.loads((tmp_path / "again" / "report.json").read_text())
    assert report["build_stats"]["rebuilt"] == len(on_disk)
    assert len([w for w in seen if w.category is CacheWarning]) == 1


def _capture(path: Path) -> Path:
    """Capture `path` through the cache; the cache entry it wrote."""
    before = set(capture_cache.cache_dir().glob("*")) if capture_cache.cache_dir().exists() \
        else set()
    load_problem(path).graph()
    (entry,) = set(capture_cache.cache_dir().glob("*")) - before
    return entry


def test_another_problems_capture_entry_is_refused(cache, tmp_path):
    """One problem's entry copied over another's key: the tune captures the right problem
    (its family and its graph), and the entry is replaced."""
    relu, total = GOOD / "relu_small.py", GOOD / "sum_small.py"
    relu_entry = _capture(relu)
    sum_entry = _capture(total)
    right = load_problem(total).graph()
    shutil.copyfile(relu_entry, sum_entry)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = tune(tmp_path / "o", problem=total)
    assert result.plan.graph == right and result.plan.family != "elementwise"
    assert [str(w.message) for w in seen if w.category is CacheWarning and
            "another key" in str(w.message)]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["family"] == result.plan.family
    assert load_problem(total).graph() == right  # replaced by the right graph


class _RunsCode:
    """Unpickling this runs `code`."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


def test_a_capture_entry_crafted_to_run_code_is_never_run(cache, tmp_path):
    problem = GOOD / "relu_small.py"
    entry = _capture(problem)
    right = load_problem(problem).graph()
    marker = tmp_path / "the-entry-ran-code"
    crafted = pickle.dumps(_RunsCode(f"open({str(marker)!r}, 'w').close()"))
    # under every name a reader of this key could open: the entry's, and a pickle's
    for path in {entry, entry.with_suffix(".pkl"), entry.with_suffix(".json")}:
        path.write_bytes(crafted)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        assert load_problem(problem).graph() == right
    assert not marker.exists(), "loading the capture cache ran the entry's code"


def test_the_worker_loads_only_the_bytes_the_cache_checked(tmp_path):
    """A cubin replaced between the build cache's check and the GPU worker's load is not run:
    the candidate is a transient `cache_damaged` failure, measured again by a later run."""
    import hashlib

    from cuda_agent.runner.worker import read_cubin
    from cuda_agent.store import TRANSIENT_KINDS

    path = tmp_path / "k.cubin"
    path.write_bytes(b"\x7fELF checked bytes")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert read_cubin(str(path), sha) == b"\x7fELF checked bytes"
    path.write_bytes(b"\x7fELF swapped in after the check")
    assert read_cubin(str(path), sha) is None
    assert read_cubin(str(path), None) == b"\x7fELF swapped in after the check"
    assert "cache_damaged" in TRANSIENT_KINDS
