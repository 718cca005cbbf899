"""The GPU worker's set-up under a memory plan, run on the CPU: torch's CUDA queries are stood in
for (free memory, L2 size, copy bandwidth), and a scripted peak counter makes a small problem
look large, so that set-up takes the paths a large problem takes on the GPU (one shared input
set, a chunked or host reference, a refusal) and a stand-in kernel is checked through them."""

from __future__ import annotations

import copy
import os
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from cuda_agent import procs
from cuda_agent.runner import memory, worker
from cuda_agent.runner.memory import MemoryRefusal, PeakTracker
from cuda_agent.runner.timing import Timing, TimingSettings
from cuda_agent.verify.cases import Split, check
from cuda_agent.verify.settings import VerifySettings
from helpers import fast_first

CPU = torch.device("cpu")


class ScriptedPeaks(PeakTracker):
    """A peak counter for the CPU: a section 'allocates' twice its answer in float64 (what a
    float64 reference allocates for its output, roughly)."""

    def __init__(self) -> None:
        super().__init__(CPU)

    def section(self, fn, count=True, cap=None):
        out = fn()
        cost = 0 if out is None else 2 * out.numel() * 8
        if cap is not None and cost > cap:
            raise torch.OutOfMemoryError("past the cap")
        return out, cost


@pytest.fixture
def small_gpu(monkeypatch):
    """64 GiB free, a 1 MiB L2, and scratch and hold allowances of a few KiB."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (64 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *a: SimpleNamespace(L2_cache_size=1 << 20))
    monkeypatch.setattr(worker, "copy_bandwidth", lambda device, flusher: 3e12)
    monkeypatch.setattr(memory, "SCRATCH_BYTES", 16 << 10)
    monkeypatch.setattr(memory, "HOLD_BYTES", 0)
    monkeypatch.setattr(memory, "SAFETY_BYTES", 0)


def state_of(path) -> worker.ProblemState:
    return worker.ProblemState(str(path), CPU, TimingSettings(), VerifySettings(),
                               tracker=ScriptedPeaks())


def exact(state):
    return lambda ins, out: out.copy_(state.witness(list(ins)))


def test_a_large_looking_layer_norm_is_chunked_along_the_batch(small_gpu, make_problem):
    path = make_problem("ln", "self.ln(x)", "torch.randn(96, 256)",
                        init_body="self.ln = nn.LayerNorm(256)")
    state = state_of(path)
    mem = state.memory
    assert mem.verification == "chunked" and "output dim 0" in mem.chunk
    pool = state.pool
    assert pool.split.out_dim == 0 and len(pool._blocks()) >= 2
    assert not pool.holds_inputs and pool.timing_set(0).inputs is pool.buffers
    assert mem.timing_sets == 1 or mem.sizes.input_bytes < (1 << 20)
    for i in range(3):
        res = check(exact(state), pool, pool.trials_for(i))
        assert res.ok, res.msg

    def last_rows_off(ins, out):
        exact(state)(ins, out)
        out[-2:] *= 1.001

    res = check(last_rows_off, pool, pool.trials_for(0))
    assert not res.ok and res.kind == "wrong"
    d = mem.as_dict()
    assert d["bound_bytes"] == (mem.eager_peak_bytes + 2 * mem.sizes.output_bytes
                                + mem.sizes.state_bytes + d["allowance_bytes"])


def test_a_global_normalization_gets_its_reference_in_host_memory(small_gpu, make_problem):
    path = make_problem("fro", "x / torch.norm(x, p='fro')", "torch.randn(96, 256)")
    state = state_of(path)
    assert state.memory.verification == "host" and state.pool.split is None
    assert state.ref_host is not None
    res = check(exact(state), state.pool, state.pool.trials_for(1))
    assert res.ok, res.msg
    res = check(lambda ins, out: out.copy_(ins[0] / ins[0].norm() * 1.01), state.pool,
                state.pool.trials_for(1))
    assert res.kind == "wrong"


def test_a_loss_reduced_to_one_number_gets_its_reference_accumulated_over_the_batch(
        small_gpu, make_problem, monkeypatch):
    """No output direction splits a mean squared error, but it adds up over chunks of the
    batch: its float64 reference is accumulated on the GPU, not held whole in host memory,
    and checks exactly as the whole reference would. (The scripted peaks count a scalar
    answer's bytes only: 20 rows a chunk are imposed, a last chunk of 16.)"""
    monkeypatch.setattr(memory, "chunk_rows", lambda cost, rows, budget: min(rows, 20))
    path = make_problem("mse", "F.mse_loss(x, y)", "torch.randn(96, 256), torch.randn(96, 256)",
                        args="x, y")
    state = state_of(path)
    mem = state.memory
    assert mem.verification == "accumulated" and "mean over chunks" in mem.chunk
    assert state.ref_host is None and state.pool.split is None
    assert state.accumulate_rows == 20
    case = state.pool.materialize(state.pool.cases[0])
    whole = F.mse_loss(case[0].double(), case[1].double())
    torch.testing.assert_close(state.reference(case), whole, rtol=1e-12, atol=0)
    for i in range(3):
        res = check(exact(state), state.pool, state.pool.trials_for(i))
        assert res.ok, res.msg
    res = check(lambda ins, out: out.copy_(F.mse_loss(ins[0], ins[1]) * 1.001), state.pool,
                state.pool.trials_for(0))
    assert not res.ok and res.kind == "wrong"


def test_a_statistic_that_does_not_add_up_still_goes_to_host_memory(small_gpu, make_problem):
    path = make_problem("std", "x.std()", "torch.randn(96, 256)")
    state = state_of(path)
    assert state.memory.verification == "host" and state.accumulation is None
    res = check(exact(state), state.pool, state.pool.trials_for(0))
    assert res.ok, res.msg


def test_a_product_whose_leading_dims_only_look_like_a_batch_goes_to_host_memory(
        small_gpu, make_problem):
    """tril(a @ b) of square matrices: both inputs' first dims are 64, so a chunk of 'the
    batch' is tried, and the module cannot run on one (its rows against b's contracted dim).
    That is not accumulable, not a failed set-up (gemm_tril ended a live bench on the H100,
    2026-12-06)."""
    path = make_problem("tril_mm", "torch.tril(a @ b)",
                        "torch.randn(64, 64), torch.randn(64, 64)", args="a, b")
    state = state_of(path)
    assert state.memory.verification == "host" and state.accumulation is None
    res = check(exact(state), state.pool, state.pool.trials_for(0))
    assert res.ok, res.msg


def test_eager_baseline_runs_on_the_timing_set_drawn_again(small_gpu, make_problem, monkeypatch):
    path = make_problem("relu", "torch.relu(x) * 2.0", "torch.randn(96, 256)")
    state = state_of(path)
    seen = []

    def fake_time_runs(run, n_sets, settings, flusher, best_ms=None, clock=None):
        for k in range(n_sets):
            seen.append(run(k).clone())
        return Timing(1.0, 0.9, 1.1, n_sets)

    monkeypatch.setattr(worker, "time_runs", fake_time_runs)
    check(exact(state), state.pool, state.pool.trials_for(0))  # the buffers now hold a case
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    reply = state.baseline("eager")
    assert reply["ok"], reply
    timing_inputs = state.pool.materialize(state.pool.timing_set(0))
    assert torch.equal(seen[0], torch.relu(timing_inputs[0]) * 2.0)


def test_a_problem_whose_tuning_cannot_fit_is_refused_in_one_line(small_gpu, make_problem,
                                                                   monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (200 << 10, 80 << 30))
    path = make_problem("relu_big", "torch.relu(x)", "torch.randn(96, 256)")
    with pytest.raises(MemoryRefusal) as exc:
        state_of(path)
    msg = str(exc.value)
    assert "\n" not in msg and "relu_big does not fit on the GPU" in msg


def test_inputs_beyond_the_free_memory_are_refused_before_allocation(small_gpu, make_problem,
                                                                     monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (10 << 30, 80 << 30))
    path = make_problem("relu_huge", "torch.relu(x)", "torch.randn(1 << 20, 1 << 12)")
    made = []
    monkeypatch.setattr(worker.ProblemState, "_eager_peak", lambda self, a: made.append(1))
    with pytest.raises(MemoryRefusal, match="16.00 GiB"):
        state_of(path)
    assert not made


def test_a_problem_chunked_by_channels_when_its_batch_statistics_forbid_the_batch(
        small_gpu, make_problem):
    """Batch norm in training mode: its statistics span the batch, so chunks along the batch
    would be wrong; per channel they are right."""
    path = make_problem("bn_train", "F.batch_norm(x, None, None, self.w, self.b, True)",
                        "torch.randn(96, 16, 24)",
                        init_body="self.w = nn.Parameter(torch.ones(16))\n"
                                  "self.b = nn.Parameter(torch.zeros(16))")
    state = state_of(path)
    # graph inputs: the weight and bias (sliced on their dim 0), then x (on its channels)
    assert state.pool.split == Split(1, (0, 0, 1))
    assert state.memory.verification == "chunked"
    res = check(exact(state), state.pool, state.pool.trials_for(0))
    assert res.ok, res.msg


def test_the_running_statistics_of_a_chunked_reference_are_the_whole_ones(small_gpu,
                                                                          make_problem):
    """Training-mode BatchNorm chunked along its channels: the reference's update of the
    running statistics, assembled chunk by chunk, is the update of the whole run."""
    path = make_problem("conv_bn", "torch.relu(self.bn(self.conv(x)))",
                        "torch.randn(24, 3, 10, 12)",
                        init_body="self.conv = nn.Conv2d(3, 16, 3)\n"
                                  "self.bn = nn.BatchNorm2d(16)")
    state = state_of(path)
    assert state.model.training and state.pool.split is not None
    assert state.pool.split.out_dim == 1 and len(state.pool._blocks()) >= 2
    case = state.pool.materialize(state.pool.cases[0])
    chunked, whole = state._reference_state(case), state._reference_run(case)[1]
    assert set(chunked) == set(whole) and {"bn.running_mean", "bn.running_var"} <= set(chunked)
    for name in whole:
        torch.testing.assert_close(chunked[name], whole[name], rtol=1e-12, atol=1e-12)


def test_a_transposed_convolution_before_a_training_mode_norm_is_chunked_by_channels(
        small_gpu, make_problem):
    """ConvTranspose3d then BatchNorm3d in training mode (the realistic suite's
    fused_conv_transpose3d_batchnorm_tanh): separable along the output channels with the
    weight sliced on its dim 1; its float64 reference went to host memory before (ten CPU
    passes of a 1 GiB volume's transposed convolution at set-up)."""
    path = make_problem("ct_bn", "torch.tanh(self.bn(self.conv(x)))", "torch.randn(2, 8, 5, 6, 6)",
                        init_body="self.conv = nn.ConvTranspose3d(8, 16, 3, stride=2, padding=1,"
                                  " output_padding=1)\nself.bn = nn.BatchNorm3d(16)")
    state = state_of(path)
    assert state.memory.verification == "chunked" and state.ref_host is None
    split = state.pool.split
    weight = [k for k, g in enumerate(state.graph.inputs) if g.target == "conv.weight"]
    assert split.out_dim == 1 and split.in_dims[weight[0]] == 1
    res = check(exact(state), state.pool, state.pool.trials_for(0))
    assert res.ok, res.msg
    case = state.pool.materialize(state.pool.cases[0])
    chunked, whole = state._reference_state(case), state._reference_run(case)[1]
    for name in whole:
        torch.testing.assert_close(chunked[name], whole[name], rtol=1e-12, atol=1e-12)


def test_the_worker_uses_the_graph_its_parent_captured(small_gpu, make_problem, monkeypatch):
    """The set-up message carries the parent's capture: the worker neither traces the file
    again (torch.export's first call imports Dynamo, seconds of every set-up) nor re-checks it;
    without one it captures as before."""
    from cuda_agent.ir import capture
    from cuda_agent.problem import load_problem

    path = make_problem("ln", "self.ln(x)", "torch.randn(96, 256)",
                        init_body="self.ln = nn.LayerNorm(256)")
    graph = load_problem(path).graph()
    traced: list[int] = []
    real = capture.capture
    monkeypatch.setattr(capture, "capture", lambda *a: traced.append(1) or real(*a))
    state = worker.ProblemState(str(path), CPU, TimingSettings(), VerifySettings(),
                                tracker=ScriptedPeaks(), graph=graph)
    assert state.graph is graph and traced == []
    again = state_of(path)
    assert traced == [1] and again.graph.fingerprint() == graph.fingerprint()


def test_set_up_reports_its_peak_by_the_end_of_each_step(small_gpu, make_problem, monkeypatch):
    """The worker's memory record places a bound passed during set-up: the running peak at
    the end of each step (capture, model, inputs, reference plan, cases, ...), never falling."""
    path = make_problem("ln", "self.ln(x)", "torch.randn(96, 256)",
                        init_body="self.ln = nn.LayerNorm(256)")
    peaks = iter(range(10, 10**6, 10))
    monkeypatch.setattr(PeakTracker, "overall", lambda self: next(peaks))
    state = state_of(path)
    marks = state.phases.marks
    assert list(marks) == list(state.phases.seconds)
    assert {"inputs", "reference_plan", "cases"} <= set(marks)
    assert list(marks.values()) == sorted(marks.values()) and marks["cases"] > 0


# -- the bound, counted: set-up on the CPU under a live-bytes counter ---------------------------

@pytest.fixture
def counted_gpu(small_gpu, monkeypatch):
    """`small_gpu` with the fixed pieces scaled to its small problems (draws and scrambles 256
    elements at a time, a 16 KiB L2: one timing set) and no host memory: every reference the
    plan keeps is on the 'GPU', so that the live bytes are the GPU's."""
    from cuda_agent.verify import separable, cases as verify
    monkeypatch.setattr(verify, "DRAW_CHUNK", 256)
    monkeypatch.setattr(separable, "SCRAMBLE_PIECE", 256)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *a: SimpleNamespace(L2_cache_size=16 << 10))
    monkeypatch.setattr(procs, "host_available_bytes", lambda: 0)


