"""The CPU emulator itself (`cpu_exec`): what its runs must not share."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cpu_exec
from cuda_agent.space.slots import Launch, Rendered

needs_gxx = pytest.mark.skipif(not cpu_exec.available(), reason="needs g++")

# each thread writes its own number where its block's shape says it is (a misnumbered thread
# writes another's element, and leaves its own NaN); both candidates cover 1024 elements
INDEX = r"""
extern "C" __global__ void {name}(const float* x, float* out, float* ws) {{
  const unsigned i = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  if (i < 1024u) out[i] = x[i] + {tag}.f;  // a misnumbered thread may land past the end
}}
"""


def _candidate(name: str, tag: int, block: tuple[int, int, int], blocks: int) -> Rendered:
    return Rendered(INDEX.format(name=name, tag=tag),
                    (Launch(name, (blocks, 1, 1), block),) * 4)


@needs_gxx
def test_runs_from_one_library_at_once_keep_their_own_block_shapes():
    """Two candidates of one `prebuild` batch (one shim: the test modules run a batch on two
    host threads) with blocks of different shapes, run at the same time, many times: each
    launch's threads are numbered by its own blockDim, not by the shape the other run set."""
    cands = [(_candidate("k_wide", 1, (256, 1, 1), 4), 1024, 1),
             (_candidate("k_tall", 2, (8, 16, 1), 8), 1024, 2)]
    cpu_exec.prebuild([(r, 1) for r, _, _ in cands])
    x = np.arange(1024, dtype=np.float32)
    failures: list[str] = []
    start = threading.Barrier(2)

    def go(rendered, n, tag):
        for _ in range(30):
            start.wait()
            got = cpu_exec.run(rendered, [x], (n,))
            if not np.array_equal(got, x + tag):
                failures.append(f"{rendered.launches[0].kernel}: {np.isnan(got).sum()} unwritten")

    threads = [threading.Thread(target=go, args=c) for c in cands]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:4]
