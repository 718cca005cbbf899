"""The Builder and the compiler wrappers: errors as data, a content-addressed cache, batching."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import nvcc_available
from cuda_agent import cache_check
from cuda_agent.build.builder import SCHEMA, Builder, BuildInput
from cuda_agent.cache_check import CacheWarning
from cuda_agent.build.compiler import (compile_source, parse_ptxas, resources_total,
                                       summarize_log, toolchain_id)

GOOD = r'''
extern "C" __global__ void k_add(const float* a, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + 1.f;
}
'''

GOOD2 = GOOD.replace("+ 1.f", "* 2.f")

BROKEN = r'''
extern "C" __global__ void k_bad(const float* a, float* out) {
  out[threadIdx.x] = a[threadIdx.x] + undeclared_thing;
}
'''

SYNTAX = 'extern "C" __global__ void k(float* o) { o[0] = 1.f '


@pytest.fixture
def fresh_warnings(monkeypatch):
    """A damaged entry warns once per cache and process: each test starts unwarned."""
    monkeypatch.setattr(cache_check, "_warned", set())


@pytest.fixture
def builder(tmp_path):
    with Builder("nvrtc", workers=1, cache_dir=tmp_path / "cache") as b:
        yield b


def test_good_source_compiles_to_a_cubin(builder):
    [res] = builder.build([BuildInput(GOOD, "sm_90")])
    assert res.ok and res.error_kind is None and not res.cached
    data = Path(res.cubin_path).read_bytes()
    assert data[:4] == b"\x7fELF"
    assert "k_add" in res.per_kernel and res.per_kernel["k_add"]["registers"] > 0
    assert res.resources["registers"] == res.per_kernel["k_add"]["registers"]
    assert builder.stats["compiled"] == 1 and builder.stats["failed"] == 0


@pytest.mark.parametrize("src,word", [(BROKEN, "undeclared_thing"), (SYNTAX, "error")])
def test_compile_error_is_a_result_not_an_exception(builder, src, word):
    [res] = builder.build([BuildInput(src, "sm_90")])
    assert not res.ok and res.cubin_path is None
    assert res.error_kind == "compile"
    assert res.error_msg and word in res.error_msg and len(res.error_msg) <= 400
    assert builder.stats["failed"] == 1


def test_mixed_batch_keeps_order(tmp_path):
    with Builder("nvrtc", workers=2, cache_dir=tmp_path) as b:
        res = b.build([BuildInput(GOOD, "sm_90"), BuildInput(BROKEN, "sm_90"),
                       BuildInput(GOOD2, "sm_90")])
    assert [r.ok for r in res] == [True, False, True]
    assert res[0].cubin_path != res[2].cubin_path
    assert b.stats["compiled"] == 3 and b.stats["failed"] == 1


def test_identical_sources_compile_once(builder):
    res = builder.build([BuildInput(GOOD, "sm_90")] * 3)
    assert builder.stats["compiled"] == 1
    assert len({r.cubin_path for r in res}) == 1 and all(r.ok for r in res)


def test_second_build_is_a_cache_hit(tmp_path):
    cache = tmp_path / "cache"
    with Builder("nvrtc", workers=1, cache_dir=cache) as b1:
        [first] = b1.build([BuildInput(GOOD, "sm_90")])
    with Builder("nvrtc", workers=1, cache_dir=cache) as b2:
        [again] = b2.build([BuildInput(GOOD, "sm_90")])
        assert b2.stats == {"compiled": 0, "cached": 1, "failed": 0, "compile_s": 0.0,
                            "rebuilt": 0}
    assert again.cached and again.ok and again.cubin_path == first.cubin_path
    assert again.key == first.key and again.per_kernel == first.per_kernel


def test_failures_are_cached_too(tmp_path):
    cache = tmp_path / "cache"
    with Builder("nvrtc", workers=1, cache_dir=cache) as b1:
        [first] = b1.build([BuildInput(BROKEN, "sm_90")])
    with Builder("nvrtc", workers=1, cache_dir=cache) as b2:
        [again] = b2.build([BuildInput(BROKEN, "sm_90")])
        assert b2.stats["cached"] == 1 and b2.stats["compiled"] == 0
    assert again.cached and again.error_kind == "compile" and again.error_msg == first.error_msg


def test_corrupt_cache_entry_is_rebuilt(tmp_path, fresh_warnings):
    cache = tmp_path / "cache"
    with Builder("nvrtc", workers=1, cache_dir=cache) as b:
        [res] = b.build([BuildInput(GOOD, "sm_90")])
        meta = Path(res.cubin_path).with_suffix(".json")
        meta.write_text("{not json")
        with pytest.warns(CacheWarning, match="not readable JSON"):
            [again] = b.build([BuildInput(GOOD, "sm_90")])
        assert not again.cached and again.ok and b.stats["rebuilt"] == 1
        json.loads(meta.read_text())  # rewritten whole


def test_missing_cubin_is_rebuilt(tmp_path, fresh_warnings):
    with Builder("nvrtc", workers=1, cache_dir=tmp_path) as b:
        [res] = b.build([BuildInput(GOOD, "sm_90")])
        Path(res.cubin_path).unlink()
        with pytest.warns(CacheWarning, match="missing"):
            [again] = b.build([BuildInput(GOOD, "sm_90")])
        assert again.ok and not again.cached and Path(again.cubin_path).exists()


def test_a_garbled_cubin_is_compiled_again_never_used(tmp_path, fresh_warnings):
    """A cubin whose bytes no longer hash to what its entry recorded is compiled again and
    replaced; one warning for the cache however many entries are damaged."""
    sources = [BuildInput(GOOD, "sm_90"), BuildInput(GOOD2, "sm_90")]
    with Builder("nvrtc", workers=1, cache_dir=tmp_path) as b:
        first = b.build(sources)
        good_bytes = [Path(r.cubin_path).read_bytes() for r in first]
        for r in first:
            Path(r.cubin_path).write_bytes(os.urandom(len(good_bytes[0])))
        with pytest.warns(CacheWarning) as seen:
            again = b.build(sources)
        assert [r.cached for r in again] == [False, False] and b.stats["rebuilt"] == 2
        assert len([w for w in seen if w.category is CacheWarning]) == 1
        assert "sha256" in str(seen[0].message) and first[0].key in str(seen[0].message)
        assert [Path(r.cubin_path).read_bytes() for r in again] == good_bytes
        assert [r.cached for r in b.build(sources)] == [True, True]  # replaced: hits again


def test_an_entry_copied_over_another_key_is_compiled_again(tmp_path, fresh_warnings):
    with Builder("nvrtc", workers=1, cache_dir=tmp_path) as b:
        one, two = b.build([BuildInput(GOOD, "sm_90"), BuildInput(GOOD2, "sm_90")])
        for suffix in (".json", ".cubin"):
            Path(two.cubin_path).with_suffix(suffix).write_bytes(
                Path(one.cubin_path).with_suffix(suffix).read_bytes())
        with pytest.warns(CacheWarning, match="another key"):
            [again] = b.build([BuildInput(GOOD2, "sm_90")])
        assert not again.cached
        assert Path(again.cubin_path).read_bytes() != Path(one.cubin_path).read_bytes()


def test_an_entry_of_another_schema_is_compiled_again_quietly(tmp_path, recwarn):
    with Builder("nvrtc", workers=1, cache_dir=tmp_path) as b:
        [res] = b.build([BuildInput(GOOD, "sm_90")])
        meta_path = Path(res.cubin_path).with_suffix(".json")
        meta = json.loads(meta_path.read_text())
        assert meta["schema"] == SCHEMA and meta["key"] == res.key
        assert meta["claims"]["arch"] == "sm_90" and meta["claims"]["backend"] == "nvrtc"
        meta_path.write_text(json.dumps({**meta, "schema": SCHEMA - 1}))
        [again] = b.build([BuildInput(GOOD, "sm_90")])
        assert not again.cached and json.loads(meta_path.read_text())["schema"] == SCHEMA
        assert not [w for w in recwarn if w.category is CacheWarning]


def test_what_emit_ships_is_checked_as_it_is_read(tmp_path, fresh_warnings, monkeypatch):
    """`Builder.cubin` hashes the bytes it hands over: a file replaced between the cache's
    check and the read is compiled again, never shipped."""
    with Builder("nvrtc", workers=1, cache_dir=tmp_path) as b:
        good = b.cubin(BuildInput(GOOD, "sm_90"))
        assert good is not None and good[:4] == b"\x7fELF"
        real_build = b.build
        garbled = []

        def build_then_garble(inputs, *a, **k):
            out = real_build(inputs, *a, **k)
            if not garbled:
                garbled.append(Path(out[0].cubin_path).write_bytes(b"garbage" * 100))
            return out

        monkeypatch.setattr(b, "build", build_then_garble)
        with pytest.warns(CacheWarning):
            assert b.cubin(BuildInput(GOOD, "sm_90")) == good


def test_keys_differ_by_source_arch_and_options(builder):
    base = BuildInput(GOOD, "sm_90")
    k = builder.key(base)
    assert k == builder.key(BuildInput(GOOD, "sm_90"))
    assert k != builder.key(BuildInput(GOOD2, "sm_90"))
    assert k != builder.key(BuildInput(GOOD, "sm_80"))
    assert k != builder.key(BuildInput(GOOD, "sm_90", ("-DX=1",)))
    res = builder.build([base, BuildInput(GOOD, "sm_80")])
    assert all(r.ok for r in res) and res[0].cubin_path != res[1].cubin_path
    assert Path(res[0].cubin_path).read_bytes() != Path(res[1].cubin_path).read_bytes()


def test_key_depends_on_backend(tmp_path):
    a = Builder("nvrtc", workers=1, cache_dir=tmp_path)
    b = Builder("nvcc", workers=1, cache_dir=tmp_path)
    assert a.key(BuildInput(GOOD, "sm_90")) != b.key(BuildInput(GOOD, "sm_90"))
    assert a.toolchain.startswith("nvrtc-") and b.toolchain.startswith("nvcc-")


def test_progress_callback_counts_every_input(builder):
    seen = []
    builder.build([BuildInput(GOOD, "sm_90"), BuildInput(BROKEN, "sm_90")], seen.append)
    assert sum(seen) == 2


def test_toolchain_id_has_nvrtc_version():
    tc = toolchain_id("nvrtc")
    assert tc.startswith("nvrtc-") and tc != "nvrtc-None"


def test_compile_source_directly():
    out = compile_source(GOOD, "sm_90")
    assert out.cubin and out.error_kind is None and out.seconds > 0
    bad = compile_source(BROKEN, "sm_90")
    assert bad.cubin is None and bad.error_kind == "compile" and "undeclared_thing" in bad.log


def test_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="backend"):
        compile_source(GOOD, "sm_90", "clang")


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on PATH")
def test_nvcc_backend(tmp_path):
    with Builder("nvcc", workers=1, cache_dir=tmp_path) as b:
        good, bad = b.build([BuildInput(GOOD, "sm_90"), BuildInput(BROKEN, "sm_90")])
    assert good.ok and good.per_kernel["k_add"]["registers"] > 0
    assert bad.error_kind == "compile" and "undeclared_thing" in bad.error_msg


PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'ca_row' for 'sm_90'
ptxas info    : Function properties for ca_row
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'ca_fold' for 'sm_90'
ptxas info    : Function properties for ca_fold
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 368 bytes cmem[0]
"""