BOUNDED = {  # name: (forward, inputs, write_problem's keywords, the verification expected)
    "mse": ("F.mse_loss(x, y)", "torch.randn(240, 256), torch.randn(240, 256)",
            dict(args="x, y"), "accumulated"),
    "cross_entropy": ("F.cross_entropy(x, t)",
                      "torch.randn(240, 256), torch.randint(0, 256, (240,))",
                      dict(args="x, t"), "accumulated"),
    "swish": ("x * torch.sigmoid(x)", "torch.randn(240, 256)", {}, "chunked"),
    "instance_norm": ("self.norm(x)", "torch.randn(24, 16, 32, 32)",
                      dict(init_body="self.norm = nn.InstanceNorm2d(16, affine=True)"),
                      "chunked"),
    "conv1d": ("self.conv(x)", "torch.randn(32, 16, 512)",
               dict(init_body="self.conv = nn.Conv1d(16, 32, 5, padding=2)"), "chunked"),
    "argmax": ("x.argmax(dim=1)", "torch.randn(240, 256)", {}, "chunked"),
    # training mode: statistics over the batch, chunked along the channels; its separability
    # test's comparison held five float64 copies of a slice (the GPU run of 2026-12-06: 67.1
    # of a 65.35 GiB bound)
    "batchnorm_train": ("self.bn(x)", "torch.randn(4, 32, 32, 32)",
                        dict(init_body="self.bn = nn.BatchNorm2d(32)"), "chunked"),
    "conv_transpose3d": ("self.conv(x)", "torch.randn(16, 8, 8, 8, 8)",
                         dict(init_body="self.conv = nn.ConvTranspose3d(8, 4, 3, stride=2, "
                              "padding=1, output_padding=1)"), "chunked"),
    "conv3d": ("self.conv(x)", "torch.randn(8, 4, 8, 16, 16)",
               dict(init_body="self.conv = nn.Conv3d(4, 8, 3, padding=1)"), "chunked"),
    # one row of its batch, or of its channels, is larger than a chunk's budget: chunked
    # along its rows' length
    "long_rows": ("x * torch.sigmoid(x)", "torch.randn(2, 2, 8192)", {}, "chunked"),
}


