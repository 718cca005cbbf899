"""Policy checkpoints: written atomically, and holding what is needed to resume exactly (policy,
optimizer, random states, curves) and to know what the policy was trained on."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import SettingsError
from .policy import MultiAgentPolicy

FORMAT = 1


def save(path: str | Path, policy: MultiAgentPolicy, meta: dict[str, Any],
         optimizer: torch.optim.Optimizer | None = None,
         rng: np.random.Generator | None = None) -> None:
    """Write a checkpoint; a reader never sees a half-written file (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"format": FORMAT, "policy": policy.state_dict(), "policy_meta": policy.describe(),
            "meta": meta, "optimizer": optimizer.state_dict() if optimizer else None,
            "numpy_rng": rng.bit_generator.state if rng is not None else None,
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pt")
    os.close(fd)
    try:
        torch.save(blob, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise SettingsError(f"{path}: no such checkpoint")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a corrupt file is the user's to know about
        raise SettingsError(f"{path}: not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise SettingsError(f"{path}: not a cuda-agent policy checkpoint")
    return blob


def policy_from(blob: dict[str, Any]) -> MultiAgentPolicy:
    meta = blob["policy_meta"]
    policy = MultiAgentPolicy(meta["mode"], meta["hidden"])
    try:
        policy.load_state_dict(blob["policy"])
    except RuntimeError:
        # the action vocabulary or the observation grew with the template library
        raise SettingsError(
            "the checkpoint was trained with another template library (its observation or "
            "action vocabulary differs from this build's); train a new policy with "
            "`cuda-agent train`") from None
    return policy
