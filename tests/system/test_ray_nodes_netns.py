"""--launcher=ray across Ray nodes: a head and two worker nodes in network namespaces.

The cluster (a module fixture, :func:`ray_netns_cluster.ray_cluster`) is three fake
machines: the head (3 CPUs, ``learner_node=1``) and two workers (2 CPUs,
``actor_node=2`` each), each in its own namespace with its own address on a bridge of
this machine and its own ``ray start`` node. Runs ask for those resources
(``PLACEMENT``), so the learner and inference run on the head and the actors on the
workers; the driver runs in the head's namespace with ``--ray_address=HEAD:6379``.
Teardown kills the processes of each namespace and deletes the namespaces (never
``ray stop``). Needs root and iproute2; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("ray")

from ray_netns_cluster import (PLACEMENT, Cluster, cmdlines, pids, ray_cluster,  # noqa: E402
                               ray_env, tail, wait_for)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO_ROOT, "scripts", "train.py")
TARGET = 475  # CartPole-v1's mean return to reach (500 is the maximum)
ACTOR_SLOTS = 2  # actor_node per worker: one worker can take both actors after a loss
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


@pytest.fixture(scope="module")
def cluster():
    """A Ray head (``learner_node=1``) and two worker nodes (``actor_node=2``), each in
    its own network namespace; everything killed and deleted at the end."""
    with ray_cluster(workers=2, head_cpus=3, worker_cpus=2, actor_slots=ACTOR_SLOTS) as c:
        yield c


def _records(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _events(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "run_events.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _version(logdir: str) -> int:
    return max([r.get("policy_version", 0) for r in _records(logdir)] or [0])


def _actors_by_node(cluster: Cluster, logdir: str) -> dict[str, list[int]]:
    """Node IP -> pids of this run's actor processes there."""
    return {n.host.ip: [pid for pid, cmd in cmdlines(n.host.netns).items()
                        if "jaxsrl.workers.actor" in cmd and logdir in cmd]
            for n in cluster.nodes}


def _driver(cluster: Cluster, args: list[str], log_path: str) -> subprocess.Popen:
    """``train.py ARGS`` started in the head's namespace (``ip netns exec`` execs it: the
    handle's pid is the driver's)."""
    with open(log_path, "w") as log:
        return subprocess.Popen([*cluster.driver_prefix, sys.executable, TRAIN,
                                 *PLACEMENT, f"--ray_address={cluster.address}", *args],
                                env=ray_env(), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _assert_nothing_left(cluster: Cluster, logdir: str) -> None:
    """No process of the run (actors, process hosts, accelerator) on any node."""
    def leftovers():
        return {n.host.ip: [cmd for cmd in cmdlines(n.host.netns).values()
                            if logdir in cmd or "ProcessHost" in cmd or "AcceleratorHost" in cmd]
                for n in cluster.nodes}
    wait_for(lambda: not any(leftovers().values()), 60, "the run's processes to go")


def test_ray_multi_node_trains_cartpole(cluster, tmp_path):
    cluster.ensure_workers()
    logdir, log_path = str(tmp_path / "run"), str(tmp_path / "driver.log")
    # configs/CartPole-v1.toml (2 actors x 32 envs), to CartPole's target of 475.
    driver = _driver(cluster, ["--env=CartPole-v1", f"--target_return={TARGET}",
                               "--log_interval_s=1", f"--logdir={logdir}"], log_path)
    try:
        placed = wait_for(lambda: (lambda by: sum(map(len, by.values())) == 2 and by)(
            _actors_by_node(cluster, logdir)), 240, "two actor processes", driver, log_path)
        # Actors on the worker nodes, one each (SPREAD), none on the head ...
        assert placed[cluster.head.host.ip] == [], placed
        assert [len(placed[w.host.ip]) for w in cluster.workers] == [1, 1], placed
        # ... the accelerator process (learner + inference) on the head, and only there.
        assert cluster.processes(cluster.head, "AcceleratorHost"), cmdlines(cluster.head.host.netns)
        for w in cluster.workers:
            assert not cluster.processes(w, "AcceleratorHost")
        rc = driver.wait(timeout=600)
    finally:
        _stop(driver)
    log_text = tail(log_path, 10**9)
    assert rc == 0, log_text[-4000:]
    # The servers bound the head's address (not loopback): the actors reached it across the bridge.
    assert f"servers bind {cluster.head.host.ip}" in log_text, log_text[-4000:]
    returns = [r["episode_return_mean"] for r in _records(logdir) if "episode_return_mean" in r]
    assert max(returns) >= TARGET, returns[-5:]
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))
    _assert_nothing_left(cluster, logdir)


