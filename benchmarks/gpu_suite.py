"""The GPU run, in one call of the device tool: GPU tests, sweeps of the example suite, and
compile/evaluation throughput. Everything lands under $OUT (results.tgz holds the sweep files
and logs), to be committed under benchmarks/data/ and benchmarks/results/.

    python3 -m benchmarks.gpu_suite --parts sweeps,faults,throughput,families --sample 100
    python3 -m benchmarks.gpu_suite --parts counters,agents      # issue 3
    python3 -m benchmarks.gpu_suite --parts bench --bench-problems a.py,b.py \
        --agent-policy benchmarks/policies/h200-replay-multi.pt   # issue 5 (wheels: docs/troubleshooting.md)
    CUDA_VISIBLE_DEVICES=0 python3 -m benchmarks.gpu_suite --parts bench --work /tmp/w0 \
        --bench-problems todo:0:2 --agent-policy $P/h200-replay-1202p-fold0.pt,$P/h200-replay-1202p-fold1.pt
        # half of what no committed live bench has, cheapest first (todo:1:2 on the other GPU)
    python3 -m benchmarks.gpu_suite --parts gemm_tc,search --search-problems a.py,b.py \
        --search-warm 1 --search-seed-template gemm_tc           # a template the sweeps predate
    python3 -m benchmarks.agents_ab --device cuda --variants online_ppo,noprior --seeds 1 \
        --problems scan_,softmax_ --deadline 420 --out $OUT/ab.json  # an agents' setting, live
    python3 -m benchmarks.gpu_suite --parts realistic --deadline 560 \
        --realistic-results benchmarks/results/DAY-h200-realistic/realistic.json
        # issue 33: the realistic suite end to end (tune, then the independent harness), cheapest
        # first, one problem per visible GPU; resumes from the results given; $OUT/realistic.json
    python3 -m benchmarks.gpu_suite --parts realistic --deadline 560 \
        --realistic-suite benchmarks/conv_chains --realistic-as-user --realistic-time-limit 120 \
        --realistic-max-autotune \
        --realistic-results benchmarks/results/DAY-h100-conv-chains/conv_chains.json
        # issue 48: the convolution chains, each tuned as a user runs `tune` (no flag but the
        # time limit), max-autotune torch.compile timed beside; $OUT/conv_chains.json
    python3 -m benchmarks.gpu_suite --parts models --deadline 560 \
        --models-results benchmarks/results/DAY-h100-models/models.json
        # issue 50: the whole models of benchmarks/models/ (`whole_models.py`), one at a time:
        # tune_model under --models-time-limit, then the independent harness (checks, eager,
        # torch.compile, CUDA graphs, the regions' share of eager time); resumes from the
        # results given; $OUT/models.json

Parts: tests (every file of tests/gpu, or those --tests-k selects; --tests-workers 4 runs four at once, the memory and timing files after them one at a time), sweeps, faults, families, counters, gemm_tc (the tensor-core GEMM's accuracy test),
cluster, direct (depthwise convolution, float4 pooling, L2 keep hint), search, bench, throughput,
agents, library (every configuration of the library template, with the baselines), cudnn
(cudnn.benchmark against cuDNN's heuristics, each in a fresh process), realistic (issue 33's
suite of benchmarks/realistic/: `realistic_run.py`), models (issue 50's whole models of
benchmarks/models/: `whole_models.py`). Pass
CUDA_AGENT_COMMIT=<hash> in the command: the GPU machine receives the tree without .git (search
rows record it).

Several invocations in one device call: give each its own OUT outside $OUT and pack them all
at the end (`OUT=/tmp/o/a ...; OUT=/tmp/o/b ...; tar czf $OUT/all.tgz -C /tmp o`): the device
tool brings back at most 8 files, and a folder per invocation soon passes that.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


#: GPU test files that measure GPU memory against the device's free memory or compare times:
#: run one test at a time, never beside other test processes on the same GPU (with `-n 4` the
#: memory bounds and the timing comparisons of these failed, 2026-12-07-h100-gpu-tests-3)
SERIAL_GPU_TESTS = ("test_memory_gpu", "test_split_chan_gpu", "test_whole_model_graphs",
                    "test_timing_gpu", "test_run_control_gpu", "test_gpu_counters",
                    "test_realistic_harness", "test_row_async_gpu", "test_cudnn_benchmark_baseline",
                    "test_baselines_tf32")


def run_tests(out: Path, which: str | list[str], timeout: float, select: str | None = None,
              workers: int = 0, name: str | None = None) -> None:
    """pytest on the GPU tests `which` (a folder, files or test ids), each test's name printed
    as it ends (`-v`: a run its limit cuts still says which passed and failed; junit XML
    beside the log). With `workers`, pytest-xdist runs that many test processes at once on the
    GPU, except `SERIAL_GPU_TESTS`, which run after them one at a time."""
    paths = [which] if isinstance(which, str) else list(which)
    name = name or Path(paths[0]).stem
    log(f"GPU tests: {' '.join(paths)}" + (f" -k {select}" if select else "") +
        (f" ({workers} at once, then {', '.join(SERIAL_GPU_TESTS)} one at a time)"
         if workers else ""))
    t0 = time.monotonic()
    base = [sys.executable, "-m", "pytest", "-v", "-rfE", "-m", "gpu", "-p", "no:cacheprovider"]
    runs = [(name, base + paths)]
    if workers:
        files = sorted(str(f.relative_to(ROOT)) for p in paths for f in
                       ((ROOT / p).glob("test_*.py") if (ROOT / p).is_dir() else [ROOT / p]))
        serial = [f for f in files if Path(f).stem in SERIAL_GPU_TESTS]
        runs = [(f"{name}-parallel", base + ["-n", str(workers)] +
                 [f for f in files if f not in serial])] + \
               ([(f"{name}-serial", base + serial)] if serial else [])
    for label, cmd in runs:
        left = timeout - (time.monotonic() - t0)
        if left < 5:
            log(f"GPU tests {label}: no time left")
            continue
        log_path = out / "logs" / f"{label}.log"
        with open(log_path, "w") as f:
            try:
                proc = subprocess.run(cmd + ["--junitxml", str(out / "logs" / f"{label}.xml")]
                                      + (["-k", select] if select else []), cwd=ROOT,
                                      stdout=f, stderr=subprocess.STDOUT, timeout=left)
                code: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        tail = log_path.read_text().splitlines()[-12:]
        log(f"GPU tests {label} exit {code}\n" + "\n".join(tail))


def pack(out: Path, final: Path) -> None:
    """Write the tarball now: if the call is cut short, what was measured still comes back."""
    final.mkdir(parents=True, exist_ok=True)
    tmp = final / "results.tgz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(out / "data", arcname="data")
        tar.add(out / "logs", arcname="logs")
        if (out / "bench").exists():
            tar.add(out / "bench", arcname="bench")
    os.replace(tmp, final / "results.tgz")


def run_sweeps(out: Path, final: Path, problems: list[Path], sample: int, deadline: float,
               per_problem_s: float) -> None:
    from cuda_agent.runner.devices import CudaDevice
    from cuda_agent.sweep import sweep_problem

    device = CudaDevice()
    try:
        for p in problems:
            if time.time() > deadline:
                log(f"deadline reached: {p.name} and later problems not swept")
                break
            t0 = time.time()
            try:
                r, path = sweep_problem(p, out / "data", sample=sample, shared_device=device,
                                        store=str(out / "store.sqlite"),
                                        time_limit_s=per_problem_s)
            except Exception as exc:  # noqa: BLE001 - one problem failing must not stop the rest
                log(f"{p.name}: FAILED {type(exc).__name__}: {exc}")
                continue
            ok = [t.measurement for t in r.trials if t.measurement.ok]
            best = min((m.time_ms for m in ok), default=None)
            fails: dict[str, int] = {}
            for t in r.trials:
                if not t.measurement.ok:
                    fails[t.measurement.error_kind] = fails.get(t.measurement.error_kind, 0) + 1
            bw = r.device.copy_bandwidth()
            frac = (r.plan.bytes_moved() / (best * 1e-3) / bw) if best and bw else None
            log(f"{p.name}: {len(r.trials)} configs in {time.time() - t0:.0f}s, best "
                f"{best and round(best, 4)} ms ({frac and round(100 * frac)}% of copy bw), "
                f"eager {r.baselines.eager_ms and round(r.baselines.eager_ms, 4)}, compile "
                f"{r.baselines.compile_ms and round(r.baselines.compile_ms, 4)}, failures {fails}")
            pack(out, final)
    finally:
        device.close()


def run_throughput(out: Path, problems: list[Path], budget: int) -> None:
    """Candidates per second with a cold and a warm compile cache (fresh store both times, so
    every candidate is really measured)."""
    from cuda_agent.tuner import tune

    rows = []
    for p in problems:
        cache = out / f"cache-{p.stem}"
        for label in ("cold compile cache", "warm compile cache"):
            os.environ["CUDA_AGENT_CACHE"] = str(cache)
            t0 = time.time()
            r = tune(p, device="cuda", strategy="random", budget=budget, batch=64,
                     baselines=False, store=":memory:", seed=1)
            wall = time.time() - t0
            row = {"problem": p.stem, "cache": label, "evals": len(r.trials),
                   "loop_s": r.wall_s, "total_s": wall,
                   "evals_per_s": len(r.trials) / r.wall_s, "build": r.build_stats,
                   "cpus": os.cpu_count()}
            rows.append(row)
            log(f"throughput {p.stem} ({label}): {row['evals_per_s']:.1f} candidates/s "
                f"({len(r.trials)} in {r.wall_s:.1f} s; compiled {r.build_stats.get('compiled')},"
                f" cached {r.build_stats.get('cached')})")
    (out / "logs" / "throughput.json").write_text(json.dumps(rows, indent=2))


def recorded_best(name: str, n: int, vary: dict[str, list] | None = None) -> list[dict]:
    """The best configurations found for the problem so far, best first: those of earlier
    searches (benchmarks/results/*/search.json) and the `n` fastest of its recorded sweep;
    with `vary` ({slot: values}), each followed by its variants along those slots (e.g. a
    slot value added to the template since)."""
    from cuda_agent.runner.replay import read_sweep

    path = ROOT / f"benchmarks/data/nvidia-h200/{name}.json.gz"
    if n <= 0 or not path.exists():
        return []
    ok = sorted((r for r in read_sweep(path)["records"] if r.get("ok") and r.get("time_ms")),
                key=lambda r: r["time_ms"])
    from cuda_agent.agents.vocab import VOCAB
    from cuda_agent.space.slots import expand_short

    found = []
    for f in sorted((ROOT / "benchmarks/results").glob("*/search.json"), reverse=True):
        for q in json.loads(f.read_text()):
            if q["problem"] == name and q.get("best_config"):
                found.append((q["best_ms"], expand_short(q["best_config"], VOCAB)))
    out = [c for _, c in sorted(found, key=lambda x: x[0])] + [r["config"] for r in ok[:n]]
    with_variants = []
    for c in out:
        with_variants.append(c)
        for slot, vals in (vary or {}).items():
            with_variants += [dict(c, **{slot: v}) for v in vals if slot in c]
    return with_variants


# configurations that differ only in these slots count as one seed shape (the model barely
# tells pipeline depths, unrolling or cache hints apart)
SEED_SHAPE = {"gemm_tc": ("config.bm", "config.bn", "config.warp", "memory.bk", "reduction.split",
                          "compute.fresh"),
              "gemm": ("config.bm", "config.bn", "config.warp", "memory.bk", "reduction.split"),
              "attention_tc": ("config.bm", "memory.bk", "memory.stages", "compute.fastmath")}
SEED_SHAPE_DEFAULT = ("config.cluster", "config.block", "config.tpr", "memory.cache",
                      "memory.vec", "compute.algo")


def slot_values(text: str) -> dict[str, list]:
    """'slot=v1,v2;slot2=v3' -> {slot: [v1, v2], slot2: [v3]} (digits as ints)."""
    return {k: [int(x) if x.isdigit() else x for x in v.split(",")]
            for k, v in (item.split("=", 1) for item in text.split(";") if item)}


def template_seeds(path: Path, template: str, n: int,
                   where: dict[str, list] | None = None) -> list[dict]:
    """The `n` configurations of one template that the simulator ranks fastest for the
    problem (a new template has no sweep to start from; or new slot values, picked by
    `where`: slot -> allowed values); for a multi-kernel program, over the stages the
    template covers (the search maps each seed onto every stage's space)."""
    from cuda_agent.ir.partition import ProgramPlan
    from cuda_agent.ir.planning import make_plan
    from cuda_agent.problem import load_problem
    from cuda_agent.costmodel.model import simulate
    from cuda_agent.space.slots import ABSENT, Target
    from cuda_agent.space.space import Space

    if n <= 0:
        return []
    plan = make_plan(load_problem(path).graph())
    plans = [s.plan for s in plan.program.stages] if isinstance(plan, ProgramPlan) else [plan]
    target = Target()
    ranked = []
    for p in plans:
        space = Space.for_plan(p, target)
        for c in space.configs:
            if space.template_of(c).name == template and all(
                    c.get(k) in vs for k, vs in (where or {}).items()):
                ms = simulate(p, space.render(c), None, target).time_ms
                ranked.append((ms, {k: v for k, v in c.as_dict().items() if v != ABSENT}))
    if not ranked:
        return []
    ranked.sort(key=lambda x: x[0])
    seen, picked = set(), []
    for _, c in ranked:
        shape = tuple(c.get(k) for k in SEED_SHAPE.get(template, SEED_SHAPE_DEFAULT))
        if shape not in seen:
            seen.add(shape)
            picked.append(c)
    # the fastest shapes of the 3xTF32 prototype at 4096^3 (scripts/proto, 2026-11-30)
    # and the fastest shapes measured so far (3xTF32 at 4096^3, 2026-11-30: 64 x 64 warp
    # tiles, 3-4 slices in flight, the step loop rolled), in their K-slice variants
    proto = [{"config.bm": bm, "config.bn": bn, "config.warp": "64x64", "memory.bk": bk,
              "memory.stages": st, "compute.unroll": "none", "reduction.split": 1,
              "config.raster": 8, "reduction.scope": "gemm_tc", "compute.fresh": fr}
             for bm, bn in ((128, 128), (256, 128), (128, 256)) for st in (3, 4)
             for bk in (32, 16) for fr in (8, 16)] if template == "gemm_tc" else []
    proto = [c for c in proto if all(c.get(k) in vs for k, vs in (where or {}).items())]
    return proto + picked[:max(0, n - len(proto))]


def run_bench(out: Path, problems: list[Path], budget: int, policy: str | None,
              deadline: float, per_problem: float, parallel: int = 1,
              strategies: str = "", single_policy: str | None = None,
              sim_constants: str | None = None, baselines: bool = True) -> None:
    """`cuda-agent bench --device cuda` over the problems in one process (its start, ~20 s of
    torch, CUDA and the policy, is paid once), each problem given up inside it once it has run
    `per_problem` seconds. Stopped at the call's deadline, the run keeps the problems it
    finished (the bench keeps them on disk as it goes; `cuda-agent report` reads them).
    Kernel Tuner and Optuna must be importable (carried as wheels: docs/troubleshooting.md)."""
    suite = ",".join(str(p) for p in problems)  # run in the order given
    run_dir = out / "bench" / "run"
    # a machine kept warm between calls keeps the work folder: an earlier call's report there
    # would stand in for this one's if this one is stopped before its end
    shutil.rmtree(run_dir, ignore_errors=True)
    cli = [sys.executable, "-c", "from cuda_agent.cli import main; main()"]
    cmd = cli + ["bench", "--suite", suite, "--device", "cuda", "--budget", str(budget),
                 "--seeds", "1", "--problem-seconds", str(per_problem),
                 "--parallel", str(parallel),
                 "--out", str(run_dir)] + (["--policy", policy] if policy else []) + (
                     ["--strategies", strategies] if strategies else []) + (
                     ["--single-policy", single_policy] if single_policy else []) + (
                     ["--sim-constants", sim_constants] if sim_constants else []) + (
                     [] if baselines else ["--no-baselines"])
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=max(deadline - time.time() - 15, 30))
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:  # its output says how far it got
        rc, stdout, stderr = "timeout", exc.stdout or "", exc.stderr or ""
    if isinstance(stdout, bytes):
        stdout, stderr = stdout.decode(errors="replace"), (stderr or b"").decode(
            errors="replace")
    (out / "logs" / "bench.log").write_text(stdout[-60000:] + stderr[-5000:])
    log(f"bench of {len(problems)} problems: exit {rc} in {time.time() - t0:.0f} s")
    if rc != 0 and (run_dir / "bench.partial.json").exists():
        proc = subprocess.run(cli + ["report", str(run_dir)], capture_output=True, text=True)
        log(f"bench stopped: reported the problems it finished (exit {proc.returncode})")


