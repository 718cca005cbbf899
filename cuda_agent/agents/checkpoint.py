"""Policy checkpoints: written atomically, and holding what is needed to resume exactly (policy,
optimizer, random states, curves) and to know what the policy was trained on."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import tempfiles
from ..errors import SettingsError
from .policy import SLOT_OFFSETS, MultiAgentPolicy
from .vocab import SLOT_ORDER, values

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
    _write(blob, path)


def _write(blob: dict[str, Any], path: Path) -> None:
    """Through a temporary renamed into place, with the user's umask (a policy is shared);
    temporaries of a save that was killed are removed first (`tempfiles.py`)."""
    tempfiles.sweep(path.parent)
    fd, tmp = tempfiles.create(path.parent, suffix=".pt")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(blob, f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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


# what only resuming a training run reads: a published policy (one that tuning loads) drops it,
# which is three quarters of a checkpoint's size (Adam's two moments, the samplers' policy copy)
RESUME_ONLY = ("optimizer", "numpy_rng", "torch_rng", "python_rng")
RESUME_ONLY_META = ("sampler_state", "pending_jobs", "generator")


def strip_for_inference(src: str | Path, dst: str | Path) -> Path:
    """Write `src` without its resume state to `dst` (atomically; `dst` may be `src`): the
    policy, its description and what it was trained on stay, so tuning, `bench` and the
    held-out checks read it as before; `Trainer` refuses to resume from it."""
    blob = load(src)
    blob = {k: v for k, v in blob.items() if k not in RESUME_ONLY}
    blob["meta"] = {k: v for k, v in blob["meta"].items() if k not in RESUME_ONLY_META}
    blob["meta"]["resumable"] = False
    _write(blob, Path(dst))
    return Path(dst)


def policy_from(blob: dict[str, Any]) -> MultiAgentPolicy:
    meta = blob["policy_meta"]
    # a fixed seed for the initial weights: where the checkpoint predates a head (the template
    # library grew), that head keeps them, and the same checkpoint must load to the same policy
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        policy = MultiAgentPolicy(meta["mode"], meta["hidden"])
    try:
        policy.load_state_dict(blob["policy"])
    except RuntimeError:
        try:  # the action vocabulary grew with the template library: grow the heads
            policy.load_state_dict(grown_state(blob["policy"], policy, meta.get("vocab")))
        except (RuntimeError, KeyError, ValueError):
            raise SettingsError(
                "the checkpoint was trained with another template library (its observation "
                "or action vocabulary differs from this build's beyond added values); train "
                "a new policy with `cuda-agent train`") from None
    return policy


def grown_state(old: dict[str, torch.Tensor], policy: MultiAgentPolicy,
                old_vocab: dict[str, list] | None = None) -> dict[str, torch.Tensor]:
    """A state dict of a policy trained on a smaller action vocabulary, fitted to `policy`'s.

    Each slot head's rows (its values) and every head's context columns (the one-hot of the
    slots decided before) are mapped onto the current vocabulary: by value where the checkpoint
    recorded its vocabulary, else by position (values are only ever appended before the absent
    marker). A value the checkpoint never saw gets zero weights and its head's mean bias, so it
    starts neither favoured nor excluded; online fine-tuning learns it."""
    new = policy.state_dict()
    head_key = {s: f"nets.{policy.group_of[s]}.heads.{s.replace('.', '_')}" for s in SLOT_ORDER}
    old_size = {s: old[head_key[s] + ".bias"].shape[0] if head_key[s] + ".bias" in old else 0
                for s in SLOT_ORDER}
    # new index of each old value index, per slot
    where: dict[str, list[int]] = {}
    for s in SLOT_ORDER:
        cur, n = list(values(s)), old_size[s]
        if n == 0:
            where[s] = []
        elif old_vocab and s in old_vocab:
            where[s] = [cur.index(v) for v in list(old_vocab[s])]
        elif n > len(cur):
            raise ValueError(f"{s}: the checkpoint has more values than this build")
        else:
            where[s] = list(range(n - 1)) + [len(cur) - 1]
    old_off = np.concatenate([[0], np.cumsum([old_size[s] for s in SLOT_ORDER])]).astype(int)
    hidden = policy.hidden
    col_map = [(hidden + int(old_off[j]) + i, hidden + int(SLOT_OFFSETS[j]) + k)
               for j, s in enumerate(SLOT_ORDER) for i, k in enumerate(where[s])]
    # slots the checkpoint knew, in its decision order (slots are only appended to an agent,
    # so a new one sits inside SLOT_ORDER: the observation's per-slot columns move)
    old_slots = (list(old_vocab) if old_vocab else
                 [s for s in SLOT_ORDER if old_size[s] > 0])
    out = {}
    for key, value in new.items():
        if key in old and old[key].shape != value.shape and key in input_layers(policy):
            out[key] = grown_inputs(old[key], value, old_slots)
            continue
        slot = next((s for s in SLOT_ORDER if key.startswith(head_key[s] + ".")), None)
        if slot is None or key not in old:
            out[key] = old[key] if key in old else value
            continue
        src, rows = old[key], where[slot]
        if key.endswith(".bias"):
            grown = torch.full_like(value, float(src[:-1].mean()) if len(src) > 1 else 0.0)
            grown[rows] = src
        else:
            grown = torch.zeros_like(value)
            grown[:, :hidden][rows] = src[:, :hidden]
            for c_old, c_new in col_map:
                grown[rows, c_new] = src[:, c_old]
        out[key] = grown
    return out


def input_layers(policy: MultiAgentPolicy) -> set[str]:
    """The weights that read an observation (agents' trunks) or the global state (critic)."""
    return {k for k in policy.state_dict() if k.endswith("trunk.0.weight")} | {"critic.0.weight"}


def grown_inputs(src: torch.Tensor, value: torch.Tensor, old_slots: list[str]) -> torch.Tensor:
    """An input layer trained on observations with fewer slots: every observation ends with one
    column per slot (`observe.config_features`), so the columns before them are copied and each
    old slot's column moves to its place; a new slot's column starts at zero (no effect)."""
    prefix = value.shape[1] - len(SLOT_ORDER)
    if src.shape[0] != value.shape[0] or src.shape[1] != prefix + len(old_slots):
        raise ValueError("the observation layout differs beyond added slots")
    grown = torch.zeros_like(value)
    grown[:, :prefix] = src[:, :prefix]
    for i, s in enumerate(old_slots):
        grown[:, prefix + SLOT_ORDER.index(s)] = src[:, prefix + i]
    return grown
