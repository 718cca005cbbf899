"""Shared by the GPU tests that drive one template's kernels directly (no worker process):
load a configuration's kernels, check them against torch, time them with CUDA events."""

from __future__ import annotations

from typing import Iterable

import torch

from cuda_agent.runner import launcher
from cuda_agent.space.slots import Config, Rendered
from cuda_agent.space.space import Space


def load_rendered(r: Rendered, device: torch.device) -> launcher.LoadedKernels:
    image = launcher.compile_for_device(r.source, device)
    return launcher.LoadedKernels(image, [launch.__dict__ for launch in r.launches],
                                  r.workspace_bytes, r.zero_workspace)


def relative_error(out: torch.Tensor, want: torch.Tensor) -> float:
    """Largest deviation relative to the reference's largest magnitude (NaN: never written)."""
    return float((out.double() - want.double()).abs().max() / want.abs().max())


def run_once(kernels: launcher.LoadedKernels, inputs: list[torch.Tensor],
             out_shape: tuple[int, ...]) -> torch.Tensor:
    """One launch into a NaN-filled output: an element the kernels never write fails."""
    out = torch.full(out_shape, float("nan"), device=inputs[0].device)
    kernels(inputs, out)
    torch.cuda.synchronize()
    return out


def time_ms(kernels: launcher.LoadedKernels, inputs: list[torch.Tensor], out: torch.Tensor,
            reps: int = 20) -> float:
    """Mean of `reps` launches back to back after a warm one (CUDA events; printed by the
    tests for reading: the searches' figures are the ones that count)."""
    kernels(inputs, out)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        kernels(inputs, out)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def check_all(sp: Space, cfgs: Iterable[Config], inputs: list[torch.Tensor], want: torch.Tensor,
              rel_tol: float = 1e-5, timed: bool = False) -> dict[str, float]:
    """Every configuration within `rel_tol` of `want`; with `timed`, each one's time (ms) by
    short form."""
    times = {}
    for cfg in cfgs:
        kernels = load_rendered(sp.render(cfg), inputs[0].device)
        try:
            out = run_once(kernels, inputs, tuple(want.shape))
            err = relative_error(out, want)
            assert err < rel_tol, (cfg.short(), err)
            if timed:
                times[cfg.short()] = time_ms(kernels, inputs, out)
        finally:
            kernels.close()
    return times
