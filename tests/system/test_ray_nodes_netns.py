"""--launcher=ray across Ray nodes: a head and two worker nodes in network namespaces.

The cluster (a module fixture) is three fake machines built by ``tests/netns_hosts.py``:
namespaces ``...-h1`` (head), ``...-h2`` and ``...-h3`` (workers), each with its own
``10.231.X.1N`` address on a bridge of this machine, and in each a Ray node started by
``ray start`` with ``--node-ip-address`` its address (``--temp-dir`` of its own,
``--num-cpus`` and ``--object-store-memory`` small). The head (3 CPUs) has the custom
resource ``learner_node=1``, each worker (2 CPUs) ``actor_node=2``; runs ask for them with
``--learner_resources=learner_node=1 --actor_resources=actor_node=1``, so the learner
and inference run on the head and the actors on the workers. The driver runs in the
head's namespace with ``--ray_address=HEAD:6379``.

Teardown never uses ``ray stop`` (it stops every Ray process of the machine, other
runs' too): the processes of each namespace (``ip netns pids``) are killed and the
namespaces deleted. Traffic stays on the bridge and the namespaces' loopback
(a namespace has no route elsewhere). Needs root and iproute2; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

pytest.importorskip("ray")

from netns_hosts import Host, netns_hosts  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO_ROOT, "scripts", "train.py")
HEAD_PORT = 6379  # in the head's own namespace: no clash with anything on this machine
TARGET = 475  # CartPole-v1's mean return to reach (500 is the maximum)
ACTOR_SLOTS = 2  # actor_node per worker: one worker can take both actors after a loss
PLACEMENT = ["--launcher=ray", "--learner_resources=learner_node=1",
             "--actor_resources=actor_node=1", "--actor_cpus=1", "--learner_cpus=1"]
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


def _env() -> dict:
    # No token authentication on this throwaway cluster; Ray's workers at normal
    # priority (nice 15 starves them on a busy machine).
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_worker_niceness": "0", "JAXSRL_PROGRESS": "0"}


def _wait_for(check, timeout_s: float, what: str, proc: subprocess.Popen | None = None,
              log_path: str = ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) while waiting for "
                                 f"{what}:\n{_tail(log_path)}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                         + (f":\n{_tail(log_path)}" if log_path else ""))


def _tail(path: str, chars: int = 4000) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()[-chars:]


def _pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], check=False, capture_output=True,
                         text=True, timeout=30).stdout
    return [int(p) for p in out.split()]


def _cmdlines(netns: str) -> dict[int, str]:
    """pid -> command line of every process living in ``netns``."""
    found = {}
    for pid in _pids(netns):
        with contextlib.suppress(psutil.Error):
            found[pid] = " ".join(psutil.Process(pid).cmdline())
    return found


@dataclasses.dataclass
class RayNode:
    host: Host
    args: list[str]  # ray start flags of this node
    temp_dir: str


@dataclasses.dataclass
class Cluster:
    address: str  # HEAD_IP:PORT
    head: RayNode
    workers: list[RayNode]

    @property
    def nodes(self) -> list[RayNode]:
        return [self.head, *self.workers]

    def kill(self, node: RayNode) -> None:
        """The node is lost: SIGKILL every process in its namespace (raylet, workers, actors)."""
        for pid in _pids(node.host.netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def processes(self, node: RayNode, needle: str) -> list[int]:
        """Pids in ``node``'s namespace whose command line contains ``needle``."""
        return [pid for pid, cmd in _cmdlines(node.host.netns).items() if needle in cmd]


