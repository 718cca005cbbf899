"""Kernel Tuner's own strategies, through its real API, on cuda-agent's configurations.

The tunable parameters are the slots that vary among the configurations, and a restriction
admits exactly those combinations, so Kernel Tuner searches the same configurations as every
other strategy. `tune_kernel` runs in simulation mode (Kernel Tuner compiles nothing) with
`max_fevals` as the budget; the order in which it evaluated configurations is what the
comparison counts.

Two sources of results:

* `run` (replay): a recorded sweep becomes Kernel Tuner's cache file, as its simulation mode
  expects.
* `run_live` (cuda, sim): the cache starts empty and a configuration Kernel Tuner asks for is
  measured by cuda-agent's own runner (the evaluation protocol of DESIGN.md) at the moment it
  asks, then served to it from the cache; the search loop drives it as a proposer
  (`kernel_tuner_ask`), on a thread or in a process of its own (`_child_search`). Kernel
  Tuner's simulation runner is swapped for one subclass that fills its cache on a miss, so its
  strategies, budget accounting and restrictions are its own code.

Warm start (`warm`, the bench's "kt_warm:<strategy>" columns; issue 34): Kernel Tuner 1.5 takes
one starting point, the strategy option `x0`, in the strategies built on its `CostFunc`
start position (`genetic_algorithm` puts it in its first population, `simulated_annealing`
starts its walk there); `bayes_opt` and `random_sample` refuse it. So a warm search measures
the analytic model's top picks first (they count against the budget like any measurement),
then runs the strategy with `x0` the fastest of them where it accepts one, its cache already
holding the picks and its `max_fevals` the budget less the picks (Kernel Tuner counts a
configuration served from its cache as an evaluation when its search first visits it, so a
pick it goes back to costs it one of its own; the whole search never measures more than the
budget).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import CudaAgentError, SettingsError, first_line
from ..space.slots import Config

STRATEGIES = ("genetic_algorithm", "bayes_opt", "simulated_annealing", "random_sample")
X0_STRATEGIES = ("genetic_algorithm", "simulated_annealing")
"""the strategies above that accept a starting point (`x0`) in Kernel Tuner 1.5"""

Record = dict[str, Any]
"""{"config": {slot: value}, "ok": bool, "time_ms": float | None}"""


def _key(values: list[Any]) -> str:
    return ",".join(str(v) for v in values)


class _Params:
    """Kernel Tuner's view of a list of configurations: the varying slots as tunable
    parameters (dots become '__': Kernel Tuner's names are Python identifiers)."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        slots = sorted({k for c in configs for k in c})
        values: dict[str, list[Any]] = {}
        for s in slots:
            seen: set[str] = set()  # by JSON form: 1, 1.0 and True are three values here
            values[s] = []
            for c in configs:
                v = c.get(s)
                if json.dumps(v) not in seen:
                    seen.add(json.dumps(v))
                    values[s].append(v)
        # fewest values first: the order in which Kernel Tuner's constraint solver assigns
        # parameters (see `_config_set`)
        varying = sorted((s for s in slots if len(values[s]) > 1), key=lambda s: len(values[s]))
        self.tune_params: dict[str, list] = {s.replace(".", "__"): values[s] for s in varying}
        self.names = list(self.tune_params)
        self.by_key = {self.key_of(c): c for c in configs}

    def restrictions(self) -> list[Any]:
        """One constraint that admits exactly the configurations (see `_config_set`)."""
        return [_config_set(self)]

    def key_of(self, cfg: dict[str, Any]) -> str:
        return _key([cfg.get(n.replace("__", ".")) for n in self.names])

    def entry(self, cfg: dict[str, Any], rec: Record) -> dict[str, Any]:
        """A Kernel Tuner cache entry for one result."""
        e: dict[str, Any] = {n: cfg.get(n.replace("__", ".")) for n in self.names}
        e.update(compile_time=0.0, verification_time=0.0, benchmark_time=0.0,
                 strategy_time=0.0, framework_time=0.0, timestamp="")
        if rec.get("ok") and rec.get("time_ms") is not None:
            e.update(time=float(rec["time_ms"]), times=[float(rec["time_ms"])])
        else:
            e["time"] = "RuntimeFailedConfig"
            e["__error__"] = "RuntimeFailedConfig"
        return e


def _config_set(params: _Params) -> Any:
    """A python-constraint constraint over every parameter that admits exactly the
    configurations. Kernel Tuner builds its search space by backtracking over the parameters in
    the solver's order (most constrained first, then fewest values: with one constraint on all,
    `_Params`' order); checking each partial assignment against the configurations' prefixes
    prunes a branch as soon as it matches none, so the solver enumerates the configurations and
    not the product of every slot's values (hundreds of millions for a GEMM space)."""
    from constraint import Constraint

    names = params.names
    # keyed like the cache (str of each value): 1 and True are different values here
    prefixes = [{_key([c.get(n.replace("__", ".")) for n in names[:i]])
                 for c in params.by_key.values()} for i in range(len(names) + 1)]

    class ConfigSet(Constraint):
        def __call__(self, variables: Any, domains: Any, assignments: dict,
                     forwardcheck: Any = False, _unassigned: Any = None) -> bool:
            d = len(assignments)
            try:
                key = _key([assignments[n] for n in names[:d]])
            except KeyError:  # another order than expected: decided once all are assigned
                return True
            return key in prefixes[d]

    return ConfigSet()


@contextmanager
def _measuring_runner(params: _Params, measure: Callable[[list[dict[str, Any]]], list[Record]]
                      ) -> Iterator[None]:
    """Within the block, Kernel Tuner's simulation runner measures what is not in its cache."""
    from kernel_tuner.runners import simulation

    base = simulation.SimulationRunner

    class MeasuringRunner(simulation.SimulationRunner):  # `base`, restored after
        def run(self, parameter_space: Any, tuning_options: Any) -> list:
            parameter_space = list(parameter_space)
            left = tuning_options.budget.get_evaluations_remaining()
            if left is None:
                left = len(parameter_space)
            todo: list[str] = []
            for element in parameter_space:
                k = _key(list(element))
                if len(todo) >= left:
                    break
                if k not in tuning_options.cache and k in params.by_key and k not in todo:
                    todo.append(k)
            if todo:
                # one batch: cuda-agent builds a batch's kernels in parallel
                recs = measure([params.by_key[k] for k in todo])
                for k, rec in zip(todo, recs):
                    tuning_options.cache[k] = params.entry(params.by_key[k], rec)
            return super().run(parameter_space, tuning_options)

    simulation.SimulationRunner = MeasuringRunner
    try:
        yield
    finally:
        simulation.SimulationRunner = base


class StrategyFailed(Exception):
    """Kernel Tuner's strategy raised (bayes_opt will not start on a space smaller than its
    initial sample, 20). Like a failing candidate, this is data about the peer, not an error of
    the run: `order` holds what it evaluated before (what the bench credits it with), the
    message what it said."""

    def __init__(self, message: str, order: list[tuple[Config, "Record"]]) -> None:
        super().__init__(message)
        self.order = order


class _Stalled(Exception):
    """Kernel Tuner's genetic algorithm can make no new generation (see `_stall_guard`)."""


#: parent draws for one generation after which the genetic algorithm is taken to be stuck (a
#: generation of 20 needs about 10 when its children are new; a stuck one draws forever)
STALL_DRAWS = 2000


@contextmanager
def _stall_guard() -> Iterator[list[dict[str, Any]]]:
    """Kernel Tuner 1.5's genetic algorithm fills each generation with children it has not yet
    put in that generation, drawing parents until it has enough; on a small space (a recorded
    sweep of 8 configurations) the children its parents can make may all be there already,
    and the loop never ends (the replay bench ran 30 minutes on one problem). Within the
    block every result its runner returns is recorded in order, and a generation that draws
    parents `STALL_DRAWS` times raises `_Stalled`: the search ends there with what it
    evaluated, as it would at its budget. Everything else is Kernel Tuner's own code."""
    from kernel_tuner.runners import simulation
    from kernel_tuner.strategies import genetic_algorithm as ga

    evaluated: list[dict[str, Any]] = []
    runner, choice = simulation.SimulationRunner, ga.GeneticAlgorithm.weighted_choice
    draws: dict[str, Any] = {"generation": None, "count": 0}

    class RecordingRunner(simulation.SimulationRunner):  # `runner`, restored after
        def run(self, parameter_space: Any, tuning_options: Any) -> list:
            results = super().run(parameter_space, tuning_options)
            evaluated.extend(results)
            return results

    def weighted_choice(self: Any, population: list, n: int) -> list:
        if population is not draws["generation"]:  # each generation is a new list
            draws.update(generation=population, count=0)
        draws["count"] += 1
        if draws["count"] > STALL_DRAWS:
            raise _Stalled()
        return choice(self, population, n)

    simulation.SimulationRunner = RecordingRunner
    ga.GeneticAlgorithm.weighted_choice = weighted_choice
    try:
        yield evaluated
    finally:
        simulation.SimulationRunner, ga.GeneticAlgorithm.weighted_choice = runner, choice


def _tune(params: _Params, cache: dict[str, Any], strategy: str, budget: int, seed: int,
          x0: list[Any] | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """Kernel Tuner's `tune_kernel` in simulation mode on `cache`: its results, in order, and
    its error when its strategy raised (the results then are what it evaluated before).
    `x0`: its starting point (the parameters' values in `params.names` order), for the
    strategies that take one."""
    try:
        import kernel_tuner
    except ImportError:
        raise SettingsError("Kernel Tuner strategies need kernel_tuner: "
                            "pip install cuda-agent[tuners]") from None
    if strategy not in STRATEGIES:
        raise SettingsError(f"unknown Kernel Tuner strategy {strategy!r}; choose from "
                            f"{', '.join(STRATEGIES)}")
    restrictions = params.restrictions()
    fd, path = tempfile.mkstemp(prefix="cuda-agent-kt-", suffix=".json")
    os.close(fd)
    try:
        with open(path, "w") as f:
            json.dump({"device_name": "cuda-agent", "kernel_name": "ca", "problem_size": [1, 1, 1],
                       "tune_params_keys": params.names, "tune_params": params.tune_params,
                       "objective": "time", "cache": cache}, f, indent=1)
            # (indented: Kernel Tuner takes a file that does not end in "}\n}" or "}}}" for
            # one left open and appends closing brackets, which an empty cache would not need)
        random.seed(seed)
        np.random.seed(seed)
        error = None
        # Kernel Tuner warns about missing block-size parameters and its strategies' numerics;
        # neither concerns this search, and the warnings would bury the progress output
        with warnings.catch_warnings(), np.errstate(all="ignore"), _stall_guard() as evaluated:
            warnings.simplefilter("ignore")
            try:
                results, _ = kernel_tuner.tune_kernel(
                    "ca", "__global__ void ca() {}", (1, 1, 1), [], params.tune_params,
                    cache=path, simulation_mode=True, restrictions=restrictions,
                    strategy=strategy, strategy_options={
                        "max_fevals": budget,
                        **({"x0": x0} if x0 is not None and strategy in X0_STRATEGIES else {})},
                    quiet=True, verbose=False)
            except _Stalled:
                results = list(evaluated)
            except CudaAgentError:  # ours (the measuring side), not the peer's
                raise
            except Exception as exc:  # noqa: BLE001 - the peer's own failure, kept as data
                results, error = list(evaluated), f"Kernel Tuner {strategy}: {first_line(exc)}"
    finally:
        os.unlink(path)
    return [r for r in results if r is not None], error


def _order(params: _Params, results: list[dict[str, Any]], lookup: Callable[[str], Record],
           budget: int, first: list[str] | None = None) -> list[tuple[Config, Record]]:
    """The distinct configurations in the order evaluated, after the keys `first` (a warm
    start's picks, measured before the search)."""
    order: list[tuple[Config, Record]] = []
    seen = set()
    keys = list(first or []) + [_key([res[n] for n in params.names]) for res in results]
    for k in keys:
        if k in seen or k not in params.by_key:
            continue
        seen.add(k)
        order.append((Config.of(params.by_key[k]), lookup(k)))
    return order[:budget]


def _warm_keys(params: _Params, warm: list[dict[str, Any]] | None, budget: int) -> list[str]:
    """The picks' keys, distinct, those in the space, at most `budget`."""
    out: list[str] = []
    for cfg in warm or []:
        k = params.key_of(cfg)
        if k in params.by_key and k not in out:
            out.append(k)
    return out[:budget]


def _start(params: _Params, keys: list[str], result: Callable[[str], Record]
           ) -> list[Any] | None:
    """`x0`: the fastest measured pick (None: none of them ran)."""
    ok = [(result(k)["time_ms"], i) for i, k in enumerate(keys)
          if result(k).get("ok") and result(k).get("time_ms") is not None]
    if not ok:
        return None
    cfg = params.by_key[keys[min(ok)[1]]]
    return [cfg.get(n.replace("__", ".")) for n in params.names]


def run(records: list[Record], strategy: str, budget: int, seed: int,
        warm: list[dict[str, Any]] | None = None) -> list[tuple[Config, Record]]:
    """Configurations in the order Kernel Tuner evaluated them, with their recorded results.
    `warm`: configurations measured first, best first (see the module's docstring)."""
    if not records:
        return []
    params = _Params([r["config"] for r in records])
    by_key = {params.key_of(r["config"]): r for r in records}
    if not params.names:  # one configuration: nothing to search
        return [(Config.of(records[0]["config"]), records[0])][:budget]
    cache = {k: params.entry(r["config"], r) for k, r in by_key.items()}
    first = _warm_keys(params, warm, budget)
    x0 = _start(params, first, by_key.__getitem__)
    results, error = (_tune(params, cache, strategy, budget - len(first), seed, x0)
                      if len(first) < budget else ([], None))
    order = _order(params, results, by_key.__getitem__, budget, first)
    if error:
        raise StrategyFailed(error, order)
    return order


def run_live(configs: list[Config], strategy: str, budget: int, seed: int,
             measure: Callable[[list[Config]], list[Record]],
             warm: list[Config] | None = None) -> list[tuple[Config, Record]]:
    """Configurations in the order Kernel Tuner asked for them, each measured by `measure`
    (a batch of configurations in, one record each out) when Kernel Tuner first asked.
    `warm`: configurations measured first, best first (see the module's docstring)."""
    if not configs:
        return []
    params = _Params([c.as_dict() for c in configs])
    if not params.names:  # one configuration: nothing to search
        return [(configs[0], measure([configs[0]])[0])][:budget]
    canon = {params.key_of(c.as_dict()): c for c in configs}
    got: dict[str, Record] = {}

    def measure_dicts(cfgs: list[dict[str, Any]]) -> list[Record]:
        recs = measure([canon[params.key_of(c)] for c in cfgs])
        for c, r in zip(cfgs, recs):
            got[params.key_of(c)] = r
        return recs

    first = _warm_keys(params, [c.as_dict() for c in warm or []], budget)
    cache: dict[str, Any] = {}
    if first:
        for k, rec in zip(first, measure_dicts([params.by_key[k] for k in first])):
            cache[k] = params.entry(params.by_key[k], rec)
    x0 = _start(params, first, got.__getitem__)
    if len(first) < budget:
        with _measuring_runner(params, measure_dicts):
            results, error = _tune(params, cache, strategy, budget - len(first), seed, x0)
    else:
        results, error = [], None
    order = _order(params, results, got.__getitem__, budget, first)
    if error:
        raise StrategyFailed(error, order)
    return order


class Abandoned(CudaAgentError):
    """The search loop ended before Kernel Tuner did (a program's stage settled, Ctrl-C, an
    error of the measuring side): it is abandoned where it waits for a measurement (an error
    of cuda-agent's side, so `_tune` lets it through)."""


def _child_search(conn: Any, configs: list[dict[str, Any]], strategy: str, budget: int,
                  seed: int, warm: list[dict[str, Any]] | None = None) -> None:
    """`run_live` in a process of its own (`kernel_tuner_ask`'s isolated driver): each batch
    to measure is sent to the parent, which answers with its records. Kernel Tuner's
    strategies draw from the process-wide `random` and numpy generators, and this module swaps
    classes in Kernel Tuner's modules for the length of a search: two searches in one process
    at once would draw from each other's stream and undo each other's swap."""
    def measure(cfgs: list[Config]) -> list[Record]:
        try:
            conn.send(("measure", [c.as_dict() for c in cfgs]))
            return conn.recv()
        except (EOFError, OSError):
            raise Abandoned() from None

    try:
        order = run_live([Config.of(c) for c in configs], strategy, budget, seed, measure,
                         [Config.of(c) for c in warm or []])
        conn.send(("done", [(c.as_dict(), r) for c, r in order], None))
    except StrategyFailed as exc:
        conn.send(("done", [(c.as_dict(), r) for c, r in exc.order], str(exc)))
    except Abandoned:
        pass
    except SettingsError as exc:
        conn.send(("settings", first_line(exc)))
    except CudaAgentError as exc:
        conn.send(("error", first_line(exc)))
    finally:
        conn.close()
