"""Golden outputs: what a redesign that changes no result must leave exactly as it was.

For every problem of the suites (the problem files of benchmarks/problems, benchmarks/realistic
and tests/data/good, and the operators defined in benchmarks/unseen_ops.py), at two fixed
numeric contracts (strict "fp32" and "tf32:conv", never tune's default, which follows the
process's torch flags):

* the captured graph's fingerprint, the plan's kind and family, and for a multi-kernel program
  its cut set (each stage: its graph, where its inputs come from, what it writes);
* each space (the kernel's, or each stage's): its size, slots, untuned default, and per
  template its version, size, a hash of its configurations in order, and the hashes of the
  rendered source and of the launches (kernels, grid, block, shared memory, library calls,
  workspace, analytic facts) of its default and of `SAMPLES` configurations drawn with a fixed
  seed; a program is also rendered whole at a few stage choices;
* the replay bench's measured orders (`bench.run_bench` on recorded sweeps; exhaustive search,
  which `bench` does not offer, through `tune(device="replay")`).

A refusal is recorded as its one-line message. The files (tests/goldens/, one JSON line per
problem) hold hashes, not sources. Nothing in them depends on the machine, the time, paths or
hash seeds; `tests/test_goldens.py` checks a subset by default and everything under `-m slow`.

    python -m cuda_agent.experiments.goldens            # compare with tests/goldens: what changed
    python -m cuda_agent.experiments.goldens --update   # write them anew (a change meant to)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from ..bench import BenchSettings, run_bench
from ..errors import CudaAgentError, ProblemError, SettingsError, UnsupportedError, first_line
from ..ir.capture import capture
from ..ir.partition import ProgramPlan
from ..ir.planning import make_plan
from ..problem import load_problem
from ..search.default import shipped_policy
from ..space.program import StageSpace, stage_spaces
from ..space.slots import Target
from ..space.space import Space
from ..tempfiles import write_atomic
from ..tuner import tune
from .golden_diff import Labels, differences, replay_differences

FORMAT = 1
PRECISIONS = ("fp32", "tf32:conv")
"""the numeric contracts every space is listed and rendered at (fixed: tune's own default,
"auto", resolves from the process's torch flags)"""
SAMPLES = 4
"""configurations rendered per template beside its default"""
SAMPLE_SEED = 0
PROGRAM_CHOICES = 3
"""a program is rendered whole at every stage's default and at this many seeded stage choices"""
HASH_CHARS = 12
"""hex digits kept of each sha256: enough to tell any change, small enough to commit"""

FILE_SUITES = {"problems": "benchmarks/problems", "realistic": "benchmarks/realistic",
               "good": "tests/data/good"}
UNSEEN_OPS = "benchmarks/unseen_ops.py"
GOLDENS_DIR = "tests/goldens"
SWEEPS = "benchmarks/data"
REGENERATE = "python -m cuda_agent.experiments.goldens --update"

REPLAY_PROBLEMS = ("attention_causal", "conv2d_depthwise", "conv_transpose3d",
                   "elementwise_bias_gelu", "fused_bmm_scale_bias", "gemm_square",
                   "loss_mse", "norm_layernorm", "normstat_batchnorm2d", "pool_max2d",
                   "reduce_mean_middim", "scan_cumsum_lastdim", "softmax_short_rows")
"""problems of benchmarks/problems replayed from their recorded sweeps: a few of each family"""
REPLAY_STRATEGIES = ("random", "genetic", "prior", "marl")
"""through `bench` (marl: the shipped policy); exhaustive beside them through `tune`"""
REPLAY_SEEDS = 2
REPLAY_BUDGET = 32

SUBSET = ("good/relu_small", "problems/attention_manual_odd", "unseen_ops/chains/baddbmm",
          "problems/conv_transpose2d_odd", "realistic/conv2d_depthwise_3x3",
          "problems/normstat_groupnorm", "problems/normstat_batchnorm_odd",
          "problems/loss_hinge", "problems/reduce_argmax_middim_odd",
          "problems/pool_avg2d_ceil", "problems/scan_cumsum_rows_odd",
          "unseen_ops/pieces/conv1d_relu_maxpool1d", "realistic/norm_batchnorm2d_train",
          "unseen_ops/pieces/glu", "unseen_ops/pieces/attention_manual_masked")
"""what the default test tier checks (seconds): a problem of each template (the cheapest to
list), a convolution (whose tf32:conv space differs), programs (one with side outputs),
refusals at planning and at capture"""


def sha(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:HASH_CHARS]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def repo_root() -> Path:
    """The checkout this package sits in (the suites and goldens are read from it)."""
    return Path(__file__).resolve().parents[2]


def one_line(exc: BaseException, root: Path) -> str:
    """An exception as one line, without the checkout's path (goldens may not depend on it)."""
    return first_line(exc).replace(f"{root}/", "").replace(str(root), "<root>")


# -- the cases --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One problem: its key in the goldens and how to capture its graph."""

    key: str
    capture: Callable[[], Any]


def _file_case(key: str, path: Path) -> Case:
    def run() -> Any:
        problem = load_problem(path)
        # captured afresh, not through the capture cache: the goldens gate capture itself
        return capture(problem.model_cls, problem.init_inputs(), problem.get_inputs)
    return Case(key, run)


def _unseen_ops(root: Path) -> Any:
    """benchmarks/unseen_ops.py, imported by path (its operators are defined in code)."""
    path = root / UNSEEN_OPS
    name = "cuda_agent_goldens_unseen_ops"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SettingsError(f"{path}: cannot import the unseen operators")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def cases(root: Path) -> list[Case]:
    """Every problem the goldens cover, in a fixed order."""
    out: list[Case] = []
    for suite, folder in FILE_SUITES.items():
        where = root / folder
        if not where.is_dir():
            raise SettingsError(f"{where}: no such suite directory (pass --root, the checkout)")
        out += [_file_case(f"{suite}/{p.stem}", p) for p in sorted(where.glob("*.py"))]

    for batch, ops in _unseen_ops(root).BATCHES.items():
        for name in sorted(ops):
            cls, inputs = ops[name]
            out.append(Case(f"unseen_ops/{batch}/{name}", partial(capture, cls, [], inputs)))
    return out


def suite_of(key: str) -> str:
    return key.split("/", 1)[0]


# -- one problem ------------------------------------------------------------------------------

def launches_digest(rendered: Any) -> str:
    """Everything about a rendering besides its source: each launch (kernel, grid, block,
    shared memory, cluster, library call, where its arguments point), the workspace and the
    analytic facts the simulator and the agents read."""
    launches = [[L.kernel, list(L.grid), list(L.block), L.smem, L.cluster, L.library,
                 None if L.args is None else list(L.args)] for L in rendered.launches]
    return sha(canonical_json([launches, rendered.workspace_bytes, rendered.zero_workspace,
                               [list(f) for f in rendered.facts]]))


def render_entry(space: Any, cfg: Any, labels: Labels, root: Path) -> list[str]:
    """[configuration, source, launches] hashes of one configuration; a rendering that raises
    is recorded by its one-line message instead of the last two."""
    key = sha(cfg.key())
    labels[key] = cfg.short()
    try:
        rendered = space.render(cfg)
    except Exception as exc:  # noqa: BLE001 - a refusal is a result, not the end of the run
        return [key, f"raised {one_line(exc, root)}"]
    return [key, sha(rendered.source), launches_digest(rendered)]


def space_entry(space: Any, labels: Labels, root: Path) -> dict[str, Any]:
    configs = space.configs
    slots = [[s.name, list(s.choices)] for s in space.slots]
    default = space.default()
    labels[sha(default.key())] = default.short()
    defaults = {space.template_of(c).name: c for c in space.template_defaults()}
    templates = []
    for t in space.templates:
        own = [c for c in configs if space.template_of(c).name == t.name]
        first = defaults.get(t.name)
        pool = [c for c in own if c != first]
        drawn = random.Random(SAMPLE_SEED).sample(pool, min(SAMPLES, len(pool)))
        picked = ([first] if first is not None else []) + drawn
        templates.append({
            "name": t.name, "version": t.version, "size": len(own),
            "configs": sha("\n".join(c.key() for c in own)), "default": first is not None,
            "renders": [render_entry(space, c, labels, root) for c in picked]})
    return {"size": len(configs), "slots": sha(canonical_json(slots)),
            "default": sha(default.key()), "templates": templates}


def program_entry(plan: Any) -> dict[str, Any]:
    """A program's cut set: the buffers between stages and what each stage covers."""
    program = plan.program
    return {"buffers": [[list(shape), dtype] for shape, dtype in program.buffers],
            "values": list(program.values),
            "stages": [{"fingerprint": st.graph.fingerprint(), "kind": st.plan.kind,
                        "family": st.plan.family,
                        "sources": [[s.kind, s.index] for s in st.sources],
                        "writes": st.writes, "sides": list(st.sides)}
                       for st in program.stages]}


def program_renders(plan: Any, spaces: list[Any], labels: Labels, root: Path
                    ) -> list[list[Any]]:
    """The whole program rendered at every stage's default, then at `PROGRAM_CHOICES` stage
    choices drawn (seeded) for each stage from its default and its configurations."""
    picks = [[sp.default(), *sp.configs] for sp in spaces]
    choices = [[sp.default() for sp in spaces]]
    for j in range(PROGRAM_CHOICES):
        rng = random.Random(SAMPLE_SEED + 1 + j)
        choices.append([rng.choice(p) for p in picks])
    out = []
    for fixed in choices:
        labels.update((sha(c.key()), c.short()) for c in fixed)
        stage = StageSpace.of(plan, 0, spaces, fixed)
        entry = render_entry(stage, fixed[0], labels, root)
        out.append([[sha(c.key()) for c in fixed]] + entry[1:])
    return out


def precision_entry(plan: Any, precision: str, labels: Labels, root: Path) -> dict[str, Any]:
    target = Target(precision=precision)
    try:
        if isinstance(plan, ProgramPlan):
            spaces = stage_spaces(plan, target)
        else:
            spaces = [Space.for_plan(plan, target)]
        out: dict[str, Any] = {"spaces": [space_entry(sp, labels, root) for sp in spaces]}
    except UnsupportedError as exc:
        return {"refused": one_line(exc, root)}
    if isinstance(plan, ProgramPlan):
        out["programs"] = program_renders(plan, spaces, labels, root)
    return out


def problem_entry(case: Case, root: Path, labels: Labels | None = None) -> dict[str, Any]:
    """The golden of one problem (`labels`, where given, collects readable configurations)."""
    labels = Labels() if labels is None else labels
    try:
        graph = case.capture()
    except (ProblemError, UnsupportedError) as exc:
        return {"refused": one_line(exc, root)}
    entry: dict[str, Any] = {"fingerprint": graph.fingerprint()}
    try:
        plan = make_plan(graph)
    except UnsupportedError as exc:
        return {**entry, "refused": one_line(exc, root)}
    entry.update(kind=plan.kind, family=plan.family)
    if isinstance(plan, ProgramPlan):
        entry["program"] = program_entry(plan)
    # a precision's entry, or "=<precision>" where it equals that one's
    by_precision: dict[str, dict[str, Any] | str] = {
        p: precision_entry(plan, p, labels, root) for p in PRECISIONS}
    first = PRECISIONS[0]
    for p in PRECISIONS[1:]:
        # most spaces do not depend on the contract: said so rather than written twice
        if by_precision[p] == by_precision[first]:
            by_precision[p] = f"={first}"
    entry["precisions"] = by_precision
    return entry


# -- the replay bench -------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayRuns:
    """Which replay runs: problems of benchmarks/problems, strategies, seeds."""

    problems: tuple[str, ...] = REPLAY_PROBLEMS
    strategies: tuple[str, ...] = REPLAY_STRATEGIES + ("exhaustive",)
    seeds: int = REPLAY_SEEDS


SUBSET_REPLAY = ReplayRuns(("softmax_short_rows",), seeds=1)
"""the replay runs the default test tier checks"""


def run_key(problem: str, strategy: str, seed: int) -> str:
    return f"{problem} {strategy} {seed}"


def replay_entry(root: Path, runs: ReplayRuns = ReplayRuns()) -> dict[str, Any]:
    """Each replay run's measured times, in the order measured (None: a failed candidate)."""
    sweeps = root / SWEEPS
    paths = [root / FILE_SUITES["problems"] / f"{p}.py" for p in runs.problems]
    for path in paths:
        if not path.is_file():
            raise SettingsError(f"{path}: no such problem file")
    out: dict[str, Any] = {}
    benched = tuple(s for s in runs.strategies if s != "exhaustive")
    if benched:
        policy = shipped_policy()
        if policy is None and "marl" in benched:
            raise SettingsError("the shipped policy is missing from this install")
        settings = BenchSettings.of(suite=",".join(str(p) for p in paths), replay_root=str(sweeps),
                                 strategies=benched, budget=REPLAY_BUDGET, seeds=runs.seeds,
                                 policy=str(policy) if policy else None, precision="fp32",
                                 tolerance="strict")
        result = run_bench(settings)
        if result.skipped:
            raise SettingsError(f"replay goldens: not benched: {result.skipped}")
        for r in result.runs:
            out[run_key(r.problem, r.strategy, r.seed)] = r.times
    if "exhaustive" in runs.strategies:
        # `bench` does not offer exhaustive search: the same settings as its runs
        # (`bench.strategy_settings`), through the public API; the order has no seed
        for path in paths:
            res = tune(path, device="replay", replay_root=str(sweeps), strategy="exhaustive",
                       budget=REPLAY_BUDGET, batch=4, seed=0, baselines=False,
                       include_default=False, precision="fp32", store=":memory:")
            out[run_key(path.stem, "exhaustive", 0)] = [
                t.measurement.time_ms if t.measurement.ok else None for t in res.trials]
    return dict(sorted(out.items()))


# -- files ------------------------------------------------------------------------------------

def settings_header() -> dict[str, Any]:
    """What the goldens were computed with: a change here makes every golden stale."""
    return {"format": FORMAT, "precisions": list(PRECISIONS), "samples": SAMPLES,
            "sample_seed": SAMPLE_SEED, "program_choices": PROGRAM_CHOICES,
            "hash_chars": HASH_CHARS, "regenerate": REGENERATE}


def dumps(header: dict[str, Any], entries: dict[str, Any]) -> str:
    """Compact JSON, one line per entry (a change shows as that entry's line in a diff)."""
    lines = [f"{json.dumps(k)}:{canonical_json(v)}" for k, v in sorted(entries.items())]
    return ("{\"header\":" + canonical_json(header) + ",\n\"entries\":{\n" + ",\n".join(lines)
            + "\n}}\n")


def file_name(group: str) -> str:
    return f"{group}.json"


def read(folder: Path, group: str) -> dict[str, Any]:
    path = folder / file_name(group)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"{path}: no goldens (write them with `{REGENERATE}`)") from None
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path}: not a goldens file ({exc})") from None
    return data