#: the order in which problems not yet benched live are taken (`--bench-problems todo`):
#: cheapest to bench first (row kernels compile fast; GEMM-based problems need about 250 s:
#: torch.compile's max-autotune and eight searches compiling GEMMs)
BENCH_ORDER = ("fused_", "attention_", "conv", "gemm_")


def bench_todo(shard: int = 0, shards: int = 1) -> list[Path]:
    """The suite's problems no committed live bench has, cheapest first; every `shards`-th
    from `shard` (one share per GPU when several bench at once)."""
    done: set[str] = set()
    for f in (ROOT / "benchmarks/results").glob("*-bench-live*/**/bench.json"):
        run = json.loads(f.read_text())
        done |= set(run["problems"])
    left = [p for p in sorted((ROOT / "benchmarks/problems").glob("*.py")) if p.stem not in done]

    def rank(p: Path) -> tuple[int, str]:
        gemm_based = any(k in p.stem for k in ("linear", "matmul", "bmm", "mlp", "addmm"))
        group = next((i for i, pre in enumerate(BENCH_ORDER) if p.stem.startswith(pre)),
                     -1)  # single-operator row problems first
        return (len(BENCH_ORDER) if gemm_based else group, p.stem)

    return sorted(left, key=rank)[shard::shards]


def heldout_sample(per_family: int, seed: int, shard: int = 0, shards: int = 1) -> list[Path]:
    """`per_family` problems drawn at random (`seed`) from each family prefix (elementwise_,
    gemm_, conv..., ...) of the problems with a recorded sweep, the multi-kernel programs left out: a
    held-out set for the agents chosen by a rule, not by how they did. In rounds (one of each
    family, then a second of each, ...); the `shard`-th of `shards` consecutive shares (one per
    call: each share spans the families)."""
    import random
    import re
    from itertools import groupby

    from benchmarks.fold_policies import recorded_problems

    multi_kernel = {"fused_conv2d_groupnorm_tanh", "fused_conv2d_relu_maxpool",
                    "fused_linear_softmax", "fused_mlp_relu"}
    names = [n for n in recorded_problems() if n not in multi_kernel]
    rng = random.Random(seed)
    def family(name: str) -> str:  # conv1d_, conv2d_, conv_transpose2d_: one family
        return re.sub(r"\d.*", "", name.split("_", 1)[0])

    families = [list(g) for _, g in groupby(sorted(names, key=family), key=family)]
    drawn = [sorted(rng.sample(f, min(per_family, len(f)))) for f in families]
    order = [n for i in range(per_family) for fam in drawn for n in fam[i:i + 1]]
    size = -(-len(order) // shards)
    return [ROOT / "benchmarks/problems" / f"{n}.py"
            for n in order[shard * size:(shard + 1) * size]]


def trial_rows(trials: list) -> list[list]:
    """Every measurement as [configuration, ms or failure kind], so a slot's effect can be read
    afterwards."""
    return [[t.config.short(), t.measurement.time_ms if t.measurement.ok
             else t.measurement.error_kind] for t in trials]


def run_search(out: Path, problems: list[Path], strategy: str, budget: int,
               deadline: float, warm: int = 0, seconds: float = 90.0,
               vary: dict[str, list] | None = None, seed_template: str = "",
               seed_count: int = 0, seed_where: dict[str, list] | None = None,
               precision: str = "fp32") -> None:
    """A guided search per problem (spaces of tens of thousands of GEMM configurations are
    sampled too thinly by a sweep), with eager and torch.compile timed in the same run.
    `warm` > 0: the genetic search starts from the recorded sweep's `warm` best
    configurations, measured again here (a sweep of a few percent of a space rarely holds
    its best; the search continues from it). `precision`: the numeric contract
    (`TuneSettings.precision`); eager and torch.compile are timed under it too."""
    from cuda_agent.tuner import tune

    rows = []
    for p in problems:
        if time.time() > deadline - 30:
            log(f"deadline: search of {p.name} and later problems not run")
            break
        t0 = time.time()
        opts = ({"initial": recorded_best(p.stem, warm, vary)}
                if warm and strategy == "genetic" else {})
        if seed_template and strategy == "genetic":
            # a template added since the sweeps: its simulator-ranked best join the start
            seeds = template_seeds(p, seed_template, seed_count, seed_where)
            opts["initial"] = opts.get("initial", []) + seeds
            log(f"search {p.stem}: {len(seeds)} {seed_template} seeds")
        try:
            r = tune(p, device="cuda", strategy=strategy, budget=budget, batch=32,
                     store=str(out / "store.sqlite"), strategy_options=opts, precision=precision,
                     time_limit_s=max(10.0, min(seconds, deadline - time.time() - 40)))
        except Exception as exc:  # noqa: BLE001 - one problem failing must not stop the rest
            log(f"search {p.name}: FAILED {type(exc).__name__}: {exc}")
            continue
        best = r.best.measurement.time_ms if r.best else None
        row = {"problem": p.stem, "family": r.plan.family, "strategy": strategy,
               "precision": precision,
               "commit": os.environ.get("CUDA_AGENT_COMMIT", "unknown"),
               "warm_start": len(opts.get("initial", [])),
               "evals": len(r.trials), "best_ms": best,
               "best_config": r.best.config.short() if r.best else None,
               # eager_ms, compile_ms at PyTorch's defaults, *_matched_ms, baseline_settings
               **r.baselines.fields(),
               "flops": r.plan.flops(), "bytes": r.plan.bytes_moved(),
               "failures": sum(1 for t in r.trials if not t.measurement.ok),
               "trials": trial_rows(r.trials),
               "wall_s": time.time() - t0,
               # the run order of searches (`search_order.py`): folder names carry only a date
               "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        rows.append(row)
        # opted-in precisions apart: the strict tables (collect.py) read search.json alone
        name = "search.json" if precision == "fp32" else f"search-{precision}.json"
        (out / "logs" / name).write_text(json.dumps(rows, indent=2))
        log(f"search {p.stem} ({strategy}, {precision}, {len(r.trials)} evals, {row['wall_s']:.0f}s): best "
            f"{best and round(best, 4)} ms, eager {r.baselines.eager_ms and round(r.baselines.eager_ms, 4)}"
            f", compile {r.baselines.compile_ms and round(r.baselines.compile_ms, 4)}; "
            f"{row['best_config']}")


def run_library(out: Path, problems: list[Path], deadline: float) -> None:
    """Every configuration of the library template (cuDNN/cuBLAS through torch, with the
    generated epilogue) measured per problem, with eager, torch.compile and max-autotune
    without CUDA graphs in the same run: what cuDNN's layout (as given or channels-last) is
    worth. For a multi-kernel program the other stages stay at their defaults."""
    from cuda_agent.problem import load_problem
    from cuda_agent.runner.baselines import with_matched
    from cuda_agent.runner.devices import CudaDevice
    from cuda_agent.tuner import Tuner, TuneSettings

    device = CudaDevice()
    rows = []
    try:
        for p in problems:
            if time.time() > deadline - 30:
                log(f"deadline: library configurations of {p.name} and later not measured")
                break
            t0 = time.time()
            tuner = Tuner(load_problem(p), TuneSettings(device="cuda", strategy="random"),
                          device=device)
            try:
                lib = [c for c in tuner.space.configs
                       if tuner.space.template_of(c).name == "lib"]
                trials = []
                for i in range(0, len(lib), 24):
                    if time.time() > deadline - 20:
                        break
                    trials += tuner.measure(lib[i:i + 24])
                base = device.baselines(with_matched((
                    "eager", "compile", "compile:max-autotune-no-cudagraphs")))
            finally:
                tuner.close()
            ok = [t for t in trials if t.measurement.ok]
            best = min(ok, key=lambda t: t.measurement.time_ms) if ok else None
            row = {"problem": p.stem, "commit": os.environ.get("CUDA_AGENT_COMMIT", "unknown"),
                   "configs": len(lib), "measured": len(trials), "ok": len(ok),
                   "best_ms": best and best.measurement.time_ms,
                   "best_config": best and best.config.short(),
                   **base.fields(),  # at PyTorch's defaults, *_matched_ms, baseline_settings
                   "baseline_notes": base.notes,
                   "trials": trial_rows(trials),
                   "wall_s": time.time() - t0}
            rows.append(row)
            (out / "logs" / "library.json").write_text(json.dumps(rows, indent=2))
            log(f"library {p.stem}: {len(ok)}/{len(trials)} ok, best "
                f"{row['best_ms'] and round(row['best_ms'], 4)} ms ({row['best_config']}); "
                f"eager {base.eager_ms and round(base.eager_ms, 4)}, compile "
                f"{base.compile_ms and round(base.compile_ms, 4)}, max-autotune-no-cg "
                f"{row['compile_max_nocg_ms'] and round(row['compile_max_nocg_ms'], 4)} "
                f"({row['wall_s']:.0f} s)")
    finally:
        device.close()


AGENT_TRAIN = ("elementwise_bias_gelu", "elementwise_log_sqrt", "reduce_sum_lastdim",
               "reduce_mean_middim", "softmax_short_rows", "softmax_long_rows", "norm_layernorm",
               "norm_rms", "reduce_argmax_middim_odd", "norm_rms_tinyrows_odd")
PARTS = ("tests", "sweeps", "faults", "families", "gemm_tc", "cluster", "direct", "timing",
         "counters", "search", "bench", "library", "cudnn", "agents", "throughput", "realistic", "models")
AGENT_HELDOUT = ("elementwise_swiglu", "reduce_argmin_middim", "softmax_log_softmax", "norm_l2")


def run_agents(out: Path, deadline: float, iterations: int, budget: int,
               profile_every: int = 16, policy: str | None = None,
               single_policy: str | None = None,
               heldout: tuple[str, ...] = AGENT_HELDOUT, train_only: bool = False) -> None:
    """Issue 3 on the GPU: train on the 10 operators of AGENT_TRAIN (four agents, then the
    single agent, each given half the time left), then compare on 4 they never saw (trained,
    untrained, random, single-agent) at equal budgets; best known = the recorded sweep's best
    or anything faster measured here. Training runs as tuning proposes: with the analytic
    model's prior (`strategy.PRIOR_WEIGHT`), so the comparison's policies are used the way they
    were trained. The checkpoints go back under logs/ (policy-multi.pt, policy-single.pt), so
    that `train_only` runs and a later call compares with `policy`/`single_policy`.
    With `policy` (a checkpoint trained elsewhere, e.g. on replay of recorded sweeps that held
    these 4 operators out), training is skipped and only the comparison runs."""
    from cuda_agent.agents.evaluate import Contender, trajectory
    from cuda_agent.agents.checkpoint import strip_for_inference
    from cuda_agent.agents.strategy import PRIOR_WEIGHT
    from cuda_agent.metrics import evals_to_fraction
    from cuda_agent.agents.train import TrainSettings, Trainer, write_curves
    from cuda_agent.runner.devices import CudaDevice
    from cuda_agent.runner.replay import read_sweep

    device = CudaDevice(profile_every=profile_every)
    rows: list[dict] = []
    try:
        files = ",".join(str(ROOT / "benchmarks/problems" / f"{n}.py") for n in AGENT_TRAIN)
        ckpts = {"multi": policy} if policy else {}
        if policy and single_policy:
            ckpts["single"] = single_policy
        kinds = () if policy else ("multi", "single")
        for i, agents in enumerate(kinds):
            # two operators per iteration, their episodes grouped: one device set-up (inputs,
            # reference answers) serves two episodes (a 2026-11-29 run that switched operator
            # every episode spent ~70 s per iteration setting up)
            s = TrainSettings.of(suite=files, device="cuda", agents=agents, iterations=iterations,
                              episodes=4, steps=3, batch=6, operators_per_iteration=2,
                              profile_every=profile_every, prior_weight=PRIOR_WEIGHT,
                              out=str(out / f"train-{agents}"))
            share = (deadline - time.time()) / (len(kinds) - i)
            tr = Trainer(s, device=device)
            try:
                curves = tr.train(lambda r: log(f"train {agents} it {r['iteration']}: "
                                                f"{r['measurements']} measurements, reward "
                                                f"{r['mean_reward']}, {r['seconds']:.0f} s"),
                                  deadline=time.time() + share)
            finally:
                tr.close()
            ckpt = out / f"train-{agents}" / "policy.pt"
            strip_for_inference(ckpt, out / "logs" / f"policy-{agents}.pt")
            try:
                write_curves(curves, out / "logs" / f"train-{agents}",
                             f"train on the H200 ({agents})")
            except Exception as exc:  # noqa: BLE001 - plotting must not lose the run
                log(f"curves of {agents} not drawn: {type(exc).__name__}: {exc}")
                (out / "logs" / f"train-{agents}.json").write_text(json.dumps(curves,
                                                                             default=str))
            ckpts[agents] = str(ckpt)
        if train_only:
            return
        contenders = [Contender("trained", "marl", ckpts.get("multi")),
                      Contender("untrained", "marl"), Contender("random", "random")]
        if "single" in ckpts:
            contenders.append(Contender("single", "marl", ckpts["single"], agents="single"))
        for name in heldout:
            recorded = min(r["time_ms"] for r in read_sweep(
                ROOT / f"benchmarks/data/nvidia-h200/{name}.json.gz")["records"] if r.get("ok"))
            runs: dict[str, list] = {}
            for c in contenders:
                if time.time() > deadline:
                    break
                runs[c.name] = trajectory(ROOT / "benchmarks/problems" / f"{name}.py", c,
                                          device, budget, 0)
            # best known: the recorded sweep's best or anything faster measured here (today's
            # machine may not reproduce the recorded best within 5 %)
            here = [t for ts in runs.values() for t in ts if t is not None]
            best = min([recorded] + here)
            for cname, ts in runs.items():
                n = evals_to_fraction(ts, best, 0.95)
                rows.append({"problem": name, "contender": cname, "evals_to_95": n,
                             "best_known_ms": best, "recorded_best_ms": recorded,
                             "budget": budget, "times_ms": ts})
                log(f"agents {name} {cname}: {n} measurements to 95% of the best known "
                    f"({best:.4f} ms; recorded {recorded:.4f} ms)")
            (out / "logs" / "agents.json").write_text(json.dumps(rows, indent=2))
    finally:
        device.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="tests,sweeps,throughput")
    ap.add_argument("--problems", default="benchmarks/problems",
                    help="directory, or comma-separated files")
    ap.add_argument("--prefixes", default=None,
                    help="comma-separated name prefixes: only these problems, in this order")
    ap.add_argument("--skip", type=int, default=0, help="skip the first N problems")
    ap.add_argument("--take", type=int, default=1000, help="sweep at most N problems")
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--deadline", type=float, default=540, help="seconds from start")
    ap.add_argument("--throughput-budget", type=int, default=200)
    ap.add_argument("--agent-iterations", type=int, default=12)
    ap.add_argument("--agent-budget", type=int, default=32)
    ap.add_argument("--agent-profile-every", type=int, default=16,
                    help="Nsight Compute profile of every N-th training candidate")
    ap.add_argument("--agent-policy", default=None,
                    help="compare this checkpoint on the held-out operators; skip training")
    ap.add_argument("--agent-single-policy", default=None,
                    help="with --agent-policy: the single-agent checkpoint to compare as well "
                         "(part bench: checkpoints for marl_single, comma-separated folds)")
    ap.add_argument("--agent-train-only", action="store_true",
                    help="part agents: train (checkpoints under logs/), compare nothing")
    ap.add_argument("--agent-heldout", default=",".join(AGENT_HELDOUT),
                    help="comma-separated operators the policies are compared on")
    ap.add_argument("--tests-k", default=None, help="pytest -k selection for the GPU tests")
    ap.add_argument("--tests-workers", type=int, default=0,
                    help="part tests: test processes at once on the GPU (pytest-xdist; the "
                         "memory and timing tests, SERIAL_GPU_TESTS, still one at a time)")
    ap.add_argument("--search-problems", default="", help="comma-separated files (part search)")
    ap.add_argument("--bench-problems", default="", help="comma-separated files (part bench; "
                    "the policy is --agent-policy), or todo[:SHARD:SHARDS]: the problems no "
                    "committed live bench has, cheapest first, or "
                    "sample:PER_FAMILY:SEED[:SHARD:SHARDS]: problems drawn at random from "
                    "each family (`heldout_sample`)")
    ap.add_argument("--bench-strategies", default="",
                    help="comma-separated (default: the bench's), e.g. "
                         "marl,marl_untrained,marl_single,random,optuna: issue 3's comparison "
                         "(marl_single's checkpoints: --agent-single-policy)")
    ap.add_argument("--bench-sim-constants", default=None,
                    help="the model's constants per fold (benchmarks/sim_folds/*.json, "
                         "comma-separated): each problem ranked by a model fitted without it")
    ap.add_argument("--bench-budget", type=int, default=40)
    ap.add_argument("--bench-no-baselines", action="store_true",
                    help="part bench: the strategies alone, torch untimed (learning_live.py)")
    ap.add_argument("--bench-parallel", type=int, default=8,
                    help="strategy runs of a problem searching at once (`bench --parallel`): "
                         "attention and convolution kernels take seconds each to compile, "
                         "and one run at a time left the cores idle (a problem took 4 min)")
    ap.add_argument("--bench-per-problem", type=float, default=150.0,
                    help="seconds after which a problem's bench is given up (checked between "
                         "strategy runs)")
    ap.add_argument("--search-strategy", default="genetic")
    ap.add_argument("--search-budget", type=int, default=160)
    ap.add_argument("--search-seed-template", default="",
                    help="genetic search: also start from this template's configurations "
                         "the simulator ranks first (a template the sweeps predate)")
    ap.add_argument("--search-seed-count", type=int, default=12)
    ap.add_argument("--search-precision", default="fp32",
                    help="part search: fp32 | tf32 | fp16 | bf16 (baselines under it too)")
    ap.add_argument("--search-seed-where", default="",
                    help="seed only from configurations with these slot values, e.g. "
                         "config.cluster=2,4,8 (slots separated by ';')")
    ap.add_argument("--search-warm", type=int, default=0,
                    help="genetic search: start from the recorded sweep's N best configurations")
    ap.add_argument("--search-vary", default="",
                    help="with --search-warm: also each warm configuration's variants, e.g. "
                         "memory.stages=3,4 (slots separated by ';')")
    ap.add_argument("--search-seconds", type=float, default=90.0,
                    help="time limit of each problem's search")
    ap.add_argument("--per-problem", type=float, default=12.0,
                    help="seconds of candidate measurement per problem in sweeps")
    ap.add_argument("--realistic-results", default="",
                    help="part realistic: comma-separated results files of earlier calls; "
                         "their problems are not run again")
    ap.add_argument("--realistic-rerun", default="",
                    help="part realistic: comma-separated statuses run again all the same "
                         "(e.g. error,timeout)")
    ap.add_argument("--realistic-problems", default="",
                    help="part realistic: comma-separated names, or family:WORD (every "
                         "problem whose family has WORD, e.g. family:conv); default: the "
                         "whole suite")
    ap.add_argument("--realistic-budget", type=int, default=32, help="tune --budget")
    ap.add_argument("--realistic-time-limit", type=float, default=45.0,
                    help="tune --time-limit, seconds")
    ap.add_argument("--realistic-policy", default="benchmarks/policies/h200-gpu-1203-multi.pt",
                    help="tune --policy ('' for the CLI's default strategy)")
    ap.add_argument("--realistic-tune-args", default="",
                    help="further tune flags, e.g. '--precision tf32'")
    ap.add_argument("--realistic-suite", default="benchmarks/realistic",
                    help="part realistic: the suite's folder (problems and suite.json), e.g. "
                         "benchmarks/conv_chains; results in $OUT/<folder name>.json")
    ap.add_argument("--realistic-as-user", action="store_true",
                    help="part realistic: tune with no flag but --time-limit (tune's default "
                         "budget, strategy, precision and baselines)")
    ap.add_argument("--realistic-max-autotune", action="store_true",
                    help="part realistic: the harness times torch.compile's max-autotune too")
    ap.add_argument("--realistic-gpus", type=int, default=0,
                    help="GPUs to run problems on at once (0: every visible GPU)")
    ap.add_argument("--models-results", default="",
                    help="part models: comma-separated results files of earlier calls; their "
                         "models are not run again")
    ap.add_argument("--models-only", default="",
                    help="part models: comma-separated names (default: every benchmarks/models "
                         "file)")
    ap.add_argument("--models-time-limit", type=float, default=120.0,
                    help="part models: tune_model's time limit per model, seconds")
    ap.add_argument("--models-budget", type=int, default=None,
                    help="part models: tune_model's budget (default: its own)")
    ap.add_argument("--work", default="/tmp/gpu-suite",
                    help="working folder (its own per invocation when several run at once, "
                         "e.g. one per GPU with CUDA_VISIBLE_DEVICES)")
    args = ap.parse_args()
    start = time.time()
    deadline = start + args.deadline
    # work outside $OUT (only 8 files come back from it); one tarball goes there
    final = Path(os.environ.get("OUT", "/tmp/out"))
    out = Path(args.work)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:  # a misspelt part used to be skipped silently, costing a device call
        ap.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    if "realistic" in parts and not (ROOT / args.realistic_suite / "suite.json").is_file():
        ap.error(f"--realistic-suite {args.realistic_suite}: no suite.json there (write it with "
                 f"python -m benchmarks.realistic_suite --suite {args.realistic_suite})")
    src = ROOT / args.problems
    problems = sorted(src.glob("*.py")) if src.is_dir() else \
        [ROOT / p for p in args.problems.split(",")]
    if args.prefixes:
        problems = [p for pre in args.prefixes.split(",") for p in problems
                    if p.stem.startswith(pre)]
    problems = problems[args.skip:args.skip + args.take]
    try:
        for part in parts:
            left = deadline - time.time()
            if left < 30:
                log(f"deadline: part {part} not run")
                continue
            if part == "sweeps":
                run_sweeps(out, final, problems, args.sample, deadline - 20, args.per_problem)
            elif part == "tests":  # every GPU test file (or those -k selects)
                run_tests(out, "tests/gpu", left - 10, args.tests_k, workers=args.tests_workers)
            elif part == "faults":
                run_tests(out, "tests/gpu/test_faults.py", min(left - 10, 150), args.tests_k)
            elif part == "families":
                run_tests(out, "tests/gpu/test_families.py", left - 10, args.tests_k)
            elif part == "gemm_tc":
                run_tests(out, "tests/gpu/test_gemm_tc.py", min(left - 10, 150))
            elif part == "cluster":
                run_tests(out, "tests/gpu/test_clusters.py", min(left - 10, 150))
            elif part == "direct":  # depthwise, float4 pooling, L2 keep, online extras
                run_tests(out, "tests/gpu/test_direct_and_hints.py", min(left - 10, 150))
            elif part == "timing":  # the events time the GPU's work, not the host's
                run_tests(out, "tests/gpu/test_timing_gpu.py", min(left - 10, 120))
            elif part == "counters":
                run_tests(out, "tests/gpu/test_gpu_counters.py", min(left - 10, 120))
            elif part == "search":
                run_search(out, [ROOT / q for q in args.search_problems.split(",") if q],
                           args.search_strategy, args.search_budget, deadline - 20,
                           args.search_warm, args.search_seconds,
                           slot_values(args.search_vary),
                           args.search_seed_template, args.search_seed_count,
                           slot_values(args.search_seed_where), args.search_precision)
            elif part == "bench":  # issue 5: every strategy and baseline, live
                todo = args.bench_problems.split(":")
                chosen = (bench_todo(*map(int, todo[1:])) if todo[0] == "todo" else
                          heldout_sample(*map(int, todo[1:])) if todo[0] == "sample" else
                          [ROOT / q for q in args.bench_problems.split(",") if q])
                if not chosen:  # `todo` once every problem has a committed live bench
                    log(f"bench: no problem to bench for --bench-problems {args.bench_problems}")
                else:
                    run_bench(out, chosen,
                              args.bench_budget, args.agent_policy, deadline - 10,
                              args.bench_per_problem, args.bench_parallel,
                              args.bench_strategies, args.agent_single_policy,
                              args.bench_sim_constants, not args.bench_no_baselines)
            elif part == "library":  # cuDNN's layout and algorithm slots, every value
                run_library(out, problems, deadline - 10)
            elif part == "cudnn":  # cudnn.benchmark against heuristics, fresh processes
                try:  # the probe writes its rows as it goes: a cut run keeps what it did
                    subprocess.run([sys.executable, str(ROOT / "benchmarks/cudnn_probe.py"),
                                    *map(str, problems), "--out", str(out / "logs/cudnn.json")],
                                   timeout=max(deadline - time.time() - 20, 10))
                except subprocess.TimeoutExpired:
                    log("cudnn probe: cut by the deadline")
            elif part == "agents":
                run_agents(out, deadline - 20, args.agent_iterations, args.agent_budget,
                           args.agent_profile_every, args.agent_policy,
                           args.agent_single_policy, tuple(args.agent_heldout.split(",")),
                           args.agent_train_only)
            elif part == "realistic":  # issue 33: tune + independent harness per problem
                from benchmarks.realistic_run import (RunSettings, as_user, run_suite,
                                                      visible_gpus)

                gpus = visible_gpus()
                settings = RunSettings(
                    work=out, final=final, deadline=deadline - 10,
                    suite=ROOT / args.realistic_suite,
                    budget=args.realistic_budget, time_limit_s=args.realistic_time_limit,
                    policy=args.realistic_policy or None,
                    tune_args=args.realistic_tune_args.split(),
                    gpus=gpus[:args.realistic_gpus] if args.realistic_gpus else gpus,
                    previous=[ROOT / f for f in args.realistic_results.split(",") if f],
                    rerun=tuple(x for x in args.realistic_rerun.split(",") if x),
                    only=[x for x in args.realistic_problems.split(",") if x],
                    max_autotune=args.realistic_max_autotune,
                    # max-autotune's first call benchmarks every kernel choice: minutes
                    harness_limit_s=600.0 if args.realistic_max_autotune else 300.0)
                # a tune's own baselines (torch eager and torch.compile at the defaults and
                # matched, cuDNN's benchmark mode) come after its search
                run_suite(as_user(settings, tune_grace_s=300.0) if args.realistic_as_user
                          else settings, log=log)
            elif part == "models":  # issue 50: tune_model + independent harness per model
                from benchmarks import whole_models

                whole_models.run_suite(whole_models.Settings(
                    work=out, final=final, deadline=deadline - 10,
                    models=[x for x in args.models_only.split(",") if x],
                    time_limit_s=args.models_time_limit, budget=args.models_budget,
                    previous=[ROOT / f for f in args.models_results.split(",") if f]), log=log)
            elif part == "throughput" and left > 70:
                run_throughput(out, [ROOT / "tests/data/good/softmax_small.py",
                                     ROOT / "benchmarks/problems/norm_layernorm_odd.py"],
                               args.throughput_budget)
            pack(out, final)
    finally:
        pack(out, final)
        log(f"done in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