def test_parse_ptxas_and_totals():
    res = parse_ptxas(PTXAS_LOG)
    assert res["ca_row"] == {"registers": 40, "spill_stores": 8, "spill_loads": 12,
                             "stack": 16, "smem_static": 1024}
    assert res["ca_fold"]["registers"] == 12 and res["ca_fold"]["smem_static"] == 0
    assert resources_total(res) == {"registers": 40, "spill_stores": 8, "spill_loads": 12,
                                    "stack": 16, "smem_static": 1024}
    assert resources_total({}) == {}


def test_summarize_log_keeps_error_lines():
    log = "note: something\nfoo.cu(3): error: identifier \"x\" is undefined\nwarning: w\n"
    assert summarize_log(log) == 'foo.cu(3): error: identifier "x" is undefined'
    assert summarize_log("plain failure\n") == "plain failure"
    assert len(summarize_log("error " * 500)) == 400


HANG_SCRIPT = r'''
import sys
from cuda_agent import cache_check
from cuda_agent.build.builder import SCHEMA, Builder, BuildInput
from cuda_agent.cache_check import CacheWarning

if __name__ == "__main__":
    n, cache = int(sys.argv[1]), sys.argv[2]
    with Builder("nvrtc", workers=2, cache_dir=cache) as b:
        res = b.build([BuildInput(f"#error e{i}\n", "sm_90") for i in range(n)])
    assert [r.error_kind for r in res] == ["compile"] * n
    print("built", len(res), b.stats["compiled"], flush=True)
'''