def compute(root: Path, only: Iterable[str] | None = None,
            progress: Callable[[str], None] | None = None
            ) -> tuple[dict[str, dict[str, Any]], Labels]:
    """Entries per group (suite), for every case or those keyed in `only`."""
    wanted = None if only is None else set(only)
    selected = [c for c in cases(root) if wanted is None or c.key in wanted]
    if wanted is not None and len(selected) != len(wanted):
        missing = sorted(wanted - {c.key for c in selected})
        raise SettingsError(f"no such problems: {', '.join(missing)}")
    groups: dict[str, dict[str, Any]] = {}
    labels = Labels()
    for case in selected:
        groups.setdefault(suite_of(case.key), {})[case.key] = problem_entry(case, root, labels)
        if progress:
            progress(case.key)
    return groups, labels


def check(root: Path, folder: Path, only: Iterable[str] | None = None,
          replay: ReplayRuns | None = ReplayRuns(),
          progress: Callable[[str], None] | None = None) -> list[str]:
    """Every difference between the goldens in `folder` and what the code computes now (the
    cases keyed in `only`, or all of them; the replay runs `replay`, or none)."""
    names = list(FILE_SUITES) + ["unseen_ops"] + (["replay"] if replay is not None else [])
    stored = {n: read(folder, n) for n in names}  # read first: a missing file fails at once
    out = [f"{file_name(n)}: written with other settings ({d['header']}); regenerate"
           for n, d in stored.items() if d["header"] != settings_header()]
    if out:
        return out
    groups, labels = compute(root, only, progress)
    for group in names[:len(FILE_SUITES) + 1]:
        entries = stored[group]["entries"]
        if only is not None:
            entries = {k: v for k, v in entries.items() if k in set(only)}
        out += differences(entries, groups.get(group, {}), labels)
    if replay is not None:
        now = replay_entry(root, replay)
        runs = stored["replay"]["entries"]
        if replay != ReplayRuns():  # a subset of the runs: those it made
            runs = {k: v for k, v in runs.items() if k in now}
        out += replay_differences(runs, now)
    return out


