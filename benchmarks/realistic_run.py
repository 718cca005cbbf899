"""A suite on the GPU, end to end (issue 33, item 5; issue 48, item 4): `gpu_suite.py --parts
realistic [--realistic-suite benchmarks/conv_chains]`.

For each problem of the suite's folder (benchmarks/realistic/ by default; cheapest first, by its
manifest's guess), as a user would: `cuda-agent tune` in a subprocess of its own under a time
limit and a budget (or, `as_user`, with no flag but the time limit), then the independent harness
(`realistic_harness.py`, another process) on the `model_new.py` it wrote. One row per problem in
DESIGN.md's result-file format, written after every problem to `<suite>.json` (realistic.json,
conv_chains.json), so that the suite spreads over several device calls: rows already in the
results files given are skipped, a problem the call's deadline cuts is left for the next call
(not recorded as a time-out), and `--realistic-gpus` runs one problem per GPU at once.

Statuses: ok (the harness verified the kernel and timed it), oom, timeout (the tune ran past its
time limit plus a grace, or the harness past its own limit), wrong (the harness found the output
or the running statistics off), unsupported (the tune's one-line refusal), error (anything else,
with its one line).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from queue import Empty, Queue

from benchmarks import realistic_suite

ROOT = Path(__file__).resolve().parents[1]

STATUSES = ("ok", "oom", "timeout", "wrong", "unsupported", "error")
CLI = [sys.executable, "-c", "from cuda_agent.cli import main; main()"]
DEFAULT_POLICY = "benchmarks/policies/h200-gpu-1203-multi.pt"
TARBALL_LIMIT = 15 << 20  # past it, the logs' tarball leaves out the emitted modules
# the row's fields that are the harness's to fill (the tune's eager/compile are not timed)
HARNESS_OWNS = ("status", "message", "eager_ms", "compile_ms")

# the Python API's equivalent of `cuda-agent tune ... --time-limit S` for a tree whose CLI lacks
# the flag: TuneSettings.time_limit_s stops the search (not the start-up) once S seconds passed
FALLBACK_TUNE = """\
import sys
import cuda_agent
path, out, budget, limit, store, policy = sys.argv[1:7]
opts, strategy = {}, "random"
if policy:
    strategy = "marl"
    opts = {"policy": policy, "agents": "multi", "budget": int(budget), "patience": 3}
r = cuda_agent.tune(path, out=out, device="cuda", strategy=strategy,
                    budget=int(budget), time_limit_s=float(limit), baselines=False, store=store,
                    strategy_options=opts)
sys.exit(0 if r.best is not None else 1)
"""


@dataclass
class RunSettings:
    """One call's share of the suite."""

    work: Path
    """working folder (outside $OUT): per-problem outputs, logs, the merged results"""
    final: Path
    """$OUT: <suite>.json and <suite>-logs.tgz, rewritten after every problem"""
    deadline: float
    """epoch seconds by which every subprocess of this call has ended"""
    suite: Path = field(default_factory=lambda: realistic_suite.SUITE)
    """the suite's folder: its problem files and their manifest (suite.json)"""
    budget: int | None = 32
    """`tune --budget`; None: not passed (tune's own default)"""
    time_limit_s: float = realistic_suite.TIME_LIMIT_S
    """`tune --time-limit`"""
    tune_grace_s: float = 90.0
    """past the time limit, seconds a tune may take (start-up, a last batch, writing) before it
    is killed and recorded as a time-out"""
    harness_limit_s: float = 300.0
    """seconds the harness may take before it is killed and recorded as a time-out"""
    policy: str | None = DEFAULT_POLICY
    """`tune --policy` (the trained agents), or None for the CLI's default strategy"""
    tune_args: list[str] = field(default_factory=list)
    """further `tune` flags, e.g. ['--precision', 'tf32']"""
    tune_baselines: bool = False
    """let the tune time torch eager and torch.compile itself (its report's headline) rather than
    pass --no-baselines: the harness times them anyway, independently"""
    max_autotune: bool = False
    """the harness times torch.compile's max-autotune mode too (minutes of autotuning each)"""
    seeds: str = "1,2,3"
    """the harness's input seeds"""
    gpus: list[str] = field(default_factory=lambda: ["0"])
    """CUDA_VISIBLE_DEVICES value per worker: one problem at a time on each"""
    previous: list[Path] = field(default_factory=list)
    """results files of earlier calls: their problems are not run again"""
    rerun: tuple[str, ...] = ()
    """statuses whose problems are run again all the same (e.g. ('error',))"""
    only: list[str] = field(default_factory=list)
    """problem names to run (default: the whole manifest)"""


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES values (one each)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ["0"]
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(max(n, 1))]


