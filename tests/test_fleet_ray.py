"""The sampling fleet on Ray, on a local cluster of three nodes (`ray.cluster_utils.Cluster`,
tiny resources) and the simulated device: training across nodes, the fleet's shared compile
cache and experience dedupe, and a killed sampler or a lost node costing only their episodes.

One cluster serves the module (starting Ray takes seconds); its tests run on one xdist worker
(`xdist_group`, with `--dist loadgroup` in pyproject), in order, the lost node last. The command
line joining the cluster and the lost node are in the slow tier (`pytest -m slow`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from cuda_agent.agents.train import TrainSettings, Trainer  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[1]
SUITE = ",".join(str(ROOT / "tests" / "data" / "good" / f) for f in
                 ("sum_small.py", "relu_small.py"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("build-cache"))
    old = os.environ.get("CUDA_AGENT_CACHE")
    os.environ["CUDA_AGENT_CACHE"] = cache  # the nodes' processes inherit it
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    workers = [c.add_node(num_cpus=2) for _ in range(2)]
    ray.init(address=c.address, logging_level="WARNING")
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("CUDA_AGENT_CACHE", None)
        else:
            os.environ["CUDA_AGENT_CACHE"] = old


def settings(out: Path, **kw) -> TrainSettings:
    base = dict(suite=SUITE, device="sim", iterations=3, episodes=2, steps=2, batch=4,
                hidden=16, out=str(out), ray="auto", samplers=2)
    return TrainSettings.of(**{**base, **kw})


def train(s: TrainSettings, on_iteration=None) -> Trainer:
    tr = Trainer(s)
    try:
        tr.train(lambda row: on_iteration(tr, row) if on_iteration else None)
    finally:
        tr.close()
    return tr


def test_the_fleet_trains_across_nodes_and_a_killed_sampler_loses_only_its_episode(
        cluster, tmp_path):
    """Three samplers spread over the three nodes; the process of one is killed (SIGKILL) while
    every sampler has an episode in flight: the run finishes every update, the report counts
    the episode lost, and Ray's restarted sampler samples again."""
    killed = []

    def kill_one(tr: Trainer, row: dict) -> None:
        if row["iteration"] == 1:  # the samplers were just sent their next episodes
            where = ray.get(tr.fleet.samplers[0].where.remote())
            os.kill(where["pid"], signal.SIGKILL)
            killed.append(where)

    tr = train(settings(tmp_path / "t", samplers=3, episodes=3, iterations=4), kill_one)
    rep = tr.fleet_report
    assert killed and [c["iteration"] for c in tr.curves] == [1, 2, 3, 4]
    assert all(c["samples"] > 0 for c in tr.curves)
    assert rep["samplers"] == 3 and rep["nodes"] >= 2  # SPREAD over the three nodes
    assert rep["lost_episodes"] == 1 and rep["lost"][0]["sampler"] == 0
    assert "ActorDiedError" in rep["lost"][0]["error"] or "Actor" in rep["lost"][0]["error"]
    assert rep["lost_samples_at_most"] == 2 * 4  # its steps' batches
    assert sum(c["lost_episodes"] for c in tr.curves) == 1
    assert rep["retired_samplers"] == []  # Ray restarted it and it sampled again
    assert rep["episodes"] >= 12
    assert json.loads((tmp_path / "t" / "fleet.json").read_text()) == rep
    assert (tmp_path / "t" / "policy.pt").exists()


def test_ctrl_c_under_ray_keeps_the_last_finished_iteration_and_ends_the_fleet(
        cluster, tmp_path):
    """Ctrl-C reaches the driver's main thread (as `interrupt.first_stops_second_aborts`
    raises it) while the samplers have episodes in flight: the interrupt propagates, the
    checkpoint on disk is the last finished iteration's, fleet.json says what the fleet did,
    and no actor of the fleet is left on the cluster."""
    names: list[str] = []

    def interrupt_after_first(tr: Trainer, row: dict) -> None:
        if row["iteration"] == 1:  # the samplers were just sent their next episodes
            names.extend(n for n in ray.util.list_named_actors() if n.startswith("cuda-agent-"))
            raise KeyboardInterrupt

    tr = Trainer(settings(tmp_path / "c", iterations=4))
    try:
        with pytest.raises(KeyboardInterrupt):
            tr.train(lambda row: interrupt_after_first(tr, row))
    finally:
        tr.close()
    assert [c["iteration"] for c in tr.curves] == [1] and tr.saved_iteration == 1
    assert (tmp_path / "c" / "policy.pt").exists()
    rep = json.loads((tmp_path / "c" / "fleet.json").read_text())
    assert rep == tr.fleet_report and rep["samplers"] == 2 and rep["episodes"] >= 2
    assert tr.fleet is None and len(names) == 3  # two samplers and the ledger
    left = [n for n in names if n in ray.util.list_named_actors()]
    assert left == [], f"actors left on the cluster after Ctrl-C: {left}"


