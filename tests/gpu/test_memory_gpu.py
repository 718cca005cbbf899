"""The GPU footprint of a tuning run (issue 33), on the GPU: problems of several GiB tune with
the worker's peak within eager's peak + 2 x output + the stated allowance, whatever the number of
verification cases; a problem that cannot fit is refused in one line before any search.

    pytest -m gpu tests/gpu/test_memory_gpu.py -s

Each test prints the plan (`report.json`'s `memory`): peak, eager peak, bound, verification.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from cuda_agent.errors import DeviceError
from cuda_agent.tuner import tune
from helpers import write_problem

pytestmark = pytest.mark.gpu

GiB = 1 << 30


def _tune(path, tmp_path, budget=4, **kw):
    result = tune(path, out=tmp_path / "o", device="cuda", budget=budget, batch=budget,
                  store=str(tmp_path / "s.sqlite"), **{"strategy": "random", **kw})
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    mem = report["memory"]
    best = report["best"]
    if best is not None:  # where the best candidate's evaluation seconds went
        secs = best["eval_seconds"]
        steps = {k: v for k, v in secs.items() if k.startswith("check_")}
        assert set(secs) - set(steps) == {"load_and_probe", "checks", "timing"}
        # the reference's chunks where the references are not held, timed apart
        assert {"check_draw", "check_hash", "check_run", "check_compare"} <= set(steps) <= {
            "check_draw", "check_hash", "check_run", "check_compare", "check_reference"}
        assert secs["load_and_probe"] + secs["checks"] + secs["timing"] <= best["wall_s"] + 0.01
        assert sum(steps.values()) <= secs["checks"] + 0.01
        print(path.stem, "best candidate's seconds", best["eval_seconds"])
    print(path.stem, "set-up's cases", report["facts"].get("cases_seconds"))
    print(path.stem, json.dumps({k: (round(v / GiB, 2) if k.endswith("_bytes") and v else v)
                                 for k, v in mem.items()}))
    return result, mem


def _within_bound(mem):
    """The issue's bound: eager's peak + twice the output (+ the drawn parameters and the fixed
    allowance: L2 flusher, scratch, held references; memory.py states them)."""
    allowance = mem["allowance_bytes"]
    assert allowance <= 2 * GiB
    bound = mem["eager_peak_bytes"] + 2 * mem["output_bytes"] + mem["state_bytes"] + allowance
    assert mem["bound_bytes"] == bound
    assert 0 < mem["peak_bytes"] <= bound, (mem["peak_bytes"] / GiB, bound / GiB)
    assert mem["within_bound"] is True


def test_an_elementwise_op_on_a_6gib_input_tunes_within_the_bound(tmp_path):
    """The issue's first failure: 6 GiB in, 6 GiB out; eager peaks at 18 GiB (the input, the
    sigmoid's temporary, the output), the tool held 110-135 GiB and ran out of memory."""
    path = write_problem(tmp_path / "p", "swish_6gib", "x * torch.sigmoid(x)",
                         "torch.randn(24576, 65536)")
    result, mem = _tune(path, tmp_path)
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)
    assert 17.5 * GiB < mem["eager_peak_bytes"] < 19 * GiB
    assert mem["timing_sets"] == 1
    assert mem["verification"] in ("full", "chunked")
    assert result.baselines.eager_ms is not None


def test_an_instance_norm_of_6gib_tunes_chunked_along_the_batch(tmp_path):
    path = write_problem(tmp_path / "p", "instnorm_6gib", "self.norm(x)",
                         "torch.randn(96, 64, 512, 512)",
                         init_body="self.norm = nn.InstanceNorm2d(64, affine=True)")
    result, mem = _tune(path, tmp_path)
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)
    assert mem["verification"] == "chunked" and "output dim 0" in mem["chunk"]


def test_a_large_mse_loss_tunes_with_its_reference_accumulated_over_the_batch(tmp_path):
    """A loss reduced to one number has no output direction to chunk along: its float64
    reference (2 x 12 GiB of float64 inputs) is accumulated over chunks of the batch on the
    GPU; before, it went to host memory (minutes of CPU float64) or was refused."""
    path = write_problem(tmp_path / "p", "mse_12gib", "F.mse_loss(x, y)",
                         "torch.randn(24576, 65536), torch.randn(24576, 65536)", args="x, y")
    t0 = time.time()
    result, mem = _tune(path, tmp_path)
    print(f"mse_12gib: {time.time() - t0:.0f} s")
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)
    assert mem["verification"] == "accumulated" and "mean over chunks" in mem["chunk"]


def test_a_1d_convolution_of_several_gib_tunes_within_the_bound(tmp_path):
    path = write_problem(tmp_path / "p", "conv1d_big", "self.conv(x)",
                         "torch.randn(256, 128, 32768)",  # 4 GiB in, 8 GiB out
                         init_body="self.conv = nn.Conv1d(128, 256, 7)")
    result, mem = _tune(path, tmp_path, budget=3)
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)