def _ray_start(node: RayNode) -> None:
    shutil.rmtree(node.temp_dir, ignore_errors=True)
    os.makedirs(node.temp_dir)
    cmd = [*node.host.launch_prefix, sys.executable, "-m", "ray.scripts.scripts", "start",
           f"--node-ip-address={node.host.ip}", f"--temp-dir={node.temp_dir}", "--num-gpus=0",
           "--object-store-memory=100000000", "--disable-usage-stats", *node.args]
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0 or "Ray runtime started" not in out.stdout + out.stderr:
        raise AssertionError(f"ray start on {node.host.ip} failed ({out.returncode}):\n"
                             f"{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def _alive_nodes(cluster: Cluster) -> set[str]:
    """IPs of the nodes the head counts as alive (asked from inside the head's namespace)."""
    code = ("import ray; ray.init(address='%s', logging_level='ERROR'); "
            "print(','.join(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"
            % cluster.address)
    out = subprocess.run([*cluster.head.host.launch_prefix, sys.executable, "-c", code], env=_env(),
                         capture_output=True, text=True, timeout=120, check=False)
    return set(out.stdout.strip().splitlines()[-1].split(",")) if out.returncode == 0 else set()


def _ensure_workers(cluster: Cluster) -> None:
    """Start again any worker node a test killed, and wait for the head to count all."""
    for node in cluster.workers:
        if not cluster.processes(node, "raylet"):
            cluster.kill(node)  # leftovers, if any
            _ray_start(node)
    want = {n.host.ip for n in cluster.nodes}
    _wait_for(lambda: _alive_nodes(cluster) >= want, 120, f"Ray nodes {sorted(want)} to be alive")


@pytest.fixture(scope="module")
def cluster():
    """A Ray head (``learner_node=1``) and two worker nodes (``actor_node=2``), each in
    its own network namespace; everything killed and deleted at the end."""
    temp_root = tempfile.mkdtemp(prefix="rayn", dir="/tmp")  # short: Ray's socket paths
    with netns_hosts(3) as hosts:
        head_ip = hosts[0].ip
        # CPUs to spare on the head: only --actor_resources keeps the actors off it.
        head = RayNode(hosts[0], ["--head", f"--port={HEAD_PORT}", "--num-cpus=3",
                                  "--include-dashboard=false", '--resources={"learner_node": 1}'],
                       os.path.join(temp_root, "head"))
        workers = [RayNode(hosts[i], [f"--address={head_ip}:{HEAD_PORT}", "--num-cpus=2",
                                      f'--resources={{"actor_node": {ACTOR_SLOTS}}}'],
                           os.path.join(temp_root, f"w{i}")) for i in (1, 2)]
        c = Cluster(f"{head_ip}:{HEAD_PORT}", head, workers)
        try:
            for node in c.nodes:
                _ray_start(node)
            _ensure_workers(c)
            yield c
        finally:
            for node in reversed(c.nodes):  # workers first, then the head
                c.kill(node)
            shutil.rmtree(temp_root, ignore_errors=True)
    # netns_hosts has killed what was left in the namespaces and deleted them


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
    return {n.host.ip: [pid for pid, cmd in _cmdlines(n.host.netns).items()
                        if "jaxsrl.workers.actor" in cmd and logdir in cmd]
            for n in cluster.nodes}


def _driver(cluster: Cluster, args: list[str], log_path: str) -> subprocess.Popen:
    """``train.py ARGS`` started in the head's namespace (``ip netns exec`` execs it: the
    handle's pid is the driver's)."""
    with open(log_path, "w") as log:
        return subprocess.Popen([*cluster.head.host.launch_prefix, sys.executable, TRAIN,
                                 *PLACEMENT, f"--ray_address={cluster.address}", *args],
                                env=_env(), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _assert_nothing_left(cluster: Cluster, logdir: str) -> None:
    """No process of the run (actors, process hosts, accelerator) on any node."""
    def leftovers():
        return {n.host.ip: [cmd for cmd in _cmdlines(n.host.netns).values()
                            if logdir in cmd or "ProcessHost" in cmd or "AcceleratorHost" in cmd]
                for n in cluster.nodes}
    _wait_for(lambda: not any(leftovers().values()), 60, "the run's processes to go")


def test_ray_multi_node_trains_cartpole(cluster, tmp_path):
    _ensure_workers(cluster)
    logdir, log_path = str(tmp_path / "run"), str(tmp_path / "driver.log")
    # configs/CartPole-v1.toml (2 actors x 32 envs), to CartPole's target of 475.
    driver = _driver(cluster, ["--env=CartPole-v1", f"--target_return={TARGET}",
                               "--log_interval_s=1", f"--logdir={logdir}"], log_path)
    try:
        placed = _wait_for(lambda: (lambda by: sum(map(len, by.values())) == 2 and by)(
            _actors_by_node(cluster, logdir)), 240, "two actor processes", driver, log_path)
        # Actors on the worker nodes, one each (SPREAD), none on the head ...
        assert placed[cluster.head.host.ip] == [], placed
        assert [len(placed[w.host.ip]) for w in cluster.workers] == [1, 1], placed
        # ... the accelerator process (learner + inference) on the head, and only there.
        assert cluster.processes(cluster.head, "AcceleratorHost"), _cmdlines(cluster.head.host.netns)
        for w in cluster.workers:
            assert not cluster.processes(w, "AcceleratorHost")
        rc = driver.wait(timeout=600)
    finally:
        _stop(driver)
    log_text = _tail(log_path, 10**9)
    assert rc == 0, log_text[-4000:]
    # The servers bound the head's address (not loopback): the actors reached it across the bridge.
    assert f"servers bind {cluster.head.host.ip}" in log_text, log_text[-4000:]
    returns = [r["episode_return_mean"] for r in _records(logdir) if "episode_return_mean" in r]
    assert max(returns) >= TARGET, returns[-5:]
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))
    _assert_nothing_left(cluster, logdir)


