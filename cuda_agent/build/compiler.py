"""Compile CUDA C to cubin with NVRTC (default) or nvcc, and read the assembler's report.

This module runs inside compile worker processes, so it imports nothing heavy (no torch).
A compile error is returned as data, never raised: STYLE lesson 2.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

BASE_OPTIONS = ("-std=c++17", "--ptxas-options=-v")

HOST_FAILURE = "host"
"""error kind of a compile that never ran (NVRTC missing or failing to start, nvcc not found):
the builder raises it as a `HostError`; it is never cached or recorded as a candidate's"""


@dataclass
class CompileOutput:
    cubin: bytes | None
    log: str
    seconds: float
    error_kind: str | None = None
    """"compile": the compiler rejected the source; "compile_timeout": it ran too long;
    HOST_FAILURE: the compiler could not run at all (the machine's failure, not the source's)"""
    resources: dict[str, dict[str, int]] = field(default_factory=dict)


def nvrtc_version() -> str | None:
    try:
        from cuda.bindings import nvrtc
        err, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}" if int(err) == 0 else None
    except Exception:  # noqa: BLE001 - library missing or broken: reported by doctor
        return None


def nvcc_version() -> str | None:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def toolchain_id(backend: str) -> str:
    version = nvrtc_version() if backend == "nvrtc" else nvcc_version()
    return f"{backend}-{version}"


_RES_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_RES_PROPS = re.compile(r"Function properties for (\w+)")
_RES_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RES_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """Per-kernel registers, spills, stack and static shared memory from `ptxas -v` output."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = _RES_ENTRY.search(line) or _RES_PROPS.search(line)
        if m:
            current = m.group(1)
            out.setdefault(current, {"registers": 0, "spill_stores": 0, "spill_loads": 0,
                                     "stack": 0, "smem_static": 0})
            continue
        if current is None:
            continue
        m = _RES_STACK.search(line)
        if m:
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
        m = _RES_USED.search(line)
        if m:
            out[current]["registers"] = int(m.group(1))
            if m.group(2):
                out[current]["smem_static"] = int(m.group(2))
    return out


def compile_nvrtc(source: str, arch: str, options: tuple[str, ...] = ()) -> CompileOutput:
    from cuda.bindings import nvrtc

    t0 = time.perf_counter()
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, *options]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"candidate.cu", 0, [], [])
    if int(err) != 0:
        return CompileOutput(None, f"nvrtcCreateProgram: {err}", 0.0, HOST_FAILURE)
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\x00 ").decode(errors="replace")
        if int(err) != 0:
            return CompileOutput(None, log, time.perf_counter() - t0, "compile")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return CompileOutput(cubin, log, time.perf_counter() - t0, None, parse_ptxas(log))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_nvcc(source: str, arch: str, options: tuple[str, ...] = ()) -> CompileOutput:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return CompileOutput(None, "nvcc not found on PATH", 0.0, HOST_FAILURE)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cuda-agent-") as tmp:
        src = os.path.join(tmp, "candidate.cu")
        out = os.path.join(tmp, "candidate.cubin")
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, "-cubin", f"-arch={arch}", "-std=c++17", "-Xptxas", "-v", *options,
               "-o", out, src]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return CompileOutput(None, "nvcc timed out", time.perf_counter() - t0,
                                 "compile_timeout")
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            return CompileOutput(None, log, time.perf_counter() - t0, "compile")
        with open(out, "rb") as f:
            cubin = f.read()
    return CompileOutput(cubin, log, time.perf_counter() - t0, None, parse_ptxas(log))


def compile_source(source: str, arch: str, backend: str = "nvrtc",
                   options: tuple[str, ...] = ()) -> CompileOutput:
    try:
        if backend == "nvrtc":
            return compile_nvrtc(source, arch, options)
        if backend == "nvcc":
            return compile_nvcc(source, arch, options)
    except Exception as exc:  # noqa: BLE001 - a broken toolchain: the builder raises it
        return CompileOutput(None, f"{type(exc).__name__}: {exc}", 0.0, HOST_FAILURE)
    raise ValueError(f"unknown compiler backend {backend!r}")


def summarize_log(log: str, limit: int = 400) -> str:
    """The first error lines of a compiler log, for one-line records."""
    errors = [l.strip() for l in log.splitlines() if "error" in l.lower()]
    text = " | ".join(errors) if errors else log.strip()
    return text[:limit]


def resources_total(resources: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Worst case over a candidate's kernels (what limits it)."""
    if not resources:
        return {}
    keys = ("registers", "spill_stores", "spill_loads", "stack", "smem_static")
    return {k: max(r.get(k, 0) for r in resources.values()) for k in keys}