def test_ray_worker_node_lost_mid_run(cluster, tmp_path):
    cluster.ensure_workers()
    logdir, log_path = str(tmp_path / "run"), str(tmp_path / "driver.log")
    driver = _driver(cluster, [*SMALL, "--total_env_steps=100000000", f"--logdir={logdir}"],
                     log_path)
    try:
        placed = wait_for(lambda: (lambda by: sum(map(len, by.values())) == 2 and by)(
            _actors_by_node(cluster, logdir)), 240, "two actor processes", driver, log_path)
        lost = next(w for w in cluster.workers if placed[w.host.ip])
        survivor = next(w for w in cluster.workers if w is not lost)
        wait_for(lambda: _version(logdir) >= 2, 240, "the learner to update", driver, log_path)
        cluster.kill(lost)  # the node is gone: raylet, Ray workers, actors
        event = wait_for(lambda: next((e for e in _events(logdir) if e["event"] == "node_lost"),
                                       None), 240, "a node_lost event", driver, log_path)
        # It names the node and the actor processes that were on it.
        assert event["node_ip"] == lost.host.ip, event
        assert sorted(p["pid"] for p in event["processes"]) == sorted(placed[lost.host.ip]), event
        assert {p["module"] for p in event["processes"]} == {"jaxsrl.workers.actor"}, event
        # Each actor lost there was restarted, and its (first) restart names the node.
        restarts = [e for e in _events(logdir) if e["event"] == "actor_restart"]
        for actor_id in {p["actor_id"] for p in event["processes"]}:
            first = next(e for e in restarts if e["actor_id"] == actor_id)
            assert f"node {lost.host.ip}" in first["reason"], restarts
        # The restarted actor runs on the surviving worker (it has room for both).
        wait_for(lambda: len(_actors_by_node(cluster, logdir)[survivor.host.ip]) == 2, 240,
                  "both actors on the surviving node", driver, log_path)
        at_restart = _version(logdir)
        wait_for(lambda: _version(logdir) >= at_restart + 3, 240, "updates after the loss",
                  driver, log_path)
        driver.send_signal(signal.SIGTERM)  # a clean stop: final record and checkpoint
        rc = driver.wait(timeout=240)
    finally:
        _stop(driver)
    log_text = tail(log_path, 10**9)
    assert rc == 130, log_text[-4000:]
    closing = _records(logdir)[-1]
    assert closing["final"] and closing["actor_restarts"] >= 1, closing
    assert closing["policy_version"] >= at_restart + 3
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))  # the final checkpoint
    assert [e["event"] for e in _events(logdir)][-1] == "run_end"
    assert pids(lost.host.netns) == []  # nothing runs on the lost node
    _assert_nothing_left(cluster, logdir)


def _checkpoints(logdir: str) -> list[int]:
    """Finalised checkpoint steps (= policy versions) of the default policy."""
    directory = os.path.join(logdir, "checkpoints", "default")
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit()) if os.path.isdir(directory) else []


def test_ray_learner_lost_on_head_node_then_resumed(cluster, tmp_path):
    cluster.ensure_workers()
    logdir = str(tmp_path / "run")
    # configs/CartPole-v1.toml, checkpointing every second.
    args = ["--env=CartPole-v1", f"--target_return={TARGET}", "--log_interval_s=1",
            "--checkpoint_interval_s=1", f"--logdir={logdir}"]
    log_path = str(tmp_path / "driver.log")
    driver = _driver(cluster, args, log_path)
    try:
        wait_for(lambda: sum(map(len, _actors_by_node(cluster, logdir).values())) == 2, 240,
                  "two actor processes", driver, log_path)
        wait_for(lambda: any(s >= 3 for s in _checkpoints(logdir)), 240,
                  "a checkpoint after 3 updates", driver, log_path)
        [learner] = cluster.processes(cluster.head, "AcceleratorHost")
        os.kill(learner, signal.SIGKILL)  # the learner (and inference) process on the head
        rc = driver.wait(timeout=240)
    finally:
        _stop(driver)
    log_text = tail(log_path, 10**9)
    assert rc == 1, log_text[-4000:]
    # One line on stderr names what was lost, where, and how to go on.
    [line] = [x for x in log_text.splitlines() if "run stopped:" in x]
    assert (f"the accelerator process (learner and inference) pid {learner} on Ray node "
            f"{cluster.head.host.ip} was lost") in line, line
    assert f"--resume --logdir={logdir}" in line, line
    # The same in the run's events, after what the learner itself recorded.
    [lost] = [e for e in _events(logdir) if e["event"] == "accelerator_lost"]
    assert (lost["pid"], lost["node_ip"]) == (learner, cluster.head.host.ip), lost
    assert _events(logdir)[-1] == lost and lost["message"] in line
    _assert_nothing_left(cluster, logdir)  # actors and hosts died with their owner, on every node

    # --resume on the same cluster continues from the newest checkpoint for a few more
    # updates (the training to the target is the first test's; this one pays two start-ups).
    step = _checkpoints(logdir)[-1]
    with open(os.path.join(logdir, "checkpoints", "default", str(step), "meta", "metadata")) as f:
        meta = json.load(f)
    n_before = len(_records(logdir))
    resumed_log = str(tmp_path / "resumed.log")
    more = meta["env_steps"] + 4096
    driver = _driver(cluster, [*args, "--resume", f"--total_env_steps={more}"], resumed_log)
    try:
        rc = driver.wait(timeout=600)
    finally:
        _stop(driver)
    assert rc == 0, tail(resumed_log)
    [resumed] = [e for e in _events(logdir) if e["event"] == "resumed"]
    assert (resumed["version"], resumed["env_steps"]) == (step, meta["env_steps"]), resumed
    after = _records(logdir)[n_before:]
    assert after and all(r["policy_version"] >= step and r["env_steps"] >= meta["env_steps"]
                         for r in after), after[:3]
    assert after[-1]["env_steps"] >= more, after[-3:]
    _assert_nothing_left(cluster, logdir)
