"""BENCHMARKS.md's live-bench sections (issue 5): the merged report of the live bench runs on
the H200 made with one policy, and of those made with the cross-fitted fold policies (a merge
needs one policy setting), with the method stated once above each, and the fastest kernel of
either against torch.compile over every problem benched. Rebuilds each merge from the run
directories first (`cuda-agent report RUN... --out MERGED`), so no section is pasted by hand.

    python -m benchmarks.live_section            # the committed runs, into BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.sections import bench_section, write_section

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
# each live bench set: a folder of runs (one per problem, or one per device-tool call)
SETS = ("2026-11-30-h200-bench-live", "2026-11-30-h200-bench-live-s10",
        "2026-11-30-h200-bench-live-s11")
MERGED = RESULTS / "2026-11-30-h200-bench-live-merged"
# the same bench with the cross-fitted policies (benchmarks/fold_policies.py)
FOLD_SETS = ("2026-11-30-h200-bench-live-s12", "2026-12-01-h200-bench-live-s13")
FOLD_MERGED = RESULTS / "2026-11-30-h200-bench-live-folds-merged"
# the same again with fold policies retrained on sweeps recorded with today's templates
RETRAINED_SETS = ("2026-12-01-h200-bench-live-s14", "2026-12-01-h200-bench-live-s15",
                  "2026-12-02-h200-bench-live-s16", "2026-12-02-h200-bench-live-s17")
RETRAINED_MERGED = RESULTS / "2026-12-01-h200-bench-live-retrained-merged"
# the agents with the analytic-model prior (`strategy.PRIOR_WEIGHT`, commit d19a269), same
# fold policies: the problems no live bench had, and the ones where the agents had needed the
# most measurements benched again
PRIOR_SETS = ("2026-12-02-h200-bench-live-s18",)
PRIOR_MERGED = RESULTS / "2026-12-02-h200-bench-live-prior-merged"
# the four multi-kernel programs, every strategy searching them stage by stage (commit 3eb0d7f)
PROGRAM_SETS = ("2026-12-03-h200-bench-live-s20",)
PROGRAM_MERGED = RESULTS / "2026-12-03-h200-bench-live-programs-merged"
# the four programs again with a settled stage handing its share on (commit 3becbaa), and the
# convolutions whose library calls now run in cuDNN's benchmark mode (commit 5f16faf)
HANDOFF_SETS = ("2026-12-03-h200-bench-live-s21",)
HANDOFF_MERGED = RESULTS / "2026-12-03-h200-bench-live-handoff-merged"
# the agents with the tensor-core model's refit in their analytic-model prior (commit c0667bc):
# GEMMs on which the agents had needed more measurements than Optuna in their latest run
TC_SETS = ("2026-12-03-h200-bench-live-s24",)
TC_MERGED = RESULTS / "2026-12-03-h200-bench-live-tcmodel-merged"
# issue 5's 3x target on problems drawn by rule, not by how the agents had done: one per family
# (`gpu_suite.heldout_sample`), each seed fixed before its runs, every strategy; per draw: its
# set, its merge, how it was run
SAMPLE_DRAWS = (
    ("2026-12-03-h200-bench-live-sample1204",
     RESULTS / "2026-12-03-h200-bench-live-sample1204-merged",
     "seed 1204 (the next after the ablations' 1202 and 1203), its three shares, commit 9c9f377"),
    ("2026-12-03-h200-bench-live-sample1205",
     RESULTS / "2026-12-03-h200-bench-live-sample1205-merged",
     "seed 1205, its third share then its second (the cheaper first; the session's GPU time ended "
     "inside the second; the first share, the attention, convolution, elementwise and fused "
     "product draws, was not run), commit 84f4973"),
)
# the whole-suite union (`union_facts`): the merges in the order their runs happened (a problem
# counts by its latest run; the rule-drawn draws last), and those that benched problems again
# because the agents had needed many measurements (counted without them as well)
UNION_MERGES = tuple(p.name for p in (MERGED, FOLD_MERGED, RETRAINED_MERGED, PRIOR_MERGED,
                                      PROGRAM_MERGED, HANDOFF_MERGED, TC_MERGED)) + tuple(
    merged.name for _, merged, _ in SAMPLE_DRAWS)
RERUN_MERGES = (PRIOR_MERGED.name, TC_MERGED.name)
SAMPLE_MERGES = tuple(merged.name for _, merged, _ in SAMPLE_DRAWS)
# issue 3's comparison live: the trained agents, the same agents untrained, the single-agent
# ablation, random search and Optuna on held-out problems drawn by rule (commit 5fae39a)
ABLATION_SETS = ("2026-12-02-h200-bench-live-s19",)
ABLATION_MERGED = RESULTS / "2026-12-02-h200-bench-live-ablations-merged"
ABLATION_COLUMNS = ("marl", "marl_untrained", "marl_single", "random", "optuna")
# an A/B on the GPU: the agents with half of each batch drawn near the best (`LOCAL_SHARE` 0.5)
LOCAL_AB = RESULTS / "2026-12-01-h200-local-share-ab" / "run1"

INTRO = """\
## cuda-agent against the peers, live on the H200 (issue 5)

