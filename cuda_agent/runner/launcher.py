"""Launch generated kernels on torch tensors through the CUDA driver API (cuda-bindings).

Self-contained on purpose: `emit.py` copies this file's source into every `model_new.py`, so the
emitted module runs without cuda-agent installed. Keep it free of cuda_agent imports.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import torch

# Errors after which the CUDA context is unusable: the process must be replaced.
STICKY = {700: "illegal_address", 714: "illegal_address", 715: "illegal_address",
          716: "misaligned", 719: "illegal_address", 702: "timeout"}
RESOURCE = {701: "resources", 1: "resources"}


class KernelLaunchError(RuntimeError):
    def __init__(self, code: int, where: str) -> None:
        self.code = code
        self.kind = STICKY.get(code) or RESOURCE.get(code) or "launch"
        self.sticky = code in STICKY
        super().__init__(f"{where}: CUDA error {code} ({self.kind})")


def _driver():
    from cuda.bindings import driver
    return driver


def _check(result, where: str):
    err = result[0] if isinstance(result, tuple) else result
    code = int(err)
    if code != 0:
        raise KernelLaunchError(code, where)
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def compile_for_device(source: str, device: torch.device) -> bytes:
    """Compile `source` with NVRTC for the GPU at hand (used when no matching cubin ships)."""
    from cuda.bindings import nvrtc

    major, minor = torch.cuda.get_device_capability(device)
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode(), b"-std=c++17"]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError("NVRTC failed: " + log.decode(errors="replace")[:2000])
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


# -- TF32 flags -----------------------------------------------------------------------------------
# torch keeps whether fp32 convolutions (cuDNN) and matrix products (cuBLAS) may run on TF32 tensor
# cores in process-wide flags, in two APIs: the legacy booleans (`cudnn.allow_tf32`,
# `set_float32_matmul_precision`) and, since torch 2.9, per-backend `fp32_precision` slots where
# a parent ("generic"/"cuda" "all") overrides its children. Reading a legacy flag raises once the
# two disagree, so a snapshot reads the slots raw and the legacy values where they read.
# (set_float32_matmul_precision writes mkldnn's matmul slot too: a snapshot keeps the CPU's)
_TF32_PARENTS = (("generic", "all"), ("cuda", "all"), ("mkldnn", "all"))
_TF32_CHILDREN = tuple((b, op) for b in ("cuda", "mkldnn") for op in ("matmul", "conv", "rnn"))


_SLOT_API: list = []


def _slot_api() -> bool:
    """Whether this torch has the fp32_precision slots, the convolution's and the matrix
    product's among them (checked once)."""
    if not _SLOT_API:
        try:
            get = torch._C._get_fp32_precision_getter
            _SLOT_API.append(all(isinstance(get(b, op), str) for b, op in
                                 _TF32_PARENTS[:2] + _TF32_CHILDREN[:2]))
        except (AttributeError, RuntimeError, ValueError, TypeError):
            _SLOT_API.append(False)
    return _SLOT_API[0]


def tf32_flags() -> dict:
    """The process's TF32 flags as they are: {"slots": {"backend/op": value}, "cudnn_allow_tf32":
    bool or None, "float32_matmul_precision": str or None} (None: unreadable, a mixed state)."""
    slots = {}
    if _slot_api():
        for b, op in _TF32_PARENTS + _TF32_CHILDREN:
            try:
                slots[f"{b}/{op}"] = torch._C._get_fp32_precision_getter(b, op)
            except (RuntimeError, ValueError, TypeError):  # one this torch does not know
                pass
    out: dict[str, Any] = {"slots": slots, "cudnn_allow_tf32": None,
                           "float32_matmul_precision": None}
    for key, read in (("cudnn_allow_tf32", torch._C._get_cudnn_allow_tf32),
                      ("float32_matmul_precision", torch.get_float32_matmul_precision)):
        try:
            out[key] = read()
        except RuntimeError:  # the legacy and new APIs disagree: the slots say it all
            pass
    return out


def conv_tf32(flags: dict) -> bool:
    """Whether fp32 convolutions may use TF32 under `flags` (a `tf32_flags()` snapshot)."""
    if "cuda/conv" in flags["slots"]:
        return flags["slots"]["cuda/conv"] == "tf32"
    return bool(flags["cudnn_allow_tf32"])


def matmul_tf32(flags: dict) -> bool:
    """Whether fp32 matrix products may use TF32 (or lower) under `flags`."""
    if "cuda/matmul" in flags["slots"]:
        return flags["slots"]["cuda/matmul"] == "tf32"
    return flags["float32_matmul_precision"] not in (None, "highest")


