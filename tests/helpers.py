"""Helpers shared by the CPU tests (imported as `helpers`; a module named conftest would be
shadowed by tests/gpu/conftest.py on sys.path).

* Every test session gets a private compile cache and cuda-agent home (CUDA_AGENT_CACHE,
  CUDA_AGENT_HOME), so tests never read or write ~/.cache/cuda-agent.
* `write_problem` writes a tiny KernelBench-format problem into a directory.
* `Fn` wraps a function as an nn.Module, for capturing small programs directly.
* `good_space` is a tests/data/good problem's template space; `sharp_policy` an agents'
  policy with sharpened weights (it would pile onto one configuration if it could).
* `fast_first` keeps a few cases of a parametrized test in the default run and marks the rest
  slow (`pytest -m slow` runs them).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Callable, Iterable

import pytest
import torch
import torch.nn as nn

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
GOOD = DATA / "good"
BAD = DATA / "bad"


class Fn(nn.Module):
    """A module whose forward() is `f`: lets tests capture one-line programs."""

    def __init__(self, f: Callable) -> None:
        super().__init__()
        self.f = f

    def forward(self, *args):
        return self.f(*args)


class ConvBatchNormRelu(nn.Module):
    """A training-mode chain: convolution, BatchNorm with batch statistics, ReLU; its
    statistics are stages of their own (a program)."""

    def __init__(self, cin: int = 3, cout: int = 2) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


PROBLEM_TEMPLATE = '''"""Test problem {name}."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self{init_sig}):
        super().__init__()
{init_body}

    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [{init_inputs}]
'''


def problem_source(expr: str, inputs: str, args: str = "x", init_body: str = "",
                   init_sig: str = "", init_inputs: str = "", name: str = "p") -> str:
    body = textwrap.indent(textwrap.dedent(init_body).strip("\n"), " " * 8) if init_body \
        else " " * 8 + "pass"
    return PROBLEM_TEMPLATE.format(name=name, init_sig=init_sig, init_body=body, args=args,
                                   expr=expr, inputs=inputs, init_inputs=init_inputs)


def write_problem(directory: Path, name: str, expr: str, inputs: str, **kw) -> Path:
    """Write a problem file `<directory>/<name>.py` computing `expr` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(problem_source(expr, inputs, name=name, **kw))
    return path


def nvcc_available() -> bool:
    return shutil.which("nvcc") is not None


def nvrtc_available() -> bool:
    from cuda_agent.build.compiler import nvrtc_version
    return nvrtc_version() is not None


def good_space(name: str):
    """The template space of tests/data/good/<name>.py on the default target."""
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.space.slots import Target
    from cuda_agent.space.space import Space

    return Space.for_plan(make_plan(load_problem(GOOD / f"{name}.py").graph()), Target())


def sharp_policy(seed: int = 0):
    """A small multi-agent policy, its weights scaled up: sharp, it would pile onto one
    configuration if it could."""
    from cuda_agent.agents.policy import MultiAgentPolicy

    torch.manual_seed(seed)
    policy = MultiAgentPolicy("multi", hidden=16)
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(25.0)
    return policy


def fast_first(cases: Iterable, keep: Iterable) -> list:
    """Parametrize values for a test whose cases each take many seconds (the CPU emulator
    compiles every kernel): those in `keep` run in the default set, so every such test keeps
    some coverage there; the others are marked slow."""
    cases, keep = list(cases), list(keep)
    unknown = [k for k in keep if k not in cases]
    if unknown:
        raise ValueError(f"fast_first: no such case {unknown}")
    return [c if c in keep else pytest.param(c, marks=pytest.mark.slow) for c in cases]


def covering_sample(configs, default=None, seed: object = 0) -> list:
    """A few of `configs` (one template's valid configurations of one space) that together take
    every value each slot takes in any of them: `default` first where it is among them, then
    greedily the configuration taking the most values not yet taken (ties: a seeded shuffle).
    What a compile test needs of a template in the default tier: every slot value rendered and
    compiled at least once, at about a third of the compiles of a random sample of ten that
    left values out; `covered_values` checks it."""
    import random

    pool = list(configs)
    random.Random(str(seed)).shuffle(pool)
    items = [frozenset(c.items) for c in pool]
    want = frozenset().union(*items)
    picked, taken = [], frozenset()
    if default is not None and default in pool:
        picked.append(default)
        taken = frozenset(default.items)
    while taken != want:
        k = max(range(len(pool)), key=lambda k: len(items[k] - taken))
        picked.append(pool[k])
        taken |= items[k]
    return picked


def covered_values(chosen, configs) -> set:
    """The (slot, value) pairs some configuration of `configs` takes that none of `chosen` does
    (empty: `chosen` covers every slot value)."""
    return {kv for c in configs for kv in c.items} - {kv for c in chosen for kv in c.items}


def seeded_reference(cls: type, shape: tuple[int, ...]):  # noqa: ANN201 - (module, x, want)
    """`cls()` in training mode with N(0, 1) parameters (seed 0), an N(0, 1) input of `shape`
    (seed 1), and the module's answer in float64 as a numpy array: what the emulator tests of
    programs compare against."""
    import torch

    torch.manual_seed(0)
    model = cls().train()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    return model, x, want