`cuda-agent bench --suite <problems> --device cuda --budget 40 --seeds 1 --policy
benchmarks/policies/h200-replay-multi.pt` through the device tool (`benchmarks/gpu_suite.py
--parts bench`; calls of 10 minutes, so the suite is benched a few problems per call, then merged
by `benchmarks/live_section.py` with `cuda-agent report <runs> --out {merged}`). Runs: {sets}.
Every strategy searches the problem's whole template space on the GPU at 40 measurements: Optuna's
TPE and Kernel Tuner's strategies through their own APIs (Kernel Tuner asks, cuda-agent's runner
measures and verifies, `search/kernel_tuner_sim.run_live`); torch eager, torch.compile (default,
max-autotune, and max-autotune without CUDA graphs) timed by the same worker in the same run; the
optimum is the best time of the run, the sweep's recorded best configurations measured again
among them. One seed per problem (device time): the per-problem counts are single searches. The
agents' policy trained on the replayed sweeps of most of these operators: its rows count only
the ones it never saw, and the column 'never trained on' gives every strategy on those same
problems. Benched so far: {done} of the suite's {total} problems. Not yet: the rest, mostly GEMM,
attention and convolution (their searches compile for longer than a call leaves a problem;
problems given up are listed at the end) and the fused chains (the multi-kernel programs among
them were not compared in these runs: Kernel Tuner tunes one kernel's parameters; the
programs section below benches them stage by stage).

max-autotune (which turns on CUDA graphs) is slower than torch.compile's default mode on most
operators here ({max_ratio}); without CUDA graphs it is as fast as the default mode in the median
({nocg_ratio}; timed since commit 7942060). So the loss is CUDA graphs': their replay copies each
fresh input the protocol feeds into the graph's static buffers, which a memory-bound operator pays
in full (the likely mechanism; not profiled).
"""


FOLDS_INTRO = """\
## The same live bench with the cross-fitted policies (issues 3, 5)