def test_a_training_mode_batch_norm_of_4gib_tunes_within_the_bound(tmp_path):
    """Statistics over the batch: chunked along the channels. Its set-up passed the bound in
    the separability test's comparison (norm_batchnorm2d_train_large: 67.1 of 65.35 GiB in the
    realistic run of 2026-12-06)."""
    path = write_problem(tmp_path / "p", "bn_train_4gib", "self.bn(x)",
                         "torch.randn(32, 32, 1024, 1024)",
                         init_body="self.bn = nn.BatchNorm2d(32)")
    result, mem = _tune(path, tmp_path, budget=2)
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)
    assert mem["verification"] == "chunked" and "output dim 1" in mem["chunk"]


def test_a_fused_chain_s_workspace_is_not_held_beside_the_reference(tmp_path):
    """Convolution, training-mode BatchNorm, ReLU: the candidates keep the convolution's output
    (2 GiB) in their workspace between stages; held while a check recomputed a reference chunk,
    it passed the bound by exactly its size (fused_conv2d_batchnorm_relu, 10.47 of 10.35 GiB)."""
    path = write_problem(tmp_path / "p", "conv_bn_relu_2gib", "torch.relu(self.bn(self.conv(x)))",
                         "torch.randn(32, 16, 512, 512)",
                         init_body="self.conv = nn.Conv2d(16, 64, 3, padding=1)\n"
                                   "self.bn = nn.BatchNorm2d(64)")
    result, mem = _tune(path, tmp_path, budget=2)
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)
    assert mem["peak_by_phase"]["candidates"] <= mem["bound_bytes"]


def test_a_problem_eager_runs_in_half_the_gpu_tunes(tmp_path):
    """The input and its output just under half the GPU together: 30 GiB each on the H200
    (139 GiB), 18 GiB on an H100 (79 GiB)."""
    total = torch.cuda.get_device_properties(0).total_memory
    gib = min(30, int(total / GiB * 0.46 / 2))
    path = write_problem(tmp_path / "p", "relu_half_gpu", "torch.relu(x)",
                         f"torch.randn({gib * 4096}, 65536)")
    result, mem = _tune(path, tmp_path, budget=2, baselines=False)
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)


def test_a_problem_that_is_not_separable_is_verified_whole(tmp_path):
    """x / ||x||: every output element reads every input; its float64 reference does not fit
    the bound on the GPU, so it runs in host memory, whole, never chunked."""
    path = write_problem(tmp_path / "p", "frobenius_4gib", "x / torch.norm(x, p='fro')",
                         "torch.randn(16384, 65536)")
    result, mem = _tune(path, tmp_path, budget=2, baselines=False)
    assert mem["verification"] == "host" and mem["chunk"] is None
    assert result.best is not None and result.best.measurement.verified
    _within_bound(mem)


def test_a_problem_that_cannot_fit_is_refused_before_any_search(tmp_path):
    path = write_problem(tmp_path / "p", "relu_200gib", "torch.relu(x)",
                         "torch.randn(409600, 131072)")
    t0 = time.perf_counter()
    with pytest.raises(DeviceError) as exc:
        tune(path, device="cuda", budget=4, store=":memory:", strategy="random")
    msg = str(exc.value)
    assert "\n" not in msg and "does not fit on the GPU" in msg and "relu_200gib" in msg, msg
    assert time.perf_counter() - t0 < 120  # no search, no candidate built or run
    print(msg)


def test_a_problem_whose_tuning_cannot_fit_is_refused_in_one_line(tmp_path):
    """Inputs that fit, but eager's run and one output more do not: 60 GiB in and out."""
    free = torch.cuda.mem_get_info()[0]
    rows = int(free * 0.45) // (65536 * 4)
    path = write_problem(tmp_path / "p", "relu_too_big", "torch.relu(x)",
                         f"torch.randn({rows}, 65536)")
    with pytest.raises(DeviceError) as exc:
        tune(path, device="cuda", budget=4, store=":memory:", strategy="random")
    msg = str(exc.value)
    assert "\n" not in msg and "does not fit on the GPU" in msg, msg
    print(msg)


def test_a_capped_section_fails_past_its_cap_and_gives_the_memory_back():
    """A reference chunk is measured under a cap (`PeakTracker.section(cap=...)`): torch's
    allocator refuses past it, and afterwards the whole GPU is usable again."""
    from cuda_agent.runner.memory import PeakTracker

    tracker = PeakTracker(torch.device("cuda"))
    tracker.start()
    _, cost = tracker.section(lambda: torch.empty(GiB // 4, dtype=torch.uint8, device="cuda"),
                              cap=GiB)
    assert GiB // 4 <= cost < GiB
    with pytest.raises(torch.OutOfMemoryError):
        tracker.section(lambda: torch.empty(2 * GiB, dtype=torch.uint8, device="cuda"),
                        cap=GiB)
    big = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")  # the cap is lifted
    assert big.numel() == 4 * GiB
