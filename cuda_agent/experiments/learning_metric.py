"""A metric beyond the first pick (issue 51, item 3): the best time a search holds after 4, 8,
16 and 32 measurements, relative to the pooled best of the problem (the best time the recorded
sweep or any strategy reached), per (problem, seed), and the comparisons between strategies on
it: a two-sided sign test over the (problem, seed) pairs and a bootstrap confidence interval,
over problems, of the geometric-mean ratio of the two strategies' best times.

The searches themselves are `benchmarks/learning_replay.py`'s (`run_problem`: each arm's
measured times in order, per seed); this module only reads their rows, so it runs on any
learning-replay result or on the rows of `benchmarks/learning_metric.py`, which runs the arms
compared here. Replayed H200 measurements: every time is a real GPU time recorded in a sweep and
served on a CPU; none is live.

    python -m cuda_agent.experiments.learning_metric RESULT.json   # the tables of a result
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

KS = (4, 8, 16, 32)
"""the numbers of measurements the best so far is read after"""
NEAR = 1 / 0.95
"""'within 5 %' as the rest of the project counts it: time <= best / 0.95"""
ARMS = ("trained+prior", "prior", "untrained+prior", "single+prior", "optuna warm",
        "kt GA warm", "kt SA warm", "random")
"""the arms compared, named as `learning_replay.arms` names them"""
PAIRS = (("trained+prior", "prior"), ("trained+prior", "untrained+prior"),
         ("trained+prior", "single+prior"), ("trained+prior", "optuna warm"),
         ("trained+prior", "kt GA warm"), ("trained+prior", "kt SA warm"),
         ("prior", "optuna warm"), ("prior", "kt GA warm"), ("untrained+prior", "prior"))
"""(a, b): is a's best after k measurements nearer the pooled best than b's?"""
LEARNING = ("prior", "untrained+prior", "single+prior")
"""the arms that ask what the training is worth (the rest are the peers)"""
BOOTSTRAP = 4000
"""resamples of the problems for the confidence intervals (seeded: the same figures each run)"""


def best_after(times: Sequence[float | None], k: int) -> float | None:
    """The best valid time among the first `k` measurements (a search that stopped before k
    holds its best at the stop); None when none of them ran."""
    ok = [t for t in times[:k] if t is not None and math.isfinite(t)]
    return min(ok) if ok else None


def pooled_best(row: dict[str, Any]) -> float:
    """The best time known on the problem: the sweep's best, or any arm's if lower (on replay
    every arm draws from the sweep, so the two agree)."""
    found = [t for runs in row["runs"].values() for times in runs for t in times
             if t is not None and math.isfinite(t)]
    return min([row["best_ms"], *found])


def ratios(row: dict[str, Any], arms: Iterable[str], ks: Sequence[int] = KS
           ) -> dict[str, dict[int, list[float]]]:
    """arm -> k -> per seed, best time after k measurements over the pooled best (1 = found
    it). A search with no valid time yet counts as the slowest time the problem ran (`worst_ms`
    of the row, else the slowest any arm measured): a penalty that keeps the mean finite."""
    best = pooled_best(row)
    seen = [t for runs in row["runs"].values() for times in runs for t in times
            if t is not None and math.isfinite(t)]
    worst = row.get("worst_ms") or max(seen, default=best)
    out: dict[str, dict[int, list[float]]] = {}
    for arm in arms:
        out[arm] = {}
        for k in ks:
            vals = []
            for times in row["runs"][arm]:
                b = best_after(times, k)
                vals.append((b if b is not None else worst) / best)
            out[arm][k] = vals
    return out


def usable(rows: list[dict[str, Any]], arms: Sequence[str]) -> list[dict[str, Any]]:
    """The rows every arm ran on out of sample (learning_replay's rows list what was in-sample
    or skipped)."""
    return [r for r in rows if "runs" in r and not r.get("in_sample")
            and all(a in r["runs"] for a in arms)]


def _geomean(v: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in v))


def arm_stats(per: dict[str, dict[str, dict[int, list[float]]]], arm: str, k: int
              ) -> dict[str, Any]:
    v = [x for p in per.values() for x in p[arm][k]]
    return {"geomean_ratio": _geomean(v), "median_ratio": statistics.median(v),
            "found_best": sum(x <= 1.0 for x in v) / len(v),
            "within_5pct": sum(x <= NEAR for x in v) / len(v), "n": len(v)}


def pair_stats(per: dict[str, dict[str, dict[int, list[float]]]], a: str, b: str, k: int,
               seed: int = 0) -> dict[str, Any]:
    """a against b after k measurements. Sign test over the (problem, seed) pairs (the seeds
    of one problem are matched: the same seed drives both arms); the confidence interval
    resamples problems, each problem's seeds kept together (they are not independent: the
    per-pair sign test is the looser of the two)."""
    import numpy as np
    from scipy.stats import binomtest, bootstrap

    better = worse = 0
    per_problem = []
    for p in per.values():
        ra, rb = p[a][k], p[b][k]
        better += sum(x < y for x, y in zip(ra, rb))
        worse += sum(x > y for x, y in zip(ra, rb))
        per_problem.append(statistics.fmean(math.log(x) - math.log(y) for x, y in zip(ra, rb)))
    n_pairs = sum(len(p[a][k]) for p in per.values())
    d = np.asarray(per_problem)
    if np.ptp(d) == 0:  # every problem the same difference: no spread to resample
        lo = hi = float(d[0])
    else:
        ci = bootstrap((d,), np.mean, n_resamples=BOOTSTRAP, confidence_level=0.95,
                       method="percentile", random_state=np.random.default_rng(seed))
        lo, hi = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
    p_sign = binomtest(better, better + worse).pvalue if better + worse else None
    return {"a": a, "b": b, "k": k, "a_better": better, "a_worse": worse,
            "tied": n_pairs - better - worse, "sign_test_p": p_sign,
            "geomean_ratio_a_over_b": math.exp(float(d.mean())),
            "ci95": [math.exp(lo), math.exp(hi)], "verdict": verdict(better, worse, p_sign,
                                                                     math.exp(lo), math.exp(hi))}


def verdict(better: int, worse: int, p: float | None, lo: float, hi: float) -> str:
    """'a' or 'b' where both the sign test (p < 0.05) and the interval (not holding 1) say
    the same side is nearer the best; 'none' otherwise."""
    if p is None or p >= 0.05:
        return "none"
    if better > worse and hi < 1.0:
        return "a"
    if worse > better and lo > 1.0:
        return "b"
    return "none"


def summarize(rows: list[dict[str, Any]], arms: Sequence[str] = ARMS,
              pairs: Sequence[tuple[str, str]] = PAIRS, ks: Sequence[int] = KS
              ) -> dict[str, Any]:
    """The metric over the usable rows: per arm and k, and per pair and k."""
    used = usable(rows, arms)
    if not used:
        raise ValueError("no row has every arm out of sample: nothing to compare")
    per = {r["problem"]: ratios(r, arms, ks) for r in used}
    seeds = {len(t) for p in per.values() for a in p.values() for t in a.values()}
    return {
        "problems": len(per), "seeds": sorted(seeds), "ks": list(ks),
        "families": sorted({r.get("family", "?") for r in used}),
        # a space of fewer configurations than k: an arm that measures each once has the best
        # by k (a tie at 1, not a skill)
        "space_at_most_k": {str(k): sum(r.get("recorded", math.inf) <= k for r in used)
                            for k in ks},
        "arms": {a: {str(k): arm_stats(per, a, k) for k in ks} for a in arms},
        "pairs": [pair_stats(per, a, b, k) for a, b in pairs if a in arms and b in arms
                  for k in ks],
        "no_valid_time_yet": {a: {str(k): sum(
            best_after(t, k) is None for r in used for t in r["runs"][a]) for k in ks}
            for a in arms},
        "per_problem": {p: {a: {str(k): [round(x, 5) for x in v] for k, v in d.items()}
                            for a, d in v2.items()} for p, v2 in per.items()},
    }


# ---------------------------------------------------------------------------------------------
# presentation


def winners(s: dict[str, Any], k: int) -> list[str]:
    """Plain sentences, one per pair, on which side is nearer the pooled best after k."""
    out = []
    for p in s["pairs"]:
        if p["k"] != k:
            continue
        lo, hi = p["ci95"]
        figs = (f"{p['a_better']}/{p['a_worse']}/{p['tied']} better/worse/tied, sign test "
                f"p = {p['sign_test_p']:.2g}" if p["sign_test_p"] is not None
                else f"all {p['tied']} tied")
        ratio = f"geomean ratio {p['geomean_ratio_a_over_b']:.3f} [{lo:.3f}, {hi:.3f}]"
        if p["verdict"] == "a":
            out.append(f"**{p['a']} beats {p['b']}** ({figs}; {ratio})")
        elif p["verdict"] == "b":
            out.append(f"**{p['b']} beats {p['a']}** ({figs}; {ratio})")
        else:
            out.append(f"{p['a']} and {p['b']}: no significant difference ({figs}; {ratio})")
    return out


def _ks(ks: list[int]) -> str:
    return ", ".join(map(str, ks[:-1])) + (" and " if len(ks) > 1 else "") + str(ks[-1])


def pair_sentence(s: dict[str, Any], a: str, b: str) -> str:
    """Which of a and b is significantly nearer the pooled best after which k (both the sign
    test and the interval agreeing), in one plain sentence; '' where the pair is not in s."""
    by = {p["k"]: p["verdict"] for p in s["pairs"] if (p["a"], p["b"]) == (a, b)}
    if not by:
        return ""
    won_a = [k for k in s["ks"] if by.get(k) == "a"]
    won_b = [k for k in s["ks"] if by.get(k) == "b"]
    rest = [k for k in s["ks"] if k not in won_a + won_b]
    parts = ([f"**{a}** nearer the best after {_ks(won_a)}"] if won_a else []) + (
        [f"**{b}** nearer after {_ks(won_b)}"] if won_b else []) + (
        [f"no significant difference after {_ks(rest)}"] if rest else [])
    return f"{a} against {b}: " + "; ".join(parts) + "."


def what_wins(s: dict[str, Any]) -> str:
    """The plain answer: is any arm significantly nearer the best than the prior alone, at
    any k; and the pairs' sentences."""
    beats_prior = sorted({p["a"] for p in s["pairs"] if p["b"] == "prior" and p["verdict"] == "a"}
                         | {p["b"] for p in s["pairs"] if p["a"] == "prior"
                            and p["verdict"] == "b"})
    lead = (f"**Nothing compared here beats the prior alone** (the model's ranking) after any "
            f"of {_ks(s['ks'])} measurements" if not beats_prior else
            f"**{', '.join(beats_prior)} beat{'s' if len(beats_prior) == 1 else ''} the prior "
            "alone** at some k")
    # the sign test alone (its pairs are not independent: a problem's seeds share it) can
    # disagree with the interval: more often nearer, by less than the losses elsewhere
    alone = [f"against {p['b']} after {p['k']} ({p['a_better']}/{p['a_worse']})"
             for p in s["pairs"] if p["a"] == "trained+prior" and p["b"] in LEARNING
             and p["verdict"] == "none" and p["sign_test_p"] is not None
             and p["sign_test_p"] < 0.05]
    note = (" The trained agents are nearer on significantly more (problem, seed) pairs, yet "
            "the interval over problems holds 1 (nearer more often, by less than they are "
            "farther elsewhere): " + "; ".join(alone) + ".") if alone else ""
    return lead + ". " + " ".join(pair_sentence(s, a, b) for a, b in
                                   dict.fromkeys((p["a"], p["b"]) for p in s["pairs"])) + note


