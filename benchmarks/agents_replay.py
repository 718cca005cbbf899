"""The agents on replay of the recorded H200 sweeps: training, held-out comparison, ablations.

    python -m benchmarks.agents_replay [--iterations 40] [--seeds 5]

Trains the multi-agent policy on the example suite minus eight held-out operators (two per
family: new operators and shapes of known families), plus variants for the ablations (single
agent; no auxiliary reward; no targeted exploration; raw-time reward instead of rank), then
measures, for every held-out operator and seed, how many measurements each contender needs to
reach 95 % of the best recorded kernel. Replay serves real GPU measurements: CPU only.
Writes benchmarks/results/<date>-agents-replay.json and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.sections import write_section

from cuda_agent.agents import checkpoint
from cuda_agent.agents.evaluate import Contender, compare
from cuda_agent.agents.reward import RewardSettings
from cuda_agent.agents.train import TrainSettings, Trainer, write_curves
from cuda_agent.runner.replay import ReplayDevice

ROOT = Path(__file__).resolve().parents[1]

HOLDOUT = ("elementwise_swiglu", "elementwise_broadcast_odd", "reduce_argmin_middim",
           "reduce_sum_size1dim_odd", "softmax_log_softmax", "softmax_tinyrows_odd", "norm_l2",
           "norm_layernorm_odd", "gemm_transposed_a", "pool_max2d", "scan_cumsum_reverse",
           "normstat_instancenorm1d")
DATA = ROOT / "benchmarks" / "data"
MARK_BEGIN, MARK_END = "<!-- agents-replay:begin -->", "<!-- agents-replay:end -->"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--train-seed", type=int, default=0)
    ap.add_argument("--ranked", type=int, default=3,
                    help="the trained agents' first N proposals are their most probable "
                    "configurations (a contender each way: ranked and purely sampled)")
    ap.add_argument("--variants", default="all",
                    help="comma-separated training variants (multi is always trained); "
                    "'all': every ablation, 'none': multi only")
    ap.add_argument("--extra-train-seeds", default="1",
                    help="comma-separated further training seeds of the multi-agent policy, "
                    "each compared frozen: how much the figures depend on the training run")
    ap.add_argument("--work", type=Path, default=Path("/tmp/agents-replay"))
    args = ap.parse_args()
    device = ReplayDevice(root=DATA)
    base = TrainSettings.of(suite=str(ROOT / "benchmarks/problems"), holdout=HOLDOUT,
                         device="replay", replay_root=str(DATA), iterations=args.iterations,
                         episodes=4, steps=4, batch=8, seed=args.train_seed)
    variants = {
        "multi": base,
        "single": replace(base, agents="single"),
        "multi, no aux reward": replace(base, reward=RewardSettings(aux_weight=0.0)),
        "multi, no targeted exploration": replace(base, explore="none"),
        "multi, raw-time reward": replace(base, reward=RewardSettings(mode="time")),
    }
    if args.variants != "all":
        keep = {"multi"} | {v.strip() for v in args.variants.split(",") if v.strip() != "none"}
        unknown = keep - set(variants)
        if unknown:
            ap.error(f"unknown variants {sorted(unknown)}; known: {list(variants)}")
        variants = {k: v for k, v in variants.items() if k in keep}
    extra_seeds = [int(x) for x in args.extra_train_seeds.split(",") if x.strip()]
    for seed in extra_seeds:
        variants[f"multi, training seed {seed}"] = replace(base, run=replace(base.run, seed=seed))
    ckpts, train_rows = {}, []
    for name, s in variants.items():
        out = args.work / name.replace(" ", "_").replace(",", "")
        s = replace(s, out=str(out))
        t0 = time.time()
        tr = Trainer(s, device=device)
        try:
            curves = tr.train()
        finally:
            tr.close()
        write_curves(curves, out, f"train on replay (H200 sweeps): {name}")
        ckpts[name] = str(out / "policy.pt")
        train_rows.append({"variant": name, "iterations": len(curves),
                           "measurements": curves[-1]["measurements"],
                           "final_mean_reward": curves[-1]["mean_reward"],
                           "seconds": time.time() - t0})
        print(f"trained {name}: {curves[-1]['measurements']} measurements in "
              f"{time.time() - t0:.0f} s", flush=True)
    # the headline contender first: the trained agents as `tune --strategy marl` runs them
    # (ranked first proposals, then sampling, fine-tuned online); every other is an ablation
    r = args.ranked
    contenders = [Contender("multi (trained, fine-tuned online)", "marl", ckpts["multi"],
                            ranked=r),
                  Contender("multi (trained, frozen)", "marl", ckpts["multi"], online=False,
                            ranked=r),
                  Contender("multi (trained, frozen, sampled only)", "marl", ckpts["multi"],
                            online=False),
                  Contender("multi (untrained)", "marl"),
                  Contender("random", "random")]
    if "single" in ckpts:
        contenders.append(Contender("single (trained, frozen)", "marl", ckpts["single"],
                                    online=False, ranked=r))
    for name in ("multi, no aux reward", "multi, no targeted exploration",
                 "multi, raw-time reward") + tuple(f"multi, training seed {x}"
                                                    for x in extra_seeds):
        if name in ckpts:
            contenders.append(Contender(f"{name} (frozen)", "marl", ckpts[name], online=False,
                                        ranked=r))
    res = compare([ROOT / "benchmarks/problems" / f"{h}.py" for h in HOLDOUT], contenders,
                  device, seeds=args.seeds)
    summary = {c.name: res.median(c.name) for c in contenders}
    date = time.strftime("%Y-%m-%d")
    # what training really used (problems whose sweeps replay; not programs, not stale sweeps)
    trained_on = len(checkpoint.load(ckpts["multi"])["meta"]["trained_on"])
    out = {"date": date, "data": "benchmarks/data/nvidia-h200 (random samples of 32 to 100 "
           "configurations per problem, measured on an NVIDIA H200)", "holdout": HOLDOUT,
           "trained_on": trained_on, "iterations": args.iterations,
           "train_seed": args.train_seed, "ranked": args.ranked,
           "variants": list(variants),
           "seeds": args.seeds, "train": train_rows, "rows": res.rows,
           "median_of_medians": summary}
    path = ROOT / "benchmarks" / "results" / f"{date}-agents-replay.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    write_markdown(out)
    for k, v in summary.items():
        print(f"{k:45s} {v}")
    print(f"wrote {path}")


def seeds_text(med: dict) -> str:
    """The same training with other seeds: how much the headline depends on the run."""
    other = {k: v for k, v in med.items() if k.startswith("multi, training seed")}
    if not other:
        return ""
    return ("Trained again with other seeds (frozen, same decoding): " +
            ", ".join(f"{k.split(', ')[1].split(' (')[0]} {v:g}" for k, v in other.items()) +
            ": the transfer to a held-out operator depends on the training run, and the "
            "margin over random search with it. ")


def losses_text(rows: list[dict], problems: list[str], contender: str) -> str:
    cell = {(r["problem"], r["contender"]): r["median_evals_to_95"] for r in rows}
    lost = [p for p in problems if cell.get((p, contender), 0) > cell.get((p, "random"), 0)]
    if not lost:
        return "Per operator, the trained agents never need more measurements than random."
    return ("Per operator, the trained agents need more measurements than random search on "
            + ", ".join(lost) + ": shapes whose best configuration is unlike the training "
            "operators' (the policy is confident there, and wrong).")


def write_markdown(res: dict) -> None:
    rows = res["rows"]
    names = list(res["median_of_medians"])
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    lines = [MARK_BEGIN, "## The agents on replay of the H200 sweeps", "",
             f"Run {res['date']} on a CPU by `benchmarks/agents_replay.py`, replaying "
             f"{res['data']}. Policies trained on the other {res.get('trained_on', 18)} recorded "
             "problems of the suite; held out: two operators per family of issue 2 and one per "
             "family of issue 4. Each cell: median over "
             f"{res['seeds']} seeds of the measurements needed to reach 95 % of the best "
             "recorded kernel (every strategy searches the same recorded configurations; a "
             "run that never gets there counts as the budget + 1).", "",
             "| contender | " + " | ".join(problems) + " | median |",
             "|---|" + "---|" * (len(problems) + 1)]
    for n in names:
        cells = []
        for p in problems:
            row = next(r for r in rows if r["problem"] == p and r["contender"] == n)
            cells.append(f"{row['median_evals_to_95']:g}")
        lines.append(f"| {n} | " + " | ".join(cells) +
                     f" | **{res['median_of_medians'][n]:g}** |")
    med = res["median_of_medians"]
    trained = med.get("multi (trained, fine-tuned online)")
    frozen = med.get("multi (trained, frozen)")
    sampled = med.get("multi (trained, frozen, sampled only)")
    rnd, untrained = med.get("random"), med.get("multi (untrained)")
    best = min(v for v in (trained, frozen) if v is not None)
    met = best <= 5 and best * 3 <= rnd
    lines += ["", f"Policies trained for {res.get('iterations')} iterations (training seed "
              f"{res.get('train_seed', 0)}; each variant trained once, so differences of a few "
              "measurements between variants are within noise). The agents score every "
              "configuration of the space with all their slot heads and draw from that "
              "distribution conditioned on the configurations available (`agents/decode.py`); "
              f"the trained contenders' first {res.get('ranked', 0)} proposals are their most "
              "probable configurations, then they sample. The first measurement of every run, "
              "whatever the contender, is the template's untuned default and is counted. "
              f"Median over the held-out operators: trained {trained:g} (fine-tuned online) and "
              f"{frozen:g} (frozen)"
              + (f", {sampled:g} frozen without ranked first proposals" if sampled is not None
                 else "")
              + f"; untrained {untrained:g}; random search {rnd:g}. "
              + ("Issue 3's target (median at most 5 measurements and at least three times "
                 "fewer than random search) is met "
                 f"({rnd / best:.1f}x fewer). " if met else
                 "Issue 3's target (median at most 5 measurements, three times fewer than "
                 "random) is not met. ")
              + seeds_text(med)
              + losses_text(rows, problems, "multi (trained, frozen)"), "",
              "Training (replay, CPU):", "",
              "| variant | iterations | measurements | final mean reward | seconds |",
              "|---|---|---|---|---|"]
    for t in res["train"]:
        lines.append(f"| {t['variant']} | {t['iterations']} | {t['measurements']} | "
                     f"{t['final_mean_reward']:+.3f} | {t['seconds']:.0f} |")
    lines += ["", MARK_END]
    write_section(ROOT / "BENCHMARKS.md", MARK_BEGIN, MARK_END, lines)


if __name__ == "__main__":
    main()
