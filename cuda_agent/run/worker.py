"""The GPU worker process: the unit of isolation (STYLE lesson 3).

One worker per GPU holds the problem's model, reference and inputs on the device, and evaluates
candidates one at a time: verify, then time. A kernel fault that poisons the CUDA context makes
the worker answer and exit; a hang is killed from outside by the supervisor (`cuda_device.py`).
Messages are plain dicts over a multiprocessing pipe.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import time
import traceback
from typing import Any

import torch

from ..ir.plan import make_plan
from ..problem import load_problem
from ..space.program import state_updates
from . import launcher
from .baselines import (CUDNN_BENCHMARK, DEFAULTS, MATCHED, contract_tf32, settings_record,
                        tf32_reads)
from .timing import PEAK_FLOPS, L2Flusher, TimingSettings, physical_floor_ms, time_runs
from .verify import (CandidateError, CasePool, IndexDomain, ValueRange, VerifyResult,
                     VerifySettings, check, check_state, make_case, poisoned_output)


TORCH_DEFAULTS = launcher.tf32_flags()
"""PyTorch's TF32 flags as this process found them: read at import, before anything here sets
them. In a worker (a fresh spawned process) they are torch's own defaults, the flags a user's
process runs with, and the baselines at the defaults run under them (`ProblemState.baseline`)."""


def use_precision(precision: str) -> None:
    """The worker's flags, process-wide: the kernels' contract, which the witness, the
    verification and the candidates' library steps run under. Strict fp32 (cuDNN would
    otherwise run fp32 convolutions on TF32 tensor cores, its default), or TF32 products in
    cuBLAS and cuDNN where the user opted into TF32 (`--precision tf32`). For fp16 and bf16 the
    products run under autocast (`precision_context`) and the rest stays fp32."""
    tf32 = contract_tf32(precision)
    launcher.set_tf32(tf32, tf32)


def precision_context(precision: str) -> Any:
    """Where the witness and the matched baselines run: under `torch.autocast` in fp16 or bf16
    when the user opted into half-precision products (what a user of torch does to get them:
    matmuls and convolutions in that dtype, reductions and norms kept in fp32), else as they
    are."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    return (torch.autocast("cuda", dtype=dtype) if dtype is not None
            else contextlib.nullcontext())


def observed_flags() -> dict[str, Any]:
    """The TF32 flags and autocast in effect where a baseline runs (its reply says them)."""
    flags = launcher.tf32_flags()
    return {"conv_tf32": launcher.conv_tf32(flags), "matmul_tf32": launcher.matmul_tf32(flags),
            "autocast": str(torch.get_autocast_dtype("cuda")).replace("torch.", "")
            if torch.is_autocast_enabled("cuda") else None}


def fresh_compile() -> Any:
    """torch.compile's persistent caches off: a compiled graph's cache key leaves out cuDNN's
    TF32 flag, which max-autotune bakes into the convolution templates it generates and
    benchmarks, so a graph compiled under one setting must not be served under the other."""
    from torch._inductor import config

    off = {k: False for k in ("fx_graph_cache", "fx_graph_remote_cache", "autotune_local_cache",
                              "autotune_remote_cache", "bundled_autotune_remote_cache")
           if hasattr(config, k)}
    return config.patch(off)


def torch_defaults() -> Any:
    """Run under PyTorch's default TF32 settings as a fresh process has them (cuDNN
    convolutions may use TF32, matrix products may not, on torch 2.x), whatever contract the
    kernels are held to; restored after. Conformance mode's reference runs under them."""
    return launcher.tf32_mode(flags=TORCH_DEFAULTS)


