"""Devices behind one interface: `cuda` (the real GPU), `sim` (analytic model), `replay`
(recorded sweeps). A device evaluates built candidates and reports `Measurement`s; it never
decides what to try (STYLE: a runner never decides).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from .. import procs
from ..errors import DeviceError
from ..limits import BASELINE_TIMEOUT_S
from ..ir.graph import Graph
from ..ir.plan import KernelPlan
from ..problem import Problem
from ..space.slots import Config, Rendered, Target
from ..verify.settings import VerifySettings
from .baselines import (CUDNN_BENCHMARK, MATCHED, Baselines, split_setting,  # noqa: F401
                        with_matched)
from .counters import profile
from .records import Measurement
from .timing import TIMING_PROTOCOL, TimingSettings


@dataclass
class Candidate:
    """What a device needs to evaluate one configuration."""

    key: str
    config: Config
    rendered: Rendered
    cubin_path: str | None
    resources: dict[str, Any] = field(default_factory=dict)
    build_error: tuple[str | None, str | None] | None = None  # (kind, message) when not built
    cubin_sha256: str | None = None
    """the hash the build cache checked the cubin against: the worker loads only those bytes"""


CUDNN_FIND_PROTOCOL = "cudnn-find"
"""the part of a CUDA device's measure protocol saying that candidates' library convolutions ran
on the algorithm cuDNN's benchmark mode found (`CudaDevice(library_cudnn_benchmark=True)`)"""


def cudnn_baselines(plan: Any) -> tuple[str, ...]:
    """(CUDNN_BENCHMARK,) where the reference runs a convolution (a plan's or a program's
    graph), else nothing: elsewhere cuDNN's algorithm choice cannot matter."""
    return (CUDNN_BENCHMARK,) if any(n.op == "conv" for n in plan.graph.live()) else ()


class Device(ABC):
    kind: str = "abstract"
    simulated: bool = False
    measure_protocol: str = ""
    """what a time from this device means (`timing.TIMING_PROTOCOL` on a GPU): a store serves
    a measurement again only to a device of the same protocol"""

    @abstractmethod
    def target(self) -> Target: ...

    @abstractmethod
    def gpu_name(self) -> str: ...

    @abstractmethod
    def setup(self, problem: Problem, plan: KernelPlan) -> None: ...

    def ensure(self, problem: Problem, plan: KernelPlan) -> None:
        """Set up for `problem` unless already set up for it: one device can serve several
        problems in turn (training moves between operators)."""
        key = (problem.source_hash, problem.graph().fingerprint())
        if getattr(self, "_current", None) != key:
            self.setup(problem, plan)
            self._current = key

    @abstractmethod
    def evaluate(self, cand: Candidate, best_ms: float | None = None) -> Measurement: ...

    def baselines(self, which: tuple[str, ...] = with_matched(("eager", "compile"))
                  ) -> Baselines:
        """The torch baselines named in `which` ("compile", "compile@matched", ...: see
        `runner/baselines.py`)."""
        return Baselines(notes={w: f"not measured on the {self.kind} device" for w in which})

    def copy_bandwidth(self) -> float | None:
        return None

    def facts(self) -> dict[str, Any]:
        return {"gpu": self.gpu_name(), "device": self.kind}

    def close(self) -> None:
        pass


