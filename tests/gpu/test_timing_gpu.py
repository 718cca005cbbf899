"""The timing protocol on the GPU: the events time the GPU's work, not the host's launch path
(`TimingSettings.lead_us`). Run by `gpu_suite.py --parts timing`."""

from __future__ import annotations

import time

import torch

from cuda_agent.runner.timing import L2Flusher, TimingSettings, time_runs


def slow_host_tiny_kernel(x: torch.Tensor):
    """A run whose host path takes ~60 us before its one tiny kernel (a few us on the GPU):
    what a Python launch path under a busy host looks like."""

    def run(k: int) -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < 60e-6:
            pass
        x.add_(1.0)

    return run


def test_the_host_launch_path_is_not_timed():
    x = torch.zeros(1024, device="cuda")
    flusher = L2Flusher(torch.device("cuda"), torch.cuda.get_device_properties(0).L2_cache_size)
    run = slow_host_tiny_kernel(x)
    led = time_runs(run, 1, TimingSettings(reps=15, lead_us=400.0), flusher)
    bare = time_runs(run, 1, TimingSettings(reps=15, lead_us=0.0), flusher)
    # without the lead-in the events hold the host's 60 us; with it, the kernel's few us
    assert bare.median_ms > 0.04, bare
    assert led.median_ms < 0.02 and led.host_bound <= 2, led


def test_a_host_slower_than_the_lead_in_is_counted():
    x = torch.zeros(1024, device="cuda")
    run = slow_host_tiny_kernel(x)
    t = time_runs(run, 1, TimingSettings(reps=5, min_reps=5, lead_us=5.0, retries=1), None)
    assert t.host_bound >= 3, t
