"""Conformance mode's tolerance (`--tolerance`): its parsing and its value, without torch, so
that the CLI checks the flag before any work (`flags.py`); `verify.py` applies it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SettingsError


@dataclass(frozen=True)
class Tolerance:
    """Conformance mode's acceptance test: |out - ref| <= atol + rtol * |ref| elementwise
    (torch.allclose) against the user's module in fp32 at PyTorch's default settings."""

    atol: float
    rtol: float

    def describe(self) -> str:
        return f"allclose(atol={self.atol:g}, rtol={self.rtol:g})"


#: what KernelBench accepts: torch.allclose(out, ref, atol=1e-2, rtol=1e-2)
KERNELBENCH = Tolerance(1e-2, 1e-2)
STRICT = "strict"


def parse_tolerance(text: str) -> Tolerance | None:
    """`--tolerance`: "strict" (None: the strict protocol), "kernelbench" (atol=rtol=1e-2), or
    "atol=A,rtol=R"; anything else is a one-line SettingsError."""
    text = text.strip().lower()
    if text == STRICT:
        return None
    if text == "kernelbench":
        return KERNELBENCH
    values: dict[str, float] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not eq or key.strip() not in ("atol", "rtol") or not math.isfinite(number) \
                or number < 0 or key.strip() in values:
            raise SettingsError(f"--tolerance {text!r}: expected strict, kernelbench, or "
                                "atol=A,rtol=R with A, R >= 0")
        values[key.strip()] = number
    if set(values) != {"atol", "rtol"}:
        raise SettingsError(f"--tolerance {text!r}: give both atol and rtol (atol=A,rtol=R)")
    return Tolerance(values["atol"], values["rtol"])
