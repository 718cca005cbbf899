"""The plots of BENCHMARKS.md (`benchmarks_md.py`), each from figures already read from the
results files, returned as PNG bytes. Small (a few tens of kB) and the same bytes every time:
no timestamp or software version in the file, a fixed size and resolution."""

from __future__ import annotations

import io
import math
from typing import Any

DPI = 72
"""pixels per inch of the PNGs: small files, legible on a page"""


def _figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    # no Software/Creation entries: the same figures give the same bytes
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def realistic_speedups(rows: list[tuple[str, float | None]]) -> bytes:
    """One bar per problem, fastest first: the kernel's speedup against default torch.compile,
    drawn from 1 (log scale); a problem without a verified time is listed last, without a
    bar."""
    timed = sorted(((p, v) for p, v in rows if v is not None), key=lambda t: -t[1])
    untimed = [(f"{p} (no time)", None) for p, v in rows if v is None]
    order = timed + untimed
    fig, ax = _figure(7.0, 0.16 * len(order) + 1.2)
    values = [v if v is not None else 1.0 for _, v in order]
    ax.barh(range(len(order)), [v - 1.0 for v in values], left=1.0,
            color=["tab:green" if v > 1 else "tab:red" for v in values])
    ax.set_xscale("log")
    lo, hi = min(values + [0.9]), max(values + [1.1])
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8) if lo / 1.5 <= t <= hi * 1.5]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(order)), [p for p, _ in order], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("speedup against default torch.compile (harness timing, live)", fontsize=8)
    ax.set_title("Realistic suite, strict fp32 kernels", fontsize=9)
    return _png(fig)


def evals_medians(columns: dict[str, dict[str, float]]) -> bytes:
    """Grouped bars: each strategy's median measurements to 95 % of the run's best, one group
    per strategy, one bar per set of runs (`columns`: label -> strategy -> median)."""
    strategies = list(dict.fromkeys(s for c in columns.values() for s in c))
    fig, ax = _figure(7.0, 3.2)
    width = 0.8 / max(len(columns), 1)
    for i, (label, medians) in enumerate(columns.items()):
        ax.bar([k + i * width for k in range(len(strategies))],
               [medians.get(s, math.nan) for s in strategies], width, label=label)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(strategies))], strategies,
                  rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("median measurements to 95 %", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7)
    ax.set_title("Live bench: fewer is better (budget + 1 = never reached)", fontsize=9)
    return _png(fig)


def spearman_by_family(columns: dict[str, dict[str, float]]) -> bytes:
    """Grouped bars: the simulator's median Spearman per family, one bar per comparison
    (`columns`: label -> family -> median)."""
    families = sorted({f for c in columns.values() for f in c})
    fig, ax = _figure(7.0, 3.2)
    width = 0.8 / max(len(columns), 1)
    for i, (label, medians) in enumerate(columns.items()):
        ax.bar([k + i * width for k in range(len(families))],
               [medians.get(f, math.nan) for f in families], width, label=label)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(families))], families,
                  rotation=30, ha="right", fontsize=7)
    ax.set_ylim(0, 1.2)  # room for the legend above the bars
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_ylabel("median Spearman", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="upper left", ncol=len(columns))
    ax.set_title("SIMULATED ranking against recorded GPU times", fontsize=9)
    return _png(fig)


def best_after_curves(panels: dict[str, dict[str, list[float]]], ks: list[int]) -> bytes:
    """One panel per set of runs: each arm's geometric-mean ratio of its best time after k
    measurements to the pooled best, against k (log scale; 1 = found the best)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True,
                             squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for arm, values in curves.items():
            ax.plot(ks, values, marker="o", markersize=3, linewidth=1.2, label=arm,
                    linestyle="--" if arm == "random" else "-")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks], fontsize=7)
        ax.minorticks_off()
        ax.tick_params(axis="y", labelsize=7)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xlabel("measurements", fontsize=8)
        ax.set_title(title, fontsize=8)
    axes[0][0].set_ylabel("best so far / pooled best (geomean)", fontsize=8)
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("REPLAY of recorded H200 sweeps: lower is better", fontsize=9)
    return _png(fig)