def test_the_same_episode_on_another_sampler_is_served_not_compiled_or_measured(cluster):
    """Experience dedupe and the compile cache across the fleet: a second sampler proposing
    what the first measured is served it, compiles nothing, and learns the same transitions."""
    from cuda_agent.agents.policy import MultiAgentPolicy
    from cuda_agent.fleet.ledger import Ledger
    from cuda_agent.fleet.sampler import Sampler

    s = settings(Path("unused"))
    files = {"sum_small": str(ROOT / "tests" / "data" / "good" / "sum_small.py")}
    ledger = ray.remote(Ledger).options(name="dedupe-test-ledger", num_cpus=0).remote()
    actor = ray.remote(Sampler)
    a, b = (actor.options(num_cpus=1).remote(i, files, s, "dedupe-test-ledger")
            for i in range(2))
    policy = MultiAgentPolicy("multi", 16)
    job = (policy.state_dict(), policy.describe(), "sum_small", 7, 0, 123)
    try:
        first = ray.get(a.episode.remote(*job))
        after_first = ray.get(ledger.report.remote())
        second = ray.get(b.episode.remote(*job))
        after_second = ray.get(ledger.report.remote())
    finally:
        for x in (a, b, ledger):
            ray.kill(x)
    n = len(first["curve"])
    assert n == s.steps * s.batch and first["served"] == 0
    assert second["served"] == n  # every measurement came from the fleet
    assert after_second["compiles"] == after_first["compiles"]  # nothing compiled again
    assert after_second["served"] - after_first["served"] == n
    assert [t.key for t in second["transitions"]] == [t.key for t in first["transitions"]]
    assert second["curve"] == first["curve"]


def test_a_compile_past_its_timeout_on_the_cluster_is_stopped_and_not_kept(cluster, tmp_path):
    """The run's compile timeout and deadline hold for the fleet's compile tasks as for the
    local pool: a compile not back in time is cancelled and is a `compile_timeout` (`CUT`
    where the deadline came first), neither cached nor kept by the ledger, so the next asking
    compiles it again."""
    import time

    from cuda_agent.build.builder import BuildInput
    from cuda_agent.build.pool import CUT
    from cuda_agent.fleet.ledger import Ledger
    from cuda_agent.fleet.sampler import RayBuilder

    source = ('extern "C" __global__ void k(const float* a, float* o, int n) {\n'
              '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
              '  if (i < n) o[i] = a[i] * 3.f + 0.5f;\n}\n')
    ledger = ray.remote(Ledger).options(name="timeout-test-ledger", num_cpus=0).remote()
    try:
        # a task cannot even start in a millisecond: every time, a compile_timeout
        late = RayBuilder(ledger, timeout_s=1e-3)
        late.cache_dir = tmp_path / "cache"
        [r] = late.build([BuildInput(source, "sm_90")])
        assert r.error_kind == "compile_timeout" and not r.ok, r
        assert "within" in r.error_msg
        [r] = late.build([BuildInput(source, "sm_90")], deadline=time.monotonic() - 1)
        assert r.error_kind == CUT
        patient = RayBuilder(ledger, timeout_s=600)
        patient.cache_dir = tmp_path / "cache"
        [r] = patient.build([BuildInput(source, "sm_90")])
        assert r.ok, r
        # each late compile was forgotten: the ledger started the same source three times
        assert ray.get(ledger.report.remote())["compiles"] == 3
    finally:
        ray.kill(ledger)


@pytest.mark.slow  # a second driver loading the suite: a minute or more on 2 shared cores
def test_train_dash_dash_ray_joins_a_cluster_by_its_address(cluster, tmp_path):
    """The command line, as a second driver joining the module's cluster by its address: the
    run's line says what the fleet did, and fleet.json is written."""
    c, _ = cluster
    cli = shutil.which("cuda-agent") or str(Path(sys.executable).with_name("cuda-agent"))
    r = subprocess.run([cli, "train", "--suite", str(ROOT / "tests" / "data" / "good" /
                                                     "relu_small.py"),
                        "--device", "sim", "--iterations", "1", "--episodes", "1", "--steps",
                        "1", "--batch", "2", "--samplers", "1", "--ray", c.address, "--out",
                        str(tmp_path / "t")], capture_output=True, text=True, timeout=600,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Ray fleet: 1 samplers" in r.stdout and "lost nothing" in r.stdout, r.stdout
    assert json.loads((tmp_path / "t" / "fleet.json").read_text())["episodes"] >= 1


@pytest.mark.slow  # a third fleet's start, and a node's loss noticed: minutes on 2 shared cores
def test_a_lost_node_loses_only_its_samplers_episodes(cluster, tmp_path):
    """Last in the module: the cluster keeps one node fewer."""
    c, workers = cluster
    removed = []

    def drop_node(tr: Trainer, row: dict) -> None:
        if row["iteration"] == 1:
            nodes = {ray.get(a.where.remote())["node"] for a in tr.fleet.samplers}
            victim = next(w for w in workers if w.node_id in nodes)
            c.remove_node(victim)
            removed.append(victim.node_id)

    tr = train(settings(tmp_path / "n", samplers=3, episodes=3, iterations=3), drop_node)
    rep = tr.fleet_report
    assert removed and [c["iteration"] for c in tr.curves] == [1, 2, 3]
    assert rep["lost_episodes"] >= 1
    assert {x["node"] for x in rep["lost"]} == set(removed)