def test_ray_worker_node_lost_mid_run(cluster, tmp_path):
    _ensure_workers(cluster)
    logdir, log_path = str(tmp_path / "run"), str(tmp_path / "driver.log")
    driver = _driver(cluster, [*SMALL, "--total_env_steps=100000000", f"--logdir={logdir}"],
                     log_path)
    try:
        placed = _wait_for(lambda: (lambda by: sum(map(len, by.values())) == 2 and by)(
            _actors_by_node(cluster, logdir)), 240, "two actor processes", driver, log_path)
        lost = next(w for w in cluster.workers if placed[w.host.ip])
        survivor = next(w for w in cluster.workers if w is not lost)
        _wait_for(lambda: _version(logdir) >= 2, 240, "the learner to update", driver, log_path)
        cluster.kill(lost)  # the node is gone: raylet, Ray workers, actors
        event = _wait_for(lambda: next((e for e in _events(logdir) if e["event"] == "node_lost"),
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
        _wait_for(lambda: len(_actors_by_node(cluster, logdir)[survivor.host.ip]) == 2, 240,
                  "both actors on the surviving node", driver, log_path)
        at_restart = _version(logdir)
        _wait_for(lambda: _version(logdir) >= at_restart + 3, 240, "updates after the loss",
                  driver, log_path)
        driver.send_signal(signal.SIGTERM)  # a clean stop: final record and checkpoint
        rc = driver.wait(timeout=240)
    finally:
        _stop(driver)
    log_text = _tail(log_path, 10**9)
    assert rc == 130, log_text[-4000:]
    closing = _records(logdir)[-1]
    assert closing["final"] and closing["actor_restarts"] >= 1, closing
    assert closing["policy_version"] >= at_restart + 3
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))  # the final checkpoint
    assert [e["event"] for e in _events(logdir)][-1] == "run_end"
    assert _pids(lost.host.netns) == []  # nothing runs on the lost node
    _assert_nothing_left(cluster, logdir)


def _checkpoints(logdir: str) -> list[int]:
    """Finalised checkpoint steps (= policy versions) of the default policy."""
    directory = os.path.join(logdir, "checkpoints", "default")
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit()) if os.path.isdir(directory) else []


def test_ray_learner_lost_on_head_node_then_resumed(cluster, tmp_path):
    _ensure_workers(cluster)
    logdir = str(tmp_path / "run")
    # configs/CartPole-v1.toml, checkpointing every second.
    args = ["--env=CartPole-v1", f"--target_return={TARGET}", "--log_interval_s=1",
            "--checkpoint_interval_s=1", f"--logdir={logdir}"]
    log_path = str(tmp_path / "driver.log")
    driver = _driver(cluster, args, log_path)
    try:
        _wait_for(lambda: sum(map(len, _actors_by_node(cluster, logdir).values())) == 2, 240,
                  "two actor processes", driver, log_path)
        _wait_for(lambda: any(s >= 3 for s in _checkpoints(logdir)), 240,
                  "a checkpoint after 3 updates", driver, log_path)
        [learner] = cluster.processes(cluster.head, "AcceleratorHost")
        os.kill(learner, signal.SIGKILL)  # the learner (and inference) process on the head
        rc = driver.wait(timeout=240)
    finally:
        _stop(driver)
    log_text = _tail(log_path, 10**9)
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

    # --resume on the same cluster continues from the newest checkpoint to the target.
    step = _checkpoints(logdir)[-1]
    with open(os.path.join(logdir, "checkpoints", "default", str(step), "meta", "metadata")) as f:
        meta = json.load(f)
    n_before = len(_records(logdir))
    resumed_log = str(tmp_path / "resumed.log")
    driver = _driver(cluster, [*args, "--resume"], resumed_log)
    try:
        rc = driver.wait(timeout=600)
    finally:
        _stop(driver)
    assert rc == 0, _tail(resumed_log)
    [resumed] = [e for e in _events(logdir) if e["event"] == "resumed"]
    assert (resumed["version"], resumed["env_steps"]) == (step, meta["env_steps"]), resumed
    after = _records(logdir)[n_before:]
    assert after and all(r["policy_version"] >= step and r["env_steps"] >= meta["env_steps"]
                         for r in after), after[:3]
    assert max(r.get("episode_return_mean", 0) for r in after) >= TARGET, after[-3:]
    _assert_nothing_left(cluster, logdir)