As above (`benchmarks/gpu_suite.py --parts bench`, budget 40, one seed, every strategy on the
problem's whole template space on the H200), with `--policy
benchmarks/policies/h200-replay-fold0.pt,benchmarks/policies/h200-replay-fold1.pt`: each problem is
tuned by the fold policy that never trained on it (its `policy` in bench.json), so every problem
counts for the agents. Runs: {sets}, merged into `{merged}`. Benched: {done} problems, the
fused chains and the single-operator problems the section above had not reached. From
2026-12-01 (runs 3 and 4 of the s13 set) the eight strategy runs of a problem search side by
side (`bench --parallel 8`: compiling overlaps, measurements take the GPU one at a time under a
lock): one GPU then benched three attention problems in a 10-minute call, and eight (attention_sdpa
and seven convolutions) in the next, where two GPUs running one search at a time had finished two
problems in one; their wall times per search include waiting for each other. Not yet benched live: the GEMM-based problems and
chains (about 250 s each one run at a time: torch.compile's max-autotune and eight searches
compiling GEMMs) and a few convolutions; the multi-kernel programs were not compared in these
runs (Kernel Tuner tunes one kernel; see the programs section below). The agents lead on the small spaces and fall behind Kernel Tuner's
bayes_opt on the convolution spaces (tens of thousands of configurations): see the per-problem
table.
"""

RETRAINED_INTRO = """\
## The live bench with the fold policies retrained on today's sweeps (issues 3, 5)

As the section above (budget 40, one seed, every strategy on the problem's whole template space
on the H200, eight strategy runs side by side), with `--policy
benchmarks/policies/h200-replay-1201-fold0.pt,benchmarks/policies/h200-replay-1201-fold1.pt`:
the same folds and training settings (`benchmarks/fold_policies.py --name h200-replay-1201`),
trained after the convolution sweeps were recorded again on 2026-12-01 with the templates of the
day (`benchmarks/results/2026-12-01-h200-resweep-s14/`: 200 configurations each, stratified by
template). The policies of the section above learned from convolution sweeps recorded before the
tensor-core implicit GEMM existed, in which cuDNN was the fastest convolution. These runs also
fine-tune online with the larger step of commit 4acdb23 (Adam 9e-3, 4 epochs; the section above
ran with 9e-4, 2 epochs): the two changes are measured together. Runs: {sets},
merged into `{merged}`. Benched: {done} problems; the s15 runs are the first live bench of the
single GEMMs and of conv3d_standard and conv_transpose3d, the s16 runs (2026-12-02, three calls)
of the other six single GEMMs and the first seven GEMM-based fused chains (80 to 120 s each with
eight searches side by side, most of it torch.compile's max-autotune and compiling GEMM
candidates, so a 10-minute call benches three to six), the s17 runs (2026-12-02, two calls, commit
fd49d38: before the agents' analytic-model prior) of seven more GEMM chains.
"""

LOCAL_AB_TEXT = """
Local proposals, an A/B on the GPU: the agents drawing half of each batch near the best
configuration so far, one agent's slots changed at a time (`agents/decode.sample_local`,
`strategy.LOCAL_SHARE` 0.5 at commit 803230d; `{run}`), against the s14 run of
the same problems, same policies and seeds (the other strategies are deterministic given their
seed and searched the same configurations again: their columns show the run-to-run noise of the
optimum). Fewer measurements nowhere, so the option is off by default (`LOCAL_SHARE`): the fold
policies' first guesses on these convolutions are often cuDNN configurations, whose neighbours
(the epilogue's block, items and vector width) all time the same.
"""

PRIOR_INTRO = """\
## The live bench with the agents' analytic-model prior (issues 3, 5)

As the section above (budget 40, one seed, the same fold policies, every strategy on the
problem's whole template space on the H200, eight strategy runs side by side), at commit d19a269,
where the agents rank each batch's proposals by their policy's log-probability plus the
simulator's estimate (`agents/prior.py`, weight 100: the `agents-ab` section below measured it on
replay). Runs: {sets}, merged into `{merged}`. Run 1: the four GEMM-based chains no live bench
had. Runs 2 to 4: the problems where the agents had needed 30 or more measurements in their
latest run before the prior (21 problems; attention_manual_odd and fused_linear_mish were cut
by the last call's deadline), and fused_manual_normalize. These were chosen for the agents' bad
counts, so a rerun would likely show fewer for them even without a change (regression to the
mean): the table below gives the best peer's counts in both runs as well, whose problems were
not chosen for the peer's counts. The earlier runs of the problems of runs 2 to 4 came from
two sets: s12 (fold policies of 2026-11-30, before the tensor-core convolution templates and
other changes) and s14 to s16 (the retrained fold policies used here), so the change is the
prior together with whatever else changed since then.
"""

PROGRAMS_INTRO = """\
## The multi-kernel programs live (issue 5)

The suite's four problems that run as several kernels (`space/program.py`: a convolution or
GEMM, then a pooling, normalization, softmax or second GEMM kernel, the values between them in
workspace), benched as the sections above (budget 40, one seed, the fold policies with the
prior, every strategy side by side on the H200) at commit 3eb0d7f. Earlier runs left them out,
since Kernel Tuner tunes one kernel's parameters; now every strategy searches a program one stage
at a time with the budget split evenly (20 + 20): the ask/tell strategies through the tuner's own
coordinate search, Kernel Tuner's strategies given each stage's template space in turn through
their API (`bench_live._kernel_tuner_stages`), the other stages at the best found so far (at
first their defaults), every candidate the whole program verified and timed end to end. No
recorded sweep is measured again for them (theirs are stage by stage, timed with other stages
than this run's): the optimum is the best of this run. Neither fold policy trained on them (a
program's sweep is not replayable), so every problem counts for the agents. Runs: {sets},
merged into `{merged}`.
"""

HANDOFF_INTRO = """\
## Programs with stage hand-off, convolutions with cuDNN's benchmark mode (issue 5)

As the programs section above (budget 40, one seed, the same fold policies, every strategy side
by side on the H200), at commit 3becbaa, where a program's stage that has gone 8 measurements
without the best falling 1 % hands the rest of its share to the next stage
(`space/program.StagePlateau`), for every strategy alike: the ask/tell ones in the tuner's
coordinate search, Kernel Tuner's by ending its search of the stage there. The even split had put
a floor of about 21 measurements under any program whose optimum needs its second stage. The
candidates of a problem with a convolution also run in a worker set up in cuDNN's benchmark mode
since commit 5f16faf (the library template gets cuDNN's fastest algorithm; eager and
torch.compile are still timed on its heuristics, eager in the benchmark mode beside them): run 1
benches conv_transpose2d_odd again for it, whose library candidates had run 3.5x slower on the
heuristics' algorithm. Runs: {sets}, merged into `{merged}`. Same-problem reruns carry the run's
own noise: the best peer's counts in both runs are given beside the agents'.
"""

TC_INTRO = """\
## The agents' prior with the refitted tensor-core model (issue 5)

As the sections above (budget 40, one seed, the same fold policies, every strategy side by side
on the H200), at commit c0667bc, where the simulator that the agents' prior reads
(`agents/prior.py`) prices a lone block per SM, the waits on spilled values and the tensor-core
tile fill as refitted on the recorded measurements (`benchmarks/sim_tc_fit.py`). The four
products were chosen because the agents had needed more measurements than Optuna in their
latest run, which favours the agents here (a rerun of a bad draw tends to do better): Optuna's
counts in both runs are beside theirs. Runs: {sets}, merged into `{merged}`.
"""

SAMPLE_INTRO = """\
## The 3x target on problems drawn by rule (issue 5)

The union above counts each problem by its latest run, and some problems were benched again
because the agents had needed many measurements, which favours the agents. This section settles
issue 5's target without that choice: problems drawn at random, one from each name family of
the recorded problems (multi-kernel programs left out; `gpu_suite.py --bench-problems
sample:1:SEED:K:3`), benched on the H200 with every strategy side by side as in the sections
above (budget 40, one seed, the fold policies: each problem tuned by the one that never trained
on it). Cells: measurements to 95 % of the run's best, 41 when not reached in 40.

{draws}

Both draws together ({n} problem runs{dups}): {pooled} {ties}One seed per problem: the spread
of the ratio across seeds was not measured. Runs: {sets}, merged per draw into {merged}; the
first draw's report follows, the second's is the next section.
"""

SAMPLE2_INTRO = """\
## The 3x target on problems drawn by rule: the second draw (issue 5)

The second draw of the section above ({what}). Runs: {sets}, merged into `{merged}`.
"""

UNION = """\
<!-- bench-live-union:begin -->
## Every problem benched live, the sections together (issue 5)

The fastest kernel measured in the run (any strategy, or the sweep's best configurations measured
again) against torch.compile's default mode timed in the same run {settings} (a problem benched
in several sections: its latest run), over the {n} problems of the sections above ({total} in
the suite; not yet benched live: {missing}): faster on **{faster} of {n}
(fast_1 {fast1:.2f}, geomean {geo:.2f}x)**; not faster on {slower} ({close} of these
within 1 % of torch.compile's time, ties that a rerun can flip either way).

Measurements to 95 % of each run's best over the same runs (a problem's latest run; the agents
counted only where their policy never trained on the problem: {unseen} problems), median over
problems: {medians}. The agents against the best of them ({best_peer}): **{ratio:.1f}x fewer**
(issue 5's target: 3x); per family, the agents' median against {best_peer}'s: {families}.
{rebench}
<!-- bench-live-union:end -->"""

REBENCH = """
{k} of these problems were benched again with the agents' prior (the prior's section above) or
with its refitted tensor-core model (the section on it), chosen for the agents' high counts
before, which favours the agents in a latest-run union; the same union with each problem's
latest run outside those two sections (those {k} by their runs before them; the programs,
benched later, by theirs): agents {before_marl:g},
{before_peer} {before_peer_med:g} ({before_ratio:.1f}x fewer). The section below settles the
target on problems drawn by rule instead."""


ABLATION_INTRO = """\
## Held-out operators live: trained, untrained, single agent, random (issue 3)

Issue 3's comparison on the H200 (device tool, commit 5fae39a, {n} problems): `cuda-agent bench
--device cuda --strategies {columns}`, budget 40, one seed, each strategy on the problem's whole
template space (runs side by side, measurements one at a time). Every agents' strategy ranks
its proposals with the analytic model's prior (weight 100) and fine-tunes online; they differ in
the policy: **marl** the four-agent fold policy that never trained on the problem
(`h200-replay-1202p-fold{{0,1}}`, trained on replay of the other half of the recorded sweeps,
with the prior), **marl_untrained** the same agents with fresh weights, **marl_single** one agent
over every slot trained the same way on the same folds (`h200-replay-1202p-single-fold{{0,1}}`).
Held out: operators and shapes the policy never trained on, from families it did. The problems
were drawn by rule, not by how the agents had done: runs 1 to 3 are
`gpu_suite.py --bench-problems sample:2:1202:K:3` (two problems drawn at random, seed 1202,
from each of the 12 name families of the recorded problems, multi-kernel programs left out);
run 4 one more per family with seed 1203 from the rest, cut by the call's deadline after {cut}
(the session's GPU time ran out). Cell of the per-problem table below: measurements until the
best so far is within 95 % of the run's best (any strategy, or the recorded sweep's best
configurations measured again); 41: not reached in 40. A 1 means the policy's first proposal
(its most probable configuration under the prior) was already within 5 %. Runs: {sets},
merged into `{merged}`.

Medians over the {n} problems: {medians}. Issue 3's target (the trained agents at most 5, and at
least 3x fewer than random search): {target}. Sign tests of the trained agents against each
(problems where they needed fewer, more; two-sided p over the untied): {signs}. Training
helps live (against the same agents untrained); the split into four agents does not show
(the single agent ties it), as in the replay ablations. One seed per problem: the medians of
1 say the trained policies' first proposals are usually right, not how much a second seed
would vary. These runs are not in the whole-suite union above, which compares every peer
(they ran Optuna alone).
"""


def peers() -> tuple[str, ...]:
    """Optuna and Kernel Tuner's strategies, the peers the agents are weighed against: the
    same names as `cuda_agent.bench.PEERS`, spelled from the search registry because importing
    `bench` imports torch, which reading results files does not need."""
    from cuda_agent.search import KERNEL_TUNER

    return ("optuna",) + KERNEL_TUNER


def ablation_text(merged: dict, cut: int) -> str:
    """The held-out comparison's text: each strategy's median measurements to 95 %, the
    issue's target, sign tests of the trained agents against the others (the per-problem
    table is the merged report's)."""
    from benchmarks.agents_ab import sign_test

    cols = [c for c in ABLATION_COLUMNS if c in merged["summary"]]
    per = {p: {c: merged["summary"][c]["evals_to_95"][p] for c in cols}
           for p in sorted(merged["problems"])
           if all(p in merged["summary"][c]["evals_to_95"] for c in cols)}
    med = {c: statistics.median(v[c] for v in per.values()) for c in cols}
    ratio = med["random"] / med["marl"]
    target = (f"median {med['marl']:g}, {ratio:.0f}x fewer than random search's {med['random']:g}"
              f" ({'met' if med['marl'] <= 5 and ratio >= 3 else 'not met'})")
    signs = []
    for c in cols[1:]:
        t = sign_test(per, "marl", c)
        pv = "-" if t["sign_test_p"] is None else f"{t['sign_test_p']:.2g}"
        signs.append(f"against {c} {t['fewer']}/{t['more']} (p {pv})")
    return ABLATION_INTRO.format(
        n=len(per), columns=",".join(cols), cut=cut,
        medians=", ".join(f"{c} {m:g}" for c, m in med.items()), target=target,
        signs="; ".join(signs), merged=ABLATION_MERGED.relative_to(ROOT),
        sets=", ".join(f"`benchmarks/results/{s}/`" for s in ABLATION_SETS))


def sample_rows(merged: dict) -> list[tuple[str, dict[str, int]]]:
    """A draw's problems the policy never trained on, each with the agents' and the peers'
    measurements to 95 %."""
    return [(p, {s: r["summary"][s]["evals_to_95"][p] for s in ("marl",) + peers()
                 if p in r["summary"].get(s, {}).get("evals_to_95", {})})
            for p, r in sorted(never_trained(latest_runs([merged])).items())]


def sample_stats(rows: list[tuple[str, dict[str, int]]]) -> dict:
    """Medians over `rows` (a problem may come twice), the best peer by median, the peers'
    per-problem minimum's median and the sign test of the agents against the best peer."""
    from benchmarks.agents_ab import sign_test

    strategies = [s for s in rows[0][1] if all(s in c for _, c in rows)]
    med = {s: statistics.median(c[s] for _, c in rows) for s in strategies}
    best_peer = min((s for s in med if s != "marl"), key=med.__getitem__)
    oracle = statistics.median(min(v for s, v in c.items() if s != "marl") for _, c in rows)
    sign = sign_test({str(i): c for i, (_, c) in enumerate(rows)}, "marl", best_peer)
    return {"runs": len(rows), "medians": med, "best_peer": best_peer, "oracle": oracle,
            "sign": sign, "ratio": med[best_peer] / med["marl"],
            "met": med[best_peer] >= 3 * med["marl"]}


def sample_comparison(rows: list[tuple[str, dict[str, int]]]) -> str:
    """Medians over `rows` (a problem may come twice), the agents against the best peer by
    median and against the peers' per-problem minimum, the sign test against the best peer."""
    st = sample_stats(rows)
    med, best_peer, oracle, sign = st["medians"], st["best_peer"], st["oracle"], st["sign"]
    p = "-" if sign["sign_test_p"] is None else f"{sign['sign_test_p']:.2g}"
    met = "met" if st["met"] else "not met"
    return (f"medians {', '.join(f'{s} {m:g}' for s, m in med.items())}; the agents against "
            f"the best of Optuna and Kernel Tuner's strategies ({best_peer}): "
            f"**{st['ratio']:.1f}x fewer** (target 3x: {met}); against the "
            f"fewest any peer needed on each problem (median {oracle:g}): "
            f"{oracle / med['marl']:.1f}x fewer; against {best_peer} fewer on {sign['fewer']}, "
            f"more on {sign['more']}, tied on {sign['tied']} (sign test, two-sided p {p}).")


def sample_text(draws: list[tuple[str, dict]]) -> str:
    """The rule-drawn samples' text; `draws`: each draw's description and merged report."""
    per_draw = [sample_rows(m) for _, m in draws]
    lines = []
    for i, ((what, merged), rows) in enumerate(zip(draws, per_draw), 1):
        unfinished = sorted(merged.get("skipped", {}))
        cut = f"; not finished: {', '.join(unfinished)}" if unfinished else ""
        lines.append(f"Draw {i}, {what} ({len(rows)} problems{cut}): "
                     + sample_comparison(rows))
    pooled = [r for rows in per_draw for r in rows]
    names = [p for p, _ in pooled]
    twice = sorted({p for p in names if names.count(p) > 1})
    kt = [s for s in peers() if s.startswith("kt:")]
    same = [f"{a} and {b}" for i, a in enumerate(kt) for b in kt[i + 1:]
            if all(c.get(a) == c.get(b) for _, c in per_draw[0])]
    ties = ""
    if same:  # Kernel Tuner's genetic algorithm starts from the random sampler's draws
        ties = (f"In the first draw {'; '.join(same)} needed the same count on every problem: "
                "under one seed Kernel Tuner's genetic algorithm begins with the random "
                "sampler's draws. ")
    return SAMPLE_INTRO.format(
        draws="\n\n".join(lines), n=len(pooled), ties=ties,
        dups=f"; {', '.join(twice)} drawn in both, counted once per run" if twice else "",
        pooled=sample_comparison(pooled),
        sets=", ".join(f"`benchmarks/results/{s}/`" for s, _, _ in SAMPLE_DRAWS),
        merged=", ".join(f"`{m.relative_to(ROOT)}`" for _, m, _ in SAMPLE_DRAWS))


def merge_set(sets: tuple[str, ...], merged: Path) -> dict:
    """Rebuild one merged report from its sets' runs; its bench.json."""
    runs = []
    for name in sets:
        # a set is either one run per problem folder or one run per call (runN/)
        runs += sorted(p.parent for p in (RESULTS / name).glob("*/bench.json"))
    cli = [sys.executable, "-c", "from cuda_agent.cli import main; main()"]
    subprocess.run(cli + ["report", *map(str, runs), "--out", str(merged)], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((merged / "bench.json").read_text())


def latest_runs(results: list[dict]) -> dict[str, dict]:
    """Each problem's latest run among `results` (later results override)."""
    return {p: r for r in results for p in r["problems"]}


def never_trained(latest: dict[str, dict]) -> dict[str, dict]:
    """The problems (with their runs) whose run's policy never trained on them and where the
    agents were counted."""
    return {p: r for p, r in latest.items() if p not in set(r.get("trained_on", []))
            and p in r["summary"].get("marl", {}).get("evals_to_95", {})}


def evals_medians(latest: dict[str, dict]) -> tuple[dict, dict[str, float], str]:
    """The problems whose run's policy never trained on them, the median measurements to 95 %
    of each strategy on those, and the best peer (fewest of Optuna and Kernel Tuner)."""
    # the agents' count where the run's policy never trained on the problem; the peers' on
    # those same problems
    unseen = never_trained(latest)

    def counts(strategy: str) -> list[int]:
        return [r["summary"][strategy]["evals_to_95"][p] for p, r in unseen.items()
                if p in r["summary"].get(strategy, {}).get("evals_to_95", {})]

    med = {s: statistics.median(c) for s in ("marl",) + peers() if (c := counts(s))}
    return unseen, med, min((s for s in med if s != "marl"), key=med.__getitem__)


def union_facts(results: list[dict], total: int, suite: list[Path],
                rebench: tuple[dict, ...] = ()) -> dict:
    """The whole-suite figures over every merge (a problem by its latest run): the best of run
    against torch.compile, and the measurements each strategy needed. `rebench`: results that
    benched problems again chosen for the agents' counts; the counts are then given without
    them as well (`rebench` in the result, else None)."""
    from cuda_agent import metrics

    latest = latest_runs(results)
    figure, settings = compile_figure({p: r["problems"][p] for p, r in latest.items()})
    facts = {p: {**r["problems"][p], "compile_ms": figure(r["problems"][p])}
             for p, r in latest.items()
             if r["problems"][p].get("best_ms") and figure(r["problems"][p])}
    found = [f["best_ms"] for f in facts.values()]
    comp = [f["compile_ms"] for f in facts.values()]
    slower = sorted(p for p, f in facts.items() if not f["best_ms"] < f["compile_ms"])
    unseen, med, best_peer = evals_medians(latest)
    family: dict[str, list[str]] = {}
    for p, r in unseen.items():
        family.setdefault(r["problems"][p].get("family", "?"), []).append(p)

    def fam_median(strategy: str, probs: list[str]) -> float:
        return statistics.median(unseen[p]["summary"][strategy]["evals_to_95"][p] for p in probs)

    families = [(f, fam_median("marl", ps), fam_median(best_peer, ps), len(ps))
                for f, ps in sorted(family.items())]
    # runs before commit 3eb0d7f left the multi-kernel programs out (Kernel Tuner tunes one
    # kernel's parameters); later runs give it a program's stages one at a time
    multi = {p for r in results for p, why in r.get("skipped", {}).items()
             if why.startswith("a multi-kernel program")} - set(latest)
    missing = sorted(p.stem for p in suite if p.stem not in latest and p.stem not in multi)
    again = None
    if rebench:
        before = latest_runs([r for r in results if all(r is not x for x in rebench)])
        _, bmed, bpeer = evals_medians(before)
        again_set = {p for r in rebench for p in r["problems"]}
        again = {"problems": len(again_set & set(before)), "marl": bmed["marl"],
                 "best_peer": bpeer, "best_peer_median": bmed[bpeer],
                 "ratio": bmed[bpeer] / bmed["marl"]}
    return {"problems": len(facts), "total": total, "faster": len(facts) - len(slower),
            "fast_1": metrics.fast_p(found, comp, 1.0),
            "geomean": metrics.geomean_speedup(found, comp), "slower": slower,
            "close": sum(facts[p]["best_ms"] < 1.01 * facts[p]["compile_ms"] for p in slower),
            "missing": missing, "multi_kernel": sorted(multi), "unseen": len(unseen),
            "medians": med, "best_peer": best_peer, "ratio": med[best_peer] / med["marl"],
            "families": families, "rebench": again, "compile_settings": settings,
            "strategies": strategy_speeds(latest, figure),
            "all_medians": unseen_medians(unseen)}


def unseen_medians(unseen: dict[str, dict]) -> dict[str, float]:
    """Every strategy's median measurements to 95 % over the problems `unseen` by the agents'
    policy (the peers' and the baselines' alike), where it ran."""
    counts: dict[str, list[int]] = {}
    for p, r in unseen.items():
        for strategy, facts in r["summary"].items():
            if p in facts.get("evals_to_95", {}):
                counts.setdefault(strategy, []).append(facts["evals_to_95"][p])
    return {s: statistics.median(c) for s, c in counts.items()}


def strategy_speeds(latest: dict[str, dict], figure: Any) -> dict[str, dict]:
    """Each strategy's fastest verified kernel per problem (the problem's latest run) against
    torch.compile's `figure` of that run: problems searched, fast_1 and the geomean speedup
    over them. The agents count only where their run's policy never trained on the problem,
    as in `cuda-agent report`."""
    from cuda_agent import metrics
    from cuda_agent.search.base import is_agents

    best: dict[str, dict[str, float | None]] = {}
    for p, r in latest.items():
        base = figure(r["problems"][p])
        if not base:
            continue
        for run in r.get("runs", []):
            if run["problem"] != p or (is_agents(run["strategy"])
                                       and p in r.get("trained_on", [])):
                continue
            times = [t for t in run.get("times") or [] if isinstance(t, (int, float))]
            mine = best.setdefault(run["strategy"], {})
            old = mine.get(p)
            mine[p] = min([t for t in (old, *times) if t is not None], default=None)
    out = {}
    for strategy, per in best.items():
        problems = sorted(per)
        times = [per[p] for p in problems]
        base = [figure(latest[p]["problems"][p]) for p in problems]
        out[strategy] = {"problems": len(problems), "fast_1": metrics.fast_p(times, base, 1.0),
                         "geomean": metrics.geomean_speedup(times, base)}
    return out


def union_section(md: Path, results: list[dict], total: int, suite: list[Path],
                  rebench: tuple[dict, ...] = ()) -> int:
    """The whole-suite sentences of `union_facts`, written as the section `bench-live-union`
    of `md`; the number of problems compared."""
    f = union_facts(results, total, suite, rebench)
    missing = list(f["missing"])
    if f["multi_kernel"]:
        missing.append(("and " if missing else "") + "the multi-kernel programs, which are not "
                       f"compared ({', '.join(f['multi_kernel'])})")
    again = ""
    if f["rebench"]:
        b = f["rebench"]
        again = REBENCH.format(k=b["problems"], before_marl=b["marl"], before_peer=b["best_peer"],
                               before_peer_med=b["best_peer_median"], before_ratio=b["ratio"])
    families = ", ".join(f"{fam} {m:g} against {pm:g} ({n})" for fam, m, pm, n in f["families"])
    text = UNION.format(n=f["problems"], total=total, faster=f["faster"], fast1=f["fast_1"],
                        geo=f["geomean"], slower=", ".join(f["slower"]) or "none",
                        close=f["close"], missing=", ".join(missing) or "none",
                        unseen=f["unseen"],
                        medians=", ".join(f"{s} {m:g}" for s, m in f["medians"].items()),
                        best_peer=f["best_peer"], ratio=f["ratio"], families=families,
                        rebench=again, settings=f["compile_settings"])
    write_section(md, "<!-- bench-live-union:begin -->", "<!-- bench-live-union:end -->",
                  text.splitlines())
    return f["problems"]


def compile_figure(problems: dict[str, dict]) -> tuple[Any, str]:
    """Which torch.compile figure a comparison over `problems` reads, and how the text names
    it: at PyTorch's defaults (as a user's process runs it: the headline) where every problem
    has one; else the accuracy-matched one for all of them (a run from before the defaults were
    timed has only that: strict fp32, cuDNN's TF32 off)."""
    from cuda_agent.runner.baselines import headline_ms, matched_ms

    if problems and all(headline_ms(f) for f in problems.values() if f.get("best_ms")):
        return headline_ms, "at PyTorch's defaults (as a user's process runs it)"
    return matched_ms, ("under the kernels' strict fp32 contract (cuDNN's TF32 off; runs "
                        "from before torch's defaults were timed have only this figure: a "
                        "user's process, with TF32 on in convolutions, can be faster)")


def generations_table(old: dict, new: dict, labels: tuple[str, ...] = (
        "policy generations", "first policies", "retrained", "first run", "this run"),
        ) -> list[str]:
    """The problems benched in both runs (two policy generations, or two settings of the
    agents): the agents' and the best peer's measurements to 95 % in each run (each run has its
    own optimum and its own peers' searches, so the peers' columns show how much of a change is
    the run's own noise). `labels`: what the runs are, the agents' column name in the old and
    the new run, then the peer's."""
    peer = new["versus_peers"]["best_peer"]
    both = sorted(set(old["problems"]) & set(new["problems"]))
    if not both:
        return []

    def counts(r: dict, strategy: str) -> list[int]:
        return [r["summary"][strategy]["evals_to_95"][p] for p in both]

    cols = [counts(old, "marl"), counts(new, "marl"), counts(old, peer), counts(new, peer)]
    what, first, second, run1, run2 = labels
    rows = ["", f"The {len(both)} problems benched with both {what} (measurements to "
            f"95 % of each run's best; {peer}, the best peer here, searched again in each run):", "",
            f"| problem | marl, {first} | marl, {second} | {peer}, {run1} | "
            f"{peer}, {run2} |", "|---|---|---|---|---|"]
    rows += [f"| {p} | " + " | ".join(str(c[i]) for c in cols) + " |"
             for i, p in enumerate(both)]
    rows.append("| median | " + " | ".join(f"{statistics.median(c):g}" for c in cols) + " |")
    return rows


def ratio_range(problems: dict, key: str) -> str:
    r = sorted(f[key] / f["compile_ms"] for f in problems.values()
               if f.get(key) and f.get("compile_ms"))
    if not r:
        return "not measured"
    return f"median {r[len(r) // 2]:.2f}x the default's time over {len(r)} problems, " \
           f"{r[0]:.2f}x to {r[-1]:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    suite = list((ROOT / "benchmarks" / "problems").glob("*.py"))
    merged = merge_set(SETS, MERGED)
    problems = merged["problems"]
    intro = INTRO.format(merged=MERGED.relative_to(ROOT),
                         sets=", ".join(f"`benchmarks/results/{s}/`" for s in SETS),
                         done=sum(1 for p in suite if p.stem in problems), total=len(suite),
                         max_ratio=ratio_range(problems, "compile_max_ms"),
                         nocg_ratio=ratio_range(problems, "compile_max_nocg_ms"))
    bench_section(args.md, "bench-live", intro, MERGED, ROOT)
    folds = merge_set(FOLD_SETS, FOLD_MERGED)
    intro = FOLDS_INTRO.format(merged=FOLD_MERGED.relative_to(ROOT),
                               sets=", ".join(f"`benchmarks/results/{s}/`" for s in FOLD_SETS),
                               done=len(folds["problems"]))
    bench_section(args.md, "bench-live-folds", intro, FOLD_MERGED, ROOT)
    retrained = merge_set(RETRAINED_SETS, RETRAINED_MERGED)
    intro = RETRAINED_INTRO.format(
        merged=RETRAINED_MERGED.relative_to(ROOT), done=len(retrained["problems"]),
        sets=", ".join(f"`benchmarks/results/{s}/`" for s in RETRAINED_SETS))
    intro += "\n".join(generations_table(folds, retrained)) + "\n"
    # the A/B run benched the problems of the s14 set's first call again
    s14 = json.loads((RESULTS / RETRAINED_SETS[0] / "run1" / "bench.json").read_text())
    local = json.loads((LOCAL_AB / "bench.json").read_text())
    intro += LOCAL_AB_TEXT.format(run=LOCAL_AB.relative_to(ROOT)) + "\n".join(
        generations_table(s14, local, ("settings", "without", "local 0.5", "s14 run",
                                       "A/B run"))) + "\n"
    bench_section(args.md, "bench-live-retrained", intro, RETRAINED_MERGED, ROOT)
    prior = merge_set(PRIOR_SETS, PRIOR_MERGED)
    intro = PRIOR_INTRO.format(
        merged=PRIOR_MERGED.relative_to(ROOT),
        sets=", ".join(f"`benchmarks/results/{s}/`" for s in PRIOR_SETS))
    before = {"problems": {}, "summary": {}}  # each problem's latest run before the prior
    for p, r in latest_runs([folds, retrained]).items():
        before["problems"][p] = r["problems"][p]
        for strategy, facts in r["summary"].items():
            if p in facts.get("evals_to_95", {}):
                before["summary"].setdefault(strategy, {"evals_to_95": {}})[
                    "evals_to_95"][p] = facts["evals_to_95"][p]
    intro += "\n".join(generations_table(before, prior, (
        "settings", "before the prior", "with the prior", "earlier run", "this run"))) + "\n"
    bench_section(args.md, "bench-live-prior", intro, PRIOR_MERGED, ROOT)
    programs = merge_set(PROGRAM_SETS, PROGRAM_MERGED)
    intro = PROGRAMS_INTRO.format(
        merged=PROGRAM_MERGED.relative_to(ROOT),
        sets=", ".join(f"`benchmarks/results/{s}/`" for s in PROGRAM_SETS))
    bench_section(args.md, "bench-live-programs", intro, PROGRAM_MERGED, ROOT)
    handoff = merge_set(HANDOFF_SETS, HANDOFF_MERGED)
    intro = HANDOFF_INTRO.format(
        merged=HANDOFF_MERGED.relative_to(ROOT),
        sets=", ".join(f"`benchmarks/results/{s}/`" for s in HANDOFF_SETS))
    intro += "\n".join(generations_table(programs, handoff, (
        "stage settings", "even split", "hand-off", "even-split run", "this run"))) + "\n"
    bench_section(args.md, "bench-live-handoff", intro, HANDOFF_MERGED, ROOT)
    tcmodel = merge_set(TC_SETS, TC_MERGED)
    intro = TC_INTRO.format(merged=TC_MERGED.relative_to(ROOT),
                            sets=", ".join(f"`benchmarks/results/{s}/`" for s in TC_SETS))
    before = latest_runs([merged, folds, retrained, prior, programs, handoff])
    old = {"problems": {p: before[p]["problems"][p] for p in tcmodel["problems"] if p in before},
           "summary": {k: {"evals_to_95": {p: before[p]["summary"][k]["evals_to_95"][p]
                                           for p in tcmodel["problems"] if p in before}}
                       for k in tcmodel["summary"]}}
    intro += "\n".join(generations_table(old, tcmodel, (
        "models", "earlier model", "refitted model", "earlier run", "this run"))) + "\n"
    bench_section(args.md, "bench-live-tcmodel", intro, TC_MERGED, ROOT)
    ablations = merge_set(ABLATION_SETS, ABLATION_MERGED)
    run4 = json.loads((RESULTS / ABLATION_SETS[0] / "run4" / "bench.json").read_text())
    bench_section(args.md, "bench-live-ablations", ablation_text(ablations, len(run4["problems"])),
                  ABLATION_MERGED, ROOT)
    samples = [merge_set((name,), path) for name, path, _ in SAMPLE_DRAWS]
    bench_section(args.md, "bench-live-sample",
                  sample_text([(what, m) for (_, _, what), m in zip(SAMPLE_DRAWS, samples)]),
                  SAMPLE_DRAWS[0][1], ROOT)
    name, path, what = SAMPLE_DRAWS[1]
    bench_section(args.md, "bench-live-sample2", SAMPLE2_INTRO.format(
        what=what, sets=f"`benchmarks/results/{name}/`", merged=path.relative_to(ROOT)),
        path, ROOT)
    # a problem benched again counts by its latest run (the sample's draws were not chosen
    # for the agents' counts: they stay in the union without the reruns)
    by_name = dict(zip(UNION_MERGES, [merged, folds, retrained, prior, programs, handoff,
                                      tcmodel, *samples]))
    n = union_section(args.md, [by_name[name] for name in UNION_MERGES], len(suite), suite,
                      rebench=tuple(by_name[name] for name in RERUN_MERGES))
    results = list(by_name.values())
    print(f"{args.md}: live bench sections, "
          f"{' + '.join(str(len(r['problems'])) for r in results)} problems; {n} together")


if __name__ == "__main__":
    main()