class CudaDevice(Device):
    """Runs candidates in a worker process on one GPU; a hang or crash costs only the worker."""

    kind = "cuda"
    measure_protocol = TIMING_PROTOCOL

    def __init__(self, index: int = 0, timing: TimingSettings | None = None,
                 verify_settings: VerifySettings | None = None, eval_timeout_s: float = 30.0,
                 setup_timeout_s: float = 600.0, profile_every: int = 0,
                 library_cudnn_benchmark: bool = True,
                 baseline_timeout_s: float = BASELINE_TIMEOUT_S) -> None:
        self.index = index
        # Candidates of a problem with a convolution run in a worker set up in cuDNN's benchmark
        # mode: a library step then gets the algorithm cuDNN finds fastest for its shape, not
        # its heuristics' pick, which can be several times slower (docs/journal.md:
        # runner/devices.py). The baselines still run as a user
        # runs them (`baselines`): eager and torch.compile on the heuristics.
        self.library_cudnn_benchmark = library_cudnn_benchmark
        self.measure_protocol = (f"{TIMING_PROTOCOL}+{CUDNN_FIND_PROTOCOL}"
                                 if library_cudnn_benchmark else TIMING_PROTOCOL)
        self._candidate_mode = False  # the cuDNN mode candidates of the current problem run in
        self._worker_mode = False  # the mode the running worker was set up in
        self.timing = timing or TimingSettings()
        self.verify_settings = verify_settings or VerifySettings()
        self.eval_timeout_s = eval_timeout_s
        self.setup_timeout_s = setup_timeout_s
        self.baseline_timeout_s = baseline_timeout_s
        self._proc: procs.Child | None = None
        self._conn: Any = None
        self._problem_path: str | None = None
        self._graph: Graph | None = None  # the current problem's, as captured here
        self._facts: dict[str, Any] = {}
        self.restarts = 0
        self.profile_every = profile_every  # profile every n-th verified candidate with ncu
        self._verified = 0
        self._start()
        reply = self._call({"op": "facts"}, self.setup_timeout_s)
        if not reply.get("ok"):
            raise DeviceError(f"the GPU worker could not start: {reply.get('error_msg')}")
        self._facts = reply

    @property
    def candidates_cudnn_benchmark(self) -> bool:
        """Whether the current problem's candidates run in cuDNN's benchmark mode."""
        return self._candidate_mode

    # -- worker management -----------------------------------------------------------------------
    def _start(self) -> None:
        # not multiprocessing's spawn, which re-runs the user's __main__ (`procs`); a worker
        # that cannot start is the machine's failure (HostError), not a candidate's
        self._proc = procs.start("cuda_agent.runner.worker:worker_main",
                                 (self.index, self.timing, self.verify_settings), "GPU worker")
        self._conn = self._proc.conn
        self._proc.wait_ready(self.setup_timeout_s)

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.close()
        self._proc = None

    def _restart(self, cudnn_benchmark: bool | None = None) -> None:
        """A fresh worker, set up for the current problem in the given cuDNN mode (None: the
        mode the problem's candidates run in)."""
        self._kill()
        self.restarts += 1
        self._start()
        mode = self._candidate_mode if cudnn_benchmark is None else cudnn_benchmark
        self._worker_mode = mode
        if self._problem_path:
            reply = self._call({"op": "setup", "path": self._problem_path, "graph": self._graph,
                                "cudnn_benchmark": mode}, self.setup_timeout_s)
            if not reply.get("ok"):
                raise DeviceError(f"the GPU worker failed to set up again: "
                                  f"{reply.get('error_msg')}")
            self._note_peak(reply, "setup")

    def _call(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send a request; a timeout or a dead worker becomes a reply with an error kind."""
        try:
            self._conn.send(msg)
            if not self._conn.poll(timeout):
                self._kill()
                return {"ok": False, "error_kind": "timeout", "dead": True,
                        "error_msg": f"no answer within {timeout:.0f} s; worker killed"}
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code, last = None, ""
            if self._proc is not None:
                self._proc.join(2)
                code, last = self._proc.exitcode, self._proc.last_line()
            self._kill()
            return {"ok": False, "error_kind": "crash", "dead": True,
                    "error_msg": f"worker process died (exit code {code})"
                                 + (f": {last}" if last else "")}

    # -- Device interface --------------------------------------------------------------------------
    def target(self) -> Target:
        f = self._facts
        return Target(name=f.get("gpu", "cuda"), arch=f"sm_{f.get('capability', '9.0')}"
                      .replace(".", ""), sm_count=int(f.get("sm_count", 132)),
                      l2_bytes=int(f.get("l2_bytes", 60 << 20)) or (60 << 20))

    def gpu_name(self) -> str:
        return str(self._facts.get("gpu", "cuda"))

    def facts(self) -> dict[str, Any]:
        return {**self._facts, "device": "cuda"}

    def setup(self, problem: Problem, plan: KernelPlan) -> None:
        self._problem_path = str(problem.path)
        # the graph this process captured goes along: the worker would otherwise trace the
        # file again (torch.export's first call imports Dynamo: seconds of every set-up)
        self._graph = problem.graph()
        self._candidate_mode = self.library_cudnn_benchmark and bool(cudnn_baselines(plan))
        self._worker_mode = self._candidate_mode
        msg = {"op": "setup", "path": self._problem_path, "graph": self._graph,
               "cudnn_benchmark": self._candidate_mode}
        reply = self._call(msg, self.setup_timeout_s)
        if reply.get("dead"):
            self._start()
            reply = self._call(msg, self.setup_timeout_s)
        if reply.get("refused"):  # cannot fit: the worker is sound, the problem is refused
            self._problem_path = None
            raise DeviceError(str(reply.get("error_msg")))
        if not reply.get("ok"):
            # a failed set-up may leave the worker's CUDA context unusable (a device-side assert
            # in the reference is sticky): the next problem gets a fresh worker
            self._problem_path = None
            self._restart()
            raise DeviceError(f"GPU setup failed for {problem.name}: {reply.get('error_msg')}")
        self._facts.update({k: v for k, v in reply.items() if k not in ("ok", "memory")})
        self._facts["memory"] = dict(reply.get("memory") or {})
        self._note_peak(reply, "setup")

    def _eval_timeout(self) -> float:
        """A candidate's time limit, plus a second per GiB of the problem's inputs and output:
        its verification draws, hashes and compares them (and recomputes references) per
        case, which takes seconds where they are tens of GiB, however fast the kernel."""
        mem = self._facts.get("memory") or {}
        size = (mem.get("input_bytes") or 0) + (mem.get("output_bytes") or 0)
        # a float64 reference in host memory is computed by the CPU: seconds per GiB
        per_gib = 4.0 if str(mem.get("verification", "")).startswith("host") else 1.0
        return self.eval_timeout_s + per_gib * size / (1 << 30)

    def _note_peak(self, reply: dict[str, Any], phase: str) -> None:
        """The worker's peak GPU memory so far, kept as the most any worker of this problem
        reached (a restarted worker counts from zero); `peak_by_phase` keeps the most seen by
        the end of each phase (setup, candidates, baselines), so a bound passed is placed. A
        baseline's reply carries its own peak (torch's run, `baseline_peak_bytes`): kept as
        `baselines_peak_bytes`, outside the run's peak and its bound."""
        mem = self._facts.get("memory")
        if mem is None:
            return
        own = reply.get("baseline_peak_bytes")  # torch's own run: apart from the bound's
        key = "baselines_peak_bytes" if own else "peak_bytes"
        peak = own or reply.get("peak_bytes") or (reply.get("memory") or {}).get("peak_bytes")
        if not peak:
            return
        for d, k in ((mem, key), (mem.setdefault("peak_by_phase", {}), phase)):
            d[k] = max(int(d.get(k) or 0), int(peak))
        if not own and mem.get("bound_bytes"):
            mem["within_bound"] = mem["peak_bytes"] <= mem["bound_bytes"]

    def copy_bandwidth(self) -> float | None:
        return self._facts.get("copy_bw")

    def evaluate(self, cand: Candidate, best_ms: float | None = None) -> Measurement:
        if cand.cubin_path is None:
            raise ValueError("evaluate() needs a built candidate")
        t0 = time.perf_counter()
        msg = {"op": "eval", "cubin": cand.cubin_path, "cubin_sha256": cand.cubin_sha256,
               "best_ms": best_ms,
               "launches": [l.__dict__ for l in cand.rendered.launches],
               "workspace_bytes": cand.rendered.workspace_bytes,
               "zero_workspace": cand.rendered.zero_workspace}
        reply = self._call(msg, self._eval_timeout())
        wall = time.perf_counter() - t0
        self._note_peak(reply, "candidates")
        if reply.get("dead") or reply.get("sticky"):
            self._restart()
        counters = dict(reply.get("counters", {}))
        counters.update({f"compile_{k}": v for k, v in cand.resources.items()})
        counters.update({f"eval_{k}_s": v for k, v in reply.get("seconds", {}).items()})
        if not reply.get("ok"):
            m = Measurement.failure(cand.key, "cuda", reply.get("error_kind") or "cuda",
                                    reply.get("error_msg") or "", wall_s=wall,
                                    counters=counters)
            m.max_rel_err = reply.get("max_rel_err")
            m.verified = reply.get("verified", False if reply.get("error_kind") in (
                "wrong", "unwritten", "nan", "mutated_input", "degenerate") else None)
            return m
        self._verified += 1
        if self.profile_every and self._verified % self.profile_every == 0:
            # after timing, in its own process: profiling never overlaps timing

            prof = profile(self._problem_path or "", cand.cubin_path,
                           [l.__dict__ for l in cand.rendered.launches],
                           cand.rendered.workspace_bytes, cand.rendered.zero_workspace)
            counters.update(prof["counters"])
            counters["profiled"] = 1.0 if prof["counters"] else 0.0
            if prof["error"]:
                counters["profile_error"] = prof["error"]
            if prof.get("dropped"):  # metrics this ncu or GPU lacks: said, not hidden
                counters["profile_dropped"] = ",".join(prof["dropped"])
        return Measurement(cand.key, "cuda", True, reply["time_ms"], reply.get("spread_ms"),
                           reply.get("samples", 0), True, False, counters=counters,
                           max_rel_err=reply.get("max_rel_err"), wall_s=wall)

    def baselines(self, which: tuple[str, ...] = with_matched(("eager", "compile"))
                  ) -> Baselines:
        settings = self._facts.get("baseline_settings")
        out = Baselines(settings=dict(settings, observed={}) if settings else None)
        for w in which:
            name, setting = split_setting(w)
            same_ms = out.ms(name)
            if setting == MATCHED and settings and settings.get("same") and same_ms is not None:
                # the two settings agree on every TF32 flag the problem's ops read, and neither
                # autocasts: one measurement is both figures
                out.set(w, same_ms)
                out.notes[w] = f"the measurement of {name}: the same settings for this problem"
                continue
            # CUDNN_BENCHMARK in a process whose convolutions meet cuDNN in that mode first,
            # its reference run included; the others where cuDNN picks as a user's default
            # process does (a fresh worker whenever the running one was set up otherwise).
            # Both settings share a worker: cuDNN keeps an algorithm per shape and TF32 flag.
            mode = name == CUDNN_BENCHMARK
            if mode != self._worker_mode:
                self._restart(cudnn_benchmark=mode)
            # bounded like a candidate: a torch.compile that takes too long is not waited for
            reply = self._call({"op": "baseline", "which": name, "settings": setting},
                               self.baseline_timeout_s)
            self._note_peak(reply, "baselines")
            if reply.get("dead"):
                self._restart(cudnn_benchmark=mode)
            if reply.get("ok"):
                out.set(w, reply["time_ms"], reply.get("spread_ms"))
                out.notes[w] = f"setup {reply.get('setup_s', 0):.1f} s"
                if out.settings is not None:
                    # what the timed runs ran under, as the worker saw it, and how far their
                    # answer is from the contract's
                    out.settings["observed"][w] = {**(reply.get("flags") or {}),
                                                   "rel_diff": reply.get("rel_diff")}
            elif reply.get("error_kind") == "timeout":
                out.notes[w] = (f"not measured: no answer within {self.baseline_timeout_s:.0f} s "
                                "(timeout); its worker was stopped")
            else:
                out.notes[w] = f"failed: {reply.get('error_msg')}"
        if self._worker_mode != self._candidate_mode:
            self._restart()  # the candidates' mode again
        return out

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send({"op": "quit"})
                self._conn.poll(5)
            except (OSError, EOFError, BrokenPipeError):
                pass
        self._kill()


def cuda_available() -> bool:
    """True when a CUDA GPU can be used (checked without initialising CUDA in this process)."""
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False
