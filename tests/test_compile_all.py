"""The all-combinations compile test: every valid configuration of every template must compile.

Default run: per (problem, template), a few configurations that together take every value of
every slot the template's configurations take there (`covering_sample`: the default
configuration first, 2 to 11 per pair, 235 in all, where a random ten per pair, 439 in all,
left values out), compiled with NVRTC through the Builder (2 workers, a private cache); the
slow set compiles a larger random sample (`SAMPLE`, 100 per pair, minutes on a small machine). ``CUDA_AGENT_COMPILE_ALL=1`` compiles every configuration of
every space (hours on a small machine; marked slow). A few configurations per template are also
compiled with the real nvcc when it is on PATH.

Besides compiling, each build is checked against the launch limits of the target (threads,
registers and shared memory per block), which a GPU would otherwise report only at launch.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from functools import lru_cache

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Fn, covered_values, covering_sample, nvcc_available
from cuda_agent.build.builder import Builder, BuildInput, BuildResult
from cuda_agent.ir.capture import capture
from cuda_agent.ir.planning import make_plan
from cuda_agent.space.slots import ABSENT, Config, Target
from cuda_agent.space.space import SCOPE_SLOT, Space
from cuda_agent.space.templates import TEMPLATES

# one worker runs the module's tests (`--dist loadgroup`, pyproject), so its module fixtures
# (`nvrtc_builds`, and the spaces `space_of` keeps) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_compile_all")

SAMPLE = int(os.environ.get("CUDA_AGENT_COMPILE_SAMPLE", "100"))
COVER = "cover"  # the default tier's sample: every slot value once (`covering_sample`)
NVCC_SAMPLE = 5
# Templates whose candidates take the compiler ~10x longer (unrolled register tiles) are sampled
# less per problem, so the CPU suite stays within CI's time; CUDA_AGENT_COMPILE_ALL still covers
# every configuration.
SAMPLE_PER_TEMPLATE = {"gemm": max(1, SAMPLE // 3), "attention": max(1, SAMPLE // 4),
                       "gemm_tc": max(1, SAMPLE // 5)}
COMPILE_ALL = os.environ.get("CUDA_AGENT_COMPILE_ALL") == "1"
TARGET = Target()
CHUNK = 400


class LayerNormModel(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(n)

    def forward(self, x):
        return self.ln(x)


def _fn(f, *shapes):
    return (Fn, [f], shapes)


PROBLEMS = {
    "relu_bias": _fn(lambda x, b: torch.relu(x + b) * 2.0, (37, 1003), (1003,)),
    "softmax": _fn(lambda x: torch.softmax(x, dim=-1), (33, 257)),
    "layer_norm": (LayerNormModel, [1004], [(16, 1004)]),
    "argmax_last": _fn(lambda x: torch.argmax(x, dim=-1), (8, 77)),
    "sum_middle": _fn(lambda x: x.sum(dim=1), (4, 100, 64)),
    "sum_dim0": _fn(lambda x: x.sum(dim=0), (300, 37)),
    "frobenius": _fn(lambda x: x / torch.norm(x, p="fro"), (33, 65)),
    "odd_softmax_middle": _fn(lambda x: torch.softmax(x, dim=1), (3, 7, 5)),
    "odd_map_broadcast": _fn(lambda x, y: F.gelu(x) * y + 1.0, (7, 1, 13), (5, 13)),
    "odd_full_sum": _fn(lambda x: x.sum(), (1000, 37)),
    # batch statistics: (N, H, W) reduced around the channels (the chan template)
    "odd_batch_norm": _fn(lambda x: F.batch_norm(x, None, None, training=True), (5, 7, 3, 11)),
    # few, long channels: the split template shares a channel among blocks
    "long_channels_batch_norm": _fn(lambda x: F.batch_norm(x, None, None, training=True),
                                    (4, 3, 8, 64)),
    "gemm_linear_odd": (nn.Linear, [67, 45], [(3, 37, 67)]),
    "gemm_bmm_transposed_tril": _fn(lambda a, b: torch.tril(torch.bmm(a.transpose(1, 2), b)),
                                    (2, 64, 96), (2, 64, 80)),
    "conv2d_odd_bias_relu": (lambda: nn.Sequential(nn.Conv2d(3, 40, 3, stride=2, padding=1),
                                                   nn.ReLU()), [], [(2, 3, 17, 19)]),
    # depthwise, channel multiplier 2, dilated: the direct template (dwconv) besides the GEMMs
    "conv2d_depthwise_odd": (lambda: nn.Sequential(nn.Conv2d(6, 12, 3, padding=2, dilation=2,
                                                             groups=6), nn.SiLU()),
                             [], [(2, 6, 19, 23)]),
    "conv_transpose2d_grouped_relu": (
        lambda: nn.Sequential(nn.ConvTranspose2d(8, 12, 4, stride=2, padding=1, output_padding=1,
                                                 groups=2), nn.ReLU()), [], [(2, 8, 9, 11)]),
    "gemm_vectors_split_k": _fn(lambda a, b, c: torch.relu(a @ b + c), (64, 2048), (2048, 96),
                                (96,)),
    "avg_pool_epilogue": _fn(lambda x, b: torch.relu(F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)) * b,
                             (2, 3, 33, 35), (18,)),
    "odd_max_pool3d_dilated": _fn(lambda x: F.max_pool3d(x, 3, (1, 2, 2), 1, dilation=(1, 1, 2)),
                                  (3, 9, 11, 13)),
    # scans: rows (exclusive, reverse, a masked prologue) and a middle dim (cumprod)
    "scan_rows_masked_reverse": _fn(
        lambda x, m: torch.flip(torch.cumsum(torch.flip(x * m, [1]), 1), [1]) - x,
        (37, 1003), (37, 1003)),
    "scan_exclusive_odd": _fn(
        lambda x: torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x, 1)[:, :-1]], 1),
        (5, 4100)),
    "odd_cumprod_middle": _fn(lambda x: torch.cumprod(x, dim=1), (3, 50, 20)),
    # attention: the manual form with a mask and an epilogue at odd sizes; causal (the
    # problems' head dim 128 takes the compiler ~5 s a candidate: 64 here)
    "attention_manual_odd_mask": _fn(
        lambda q, k, v, m: torch.softmax(q @ k.transpose(-2, -1) * 0.16 + m, -1) @ v + q,
        (3, 70, 36), (3, 53, 36), (3, 53, 36), (70, 53)),
    "attention_causal": _fn(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (1, 2, 300, 64), (1, 2, 300, 64), (1, 2, 300, 64)),
}


@lru_cache(maxsize=None)
def space_of(name: str) -> Space:
    cls, init, shapes = PROBLEMS[name]
    g = capture(cls, list(init), lambda: [torch.randn(*s) for s in shapes])
    return Space.for_plan(make_plan(g), TARGET)


@lru_cache(maxsize=None)
def configs_of(name: str, template: str) -> tuple[Config, ...]:
    sp = space_of(name)
    if template not in [t.name for t in sp.templates]:
        return ()
    return tuple(sp.configs_of(template))


def sample_of(name: str, template: str, n: int | None) -> list[Config]:
    cfgs = list(configs_of(name, template))
    if n is None or n >= len(cfgs):
        return cfgs
    rng = random.Random(f"{name}/{template}")
    picked = rng.sample(cfgs, n)
    # the template's default is what every run measures first: always include it
    default = space_of(name).default()
    if default in cfgs and default not in picked and space_of(name).template_of(
            default).name == template:
        picked[0] = default
    return picked


@lru_cache(maxsize=None)
def cover_of(name: str, template: str) -> tuple[Config, ...]:
    return tuple(covering_sample(configs_of(name, template), space_of(name).default(),
                                 f"{name}/{template}"))


def _pick(name: str, template: str, n: int | str | None) -> list[Config]:
    if n == COVER:
        return list(cover_of(name, template))
    return sample_of(name, template, _sample_size(template, n))


def _sample_size(template: str, n: int | None) -> int | None:
    return None if n is None else min(n, SAMPLE_PER_TEMPLATE.get(template, n))


PAIRS = [(p, t.name) for p in PROBLEMS for t in TEMPLATES]


@dataclass
class Built:
    config: Config
    launches: tuple
    result: BuildResult


def build_all(pairs, n: int | None, tmp, backend: str = "nvrtc") -> dict:
    """Render and build samples for every (problem, template) pair in one batch."""
    items: list[tuple[tuple[str, str], Config, object]] = []
    for name, tmpl in pairs:
        sp = space_of(name)
        for cfg in sample_of(name, tmpl, _sample_size(tmpl, n)):
            items.append(((name, tmpl), cfg, sp.render(cfg)))
    out: dict = {pair: [] for pair in pairs}
    if not items:
        return out
    inputs = [BuildInput(r.source, TARGET.arch) for _, _, r in items]
    results = []
    # a fresh Builder (and compile pool) per CHUNK sources: a pool whose workers retire after
    # 500 tasks can hang (see test_builder.py::test_one_large_batch_does_not_hang)
    for k in range(0, len(inputs), CHUNK):
        with Builder(backend, workers=2, cache_dir=tmp) as b:
            results.extend(b.build(inputs[k:k + CHUNK]))
    for (pair, cfg, r), res in zip(items, results):
        out[pair].append(Built(cfg, r.launches, res))
    return out


class PairBuilds:
    """Each (problem, template) pair's sample, built when a test first asks for it, through
    one compile pool (renewed every CHUNK sources, as `build_all` does)."""

    def __init__(self, tmp) -> None:
        self.tmp, self.done, self.builder, self.used = tmp, {}, None, 0

    def get(self, pair: tuple[str, str], n: int | None) -> list[Built]:
        if (pair, n) not in self.done:
            name, tmpl = pair
            sp = space_of(name)
            cfgs = _pick(name, tmpl, n)
            rendered = [sp.render(c) for c in cfgs]
            inputs = [BuildInput(r.source, TARGET.arch) for r in rendered]
            if self.builder is None or self.used + len(inputs) > CHUNK:
                self.close()
                self.builder, self.used = Builder("nvrtc", workers=2, cache_dir=self.tmp), 0
            self.used += len(inputs)
            results = self.builder.build(inputs) if inputs else []
            self.done[(pair, n)] = [Built(c, r.launches, res)
                                    for c, r, res in zip(cfgs, rendered, results)]
        return self.done[(pair, n)]

    def close(self) -> None:
        if self.builder is not None:
            self.builder.close()
            self.builder = None


@pytest.fixture(scope="module")
def nvrtc_builds(tmp_path_factory):
    builds = PairBuilds(tmp_path_factory.mktemp("build-nvrtc"))
    yield builds
    builds.close()


def _assert_builds_ok(name: str, tmpl: str, builds: list[Built]) -> None:
    failures = [f"{b.config.short()}: {b.result.error_kind}: {b.result.error_msg}"
                for b in builds if not b.result.ok]
    assert not failures, f"{name}/{tmpl}: {len(failures)} of {len(builds)} configurations " \
        f"failed to compile:\n" + "\n".join(failures[:5])
    for b in builds:
        for launch in b.launches:
            if launch.library:  # a vendor-library step: nothing of ours to compile
                continue
            threads = launch.threads
            assert 1 <= threads <= 1024, (b.config.short(), launch)
            assert all(g >= 1 for g in launch.grid), (b.config.short(), launch)
            assert launch.grid[0] < 2 ** 31 and launch.grid[1] < 65536 and launch.grid[2] < 65536
            res = b.result.per_kernel.get(launch.kernel)
            assert res is not None, f"{launch.kernel} not in the cubin's ptxas report"
            smem = res["smem_static"] + launch.smem
            assert smem <= TARGET.max_smem_per_block, (b.config.short(), launch, res)
            regs_per_thread = max(res["registers"], 1)
            assert regs_per_thread * threads <= TARGET.regs_per_sm, (b.config.short(), res)


def _applies(name: str, tmpl: str) -> bool:
    # the space offers only templates that have a valid configuration here (Space.for_plan)
    return tmpl in {t.name for t in space_of(name).templates}


@pytest.mark.parametrize("name,tmpl", PAIRS, ids=[f"{p}-{t}" for p, t in PAIRS])
def test_sampled_configs_compile(name, tmpl, nvrtc_builds):
    if not _applies(name, tmpl):
        pytest.skip(f"template {tmpl} does not apply to {name}")
    builds = nvrtc_builds.get((name, tmpl), COVER)
    chosen = [b.config for b in builds]
    # every value each slot takes in this template's configurations is compiled at least once
    assert not covered_values(chosen, configs_of(name, tmpl)), \
        covered_values(chosen, configs_of(name, tmpl))
    assert len(set(chosen)) == len(chosen) and set(chosen) <= set(configs_of(name, tmpl))
    default = space_of(name).default()
    if space_of(name).template_of(default).name == tmpl:
        assert chosen[0] == default  # what every run measures first
    _assert_builds_ok(name, tmpl, builds)


@pytest.mark.slow
@pytest.mark.parametrize("name,tmpl", PAIRS, ids=[f"{p}-{t}" for p, t in PAIRS])
def test_larger_samples_compile(name, tmpl, nvrtc_builds):
    if not _applies(name, tmpl):
        pytest.skip(f"template {tmpl} does not apply to {name}")
    builds = nvrtc_builds.get((name, tmpl), SAMPLE)
    assert len(builds) == min(_sample_size(tmpl, SAMPLE), len(configs_of(name, tmpl)))
    _assert_builds_ok(name, tmpl, builds)


def test_every_template_is_exercised():
    """Each template in the library applies to at least one test problem (else add one)."""
    for t in TEMPLATES:
        assert any(_applies(p, t.name) for p in PROBLEMS), f"no test problem for {t.name}"


@pytest.mark.slow
@pytest.mark.skipif(not COMPILE_ALL, reason="set CUDA_AGENT_COMPILE_ALL=1 to compile every "
                    "configuration of every space")
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_every_config_compiles(name, tmp_path):
    pairs = [(name, t.name) for t in TEMPLATES if _applies(name, t.name)]
    builds = build_all(pairs, None, tmp_path)
    for (p, t), bs in builds.items():
        assert len(bs) == len(configs_of(p, t))
        _assert_builds_ok(p, t, bs)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on PATH")
def test_sample_compiles_with_nvcc(tmp_path):
    pairs = []
    for t in TEMPLATES:
        first = next((p for p in PROBLEMS if _applies(p, t.name)), None)
        if first:
            pairs.append((first, t.name))
    builds = build_all(pairs, NVCC_SAMPLE, tmp_path, backend="nvcc")
    for (p, t), bs in builds.items():
        assert len(bs) == min(NVCC_SAMPLE, len(configs_of(p, t)))
        _assert_builds_ok(p, t, bs)


# -- the space itself -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_space_size_in_range(name):
    sp = space_of(name)
    assert 100 <= len(sp) <= 100_000, len(sp)
    assert len(set(sp.configs)) == len(sp)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_configs_are_valid_and_complete(name):
    sp = space_of(name)
    names = [s.name for s in sp.slots]
    assert names == sorted(names)
    rng = random.Random(name)
    for cfg in rng.sample(sp.configs, min(50, len(sp))):
        assert [k for k, _ in cfg.items] == names
        assert sp.check(cfg) is None
        t = sp.template_of(cfg)
        own = {s.name for s in t.slots(sp.plan, sp.target)}
        for k, v in cfg.items:
            if k not in own and k != SCOPE_SLOT:
                assert v == ABSENT, (k, v)
            else:
                assert v in sp.slot(k).choices
    default = sp.default()
    assert sp.check(default) is None, sp.check(default)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_listed_configs_are_members_without_the_list(name):
    """What lets the random search draw without listing a space (`Space.contains`): every
    listed configuration is valid and its own canonical form."""
    sp = space_of(name)
    fresh = Space(sp.plan, sp.target, sp.templates)
    missing = [c.short() for c in sp.configs if not fresh.contains(c)]
    assert not missing and "configs" not in vars(fresh), missing[:3]


def test_space_check_explains_an_invalid_config():
    sp = space_of("softmax")
    cfg = sp.configs[0].as_dict()
    cfg["config.block"] = 12345
    reason = sp.check(Config.of(cfg))
    assert reason and "config.block" in reason


def _partials(sp: Space, rng: random.Random) -> list[dict]:
    out: list[dict] = [{}]
    if len(sp.templates) > 1:
        out += [{SCOPE_SLOT: t.name} for t in sp.templates]
    for _ in range(4):
        cfg = rng.choice(sp.configs).present()
        keys = rng.sample(sorted(cfg), min(len(cfg), rng.randint(1, 3)))
        out.append({k: cfg[k] for k in keys})
    return out


@pytest.mark.parametrize("name", ["softmax", "sum_middle", "odd_full_sum", "relu_bias",
                                  "layer_norm"])
def test_mask_allows_exactly_the_values_some_valid_config_takes(name):
    sp = space_of(name)
    dicts = [c.as_dict() for c in sp.configs]
    rng = random.Random(name)
    for partial in _partials(sp, rng):
        matching = [d for d in dicts if all(d.get(k) == v for k, v in partial.items())]
        assert matching, partial
        for slot in sp.slots:
            mask = sp.mask(slot.name, partial)
            assert len(mask) == len(slot.choices)
            for value, allowed in zip(slot.choices, mask):
                witnesses = [d for d in matching if d[slot.name] == value]
                if allowed:
                    assert witnesses, (partial, slot.name, value)
                    assert sp.check(Config.of(witnesses[0])) is None
                else:
                    assert not witnesses, (partial, slot.name, value)
            assert any(mask) or ABSENT in [d[slot.name] for d in matching], (partial, slot)


def test_mask_hides_slots_of_other_templates():
    sp = space_of("softmax")
    assert len(sp.templates) > 1
    for t in sp.templates:
        own = {s.name for s in t.slots(sp.plan, sp.target)}
        for slot in sp.slots:
            if slot.name in own or slot.name == SCOPE_SLOT:
                continue
            allowed = [v for v, ok in zip(slot.choices, sp.mask(slot.name, {SCOPE_SLOT: t.name}))
                       if ok]
            assert allowed == [], (t.name, slot.name, allowed)


def test_mask_narrows_under_a_constraint():
    """Row length 257 is odd: under the row template only scalar loads are valid."""
    sp = space_of("softmax")  # row length 257 is odd: no vector loads in the row template
    row = {SCOPE_SLOT: "row"} if len(sp.templates) > 1 else {}
    vec = sp.mask("memory.vec", row)
    allowed = [v for v, ok in zip(sp.slot("memory.vec").choices, vec) if ok]
    assert allowed == [1]