def write(root: Path, folder: Path, overwrite: bool,
          progress: Callable[[str], None] | None = None) -> list[Path]:
    """Compute every golden and write them to `folder` (refusing to replace files there
    without `overwrite`): each file whole, none half-written."""
    names = list(FILE_SUITES) + ["unseen_ops", "replay"]
    paths = [folder / file_name(n) for n in names]
    present = [p for p in paths if p.exists()]
    if present and not overwrite:
        raise SettingsError(f"{present[0]}: goldens exist; pass --update to overwrite them")
    groups, _ = compute(root, None, progress)
    groups["replay"] = replay_entry(root)
    texts = {folder / file_name(n): dumps(settings_header(), groups.get(n, {})) for n in names}
    for path, text in texts.items():  # computed first: an error leaves the old files whole
        write_atomic(path, text.encode())
    return list(texts)


def update_entries(root: Path, folder: Path, only: Iterable[str],
                   progress: Callable[[str], None] | None = None) -> list[Path]:
    """Recompute the problems keyed in `only` and replace their entries in the goldens in
    `folder`, every other entry and the replay runs kept as they are: a change meant for a
    few problems regenerated in minutes, not the whole set's half hour. The files must have
    been written with the current settings; each file is written whole, none half-written."""
    names = list(FILE_SUITES) + ["unseen_ops"]
    stored = {n: read(folder, n) for n in names}
    stale = [n for n, d in stored.items() if d["header"] != settings_header()]
    if stale:
        raise SettingsError(f"{file_name(stale[0])}: written with other settings; regenerate "
                            "every golden (--update without --only)")
    groups, _ = compute(root, only, progress)
    texts = {}
    for name, entries in groups.items():
        merged = dict(stored[name]["entries"])
        merged.update(entries)
        texts[folder / file_name(name)] = dumps(settings_header(), dict(sorted(merged.items())))
    for path, text in texts.items():  # computed first: an error leaves the old files whole
        write_atomic(path, text.encode())
    return list(texts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.experiments.goldens",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true",
                    help="write the goldens anew, replacing those in --out")
    ap.add_argument("--out", type=Path, help=f"where to write (default: ROOT/{GOLDENS_DIR}); "
                    "existing goldens there are kept unless --update")
    ap.add_argument("--root", type=Path, default=None,
                    help="the checkout holding the suites (default: this package's)")
    ap.add_argument("--only", help="comma-separated problem keys to check (e.g. "
                    "problems/softmax_short_rows), or with --update to recompute and replace "
                    "in the goldens, the others kept; no replay runs")
    ap.add_argument("--quiet", action="store_true", help="no line per problem")
    args = ap.parse_args(argv)
    root = (args.root or repo_root()).resolve()
    t0 = time.perf_counter()

    def progress(key: str) -> None:
        if not args.quiet:
            print(f"{time.perf_counter() - t0:7.1f}s {key}", file=sys.stderr, flush=True)

    try:
        if args.update or args.out is not None:
            if args.only:
                if not args.update:
                    raise SettingsError("--only with --out: pass --update to replace those "
                                        "problems' entries in the goldens there")
                paths = update_entries(root, args.out or root / GOLDENS_DIR,
                                       args.only.split(","), progress)
            else:
                paths = write(root, args.out or root / GOLDENS_DIR, args.update, progress)
            print(f"wrote {', '.join(str(p) for p in paths)} "
                  f"in {time.perf_counter() - t0:.0f} s")
            return 0
        only = args.only.split(",") if args.only else None
        found = check(root, root / GOLDENS_DIR, only, None if only else ReplayRuns(), progress)
    except CudaAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for line in found:
        print(line)
    print(f"{len(found)} differences from the goldens in {time.perf_counter() - t0:.0f} s"
          + (f"; if intended: {REGENERATE}" if found else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