def tune_has_time_limit() -> bool:
    """Whether this tree's `cuda-agent tune` takes --time-limit (issue 33, item 2)."""
    try:
        out = subprocess.run(CLI + ["tune", "--help"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    except (OSError, subprocess.SubprocessError):
        return False
    return "--time-limit" in out.stdout


def as_user(s: RunSettings, tune_grace_s: float | None = None) -> RunSettings:
    """`s` for a tune as a user runs it: no flag but the time limit (tune's default budget,
    strategy, precision and baselines); --device, --out and --store only say where. The
    baselines come after the search: `tune_grace_s` gives them their time."""
    return replace(s, budget=None, policy=None, tune_args=[], tune_baselines=True,
                   tune_grace_s=s.tune_grace_s if tune_grace_s is None else tune_grace_s)


def tune_command(problem: Path, out: Path, s: RunSettings, cli_limit: bool) -> list[str]:
    store = str(out.parent / "store.sqlite")  # fresh per problem: nothing reused from before
    if not cli_limit:
        return [sys.executable, "-c", FALLBACK_TUNE, str(problem), str(out), str(s.budget or 64),
                str(s.time_limit_s), store, s.policy or ""]
    return CLI + ["tune", str(problem), "--device", "cuda"] + (
        ["--budget", str(s.budget)] if s.budget is not None else []) + [
        "--time-limit", str(s.time_limit_s), "--out", str(out), "--store", store] + (
        [] if s.tune_baselines else ["--no-baselines"]) + (
        ["--policy", s.policy] if s.policy else []) + s.tune_args


def harness_command(problem: Path, model_new: Path, out: Path, seeds: str,
                    max_autotune: bool = False) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks/realistic_harness.py"), str(problem),
            str(model_new), "--out", str(out), "--seeds", seeds] + (
        ["--max-autotune"] if max_autotune else [])


def stem(s: RunSettings) -> str:
    """The suite's name in its files: realistic.json, conv_chains.json, and their logs."""
    return s.suite.name


class GpuMemorySampler:
    """Peak device memory in use on one GPU while a subprocess runs (nvidia-smi every 0.5 s, all
    processes on the device, less what was in use before): the tool's footprint as the machine
    sees it, whatever the tool reports about itself."""

    def __init__(self, gpu: str, period_s: float = 0.5):
        self.gpu, self.period = gpu, period_s
        self.base = self._used()
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _used(self) -> int | None:
        try:
            out = subprocess.run(["nvidia-smi", "-i", self.gpu, "--query-gpu=memory.used",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
            return int(out.splitlines()[0]) << 20  # MiB
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            used = self._used()
            if used is not None and self.base is not None:
                self.peak = max(self.peak or 0, used - self.base)

    def __enter__(self) -> "GpuMemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


INTERRUPT_GRACE_S = 30.0
"""after a time limit, how long a process interrupted (SIGINT, as Ctrl-C) has to write what it
kept before it is killed: a tune writes its best so far and its report (phases, memory)"""


def run_limited(cmd: list[str], log: Path, limit_s: float, deadline: float,
                env: dict[str, str]) -> tuple[int | str, float]:
    """Run `cmd` (output to `log`) for at most `limit_s` seconds and never past `deadline`;
    (exit code or 'timeout' or 'cut', wall seconds). Past `limit_s` its process group is
    interrupted first (a tune killed outright left an empty log and no report: gemm_square_16k,
    2026-12-06), then killed; at the deadline, killed (the tune's compile pool and GPU worker
    with it)."""
    t0 = time.time()
    room = deadline - t0
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            return proc.wait(timeout=max(1.0, min(limit_s, room))), time.time() - t0
        except subprocess.TimeoutExpired:
            timed_out = limit_s <= room
            if timed_out:
                grace = min(INTERRUPT_GRACE_S, deadline - time.time())
                if grace > 1.0 and _signal_group(proc, signal.SIGINT):
                    try:
                        proc.wait(timeout=grace)
                    except subprocess.TimeoutExpired:
                        pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            return ("timeout" if timed_out else "cut"), time.time() - t0


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Send `sig` to `proc`'s process group; False where it is gone."""
    try:
        os.killpg(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False


def classify_tune(rc: int | str, output: str, report: dict | None,
                  model_new: bool) -> tuple[str, str]:
    """A finished tune's (status, one-line message); ('ok', '') when it wrote a kernel."""
    if rc == 0 and model_new:
        return "ok", ""
    text = output.lower()
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
    message = errors[-1] if errors else (lines[-1] if lines else f"exit {rc}")
    fails = " ".join(str(c.get("error_msg") or "") for c in (report or {}).get("candidates", [])
                     if not c.get("ok")).lower()
    if "out of memory" in text or "outofmemoryerror" in text or "out of memory" in fails:
        oom = next((line for line in lines if "out of memory" in line.lower()), message)
        return "oom", oom[:300]
    if message.lower().startswith("unsupported") or "unsupported:" in message.lower():
        return "unsupported", message[:300]
    if "time limit" in message.lower():  # stopped by its own limit with nothing verified
        return "timeout", message[:300]
    if rc == 0:
        message = f"exit 0 but no model_new.py was written ({message})"
    return "error", message[:300]


def report_fields(report: dict | None) -> dict:
    """What a row keeps of the tune's report.json (DESIGN.md's fields and the memory section)."""
    if not report:
        return {}
    keep = ("family", "strategy", "evals", "evals_to_95", "best_ms", "space_size", "precision",
            "precision_asked", "commit", "failures", "gpu", "headline", "library_floor_ms",
            "own_templates_ms", "won_by")  # gpu: a row the harness never ran still names it
    row = {k: report.get(k) for k in keep if k in report}
    row["tune_verified"] = bool(report.get("best") and report["best"].get("verified"))
    # where the tune's wall time went: the tuner's phases and the GPU worker's set-up phases
    row["tune_phases"] = report.get("phases")
    row["tune_setup_phases"] = (report.get("facts") or {}).get("setup_phases")
    row["tune_cases_seconds"] = (report.get("facts") or {}).get("cases_seconds")
    if report.get("memory") is not None:  # issue 33 item 1's section, where the tree has it
        row["tune_memory"] = report["memory"]
        peaks = [v for k, v in _flat(report["memory"]) if "peak" in k and
                 isinstance(v, (int, float))]
        row["tune_reported_peak_bytes"] = max(peaks) if peaks else None
    return row


def _flat(d: object, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(d, dict):
        return [kv for k, v in d.items() for kv in _flat(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), d)]


def run_problem(entry: dict, gpu: str, s: RunSettings, cli_limit: bool) -> dict | None:
    """Tune then check one problem on one GPU; its row, or None when the deadline cut it."""
    name = entry["problem"]
    path = s.suite / f"{name}.py"
    d = s.work / stem(s) / name
    shutil.rmtree(d, ignore_errors=True)  # a warm machine's earlier, unfinished attempt
    (d / "out").mkdir(parents=True)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    row: dict = {"problem": name, "family": entry["family"], "bytes": entry["bytes"],
                 "flops": entry["flops"], "input_bytes": entry["input_bytes"],
                 "budget": s.budget, "time_limit_s": s.time_limit_s,
                 "tune_time_limit_flag": cli_limit, "policy": s.policy,
                 "tune_args": s.tune_args, "precision_asked": precision_of(s.tune_args),
                 "verified": False, "best_ms": None,
                 "eager_ms": None, "compile_ms": None, "strategy": None, "evals": None,
                 "evals_to_95": None}
    with GpuMemorySampler(gpu) as mem:
        rc, wall = run_limited(tune_command(path, d / "out", s, cli_limit), d / "tune.log",
                               s.time_limit_s + s.tune_grace_s, s.deadline, env)
    if rc == "cut":
        return None
    row.update(tune_rc=rc, tune_wall_s=round(wall, 1), tune_peak_gpu_bytes=mem.peak)
    report_path = d / "out" / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    row.update(report_fields(report))
    row["best_ms"] = (report or {}).get("best_ms")
    if rc == "timeout":
        row.update(status="timeout", message=f"tune ran past {s.time_limit_s + s.tune_grace_s:.0f}"
                   f" s (time limit {s.time_limit_s:.0f} s + {s.tune_grace_s:.0f} s grace)")
        return row
    output = (d / "tune.log").read_text(errors="replace")
    status, message = classify_tune(rc, output, report, (d / "out" / "model_new.py").exists())
    if status != "ok":
        row.update(status=status, message=message)
        return row
    hrc, hwall = run_limited(harness_command(path, d / "out" / "model_new.py",
                                             d / "harness.json", s.seeds, s.max_autotune),
                             d / "harness.log", s.harness_limit_s, s.deadline, env)
    if hrc == "cut":
        return None
    row["harness_wall_s"] = round(hwall, 1)
    partial = _read_json(d / "harness.json") if hrc == "timeout" else None
    if partial and partial.get("status") == "ok" and partial.get("compile_max") == "running":
        # killed in max-autotune's first call: ModelNew's verdict and the other timings stand
        partial.update(compile_max="timeout", compile_max_error="max-autotune torch.compile "
                       f"ran past the harness's {s.harness_limit_s:.0f} s")
        (d / "harness.json").write_text(json.dumps(partial, indent=1, default=str))
    elif hrc == "timeout":
        row.update(status="timeout", message=f"harness ran past {s.harness_limit_s:.0f} s")
        return row
    if not (d / "harness.json").exists():
        tail = (d / "harness.log").read_text(errors="replace").strip().splitlines()[-1:]
        row.update(status="error", message=f"harness exit {hrc}: {' '.join(tail)}"[:300])
        return row
    h = json.loads((d / "harness.json").read_text())
    h.pop("problem", None)
    h.pop("traceback", None)  # kept in harness.json, in the logs' tarball
    for k, v in h.items():  # the harness's own measure of a field the row has is kept apart
        row[k if k not in row or k in HARNESS_OWNS else f"harness_{k}"] = v
    row["verified"] = h["status"] == "ok"
    return row


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def precision_of(tune_args: list[str] | None) -> str:
    """The precision a call's `tune` flags ask for: `--precision`'s value, else `tune`'s
    default, "auto" (each product as the user's torch runs it)."""
    args = list(tune_args or [])
    for i, a in enumerate(args):
        if a == "--precision" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--precision="):
            return a.split("=", 1)[1]
    return "auto"


def row_precision(row: dict) -> str:
    """The precision a row was tuned at, as asked: its `precision_asked` (rows from the
    precision's "auto" default on), else its flags' `--precision`; a row with neither was tuned
    before "auto" existed, when `tune`'s default was strict fp32."""
    if row.get("precision_asked"):
        return row["precision_asked"]
    args = list(row.get("tune_args") or [])
    if any(a == "--precision" or a.startswith("--precision=") for a in args):
        return precision_of(args)
    return "fp32"


def load_rows(files: list[Path], precision: str | None = None) -> dict[str, dict]:
    """Rows of earlier calls by problem (a later file's row wins); with `precision`, only the
    rows tuned at it (a TF32 run's problems are not done because their fp32 rows are)."""
    rows: dict[str, dict] = {}
    for f in files:
        for r in json.loads(f.read_text())["rows"]:
            if precision is None or row_precision(r) == precision:
                rows[r["problem"]] = r
    return rows


def select(manifest: list[dict], only: list[str], suite: str = "realistic") -> list[str]:
    """Problem names from `only`'s names and `family:WORD` entries (every problem whose family
    has WORD, e.g. family:conv for the convolutions and their chains); unknown names refused."""
    names, unknown = [], []
    for item in only:
        if item.startswith("family:"):
            word = item.split(":", 1)[1]
            found = [e["problem"] for e in manifest if word in e["family"].split("+")]
            names += found
            if not found:
                unknown.append(item)
        elif any(e["problem"] == item for e in manifest):
            names.append(item)
        else:
            unknown.append(item)
    if unknown:
        raise SystemExit(f"error: not in the {suite} suite: {', '.join(unknown)}")
    return list(dict.fromkeys(names))


def todo(manifest: list[dict], done: dict[str, dict], rerun: tuple[str, ...] = (),
         only: list[str] | None = None) -> list[dict]:
    """The manifest's entries still to run, in its order (cheapest first)."""
    wanted = set(only) if only else None
    return [e for e in manifest if (wanted is None or e["problem"] in wanted) and
            (e["problem"] not in done or done[e["problem"]].get("status") in rerun)]


def run_facts(ordered: list[dict]) -> dict:
    """A result file's facts from its rows: the GPU and torch of the first row that names
    them, today's date, the commit ($CUDA_AGENT_COMMIT), the rows' median copy bandwidth."""
    first = next((r for r in ordered if r.get("gpu")), {})
    bandwidths = sorted(r["copy_tbps"] for r in ordered if r.get("copy_tbps"))
    return {"gpu": first.get("gpu"), "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "commit": os.environ.get("CUDA_AGENT_COMMIT", "unknown"),
            "torch": first.get("torch"),
            "copy_tbps": bandwidths[len(bandwidths) // 2] if bandwidths else None}


def results_doc(rows: dict[str, dict], manifest: list[dict], settings: RunSettings) -> dict:
    """DESIGN.md's result file: rows in the manifest's order, the run's facts at the top."""
    ordered = [rows[e["problem"]] for e in manifest if e["problem"] in rows]
    return {**run_facts(ordered),
            "suite": realistic_suite.suite_name(settings.suite), "problems": len(manifest),
            "settings": {"budget": settings.budget, "time_limit_s": settings.time_limit_s,
                         "tune_grace_s": settings.tune_grace_s,
                         "harness_limit_s": settings.harness_limit_s,
                         "policy": settings.policy, "tune_args": settings.tune_args,
                         "tune_baselines": settings.tune_baselines,
                         "max_autotune": settings.max_autotune,
                         "precision_asked": precision_of(settings.tune_args),
                         "seeds": settings.seeds},
            "rows": ordered}


def write_results(s: RunSettings, rows: dict[str, dict], manifest: list[dict]) -> None:
    """<suite>.json (work and $OUT) and the logs' tarball, replaced whole each time."""
    name = stem(s)
    text = json.dumps(results_doc(rows, manifest, s), indent=1, default=str) + "\n"
    for folder in (s.work, s.final):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{name}.json.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / f"{name}.json")
    tmp = s.final / f"{name}-logs.tgz.tmp"
    for kernels in (True, False):  # the device tool brings back files of at most 16 MiB
        with tarfile.open(tmp, "w:gz") as tar:
            for d in sorted((s.work / name).glob("*")):
                for f in sorted(d.rglob("*")):
                    if f.is_file() and "store.sqlite" not in f.name and (
                            kernels or f.name not in ("model_new.py", "kernel.cu")):
                        tar.add(f, arcname=str(f.relative_to(s.work / name)))
        if tmp.stat().st_size < TARBALL_LIMIT:
            break
    os.replace(tmp, s.final / f"{name}-logs.tgz")


def table(rows: list[dict]) -> str:
    """A short fixed-width table of rows."""
    def ms(v: object) -> str:
        return f"{v:.3f}" if isinstance(v, (int, float)) else "-"

    head = f"{'problem':40s} {'status':11s} {'tune s':>7s} {'new ms':>9s} {'compile ms':>10s} " \
           f"{'vs compile':>10s}  message"
    lines = [head, "-" * len(head)]
    for r in rows:
        vs = r.get("speedup_vs_compile")
        lines.append(f"{r['problem'][:40]:40s} {r['status']:11s} "
                     f"{r.get('tune_wall_s') or 0:>7.0f} {ms(r.get('new_ms')):>9s} "
                     f"{ms(r.get('compile_ms')):>10s} "
                     f"{(f'{vs:.2f}x' if vs else '-'):>10s}  {(r.get('message') or '')[:70]}")
    return "\n".join(lines)


def run_suite(s: RunSettings, log=print) -> dict[str, dict]:  # noqa: ANN001
    """Run what is left of the suite within the deadline; the merged rows by problem."""
    missing = [str(f) for f in s.previous if not f.is_file()]
    if missing:
        raise SystemExit(f"error: no such results file: {', '.join(missing)}")
    manifest_file = realistic_suite.manifest_path(s.suite)
    if not manifest_file.is_file():
        raise SystemExit(f"error: {manifest_file}: no such manifest (write it with python "
                         f"benchmarks/realistic_suite.py --suite {s.suite})")
    manifest = realistic_suite.read(manifest_file)
    name = stem(s)
    only = select(manifest, s.only, name)
    precision = precision_of(s.tune_args)
    rows = load_rows(s.previous, precision)
    own = s.work / f"{name}.json"
    # this machine's rows: a warm machine's earlier call of this session, and this call's. The
    # results file holds only these, under this machine's GPU: the earlier files' rows (other
    # GPUs, other commits) decide what is left to run, and stay in their own files
    mine = load_rows([own], precision) if own.exists() and own not in s.previous else {}
    rows = {**mine, **rows}
    left = todo(manifest, rows, s.rerun, only)
    log(f"{name}: {len(rows)} problems done before, {len(left)} to run on "
        f"{len(s.gpus)} GPU(s), {s.deadline - time.time():.0f} s left")
    cli_limit = tune_has_time_limit()
    if not cli_limit:
        log(f"{name}: this tree's `cuda-agent tune` has no --time-limit; tuning through the "
            "Python API's time_limit_s instead (its start-up is not limited"
            + (f"; {' '.join(s.tune_args)} not passed" if s.tune_args else "") + ")")
    queue: Queue = Queue()
    for e in left:
        queue.put(e)
    lock = threading.Lock()
    ran: list[dict] = []

    def worker(gpu: str) -> None:
        while True:
            try:
                entry = queue.get_nowait()
            except Empty:
                return
            est = realistic_suite.estimate_s(entry, s.time_limit_s, s.tune_baselines,
                                             s.max_autotune)
            if time.time() + est > s.deadline:
                log(f"{name} [{gpu}]: {entry['problem']} (about {est:.0f} s) left for the "
                    "next call")
                return
            log(f"{name} [{gpu}]: {entry['problem']} ({entry['input_bytes'] / 2**30:.1f} GiB"
                f", about {est:.0f} s)")
            try:
                row = run_problem(entry, gpu, s, cli_limit)
            except Exception as exc:  # noqa: BLE001 - the suite goes on without this problem
                row = {"problem": entry["problem"], "family": entry["family"],
                       "status": "error", "message": f"suite runner: {type(exc).__name__}: "
                       f"{exc}"[:300], "verified": False, "tune_args": s.tune_args,
                       "precision_asked": precision_of(s.tune_args)}
            if row is None:
                log(f"{name} [{gpu}]: {entry['problem']} cut by the deadline; left for the "
                    "next call")
                return
            row["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            with lock:
                rows[entry["problem"]] = mine[entry["problem"]] = row
                ran.append(row)
                write_results(s, mine, manifest)
            log(f"{name} [{gpu}]: {entry['problem']}: {row['status']} "
                f"{row.get('message') or ''}".rstrip())

    threads = [threading.Thread(target=worker, args=(g,)) for g in s.gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    write_results(s, mine, manifest)
    counts = {st: sum(1 for r in rows.values() if r.get("status") == st) for st in STATUSES}
    log(f"{name}: this call\n" + table(ran))
    log(f"{name}: {len(rows)} of {len(manifest)} problems done ("
        + ", ".join(f"{k} {v}" for k, v in counts.items() if v) + f"); "
        f"{len(todo(manifest, rows, (), only))} left")
    return rows
