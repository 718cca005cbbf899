"""The numeric contract a run holds its kernels to, and how `--precision auto` reads it off torch.

A user asks for a precision (`PRECISIONS`); a run holds its kernels to a contract (`CONTRACTS`).
"auto", the default, is the contract the user's own process gives each op: fp32 convolutions on
TF32 tensor cores where `torch.backends.cudnn.allow_tf32` is set (torch's default), fp32 matrix
products on TF32 where `torch.get_float32_matmul_precision()` is not "highest" (torch's default
is "highest": strict). So a fresh process resolves "auto" to "tf32:conv". Every other op
(elementwise, reductions, norms, pooling, scans) runs on no tensor core in torch and stays
strict fp32 under every contract. The verifier holds a product to a small multiple of torch's
own error at its contract (the witness: torch's answer under the same flags), so a TF32
convolution is verified against cuDNN's TF32 answer, as the user's process would compute it.

The replay device serves sweeps recorded under strict fp32: there "auto" is "fp32".
"""

from __future__ import annotations

from typing import Any

PRECISIONS = ("auto", "fp32", "tf32", "fp16", "bf16")
"""what a user may ask for: auto (each op as the user's torch runs it, the default), strict
fp32, or tensor-core products whose operands are rounded once to TF32, fp16 or bf16 (fp32
accumulation); inputs and outputs stay fp32"""

CONTRACTS = ("fp32", "tf32", "tf32:conv", "tf32:matmul", "fp16", "bf16")
"""what a run holds its kernels to: strict fp32; TF32 products for convolutions and matrix
products alike, or for one of the two ("auto" under torch's flags); fp16 or bf16 products"""

PRODUCT_OPS = ("conv", "matmul")
"""the two kinds of product torch's TF32 flags govern: cuDNN's convolutions, cuBLAS's matrix
products (attention's math path multiplies matrices: "matmul")"""

NOTES = {
    "tf32": "TF32: tensor-core products round their operands to TF32, as torch does with "
            "allow_tf32; the matched eager and torch.compile timed with TF32 on",
    "tf32:conv": "convolutions on TF32 tensor cores, as torch runs them by default "
                 "(cudnn.allow_tf32); matrix products strict fp32 (float32_matmul_precision "
                 "'highest'); verified against torch's own answer under those flags",
    "tf32:matmul": "matrix products on TF32 tensor cores, as this process's torch runs them "
                   "(float32_matmul_precision not 'highest'); convolutions strict fp32 "
                   "(cudnn.allow_tf32 off); verified against torch's own answer under those "
                   "flags",
    "fp16": "fp16 (opted in): tensor-core products round their operands to fp16 and accumulate "
            "in fp32; verified against, and matched to, eager and torch.compile under "
            "torch.autocast(float16)",
    "bf16": "bf16 (opted in): tensor-core products round their operands to bf16 and accumulate "
            "in fp32; verified against, and matched to, eager and torch.compile under "
            "torch.autocast(bfloat16)",
}
"""what each contract but strict fp32 means, as the reports and model_new.py say it"""


def tf32_ops(contract: str) -> dict[str, bool]:
    """Which products may round fp32 operands to TF32 under `contract`: {"conv", "matmul"}."""
    return {"conv": contract in ("tf32", "tf32:conv"),
            "matmul": contract in ("tf32", "tf32:matmul")}


def product_precision(contract: str, op: str) -> str:
    """What an `op` product ("conv" or "matmul") computes in under `contract`: "fp32" (strict),
    "tf32", "fp16" or "bf16"."""
    if op not in PRODUCT_OPS:
        raise ValueError(f"unknown product {op!r}; one of {PRODUCT_OPS}")
    if contract in ("fp16", "bf16"):
        return contract
    return "tf32" if tf32_ops(contract)[op] else "fp32"


def contract_of(conv_tf32: bool, matmul_tf32: bool) -> str:
    """The contract in which convolutions and matrix products use TF32 as given."""
    return {(False, False): "fp32", (True, True): "tf32", (True, False): "tf32:conv",
            (False, True): "tf32:matmul"}[(conv_tf32, matmul_tf32)]


def process_flags() -> dict[str, Any]:
    """This process's TF32 flags as they are now (`launcher.tf32_flags`)."""
    from .runner import launcher

    return launcher.tf32_flags()


def resolve(asked: str, device_kind: str | None, flags: dict[str, Any] | None = None) -> str:
    """The contract a run asked for `asked` holds its kernels to. "auto" reads `flags` (by
    default this process's, after the problem file was imported: a file that sets torch's TF32
    flags is run as it asks); on the replay device it is strict fp32, what the sweeps recorded.
    A contract passes through unchanged."""
    if asked != "auto":
        return asked
    if device_kind == "replay":
        return "fp32"
    from .runner import launcher

    flags = flags if flags is not None else process_flags()
    return contract_of(launcher.conv_tf32(flags), launcher.matmul_tf32(flags))


def describe(contract: str, asked: str | None = None) -> str:
    """One phrase for reports: what the kernels were held to, and how it was chosen."""
    what = NOTES.get(contract, "strict fp32: every kernel held to fp32 accuracy (tensor cores "
                               "only error-compensated)")
    return f"{what} (--precision {asked} resolved to {contract})" if asked == "auto" else what