class ProblemState:
    """Everything about one problem that lives on the GPU between candidates.

    The model is held as `Model(*get_init_inputs())` leaves it (training mode unless its
    constructor says otherwise), as the user and the field's harness hold it. Where forward()
    updates module state (BatchNorm's running statistics in training mode), each reference run
    updates copies, never a case's tensors, and a candidate's timed runs include its update.
    """

    def __init__(self, path: str, device: torch.device, timing: TimingSettings,
                 verify_settings: VerifySettings) -> None:
        self.device = device
        self.timing = timing
        self.verify_settings = verify_settings
        self.precision = verify_settings.precision
        self.problem = load_problem(path)
        self.graph = self.problem.graph()
        self.plan = make_plan(self.graph)
        self.model = self.problem.make_model(device)
        self.ref_model = copy.deepcopy(self.model).double()
        self.conformance = verify_settings.tolerance is not None
        # module state forward() updates in place, applied after a candidate's kernels
        self.updates = state_updates(self.plan)
        self.mutable = {u[k] for u in self.updates for k in ("target", "running_mean",
                                                            "running_var") if k in u}
        buffers = dict(self.model.named_buffers())
        self.timing_state = {name: buffers[name].detach().clone() for name in self.mutable}
        self._state_want: dict[str, torch.Tensor] | None = None  # `check_state`'s reference
        example_args = self.problem.make_inputs(device)
        params = dict(self.model.named_parameters())
        params.update(dict(self.model.named_buffers()))
        # graph inputs, in graph order: forward args by position, parameters by state_dict name
        self.examples: list[torch.Tensor] = []
        for gin in self.graph.inputs:
            t = example_args[gin.arg_index] if gin.role == "input" else params[gin.target]
            self.examples.append(t.detach().to(device).contiguous())
        out_dtype = {"float32": torch.float32, "int64": torch.int64}[self.plan.out_dtype]
        self.out_shape, self.out_dtype = tuple(self.plan.out_shape), out_dtype
        # rotated input sets for timing: fresh draws, so no run finds its data in cache
        domains = [IndexDomain(gin.index_bound, gin.index_ignore) if gin.index_bound is not None
                   else ValueRange(*gin.value_range) if gin.value_range is not None else None
                   for gin in self.graph.inputs]
        self.sets = [make_case(self.examples, t, 1234, domains=domains).tensors
                     for t in range(timing.rotate)]
        self.set_outs = [torch.empty(self.out_shape, dtype=out_dtype, device=device)
                         for _ in range(timing.rotate)]
        props = torch.cuda.get_device_properties(device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 60 * 1024 * 1024))
        self.flusher = L2Flusher(device, self.l2_bytes)
        self.copy_bw = copy_bandwidth(device, self.flusher)
        self.bytes = self.plan.bytes_moved()
        self.flops = self.plan.flops()
        # parameters and buffers are drawn signed whatever their initial values
        signed = [gin.role != "input" for gin in self.graph.inputs]
        # conformance mode checks against the module itself in fp32, so no witness is needed
        self.pool = CasePool(self.reference, self.examples, self.out_shape, self.out_dtype,
                             verify_settings, signed,
                             witness=None if self.conformance else self.witness,
                             domains=domains)
        self.evaluated = 0

    # -- reference -----------------------------------------------------------------------------
    def reference(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        return self._reference_run(tensors)[0]

    def _reference_run(self, tensors: list[torch.Tensor]
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The reference's output and the state it updated: a float64 copy of the module
        (strict protocol), or the module itself in fp32 at PyTorch's default settings
        (conformance mode)."""
        if self.conformance:
            args, state = self._split(tensors, None)
            with torch.no_grad(), torch_defaults():
                out = torch.func.functional_call(self.model, state, tuple(args))
        else:
            args, state = self._split(tensors, torch.float64)
            with torch.no_grad():
                out = torch.func.functional_call(self.ref_model, state, tuple(args))
        return out, {k: v for k, v in state.items() if k in self.mutable}

    def witness(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """torch eager's own answer under the kernels' contract (fp32, TF32 or autocast): the
        accuracy a kernel can be held to."""
        args, state = self._split(tensors, None)
        with torch.no_grad(), precision_context(self.precision):
            out = torch.func.functional_call(self.model, state, tuple(args))
        return out.float() if out.dtype in (torch.float16, torch.bfloat16) else out

    def _split(self, tensors: list[torch.Tensor], dtype: torch.dtype | None
               ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        n_args = sum(1 for g in self.graph.inputs if g.role == "input")
        args: list[Any] = [None] * n_args
        state: dict[str, torch.Tensor] = {}
        for gin, t in zip(self.graph.inputs, tensors):
            t = t.to(dtype) if dtype is not None and t.is_floating_point() else t
            if gin.role == "input":
                args[gin.arg_index] = t
            else:
                # forward() updates these in place: a copy, so a case's tensors never change
                state[gin.target] = t.clone() if gin.target in self.mutable else t
        return args, state

    def kernel_inputs(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [tensors[k] for k in self.plan.operands]

    def run_candidate(self, kernels: launcher.LoadedKernels, inputs: list[torch.Tensor],
                      out: torch.Tensor, state: dict[str, torch.Tensor] | None = None) -> None:
        """One run as the emitted module makes it: the kernels, then the module-state update
        (on `state`, default the timing copies), so that a timed run costs what it costs
        in `model_new.py`."""
        kernels(inputs, out)
        if self.updates:
            launcher.update_state(self.updates, kernels.workspace,
                                  (self.timing_state if state is None else state).__getitem__)

    def check_state(self, kernels: launcher.LoadedKernels) -> VerifyResult:
        """Where forward() updates module state: the candidate's update on the first case
        against the reference's (a running mean is taken from statistics only the program's
        buffers hold; the output checks them only through the normalisation)."""
        if not self.mutable:
            return VerifyResult(True)
        case = self.pool.cases[0].inputs
        if self._state_want is None:  # the reference's update, once per problem
            self._state_want = self._reference_run(case)[1]
        want = self._state_want
        _, start = self._split(case, None)
        buffers = dict(self.model.named_buffers())
        got = {name: (start[name] if name in start else buffers[name]).detach().clone()
               for name in self.mutable}
        out = poisoned_output(self.out_shape, self.out_dtype, self.device)
        try:
            self.run_candidate(kernels, self.kernel_inputs(case), out, got)
            launcher.synchronize(self.device)
        except launcher.KernelLaunchError as exc:
            return VerifyResult(False, exc.kind, str(exc))
        floats = {k: v for k, v in want.items() if v.is_floating_point()}
        return check_state({k: got[k] for k in floats}, floats, self.pool)

    # -- candidates ----------------------------------------------------------------------------
    def evaluate(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        with open(msg["cubin"], "rb") as f:
            image = f.read()
        try:
            kernels = launcher.LoadedKernels(image, msg["launches"], msg.get("workspace_bytes", 0),
                                             msg.get("zero_workspace", False), self.device)
        except launcher.KernelLaunchError as exc:
            return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                    "sticky": exc.sticky}

        # One timed run first: it warms up, surfaces faults early, and lets a hopeless
        # candidate be abandoned before the (costly) verification.
        try:
            probe_ms = self._probe(kernels)
        except launcher.KernelLaunchError as exc:
            return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                    "sticky": exc.sticky}
        best = msg.get("best_ms")
        if probe_ms > 1000.0 or (best and probe_ms > max(20.0 * best, 5.0)):
            kernels.close()
            return {"ok": False, "error_kind": "slow",
                    "error_msg": f"one run took {probe_ms:.2f} ms (best so far "
                                 f"{best and round(best, 4)} ms)", "time_ms": probe_ms,
                    "wall_s": time.perf_counter() - t0}

        def run(tensors: list[torch.Tensor], out: torch.Tensor) -> None:
            try:
                kernels(self.kernel_inputs(tensors), out)
                launcher.synchronize(self.device)
            except launcher.KernelLaunchError as exc:
                raise CandidateError(exc.kind, str(exc), exc.sticky) from None

        result = check(run, self.pool, self.pool.trials_for(self.evaluated))
        if result.ok:
            result = self.check_state(kernels)
        self.evaluated += 1
        if not result.ok:
            sticky = result.kind in ("illegal_address", "misaligned", "timeout")
            if not sticky:
                kernels.close()
            return {"ok": False, "error_kind": result.kind, "error_msg": result.msg,
                    "max_rel_err": result.max_rel_err, "sticky": sticky,
                    "wall_s": time.perf_counter() - t0}
        inputs_by_set = [self.kernel_inputs(s) for s in self.sets]

        def timed(k: int) -> None:
            self.run_candidate(kernels, inputs_by_set[k], self.set_outs[k])

        try:
            timing = time_runs(timed, len(self.sets), self.timing, self.flusher,
                               msg.get("best_ms"))
            launcher.synchronize(self.device)
        except launcher.KernelLaunchError as exc:
            return {"ok": False, "error_kind": exc.kind, "error_msg": str(exc),
                    "sticky": exc.sticky}
        kernels.close()
        floor = physical_floor_ms(self.bytes, self.flops, self.copy_bw, self.l2_bytes,
                                  PEAK_FLOPS[self.precision])
        if timing.median_ms < floor:
            return {"ok": False, "error_kind": "timing_floor",
                    "error_msg": f"{timing.median_ms:.4f} ms is below the physical floor "
                                 f"{floor:.4f} ms", "verified": True,
                    "wall_s": time.perf_counter() - t0}
        return {"ok": True, "verified": True, "time_ms": timing.median_ms,
                "spread_ms": timing.spread_ms, "samples": timing.samples,
                "early_stopped": timing.early_stopped, "max_rel_err": result.max_rel_err,
                "wall_s": time.perf_counter() - t0,
                "counters": {"achieved_bw_fraction": self.bytes / (timing.median_ms * 1e-3)
                             / self.copy_bw,
                             # timed runs the host may have delayed (`TimingSettings.lead_us`)
                             **({"timing_host_bound": timing.host_bound}
                                if timing.host_bound else {})}}

    def _probe(self, kernels: launcher.LoadedKernels) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.run_candidate(kernels, self.kernel_inputs(self.sets[0]), self.set_outs[0])
        end.record()
        launcher.synchronize(self.device)
        return start.elapsed_time(end)

    # -- baselines -----------------------------------------------------------------------------
    def baseline_settings(self) -> dict[str, Any]:
        """What the two settings of the baselines are for this problem (`settings_record`)."""
        defaults = {"conv": launcher.conv_tf32(TORCH_DEFAULTS),
                    "matmul": launcher.matmul_tf32(TORCH_DEFAULTS)}
        return settings_record(defaults, self.precision,
                               tf32_reads({n.op for n in self.graph.live()}))

    def baseline(self, which: str, settings: str = DEFAULTS) -> dict[str, Any]:
        """Time torch eager or torch.compile on the same inputs, with the same protocol, under
        `settings`: DEFAULTS, PyTorch's own flags as a fresh process has them and no autocast
        (a user's process); MATCHED, the kernels' contract (the worker's flags, autocast in
        fp16/bf16). The flags are process-wide: they are put in place for this call only."""
        if settings not in (DEFAULTS, MATCHED):
            return {"ok": False, "error_msg": f"unknown baseline settings {settings!r}"}
        if which == CUDNN_BENCHMARK:
            # eager as it is, in a worker set up in that mode (`CudaDevice.baselines`)
            if not torch.backends.cudnn.benchmark:
                return {"ok": False, "error_msg": "the worker was not set up in cuDNN's "
                        "benchmark mode"}
        elif torch.backends.cudnn.benchmark:
            # eager and torch.compile are timed as a user's process runs them: on the heuristics
            return {"ok": False, "error_msg": f"baseline {which!r} asked of a worker set up in "
                    "cuDNN's benchmark mode"}
        tf32 = contract_tf32(self.precision)
        flags = (launcher.tf32_mode(flags=TORCH_DEFAULTS) if settings == DEFAULTS
                 else launcher.tf32_mode(tf32, tf32))
        numerics = (contextlib.nullcontext() if settings == DEFAULTS
                    else precision_context(self.precision))
        compiled = which.startswith("compile")
        with flags, fresh_compile() if compiled else contextlib.nullcontext():
            reply = self._time_baseline(which, numerics)
        out = reply.pop("output", None)
        if reply.get("ok"):
            # its output beside the witness's (the contract's answer, under the worker's own
            # flags again): how far this setting's numerics are from the contract's
            try:
                reply["rel_diff"] = self._rel_diff(out)
            except Exception as exc:  # noqa: BLE001 - informative only: the time stands
                reply["rel_diff"], reply["rel_diff_error"] = None, f"{type(exc).__name__}"
            del out
            torch.cuda.empty_cache()
        return reply

    def _time_baseline(self, which: str, numerics: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        model = self.model
        if which.startswith("compile"):
            # a fresh compile under the flags in effect: dynamo's cache would serve a graph
            # compiled under the other setting, whose decisions may depend on the flags
            torch._dynamo.reset()
            mode = None if which == "compile" else which.split(":", 1)[1]
            model = torch.compile(self.model, mode=mode)
        arg_sets = []
        for s in self.sets:
            args, state = self._split(s, None)
            arg_sets.append(args)
        # parameters stay the model's own: baselines compute the same function on the same data
        with torch.no_grad(), numerics:
            try:
                model(*arg_sets[0])
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a failing baseline is reported, not fatal
                return {"ok": False, "error_msg": f"{type(exc).__name__}: {exc}"[:300]}
            compile_s = time.perf_counter() - t0
            seen = observed_flags()  # where the timed runs run, checked, not assumed
            timing = time_runs(lambda k: model(*arg_sets[k]), len(arg_sets), self.timing,
                               self.flusher)
            out = model(*arg_sets[0])
            if not isinstance(out, torch.Tensor):
                out = None
            elif which.startswith("compile"):
                out = out.clone()  # CUDA-graph modes hand out a buffer the next replay reuses
        if which.startswith("compile"):
            torch._dynamo.reset()  # its graphs, compiled under this call's flags, go with it
        return {"ok": True, "time_ms": timing.median_ms, "spread_ms": timing.spread_ms,
                "samples": timing.samples, "setup_s": compile_s, "flags": seen, "output": out}

    def _rel_diff(self, out: torch.Tensor | None) -> float | None:
        """Relative-norm difference of a baseline's output from the witness's on the same
        input set (None for an integer output), summed in float64 a slice at a time: no more
        than the two outputs on the device."""
        if out is None or not out.is_floating_point():
            return None
        ref = self.witness(self.sets[0])
        if tuple(ref.shape) != tuple(out.shape) or not ref.is_floating_point():
            return None
        o, r = out.reshape(-1), ref.reshape(-1)
        num = den = 0.0
        step = 1 << 24
        for i in range(0, r.numel(), step):
            rs = r[i:i + step].double()
            den += float(rs.square().sum())
            num += float((o[i:i + step].double() - rs).square().sum())
        return (num / den) ** 0.5 if den > 0 else num ** 0.5


_COPY_BW: dict[str, float] = {}


def copy_bandwidth(device: torch.device, flusher: L2Flusher) -> float:
    """Copy bandwidth, measured once per worker: the best of three measurements, after a long
    warm-up, so that an idle GPU's clock ramp does not lower the physical floor."""
    key = str(device)
    if key not in _COPY_BW:
        _COPY_BW[key] = max(measure_copy_bandwidth(device, flusher) for _ in range(3))
    return _COPY_BW[key]


def measure_copy_bandwidth(device: torch.device, flusher: L2Flusher,
                           nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted), same protocol."""
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    t = time_runs(lambda k: dst.copy_(src), 1, TimingSettings(warmup=10, reps=10), flusher)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / (t.median_ms * 1e-3)


def gpu_facts(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    facts = {"gpu": props.name, "sm_count": props.multi_processor_count,
             "capability": f"{props.major}.{props.minor}",
             "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
             "memory_bytes": int(props.total_memory), "torch": torch.__version__,
             "cuda": torch.version.cuda}
    try:
        facts["sm_clock_mhz"] = torch.cuda.clock_rate(device)
    except Exception:  # noqa: BLE001 - pynvml may be missing; the clock is informative only
        facts["sm_clock_mhz"] = None
    return facts


def worker_main(conn: Any, device_index: int, timing: TimingSettings,
                verify_settings: VerifySettings) -> None:
    """Serve requests until told to quit; exit after a sticky CUDA error."""
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    use_precision(verify_settings.precision)
    device = torch.device("cuda", device_index)
    torch.cuda.set_device(device)
    state: ProblemState | None = None
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        op = msg.get("op")
        try:
            if op == "quit":
                conn.send({"ok": True})
                return
            if op == "facts":
                conn.send({"ok": True, **gpu_facts(device)})
            elif op == "setup":
                state = None
                gc.collect()  # the previous problem's tensors, even if a cycle holds them
                torch.cuda.empty_cache()
                # before the reference first runs: the mode that meets a convolution's shape
                # first decides its algorithm for the process's life (CUDNN_BENCHMARK)
                torch.backends.cudnn.benchmark = bool(msg.get("cudnn_benchmark", False))
                state = ProblemState(msg["path"], device, timing, verify_settings)
                conn.send({"ok": True, "copy_bw": state.copy_bw, **gpu_facts(device),
                           "cudnn_benchmark": torch.backends.cudnn.benchmark,
                           "baseline_settings": state.baseline_settings()})
            elif op == "eval":
                assert state is not None, "setup first"
                reply = state.evaluate(msg)
                conn.send(reply)
                if reply.get("sticky"):
                    return  # the context is poisoned: the supervisor starts a fresh worker
            elif op == "baseline":
                assert state is not None, "setup first"
                conn.send(state.baseline(msg["which"], msg.get("settings", DEFAULTS)))
            else:
                conn.send({"ok": False, "error_kind": "cuda", "error_msg": f"unknown op {op}"})
        except Exception as exc:  # noqa: BLE001 - report and carry on (or die if sticky)
            text = f"{type(exc).__name__}: {exc}"
            sticky = "illegal memory access" in text or "misaligned" in text or \
                "unspecified launch failure" in text
            kind = "illegal_address" if sticky else "cuda"
            conn.send({"ok": False, "error_kind": kind, "error_msg": text[:500],
                       "trace": traceback.format_exc()[-2000:], "sticky": sticky})
            if sticky:
                return