def arm_rows(s: dict[str, Any]) -> list[list[str]]:
    """Per arm: the geometric-mean ratio after each k, and the share within 5 % and at the
    best after the last k."""
    last = str(s["ks"][-1])
    rows = []
    for a, by_k in s["arms"].items():
        rows.append([a, *(f"{by_k[str(k)]['geomean_ratio']:.3f}" for k in s["ks"]),
                     f"{100 * by_k[last]['within_5pct']:.0f} %",
                     f"{100 * by_k[last]['found_best']:.0f} %"])
    return rows


def arm_header(s: dict[str, Any]) -> list[str]:
    last = s["ks"][-1]
    return ["arm", *(f"after {k}" for k in s["ks"]), f"within 5 % after {last}",
            f"at the best after {last}"]


def pair_rows(s: dict[str, Any], ks: Sequence[int] | None = None) -> list[list[str]]:
    """Per pair: the ratio a/b with its interval after each k, and the sign test's counts."""
    ks = ks or s["ks"]
    by = {(p["a"], p["b"], p["k"]): p for p in s["pairs"]}
    out = []
    for a, b in dict.fromkeys((p["a"], p["b"]) for p in s["pairs"]):
        cells = []
        for k in ks:
            p = by[(a, b, k)]
            lo, hi = p["ci95"]
            mark = {"a": " (a)", "b": " (b)"}.get(p["verdict"], "")
            pv = "-" if p["sign_test_p"] is None else f"{p['sign_test_p']:.2g}"
            cells.append(f"{p['geomean_ratio_a_over_b']:.3f} [{lo:.3f}, {hi:.3f}], "
                         f"{p['a_better']}/{p['a_worse']}, p {pv}{mark}")
        out.append([a, b, *cells])
    return out