def tf32_state() -> tuple[bool, bool]:
    """(convolutions, matrix products): whether each may use TF32 now; cheaper than a
    snapshot, for the check before every library step."""
    if _slot_api():
        get = torch._C._get_fp32_precision_getter
        return get("cuda", "conv") == "tf32", get("cuda", "matmul") == "tf32"
    return (bool(torch._C._get_cudnn_allow_tf32()),
            torch.get_float32_matmul_precision() != "highest")


def restore_tf32_flags(flags: dict) -> None:
    """Put back a `tf32_flags()` snapshot: the parents first (setting one resets its
    children), then the legacy values, then the children."""
    setter = getattr(torch._C, "_set_fp32_precision_setter", None)
    slots = flags["slots"]
    for key in [f"{b}/{op}" for b, op in _TF32_PARENTS]:
        if setter is not None and key in slots:
            setter(*key.split("/"), slots[key])
    if flags["cudnn_allow_tf32"] is not None:
        torch._C._set_cudnn_allow_tf32(flags["cudnn_allow_tf32"])
    if flags["float32_matmul_precision"] is not None:
        torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
    for key in [f"{b}/{op}" for b, op in _TF32_CHILDREN]:
        if setter is not None and key in slots:
            setter(*key.split("/"), slots[key])


def set_tf32(conv: bool, matmul: bool) -> None:
    """Allow TF32 in fp32 convolutions and matrix products, or not, whatever the state before:
    a parent slot set by the new API would override the legacy flags, so it is cleared first."""
    if _slot_api():
        for b, op in _TF32_PARENTS:
            if torch._C._get_fp32_precision_getter(b, op) != "none":
                torch._C._set_fp32_precision_setter(b, op, "none")
    torch._C._set_cudnn_allow_tf32(bool(conv))
    torch.set_float32_matmul_precision("high" if matmul else "highest")


class tf32_mode:
    """`with tf32_mode(conv, matmul):` TF32 allowed (or not) in fp32 convolutions and matrix
    products inside, the flags as they were restored after (nests; exceptions pass through).
    `tf32_mode(flags=snapshot)` puts a whole `tf32_flags()` snapshot in place instead."""

    def __init__(self, conv: bool = False, matmul: bool = False,
                 flags: dict | None = None) -> None:
        self.conv, self.matmul, self.flags = conv, matmul, flags
        self.saved: list = []

    def __enter__(self) -> "tf32_mode":
        self.saved.append(tf32_flags())
        if self.flags is not None:
            restore_tf32_flags(self.flags)
        else:
            set_tf32(self.conv, self.matmul)
        return self

    def __exit__(self, *exc) -> None:
        restore_tf32_flags(self.saved.pop())