def test_one_large_batch_does_not_hang(tmp_path):
    """Regression: a batch of many times the workers' count in one build() call finishes
    (with multiprocessing's max_tasks_per_child=500 the pool hung on Python 3.11, CPython
    gh-115634, at 1100 sources). The compile processes are `procs` children since 69398dd,
    reused without a task limit, so the size has no threshold left to cross: 300 sources
    (150 jobs a process) keep the regression's shape at a quarter of its CPU (each NVRTC
    start costs ~15 ms). Each source fails fast (#error)."""
    import subprocess
    import sys

    script = tmp_path / "big_batch.py"
    script.write_text(HANG_SCRIPT)
    try:
        r = subprocess.run([sys.executable, str(script), "300", str(tmp_path / "c")],
                           capture_output=True, text=True, timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("Builder.build() of 300 sources did not finish in 40 s (hung)")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "built 300 300" in r.stdout


def _dies_on_marker(job):
    """A compile worker whose process dies on a source holding DIE_HERE (a compiler crash, or
    the OOM killer), compiling every other source as the real worker does."""
    import os

    from cuda_agent.build.builder import _build_one

    if "DIE_HERE" in job[0]:
        os._exit(1)
    return _build_one(job)


def test_a_compile_process_that_dies_fails_only_its_source(tmp_path):
    """A dying compile process costs only its own source: the other sources still compile,
    the one that killed its process (in two processes) fails as a compile_crash, which is not
    cached (the next attempt may live), and the builder keeps working."""
    dying = GOOD.replace("k_add", "k_dies") + "// DIE_HERE\n"
    with Builder("nvrtc", workers=2, cache_dir=tmp_path) as b:
        b._worker = _dies_on_marker
        res = b.build([BuildInput(GOOD, "sm_90"), BuildInput(dying, "sm_90"),
                       BuildInput(GOOD2, "sm_90")])
        assert [r.ok for r in res] == [True, False, True]
        assert res[1].error_kind == "compile_crash" and "process died" in res[1].error_msg
        assert b.stats["failed"] == 1
        [again] = b.build([BuildInput(GOOD.replace("1.f", "3.f"), "sm_90")])
        assert again.ok, "the builder keeps compiling after a process died"
        assert [r.cached for r in b.build([BuildInput(GOOD, "sm_90")])] == [True]
    assert not (tmp_path / res[1].key[:2] / (res[1].key + ".json")).exists()


def _sleeps_on_marker(job):
    """A compile worker that takes forever on a source holding SLOW_HERE (a huge unrolled
    kernel), compiling every other source as the real worker does."""
    import time

    from cuda_agent.build.builder import _build_one

    if "SLOW_HERE" in job[0]:
        time.sleep(600)
    return _build_one(job)


def test_a_compile_past_its_timeout_is_stopped_and_recorded(tmp_path):
    """The tuner's compile timeout: a source that compiles too long is stopped and comes back
    a compile_timeout (not cached), without holding up the rest of its batch."""
    import time

    slow = GOOD.replace("k_add", "k_slow") + "// SLOW_HERE\n"
    with Builder("nvrtc", workers=2, cache_dir=tmp_path, timeout_s=3.0) as b:
        b._worker = _sleeps_on_marker
        t0 = time.monotonic()
        res = b.build([BuildInput(slow, "sm_90"), BuildInput(GOOD, "sm_90"),
                       BuildInput(GOOD2, "sm_90")])
        took = time.monotonic() - t0
    assert [r.error_kind for r in res] == ["compile_timeout", None, None]
    assert "3 s" in res[0].error_msg
    assert took < 60, f"the build waited {took:.0f} s for a compile it should have stopped"
    assert not (tmp_path / res[0].key[:2] / (res[0].key + ".json")).exists()


def test_a_deadline_cuts_the_compiles_it_finds_running(tmp_path):
    """The run's time limit: what is still compiling when it comes back CUT, and that is not
    counted as a compile (it says nothing about the candidate)."""
    import time

    from cuda_agent.build.pool import CUT

    slow = GOOD.replace("k_add", "k_slow") + "// SLOW_HERE\n"
    with Builder("nvrtc", workers=1, cache_dir=tmp_path, timeout_s=300.0) as b:
        b._worker = _sleeps_on_marker
        t0 = time.monotonic()
        res = b.build([BuildInput(slow, "sm_90"), BuildInput(GOOD, "sm_90")],
                      deadline=time.monotonic() + 3.0)
        took = time.monotonic() - t0
        assert [r.error_kind for r in res] == [CUT, CUT]
        assert b.stats["compiled"] == 0 and b.stats["failed"] == 0
        assert took < 60
        [later] = b.build([BuildInput(GOOD, "sm_90")])
        assert later.ok, "the builder keeps compiling after a cut"


def test_a_compiler_that_cannot_run_is_a_host_error_not_a_result(tmp_path, monkeypatch):
    """NVRTC failing to load is the machine's failure: raised, never a candidate's result,
    and nothing is cached that a later run would reuse."""
    import cuda_agent.build.compiler as compiler
    from cuda_agent.errors import HostError

    def broken(*a, **k):
        raise OSError("libnvrtc.so: cannot open shared object file")

    monkeypatch.setattr(compiler, "compile_nvrtc", broken)
    with Builder("nvrtc", workers=1, cache_dir=tmp_path) as b:
        with pytest.raises(HostError, match="libnvrtc"):
            b.build([BuildInput(GOOD, "sm_90")])
    assert not list(tmp_path.rglob("*.json"))
