"""The GEMM model's shared-memory bank counting (`costmodel/gemm.smem_wavefronts`), computed for
every warp instruction at once with numpy, against the lane-by-lane count it replaced (kept
here as the oracle): the same wavefronts for layouts of every tile, warp shape, fragment split,
padding, pipeline depth, operand orientation and vector width."""

from __future__ import annotations

import random

from cuda_agent.costmodel.gemm import smem_wavefronts


def _wavefronts(words_per_lane: list[list[int]]) -> int:
    """Shared-memory wavefronts of one warp instruction: each of the 32 banks serves one
    distinct 4-byte word per wavefront (lanes reading the same word share it, a broadcast)."""
    banks: dict[int, set[int]] = {}
    for words in words_per_lane:
        for w in words:
            banks.setdefault(w % 32, set()).add(w)
    return max(1, max((len(s) for s in banks.values()), default=1))


def lane_by_lane(bm: int, bn: int, bk: int, tm: int, tn: int, warp: str, split_frag: bool,
                 pad: int, stages: int, a_along: str, b_along: str, vec_a: int, vec_b: int
                 ) -> tuple[float, float]:
    """The model's count as it was written first (up to commit 6834314): thread by thread,
    a Python set of words per bank."""
    wn, wm = bn // tn, bm // tm
    nt = wn * wm
    lda, ldb = bm + pad, bn + pad

    def lane_xy(tid: int) -> tuple[int, int]:
        if warp == "4x8":
            w, lane = tid >> 5, tid & 31
            return (w % (wn // 8)) * 8 + (lane & 7), (w // (wn // 8)) * 4 + (lane >> 3)
        return tid % wn, tid // wn

    def starts(idx: int, count: int, whole: int) -> list[int]:
        if split_frag and count == 8:
            return [idx * 4, whole // 2 + idx * 4]
        return [idx * count + 4 * q for q in range(count // 4)]

    frag = 0
    warps = [list(range(w * 32, min(nt, w * 32 + 32))) for w in range(-(-nt // 32))]
    for lanes in warps:
        xy = [lane_xy(t) for t in lanes]
        for q in range(len(starts(0, tm, bm))):
            frag += _wavefronts([range(starts(y, tm, bm)[q], starts(y, tm, bm)[q] + 4)
                                 for _, y in xy])
        for q in range(len(starts(0, tn, bn))):
            frag += _wavefronts([range(starts(x, tn, bn)[q], starts(x, tn, bn)[q] + 4)
                                 for x, _ in xy])
    store = 0
    for row_dim, along, vec, rows, ld in (("m", a_along, vec_a, bm, lda),
                                          ("n", b_along, vec_b, bn, ldb)):
        if stages >= 3 and not (along == row_dim and vec == 4):
            vec_eff, per_elem = 1, True  # cp.async element by element
        else:
            vec_eff, per_elem = vec, False
        total = rows * bk // vec_eff
        for j in range(max(1, total // nt)):
            for lanes in warps:
                addrs = []
                for t in lanes:
                    idx = t + j * nt
                    if per_elem:
                        r, kk = ((idx % rows, idx // rows) if along == row_dim
                                 else (idx // bk, idx % bk))
                    elif along == row_dim:
                        r, kk = (idx % (rows // vec)) * vec, idx // (rows // vec)
                    else:
                        r, kk = idx // (bk // vec), (idx % (bk // vec)) * vec
                    addrs.append((r, kk))
                if along == row_dim and vec_eff == 4:
                    store += _wavefronts([range(kk * ld + r, kk * ld + r + 4) for r, kk in addrs])
                else:  # scalar stores, one per element of the vector
                    for q in range(vec_eff):
                        store += _wavefronts([[(kk + q) * ld + r] for r, kk in addrs])
    return float(frag), float(store)


def _layouts(n: int) -> list[tuple]:
    rng = random.Random(0)
    out = []
    while len(out) < n:
        args = (rng.choice([8, 16, 32, 64, 128, 256]), rng.choice([8, 16, 32, 64, 128, 256]),
                rng.choice([4, 8, 16, 32]), rng.choice([4, 8]), rng.choice([4, 8]),
                rng.choice(["row", "4x8"]), rng.random() < 0.5, rng.choice([0, 1, 4]),
                rng.choice([1, 2, 3]), rng.choice(["m", "k"]), rng.choice(["n", "k"]),
                rng.choice([1, 2, 4]), rng.choice([1, 2, 4]))
        try:
            want = lane_by_lane(*args)
        except (ZeroDivisionError, ValueError):
            continue  # not a layout the template writes
        out.append((args, want))
    return out


def test_the_vectorised_count_is_the_lane_by_lane_count():
    wrong = [(args, want, smem_wavefronts.__wrapped__(*args)) for args, want in _layouts(300)
             if smem_wavefronts.__wrapped__(*args) != want]
    assert not wrong, wrong[:3]


def test_known_conflicts():
    # an 8-wide contiguous thread tile: lanes 32 bytes apart, two wavefronts per quarter warp
    contiguous, _ = smem_wavefronts.__wrapped__(64, 64, 8, 8, 8, "row", False, 0, 1, "m", "n",
                                                1, 1)
    split, _ = smem_wavefronts.__wrapped__(64, 64, 8, 8, 8, "row", True, 0, 1, "m", "n", 1, 1)
    assert contiguous > split
    # a transposed store without padding hits one bank per column; padding spreads it
    _, bare = smem_wavefronts.__wrapped__(64, 64, 8, 4, 4, "row", False, 0, 1, "k", "n", 1, 1)
    _, padded = smem_wavefronts.__wrapped__(64, 64, 8, 4, 4, "row", False, 1, 1, "k", "n", 1, 1)
    assert bare > padded
