"""Elementwise ops of the IR and their CUDA C expressions.

Each op renders to a C expression over already-computed operand expressions. Two flavours:
precise (what torch computes, to fp32 rounding) and fast (`--use_fast_math`-style intrinsics,
chosen by the compute agent's `fastmath` slot; the verifier decides whether they are accurate
enough for the problem at hand). Code must compile under NVRTC, which has no math headers:
no INFINITY/NAN macros, so `CA_INF` from the template prelude is used instead.
"""

from __future__ import annotations

from typing import Any, Callable

Attrs = dict[str, Any]


def _f(value: float) -> str:
    """A float literal NVRTC accepts, exact for the value's fp32 rounding."""
    if value != value:
        return "CA_NAN"
    if value == float("inf"):
        return "CA_INF"
    if value == float("-inf"):
        return "(-CA_INF)"
    return f"{float(value)!r}f".replace("inf", "INF")


def _softplus(x: str, a: Attrs, fast: bool) -> str:
    beta, thr = float(a.get("beta", 1.0)), float(a.get("threshold", 20.0))
    bx = x if beta == 1.0 else f"({x} * {_f(beta)})"
    soft = f"__logf(1.f + __expf({bx}))" if fast else f"log1pf(expf({bx}))"
    if beta != 1.0:
        soft = f"({soft} / {_f(beta)})"
    return f"(({bx}) > {_f(thr)} ? ({x}) : {soft})"


def _elu(x: str, a: Attrs, fast: bool) -> str:
    alpha, scale = float(a.get("alpha", 1.0)), float(a.get("scale", 1.0))
    in_scale = float(a.get("input_scale", 1.0))
    xs = x if in_scale == 1.0 else f"({x} * {_f(in_scale)})"
    neg = f"(__expf({xs}) - 1.f)" if fast else f"expm1f({xs})"
    pos = x if scale == 1.0 else f"({x} * {_f(scale)})"
    coef = alpha * scale
    negv = neg if coef == 1.0 else f"({_f(coef)} * {neg})"
    return f"(({x}) > 0.f ? {pos} : {negv})"


def _tanh(x: str, fast: bool) -> str:
    if fast:
        return f"copysignf(1.f - 2.f / (__expf(2.f * fabsf({x})) + 1.f), {x})"
    return f"tanhf({x})"


def _pow_scalar(x: str, a: Attrs, fast: bool) -> str:
    e = float(a["exponent"])
    table = {1.0: f"({x})", 2.0: f"(({x}) * ({x}))", 3.0: f"(({x}) * ({x}) * ({x}))",
             0.5: f"sqrtf({x})", -0.5: f"rsqrtf({x})", -1.0: f"(1.f / ({x}))", 0.0: "1.f"}
    if e in table:
        return table[e]
    return f"{'__powf' if fast else 'powf'}({x}, {_f(e)})"


def _clamp(x: str, a: Attrs, fast: bool) -> str:
    out = x
    if a.get("min") is not None:
        out = f"ca_max({out}, {_f(a['min'])})"
    if a.get("max") is not None:
        out = f"ca_min({out}, {_f(a['max'])})"
    return out


_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT2 = 0.7071067811865476

# name -> (render(x, attrs, fast), uses_transcendental)
UNARY: dict[str, tuple[Callable[[str, Attrs, bool], str], bool]] = {
    "relu": (lambda x, a, f: f"(({x}) < 0.f ? 0.f : ({x}))", False),
    "gelu": (lambda x, a, f: f"(0.5f * ({x}) * (1.f + erff(({x}) * {_f(_INV_SQRT2)})))", True),
    "gelu_tanh": (lambda x, a, f: f"(0.5f * ({x}) * (1.f + " + _tanh(
        f"{_f(_SQRT_2_OVER_PI)} * (({x}) + 0.044715f * ({x}) * ({x}) * ({x}))", f) + "))", True),
    "silu": (lambda x, a, f: f"(({x}) / (1.f + {'__expf' if f else 'expf'}(-({x}))))", True),
    "sigmoid": (lambda x, a, f: f"(1.f / (1.f + {'__expf' if f else 'expf'}(-({x}))))", True),
    "tanh": (lambda x, a, f: _tanh(x, f), True),
    "softplus": (_softplus, True),
    "elu": (_elu, True),
    "hardtanh": (lambda x, a, f: f"ca_min(ca_max({x}, {_f(a.get('min_val', -1.0))}), "
                 f"{_f(a.get('max_val', 1.0))})", False),
    "leaky_relu": (lambda x, a, f: f"(({x}) > 0.f ? ({x}) : ({x}) * "
                   f"{_f(a.get('negative_slope', 0.01))})", False),
    "hardsigmoid": (lambda x, a, f: f"ca_min(ca_max(({x}) * (1.f/6.f) + 0.5f, 0.f), 1.f)", False),
    "hardswish": (lambda x, a, f: f"(({x}) * ca_min(ca_max(({x}) + 3.f, 0.f), 6.f) * (1.f/6.f))",
                  False),
    "mish": (lambda x, a, f: f"(({x}) * " + _tanh(_softplus(x, {}, f), f) + ")", True),
    "abs": (lambda x, a, f: f"fabsf({x})", False),
    "neg": (lambda x, a, f: f"(-({x}))", False),
    "exp": (lambda x, a, f: f"{'__expf' if f else 'expf'}({x})", True),
    "log": (lambda x, a, f: f"{'__logf' if f else 'logf'}({x})", True),
    "log2": (lambda x, a, f: f"{'__log2f' if f else 'log2f'}({x})", True),
    "log1p": (lambda x, a, f: f"log1pf({x})", True),
    "expm1": (lambda x, a, f: f"expm1f({x})", True),
    "sqrt": (lambda x, a, f: f"sqrtf({x})", False),
    "rsqrt": (lambda x, a, f: f"rsqrtf({x})", False),
    "reciprocal": (lambda x, a, f: f"(1.f / ({x}))", False),
    "sin": (lambda x, a, f: f"{'__sinf' if f else 'sinf'}({x})", True),
    "cos": (lambda x, a, f: f"{'__cosf' if f else 'cosf'}({x})", True),
    "erf": (lambda x, a, f: f"erff({x})", True),
    "sign": (lambda x, a, f: f"(float)((({x}) > 0.f) - (({x}) < 0.f))", False),
    "floor": (lambda x, a, f: f"floorf({x})", False),
    "ceil": (lambda x, a, f: f"ceilf({x})", False),
    "round": (lambda x, a, f: f"rintf({x})", False),
    "pow_scalar": (_pow_scalar, True),
    "clamp": (_clamp, False),
    "to_float": (lambda x, a, f: f"((float)({x}))", False),
    # a cast to half precision inside forward(): the value rounded to nearest even in that
    # type, held in a float register (the prelude's conversions)
    "round_f16": (lambda x, a, f: f"ca_round_f16({x})", False),
    "round_bf16": (lambda x, a, f: f"ca_round_bf16({x})", False),
    "logical_not": (lambda x, a, f: f"(!({x}))", False),
}