def agreement(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int, int]:
    """How far two results of the metric agree where they overlap: (problems in both, (problem,
    arm, k) cells with the same per-seed ratios, cells compared)."""
    common = sorted(set(a["per_problem"]) & set(b["per_problem"]))
    same = total = 0
    for p in common:
        for arm, by_k in b["per_problem"][p].items():
            for k, v in by_k.items():
                if arm in a["per_problem"][p] and k in a["per_problem"][p][arm]:
                    total += 1
                    same += a["per_problem"][p][arm][k] == v
    return len(common), same, total


def curves(s: dict[str, Any]) -> dict[str, list[float]]:
    """arm -> the geometric-mean ratio after each k (the plot's lines)."""
    return {a: [by_k[str(k)]["geomean_ratio"] for k in s["ks"]] for a, by_k in s["arms"].items()}


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def rich_tables(s: dict[str, Any], title: str) -> list[Any]:
    """The two tables for a terminal (rich)."""
    from rich.table import Table

    t1 = Table(title=f"{title}: best after k / pooled best (geometric mean; 1 = the best)")
    for h in arm_header(s):
        t1.add_column(h, justify="left" if h == "arm" else "right")
    for r in arm_rows(s):
        t1.add_row(*r)
    t2 = Table(title="a against b: geomean ratio a/b [95 % CI over problems], "
                     "a better/worse over (problem, seed), sign test p; (a)/(b): significant")
    for h in ("a", "b", *(f"after {k}" for k in s["ks"])):
        t2.add_column(h)
    for r in pair_rows(s):
        t2.add_row(*r)
    return [t1, t2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path, help="a learning-metric (or learning-replay) JSON")
    args = ap.parse_args(argv)
    try:
        doc = json.loads(args.result.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {args.result}: not a readable results file ({exc})", file=sys.stderr)
        return 2
    s = doc.get("metric")
    if s is None:  # a learning-replay result: its rows are in "runs", its bests in the summary
        if "runs" not in doc:
            print(f"error: {args.result}: neither a learning-metric nor a learning-replay "
                  "result", file=sys.stderr)
            return 2
        print(f"error: {args.result}: a learning-replay result; run `python -m "
              "benchmarks.learning_metric --from` on it first", file=sys.stderr)
        return 2
    from rich.console import Console

    con = Console()
    for t in rich_tables(s, doc.get("label", "")):
        con.print(t)
    for line in winners(s, s["ks"][-1]):
        con.print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