@pytest.mark.parametrize("name", fast_first(sorted(BOUNDED), ["mse", "cross_entropy", "argmax", "long_rows",
                                                             "batchnorm_train"]))
def test_set_up_stays_within_the_bound_it_states(name, counted_gpu, make_problem):
    """The set-up's live bytes, counted as torch's allocator counts them on the GPU, within
    eager's peak + 2 x output + allowance. The MSE passed it by one input's worth before
    (6-12 GiB on the GPU): the witness's answer, torch's 0-d mean, kept the storage of the
    whole elementwise loss alive while the reference ran."""
    expr, inputs, kw, verification = BOUNDED[name]
    state = _set_up_and_check_within_the_bound(make_problem(name, expr, inputs, **kw))
    mem = state.memory
    assert mem.verification == verification
    assert mem.peak_bytes >= mem.eager_peak_bytes > mem.sizes.input_bytes
    if name == "long_rows":  # in several chunks along the rows' length
        rows, _, n = mem.chunk.partition(" along output dim 2")[0].partition(" of ")
        assert int(rows) < int(n) == 8192


def _set_up_and_check_within_the_bound(path) -> worker.ProblemState:
    """The worker's set-up of `path` under the live-bytes counter, then two candidates' checks
    (the output buffer, each case drawn in turn, its reference held or recomputed and compared
    chunk by chunk; a stand-in kernel: torch's own answer), each within the stated bound."""
    from live_bytes import LiveBytes, LiveBytesTracker
    with LiveBytes(where=True) as live:
        state = worker.ProblemState(str(path), CPU, TimingSettings(), VerifySettings(),
                                    tracker=LiveBytesTracker(live))
    mem = state.memory
    assert mem.peak_bytes <= mem.bound_bytes, (state.phases.marks, "".join(live.top_stack))
    with live:
        for i in range(2):
            res = check(exact(state), state.pool, state.pool.trials_for(i))
            assert res.ok, res.msg
    assert live.peak <= mem.bound_bytes, "".join(live.top_stack)
    return state


