"""Cross-fitted policies: the recorded problems split into folds, one multi-agent policy trained
per fold without that fold's problems, so that every problem has a policy that never saw it.

    python -m benchmarks.fold_policies [--folds 2] [--iterations 100] [--agents single]

`cuda-agent bench --policy fold0.pt,fold1.pt` then tunes each problem with the policy that
never trained on it, and the agents' rows count every problem (a single policy trained on most
of the suite leaves few problems it never saw to be compared on). The split is by name within
each family prefix (elementwise_, reduce_, ...), alternating, so every fold holds some of each
family. Same training settings as benchmarks/policies/h200-replay-multi.pt (replayed H200
sweeps, training seed 0). Writes benchmarks/policies/<name>-fold<k>.pt, or with `--agents single`
(the single-agent ablation over the same slots, same folds and settings)
benchmarks/policies/<name>-single-fold<k>.pt; --name is h200-replay unless given (retrained on
other sweeps: another name, e.g. h200-replay-1201, since bench results name their checkpoint).
`--prior-weight 100` trains with the analytic model's prior in the proposals, as tuning runs
(h200-replay-1202p). `--ablation` trains without one part of the method (issue 3's
ablations: no auxiliary reward, no targeted exploration, the raw time as reward instead of the
rank within the batch); name it apart, e.g. --name h200-replay-1202p-noaux.
`--sim-constants benchmarks/sim_folds/h200-fold{k}.json` trains fold k's prior with the model's
constants fitted without fold k (`benchmarks/sim_fold_fit.py`), so neither the policy nor the
model its episodes propose under has seen the problems it is evaluated on (h200-replay-1204f;
issue 34). `{k}` is replaced by the fold's number. `--all` trains one policy on every recorded
problem instead (what `tune` ships: `--all --prior-weight 100 --name h200-replay-prior` writes
benchmarks/policies/h200-replay-prior.pt, copied to cuda_agent/policies/; its prior uses the
shipped model, as `tune` does).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from itertools import groupby
from pathlib import Path

from benchmarks.agents_replay import DATA
from cuda_agent.agents import checkpoint
from cuda_agent.agents.reward import RewardSettings
from cuda_agent.agents.train import TrainSettings, Trainer
from cuda_agent.runner.replay import ReplayDevice

ROOT = Path(__file__).resolve().parents[1]


def recorded_problems() -> list[str]:
    """The suite's problems with a recorded H200 sweep (what replay training can use)."""
    sweeps = {p.name.removesuffix(".json.gz") for p in (DATA / "nvidia-h200").glob("*.json.gz")}
    return sorted(p.stem for p in (ROOT / "benchmarks/problems").glob("*.py") if p.stem in sweeps)


def folds(names: list[str], k: int) -> list[list[str]]:
    """Names split into k folds, alternating within each family prefix (the name up to its
    first underscore), so each fold has a share of every family."""
    out: list[list[str]] = [[] for _ in range(k)]
    turn = 0
    for _, group in groupby(sorted(names), key=lambda n: n.split("_", 1)[0]):
        for name in group:
            out[turn % k].append(name)
            turn += 1
    return out


ABLATIONS = {
    "none": {},
    "no_aux": {"reward": RewardSettings(aux_weight=0.0)},
    "no_explore": {"explore": "none"},
    "time_reward": {"reward": RewardSettings(mode="time")},
}
"""training settings of each ablation (as `agents_replay.py`'s variants)"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--agents", choices=("multi", "single"), default="multi")
    ap.add_argument("--work", type=Path, default=Path("/tmp/fold-policies"))
    ap.add_argument("--name", default="h200-replay",
                    help="file name stem: a policy retrained on other sweeps gets a new name, "
                         "so committed results keep naming the checkpoint they ran with")
    ap.add_argument("--prior-weight", type=float, default=0.0,
                    help="train with the analytic model's prior on the proposals, as tuning "
                         "uses it (`TrainSettings.prior_weight`)")
    ap.add_argument("--ablation", choices=tuple(ABLATIONS), default="none",
                    help="train without one part of the method (name the result apart)")
    ap.add_argument("--sim-constants", default=None,
                    help="the model's constants per fold for the prior, '{k}' standing for the "
                         "fold (benchmarks/sim_folds/h200-fold{k}.json): each fitted without "
                         "the fold's problems")
    ap.add_argument("--all", action="store_true",
                    help="one policy trained on every recorded problem (no fold held out)")
    ap.add_argument("--fold", type=int, default=None,
                    help="train only this fold (folds are independent: one process each)")
    args = ap.parse_args()

    def tag(i: int) -> str:
        return "all" if args.all else f"fold{i}"

    device = ReplayDevice(root=DATA)
    splits = [[]] if args.all else folds(recorded_problems(), args.folds)
    for i, held in enumerate(splits):
        if args.fold is not None and i != args.fold:
            continue
        s = TrainSettings.of(suite=str(ROOT / "benchmarks/problems"), holdout=tuple(held),
                          device="replay", replay_root=str(DATA), iterations=args.iterations,
                          episodes=4, steps=4, batch=8, seed=0, agents=args.agents,
                          prior_weight=args.prior_weight, **ABLATIONS[args.ablation],
                          sim_constants=(str(ROOT / args.sim_constants.format(k=i))
                                         if args.sim_constants else None),
                          out=str(args.work / f"{args.name}-{args.agents}-{tag(i)}"))
        t0 = time.time()
        tr = Trainer(s, device=device)
        try:
            tr.train()
        finally:
            tr.close()
        kind = "" if args.agents == "multi" else "single-"
        dest = ROOT / "benchmarks/policies" / (
            f"{args.name}{'-single' if kind else ''}.pt" if args.all
            else f"{args.name}-{kind}fold{i}.pt")
        # published without the resume state (a quarter of the size; the GPU calls carry the
        # policies within 64 MiB); the work folder keeps the resumable checkpoint
        checkpoint.strip_for_inference(
            args.work / f"{args.name}-{args.agents}-{tag(i)}" / "policy.pt", dest)
        what = "on every recorded problem" if args.all else f"fold {i}: without {len(held)}"
        print(f"{what} in {time.time() - t0:.0f} s -> {dest.relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main()