def run_library(call: dict, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """A vendor-library step of a candidate, through torch on the current stream: cuBLAS for a
    (batched, strided) matrix product, cuDNN for a convolution, direct or transposed. Returns
    the product dense (contiguous, or channels-last where the call keeps it so), which the
    kernels after it read as their workspace. With
    `dtype` ("fp16" or "bf16", where the user opted into half-precision products) the operands
    are cast to it and the product back to fp32, as torch.autocast computes it. With
    `cudnn_benchmark` (a model_new.py whose kernel was measured so) a convolution runs in
    cuDNN's benchmark mode, the process's own mode restored after it. cuDNN and cuBLAS round
    fp32 operands to TF32 only with `tf32` (the user opted in: `--precision tf32`); otherwise the
    step runs strict fp32, as it was verified, whatever the process's own TF32 flags (torch's
    default lets cuDNN use TF32), which are restored after it."""
    tf32 = bool(call.get("tf32"))
    if tf32_state() != (tf32, tf32):
        with tf32_mode(tf32, tf32):
            return _run_library_as_set(call, inputs)
    return _run_library_as_set(call, inputs)


def _run_library_as_set(call: dict, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    if call.get("cudnn_benchmark") and not torch.backends.cudnn.benchmark:
        # the first call of a shape times cuDNN's algorithms and keeps the fastest for the
        # process's life, unless the process already met the shape on the heuristics
        torch.backends.cudnn.benchmark = True
        try:
            return _run_library_as_set({k: v for k, v in call.items()
                                        if k != "cudnn_benchmark"}, inputs)
        finally:
            torch.backends.cudnn.benchmark = False
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(call.get("dtype", ""))
    if half is not None:
        inputs = list(inputs)
        for k in (call["a"], call["b"]) if call["op"] == "matmul" else (call["x"], call["w"]):
            inputs[k] = inputs[k].to(half)
        return _product_layout(call, _run_library(call, inputs).float())
    return _run_library(call, inputs)


def _product_layout(call: dict, y: torch.Tensor) -> torch.Tensor:
    """The product dense in the layout the kernels after it read: torch's default, or, for
    a convolution whose product is kept channels-last (layout "channels_last_kept": the next
    stages of a program read it so), channels-last, with no conversion back."""
    if str(call.get("layout", "")).startswith("channels_last_kept"):  # or _kept_ordered
        return y.contiguous(memory_format=torch.channels_last if call["dims"] == 2
                            else torch.channels_last_3d)
    return y.contiguous()


def _run_library(call: dict, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    if call["op"] == "matmul":
        # a cast operand keeps its shape and contiguous layout: the strides hold for it too
        a = inputs[call["a"]].as_strided((call["batch"], call["M"], call["K"]),
                                         call["a_strides"])
        b = inputs[call["b"]].as_strided((call["batch"], call["K"], call["N"]),
                                         call["b_strides"])
        if call["batch"] == 1:
            return torch.mm(a[0], b[0])
        return torch.matmul(a, b)
    if call["op"] not in ("conv", "conv_transpose"):
        raise ValueError(f"unknown library step {call['op']!r}")
    x, w = inputs[call["x"]], inputs[call["w"]]
    if str(call.get("layout", "")).startswith("channels_last"):
        # cuDNN computes in NHWC; converted back below unless kept (`_product_layout`)
        fmt = torch.channels_last if call["dims"] == 2 else torch.channels_last_3d
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    if call["op"] == "conv":
        conv = getattr(torch.nn.functional, f"conv{call['dims']}d")
        y = conv(x, w, None, call["stride"], call["padding"], call["dilation"], call["groups"])
    else:
        conv = getattr(torch.nn.functional, f"conv_transpose{call['dims']}d")
        y = conv(x, w, None, call["stride"], call["padding"], call["output_padding"],
                 call["groups"], call["dilation"])
    return _product_layout(call, y)


class LoadedKernels:
    """A cubin loaded into the current context plus the launch sequence of one candidate.

    `launches` is a list of dicts {kernel, grid, block, smem, library}; every kernel takes
    (inputs..., out, workspace) as raw device pointers. A launch with `library` set is a
    vendor-library step (`run_library`) whose result is the workspace of the kernels after it.
    """

    def __init__(self, image: bytes, launches: Sequence[dict], workspace_bytes: int = 0,
                 zero_workspace: bool = False, device: torch.device | None = None) -> None:
        driver = _driver()
        self.device = device or torch.device("cuda", torch.cuda.current_device())
        torch.cuda.init()
        with torch.cuda.device(self.device):
            torch.empty(1, device=self.device)  # makes the primary context current
            self.module = _check(driver.cuModuleLoadData(image), "cuModuleLoadData")
            self.functions: dict[str, Any] = {}  # kernel name -> CUfunction
            for launch in launches:
                if launch.get("library"):
                    continue
                name = launch["kernel"]
                if name not in self.functions:
                    fn = _check(driver.cuModuleGetFunction(self.module, name.encode()),
                                f"cuModuleGetFunction({name})")
                    self.functions[name] = fn
                if launch.get("smem", 0) > 48 * 1024:
                    _check(driver.cuFuncSetAttribute(
                        self.functions[name],
                        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        int(launch["smem"])), f"cuFuncSetAttribute({name})")
        self.launches = [dict(l) for l in launches]
        self.workspace_bytes = int(workspace_bytes)
        self.zero_workspace = bool(zero_workspace)
        self.workspace: torch.Tensor | None = None  # allocated, zeroed, by the next run

    def release_workspace(self) -> None:
        """Give the workspace back until the next run (which allocates it zeroed again): a
        verification check compares against float64 reference chunks after each run, and a
        fused chain's workspace (the convolution's output between its stages, GiBs) held
        meanwhile would pass the memory bound (docs/journal.md: runner/launcher.py)."""
        self.workspace = None

    def __call__(self, inputs: Sequence[torch.Tensor], out: torch.Tensor) -> None:
        driver = _driver()
        stream = torch.cuda.current_stream(self.device).cuda_stream
        if self.workspace is None:
            self.workspace = torch.zeros(max(self.workspace_bytes, 16), dtype=torch.uint8,
                                         device=self.device)
        elif self.zero_workspace:
            self.workspace.zero_()
        workspace = self.workspace
        plain = [t.data_ptr() for t in inputs] + [out.data_ptr(), workspace.data_ptr()]
        # the library steps' results in order: the latest is the workspace of the kernels
        # after it (["product"]); a bare product is a later stage's operand (["product", j])
        products: list[torch.Tensor] = []
        for launch in self.launches:
            args = launch.get("args")
            if launch.get("library"):
                tensors = inputs if args is None else [
                    self._tensor(a, inputs, workspace, products) for a in args]
                products.append(run_library(launch["library"], tensors))
                continue
            if args is None:
                ptrs = plain[:-1] + [products[-1].data_ptr() if products else plain[-1]]
            else:
                ptrs = [self._pointer(a, inputs, out, products, workspace)
                        for a in args]
            holders = [ctypes.c_void_p(p) for p in ptrs]
            params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
            gx, gy, gz = launch["grid"]
            bx, by, bz = launch["block"]
            _check(driver.cuLaunchKernel(self.functions[launch["kernel"]], gx, gy, gz, bx, by, bz,
                                         int(launch.get("smem", 0)), stream,
                                         ctypes.addressof(params), 0),
                   f"launch {launch['kernel']}")

    @staticmethod
    def _pointer(arg: Sequence, inputs: Sequence[torch.Tensor], out: torch.Tensor,
                 products: Sequence[torch.Tensor], workspace: torch.Tensor) -> int:
        if arg[0] == "in":
            return inputs[arg[1]].data_ptr()
        if arg[0] == "out":
            return out.data_ptr()
        if arg[0] == "buf":
            return workspace.data_ptr() + int(arg[1])
        if arg[0] == "product" and products:
            return products[int(arg[1]) if len(arg) > 1 else -1].data_ptr()
        raise ValueError(f"bad kernel argument {arg!r}")

    @staticmethod
    def _tensor(arg: Sequence, inputs: Sequence[torch.Tensor], workspace: torch.Tensor,
                products: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        """A library step's operand: a program input, an earlier library step's bare product
        (in its logical shape), or a view of a workspace buffer."""
        if arg[0] == "in":
            return inputs[arg[1]]
        if arg[0] == "product":
            return products[int(arg[1]) if len(arg) > 1 else -1]
        dtype = torch.int64 if arg[3] == "int64" else torch.float32
        shape = tuple(arg[2])
        n = 1
        for s in shape:
            n *= s
        start = int(arg[1])
        raw = workspace[start:start + n * (8 if dtype == torch.int64 else 4)]
        return raw.view(dtype).view(shape)

    def close(self) -> None:
        if getattr(self, "module", None) is not None:
            try:
                _driver().cuModuleUnload(self.module)
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
            self.module = None

    def __del__(self) -> None:
        self.close()


def update_state(updates: Sequence[dict], workspace: torch.Tensor,
                 buffer: Callable[[str], torch.Tensor]) -> None:
    """Apply a candidate's module-state updates after its kernels ran (`program.state_updates`):
    BatchNorm's running statistics in training mode, from the batch mean and biased variance
    the kernels left in the workspace, as torch computes them (the variance made unbiased,
    count / (count - 1)); and counters such as num_batches_tracked. `buffer` maps a
    state_dict name to the tensor to update. Part of every timed run of such a candidate."""
    for u in updates:
        if u["op"] == "increment":
            buffer(u["target"]).add_(u["by"])
            continue
        m, n = float(u["momentum"]), int(u["count"])
        mean, var = (_floats(workspace, *u[stat]) for stat in ("mean", "var"))
        running_mean, running_var = buffer(u["running_mean"]), buffer(u["running_var"])
        if running_mean.dtype != torch.float32:
            # a half-precision model's statistics (float32 in the workspace): updated in
            # float32 and rounded once into the buffers, as torch's batch norm does
            running_mean.copy_(running_mean.float().lerp_(mean.view(running_mean.shape), m))
            running_var.copy_(running_var.float().mul_(1.0 - m).add_(
                var.view(running_var.shape), alpha=m * n / (n - 1)))
            continue
        # four small launches in all (with the counter's): (1 - m) * r + m * statistic
        running_mean.lerp_(mean.view(running_mean.shape), m)
        running_var.mul_(1.0 - m).add_(var.view(running_var.shape), alpha=m * n / (n - 1))


def _floats(workspace: torch.Tensor, start: int, numel: int) -> torch.Tensor:
    return workspace[start:start + 4 * numel].view(torch.float32)


def synchronize(device: torch.device) -> None:
    """Wait for the device; a kernel fault surfaces here as a KernelLaunchError."""
    driver = _driver()
    stream = torch.cuda.current_stream(device).cuda_stream
    _check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