# name -> (render(a, b, attrs, fast), uses_transcendental)
BINARY: dict[str, tuple[Callable[[str, str, Attrs, bool], str], bool]] = {
    "add": (lambda a, b, at, f: f"(({a}) + ({b}))", False),
    "sub": (lambda a, b, at, f: f"(({a}) - ({b}))", False),
    "mul": (lambda a, b, at, f: f"(({a}) * ({b}))", False),
    "div": (lambda a, b, at, f: f"__fdividef({a}, {b})" if f else f"(({a}) / ({b}))", False),
    "maximum": (lambda a, b, at, f: f"ca_max({a}, {b})", False),
    "minimum": (lambda a, b, at, f: f"ca_min({a}, {b})", False),
    "pow": (lambda a, b, at, f: f"{'__powf' if f else 'powf'}({a}, {b})", True),
    "gt": (lambda a, b, at, f: f"(({a}) > ({b}))", False),
    "lt": (lambda a, b, at, f: f"(({a}) < ({b}))", False),
    "ge": (lambda a, b, at, f: f"(({a}) >= ({b}))", False),
    "le": (lambda a, b, at, f: f"(({a}) <= ({b}))", False),
    "eq": (lambda a, b, at, f: f"(({a}) == ({b}))", False),
    "ne": (lambda a, b, at, f: f"(({a}) != ({b}))", False),
    "logical_and": (lambda a, b, at, f: f"(({a}) && ({b}))", False),
    "logical_or": (lambda a, b, at, f: f"(({a}) || ({b}))", False),
}

COMPARISONS = {"gt", "lt", "ge", "le", "eq", "ne", "logical_and", "logical_or"}

# Ternary ops are few enough to list by hand.
TERNARY = {"where": (lambda c, a, b, at, f: f"(({c}) ? ({a}) : ({b}))", False)}

C_TYPES = {"float32": "float", "int64": "long long", "bool": "bool"}


def is_elementwise(op: str) -> bool:
    return op in UNARY or op in BINARY or op in TERNARY


def uses_transcendental(op: str) -> bool:
    for table in (UNARY, BINARY, TERNARY):
        if op in table:
            return table[op][1]
    return False


def render(op: str, operands: list[str], attrs: Attrs, fast: bool) -> str:
    """C expression for `op` applied to operand expressions."""
    if op in UNARY:
        return UNARY[op][0](operands[0], attrs, fast)
    if op in BINARY:
        return BINARY[op][0](operands[0], operands[1], attrs, fast)
    if op in TERNARY:
        return TERNARY[op][0](operands[0], operands[1], operands[2], attrs, fast)
    raise KeyError(op)


float_literal = _f


def cast_operand(op: str, product: str) -> str | None:
    """Why one kernel does not take a `product` ("matrix product", "convolution") whose operand
    is IR op `op`, where that is torch.autocast's cast to a half type (`autocast.py`; None for
    any other op): the region split tunes it (torch casts, the product in that type through
    the library)."""
    dtype = {"round_f16": "float16", "round_bf16": "bfloat16"}.get(op)
    if dtype is None:
        return None
    return (f"unsupported: a {product} of operands cast to {dtype} (torch.autocast) as one "
            f"kernel; the region split tunes it: torch casts, the {product} in {dtype}")
