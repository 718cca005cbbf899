"""The split template over channels on the GPU (`space/templates/split.py`): a sample of the
configurations of a training-mode batch norm's channels, shared among blocks, verifies against
the float64 reference (odd sizes: 7 channels, a trailing run of 33 x 35), and on few long
channels the fastest split kernel beats the fastest block-per-channel one by a clear margin
(H100, 2026-12-06: 1.42 ms against 2.04 ms, 0.70x, the best of 40 sampled configurations each;
a block per channel at its best keeps the channel in a cluster, which the default does not).

    pytest -m gpu tests/gpu/test_split_chan_gpu.py -s
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cuda_agent.build.builder import Builder, BuildInput
from cuda_agent.ir.plan import CHAN_REDUCE
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem
from cuda_agent.runner.devices import Candidate, CudaDevice
from cuda_agent.runner.timing import TimingSettings
from cuda_agent.space.space import Space
from helpers import write_problem

pytestmark = pytest.mark.gpu

BATCH_NORM = "F.batch_norm(x, None, None, self.weight, self.bias, training=True)"
INIT = ("self.weight = nn.Parameter(1 + 0.1 * torch.randn({c}))\n"
        "self.bias = nn.Parameter(0.1 * torch.randn({c}))")


def _measure(path: Path, tmp: Path, templates: tuple[str, ...], sample: int
             ) -> dict[str, list]:
    """Each template's configurations, a seeded sample of `sample` of them, built, verified and
    timed on the GPU: {template: [(config, measurement)]}."""
    prob = load_problem(path)
    plan = make_plan(prob.graph())
    assert plan.kind == CHAN_REDUCE
    dev = CudaDevice(timing=TimingSettings(reps=10, warmup=2))
    out: dict[str, list] = {}
    try:
        dev.setup(prob, plan)
        space = Space.for_plan(plan, dev.target())
        with Builder(cache_dir=tmp / "cache") as b:
            for name in templates:
                every = space.configs_of(name)
                configs = random.Random(0).sample(every, min(sample, len(every)))
                rendered = [space.render(c) for c in configs]
                built = b.build([BuildInput(r.source, "sm_90") for r in rendered])
                out[name] = []
                for cfg, r, bl in zip(configs, rendered, built):
                    assert bl.ok, (cfg.short(), bl.error_msg)
                    m = dev.evaluate(Candidate(cfg.short(), cfg, r, bl.cubin_path))
                    out[name].append((cfg, m))
    finally:
        dev.close()
    return out


def test_split_configurations_of_odd_channels_verify(tmp_path):
    path = write_problem(tmp_path / "p", "bn_odd", BATCH_NORM, "torch.randn(5, 7, 33, 35)",
                         init_body=INIT.format(c=7))
    got = _measure(path, tmp_path, ("split",), sample=80)
    wrong = [(c.short(), m.error_kind, m.error_msg) for c, m in got["split"]
             if not (m.ok and m.verified)]
    assert not wrong, wrong[:5]
    assert {c["reduction.cross"] for c, _ in got["split"]} == {"two_pass", "last_block", "atomic"}


def test_few_long_channels_run_faster_split(tmp_path):
    """32 channels of 8 M elements (1 GiB): a block per channel leaves most of the H100's 132
    SMs idle."""
    path = write_problem(tmp_path / "p", "bn_long", BATCH_NORM, "torch.randn(32, 32, 512, 512)",
                         init_body=INIT.format(c=32))
    got = _measure(path, tmp_path, ("chan", "split"), sample=40)
    best = {name: min(m.time_ms for _, m in rows if m.ok) for name, rows in got.items()}
    print(f"bn_long (1 GiB, 32 channels): best chan {best['chan']:.3f} ms, "
          f"best split {best['split']:.3f} ms")
    assert best["split"] < 0.8 * best["chan"]


def test_one_welford_pass_beats_a_pass_per_statistic_on_long_channels(tmp_path):
    """The same 1 GiB batch norm: sampled split and chan configurations whose statistics are
    one Welford pass against their twins with a pass per level (same configuration otherwise),
    all verified; the best Welford kernel reads the channels twice (statistics, output) where
    the best of the others reads them three times, and is faster (H100, 2026-12-06: 1.134 ms
    against 1.436 ms, 24 pairs)."""
    from cuda_agent.space.slots import Config

    path = write_problem(tmp_path / "p", "bn_long", BATCH_NORM, "torch.randn(32, 32, 512, 512)",
                         init_body=INIT.format(c=32))
    prob = load_problem(path)
    plan = make_plan(prob.graph())
    dev = CudaDevice(timing=TimingSettings(reps=10, warmup=2))
    best: dict[str, float] = {}
    try:
        dev.setup(prob, plan)
        space = Space.for_plan(plan, dev.target())
        online = [c for c in space.configs if c.get("compute.algo") == "online"]
        picked = random.Random(1).sample(online, min(24, len(online)))
        pairs = [(c, Config.of({**c.as_dict(), "compute.algo": "passes"})) for c in picked]
        pairs = [(a, b) for a, b in pairs if space.contains(b)]
        assert len(pairs) >= 12
        configs = [c for pair in pairs for c in pair]
        rendered = [space.render(c) for c in configs]
        with Builder(cache_dir=tmp_path / "cache") as b:
            built = b.build([BuildInput(r.source, "sm_90") for r in rendered])
        for cfg, r, bl in zip(configs, rendered, built):
            assert bl.ok, (cfg.short(), bl.error_msg)
            m = dev.evaluate(Candidate(cfg.short(), cfg, r, bl.cubin_path))
            assert m.ok and m.verified, (cfg.short(), m.error_kind, m.error_msg)
            algo = cfg["compute.algo"]
            best[algo] = min(best.get(algo, float("inf")), m.time_ms)
    finally:
        dev.close()
    print(f"bn_long (1 GiB, 32 channels), {len(pairs)} pairs: best one Welford pass "
          f"{best['online']:.3f} ms, best a pass per level {best['passes']:.3f} ms")
    assert best["online"] < 0.95 * best["passes"]