def test_an_answer_holding_a_larger_storage_is_compacted():
    x, y = torch.randn(300, 200), torch.randn(300, 200)
    loss = F.mse_loss(x, y)
    assert loss.untyped_storage().nbytes() >= x.numel() * 4  # torch's own behaviour
    small = memory.compact(loss)
    assert small.untyped_storage().nbytes() <= 64 and torch.equal(small, loss)
    part = x[:3]  # a slice of an input would hold the input
    assert memory.compact(part).untyped_storage().nbytes() == 3 * 200 * 4
    whole = torch.randn(300, 200)
    assert memory.compact(whole) is whole
    expanded = torch.randn(1, 200).expand(300, 200)  # less storage than elements: kept
    assert memory.compact(expanded) is expanded


def test_the_gpu_worker_asks_for_growable_segments_unless_the_user_chose(monkeypatch):
    """The allocator's cached blocks of every size the worker met held GiBs beyond torch's own
    count; a user's own PYTORCH_CUDA_ALLOC_CONF is left as it is."""
    class Quit:
        sent: list = []

        def recv(self):
            return {"op": "quit"}

        def send(self, msg):
            self.sent.append(msg)

    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")  # restored after the test, whatever it was
    for mine in (None, "max_split_size_mb:128"):
        if mine is None:
            monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
        else:
            monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", mine)
        worker.worker_main(Quit(), 0, TimingSettings(), VerifySettings())
        assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == (mine or "expandable_segments:True")


