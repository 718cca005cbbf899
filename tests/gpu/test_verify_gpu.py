"""The verifier's own tensor work on the GPU, against the same code on the CPU: the mutation
check's hash, the case draws and the comparison are torch code that runs where the tensors
are, and the GPU must give what the CPU gives (int64 products that wrap, a per-row sum, draws
in the input's float type). Timings of the three at 4 GiB are printed (the GPU suite's log
keeps them): they are most of a large problem's checks."""

from __future__ import annotations

import time

import pytest
import torch

from cuda_agent.verify import cases as V

GiB = 1 << 30


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
@pytest.mark.parametrize("chunk", [None, 7, V.HASH_ROW + 5, 1 << 20])
def test_the_hash_on_the_gpu_is_the_cpu_s(dtype, chunk):
    x = (torch.randn(3 * V.HASH_ROW + 77) * 100).to(dtype)
    g = x.cuda()
    assert V.fingerprint(g, 4242, chunk) == V.fingerprint(x, 4242, chunk)
    y = g.clone()
    y.view(torch.uint8)[1234] ^= 4
    assert V.fingerprint(y, 4242, chunk) != V.fingerprint(g, 4242, chunk)
    assert torch.equal(g.cpu(), x), "the hash left its input as it was"


def test_draws_on_the_gpu_keep_their_type_domain_and_seed():
    meta = V.InputMeta((1 << 20,), torch.float32, torch.device("cuda"), 0.5)
    for trial in range(len(V.DISTRIBUTIONS)):
        a = torch.empty(meta.shape, device="cuda")
        b = torch.empty(meta.shape, device="cuda")
        V.draw_into(a, meta, trial, torch.Generator("cuda").manual_seed(3))
        V.draw_into(b, meta, trial, torch.Generator("cuda").manual_seed(3))
        assert torch.equal(a, b) and bool(torch.isfinite(a).all())
        assert float(a.min()) > 0, V.DISTRIBUTIONS[trial]  # a positive example's domain


def test_a_comparison_on_the_gpu_finds_what_it_finds_on_the_cpu():
    ref = torch.randn(1 << 20, dtype=torch.float64)
    right = (ref * (1 + 1e-7)).float()
    one_off = right.clone()
    one_off[77] += 0.05
    unwritten = right.clone()
    V.poison(unwritten[99:100])
    for out, want in ((right, None), (one_off, "wrong"), (unwritten, "unwritten")):
        cpu = V.compare(out, ref, 1e-4, 10.0, limit=1 << 16)
        gpu = V.compare(out.cuda(), ref.cuda(), 1e-4, 10.0, limit=1 << 16)
        assert cpu[0] == gpu[0] == want and cpu[1] == gpu[1]
        assert gpu[2] == pytest.approx(cpu[2], rel=1e-9) or cpu[2] == gpu[2]


def test_the_checks_own_steps_at_4_gib_are_timed():
    n = 4 * GiB // 4
    x = torch.empty(n, device="cuda")
    meta = V.InputMeta((n,), torch.float32, x.device, -1.0)
    gen = torch.Generator("cuda").manual_seed(1)
    seconds = {}
    for trial, kind in enumerate(V.DISTRIBUTIONS):
        torch.cuda.synchronize()
        t = time.perf_counter()
        V.draw_into(x, meta, trial, gen)
        torch.cuda.synchronize()
        seconds[f"draw {kind}"] = time.perf_counter() - t
    t = time.perf_counter()
    V.fingerprint(x, 7, chunk=V.DRAW_CHUNK * 16)
    seconds["hash"] = time.perf_counter() - t
    ref = x.double()
    out = x.clone()
    t = time.perf_counter()
    V.compare(out, ref, 1e-4, 10.0, limit=V.DRAW_CHUNK * 16)
    seconds["compare"] = time.perf_counter() - t
    print("4 GiB fp32:", {k: round(v, 3) for k, v in seconds.items()})
    assert all(v > 0 for v in seconds.values())