def test_a_depthwise_convolution_before_a_training_mode_norm_is_chunked_by_channels(
        small_gpu, make_problem):
    """A MobileNet block (the realistic suite's fused_depthwise_batchnorm_relu6): the module
    fixes its groups to the channel count, so no chunk of channels ran it and the float64
    reference went to host memory (35 s of set-up on the H100 for 1 GiB). The worker's own
    copies take any slice of a depthwise convolution's channels; the user's module is
    untouched."""
    path = make_problem("dw_bn", "F.relu6(self.bn(self.conv(x)))", "torch.randn(4, 16, 12, 12)",
                        init_body="self.conv = nn.Conv2d(16, 16, 3, padding=1, groups=16, "
                                  "bias=False)\nself.bn = nn.BatchNorm2d(16)")
    state = state_of(path)
    assert state.memory.verification == "chunked" and state.ref_host is None
    assert state.pool.split.out_dim == 1 and len(state.pool._blocks()) >= 2
    assert "forward" not in vars(state.model.conv)  # the user's module as it was
    res = check(exact(state), state.pool, state.pool.trials_for(0))
    assert res.ok, res.msg
    res = check(lambda ins, out: exact(state)(ins, out).mul_(1.001), state.pool,
                state.pool.trials_for(1))
    assert not res.ok and res.kind == "wrong"
    case = state.pool.materialize(state.pool.cases[0])
    chunked, whole = state._reference_state(case), state._reference_run(case)[1]
    assert {"bn.running_mean", "bn.running_var"} <= set(whole)
    for name in whole:
        torch.testing.assert_close(chunked[name], whole[name], rtol=1e-12, atol=1e-12)


def test_a_sliceable_depthwise_copy_computes_what_the_module_does():
    from cuda_agent.verify.sliceable import channel_sliceable
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8).double()
    grouped = torch.nn.Conv2d(8, 8, 3, groups=2).double()  # not depthwise: left as it is
    x = torch.randn(2, 8, 9, 9, dtype=torch.float64)
    want = conv(x)
    mine = copy.deepcopy(conv)
    assert channel_sliceable(mine) == 1 and channel_sliceable(copy.deepcopy(grouped)) == 0
    assert torch.equal(mine(x), want)
    chunk = torch.func.functional_call(mine, {"weight": conv.weight[2:5],
                                              "bias": conv.bias[2:5]}, (x[:, 2:5],))
    torch.testing.assert_close(chunk, want[:, 2:5], rtol=1e-12, atol=1e-12)
    again = copy.deepcopy(mine)  # a copy's forward is its own
    with torch.no_grad():
        again.weight.mul_(2)
    assert torch.equal(mine(x), want) and not torch.equal(again(x), want)


def test_a_slow_set_up_step_is_announced_as_it_ends(capsys, monkeypatch):
    """A set-up step of a minute (a large problem's float64 references) says so on the tune's
    output when it ends, with the GPU peak so far; quick steps say nothing."""
    from cuda_agent.stopwatch import Phases

    clock = iter([0.0, 0.5, 10.0, 42.5])
    monkeypatch.setattr("cuda_agent.stopwatch.time.perf_counter", lambda: next(clock))
    phases = Phases(mark=lambda: 3 << 30, on_end=worker.slow_step_notice)
    with phases("inputs"):
        pass
    with phases("reference_plan"):
        pass
    assert capsys.readouterr().err == "set-up: reference_plan took 32.5 s, GPU peak so far " \
                                      "3.00 GiB\n"
    assert phases.seconds == {"inputs": 0.5, "reference_plan": 32.5}


def test_a_product_whose_other_operand_is_large_is_chunked_on_the_gpu(counted_gpu, monkeypatch,
                                                                       make_problem):
    """A matrix product chunked along the left operand's rows keeps the right one whole, in
    float64 (16k x 16k: 2 GiB, more than a chunk's share): its chunks take the room the GPU
    would keep references in, and the references go to host memory. Before, its reference ran
    on the CPU: a float64 16k^3 product per case (the likely cause of gemm_square_16k's
    time-out on the H100). Within the bound, set-up and checks."""
    monkeypatch.setattr(memory, "HOLD_BYTES", 512 << 10)
    state = _set_up_and_check_within_the_bound(make_problem(
        "mm", "torch.matmul(a, b)", "torch.randn(128, 256), torch.randn(256, 256)",
        args="a, b"))
    mem = state.memory
    assert mem.verification == "chunked" and mem.chunk.endswith("references in host memory")
    assert state.ref_host is None and not state.device_refs
    assert state.pool.budget.device_bytes == 0


def test_a_reference_row_too_large_fails_at_its_cap_while_measured(counted_gpu, make_problem):
    """A float64 reference whose one batch row takes more than the whole bound (as torch's
    attention does on the GPU in float64, its scores materialised: one batch row 4.5 GB, the
    bound 4.35 GiB in the realistic run of 2026-12-06, passed while that row was measured).
    Each size is measured under a cap (torch's allocator limited on the GPU) and fails there;
    the next separable direction, along the channels, fits."""
    path = make_problem(
        "wide_f64", "torch.relu((x[..., None] * torch.ones(64, dtype=x.dtype)).sum(-1) / 64 "
        "if x.dtype == torch.float64 else x) * 2", "torch.randn(16, 512)")
    state = _set_up_and_check_within_the_bound(path)
    mem = state.memory
    assert mem.verification == "chunked" and "along output dim 1" in mem.chunk


def test_attention_too_large_along_each_direction_is_chunked_by_batch_and_head(
        counted_gpu, make_problem):
    """Attention whose float64 reference fits neither one batch row, nor one head over the
    batch, nor one query row (the keys and values whole in float64): each batch row taken
    apart and chunked by heads (16 x 16 x 4096 x 128 on the GPU: its reference went to the
    CPU, a minute of set-up; without host memory, as here, it was refused). Within the bound,
    exact where right, and a kernel off in one head of the last batch row fails."""
    path = make_problem("sdpa", "F.scaled_dot_product_attention(q, k, v)",
                        ", ".join(["torch.randn(4, 4, 128, 64)"] * 3), args="q, k, v")
    state = _set_up_and_check_within_the_bound(path)
    mem = state.memory
    assert mem.verification == "chunked"
    assert mem.chunk.endswith("along output dim 1, each row of output dim 0 apart"), mem.chunk
    assert state.pool.split.inner is not None and len(state.pool._blocks()) > 4

    def off_in_one_head(ins, out):
        exact(state)(ins, out)
        out[3, 2] *= 1.01

    res = check(off_in_one_head, state.pool, state.pool.trials_for(0))
    assert res.kind == "wrong", res.msg
