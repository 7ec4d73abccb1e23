"""A Ray cluster of fake machines: a head and worker nodes in network namespaces.

:func:`ray_cluster` builds ``1 + workers`` namespaces with :func:`netns_hosts.netns_hosts`
(``...-h1`` the head, ``...-h2``, ... the workers, each with its own ``10.231.X.1N``
address on a bridge of this machine) and starts in each a Ray node with ``ray start``
(``--node-ip-address`` its address, a ``--temp-dir`` of its own, ``--num-cpus`` and
``--object-store-memory`` small). The head has the custom resource ``learner_node=1``,
each worker ``actor_node=actor_slots``; a run asks for them with
``--learner_resources=learner_node=1 --actor_resources=actor_node=1`` (:data:`PLACEMENT`),
so the learner and inference run on the head and the actors on the workers. Drivers run
in the head's namespace (:attr:`Cluster.driver_prefix`) with ``--ray_address=HEAD:6379``.

Teardown never uses ``ray stop`` (it stops every Ray process of the machine, other
runs' too): the processes of each namespace (``ip netns pids``) are killed and the
namespaces deleted. Used by ``tests/system/test_ray_nodes_netns.py`` and
``scripts/soak_ray_nodes.py``. Needs root and iproute2 (else ``pytest.skip``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import psutil

from netns_hosts import Host, netns_hosts

HEAD_PORT = 6379  # in the head's own namespace: no clash with anything on this machine
PLACEMENT = ["--launcher=ray", "--learner_resources=learner_node=1",
             "--actor_resources=actor_node=1", "--actor_cpus=1", "--learner_cpus=1"]


def ray_env() -> dict:
    """Environment of drivers and ``ray start``: no token authentication on this
    throwaway cluster; Ray's workers at normal priority (nice 15 starves them on a busy
    machine); the head's health check of each node every second instead of every 3 s, so
    a killed node is declared dead (5 failed checks in a row, as by default) in about 5 s
    instead of about 15 s. A check fails only when it errs or times out (10 s, as by
    default): a slow but live node still answers."""
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_worker_niceness": "0", "RAY_health_check_period_ms": "1000",
            "JAXSRL_PROGRESS": "0"}


def wait_for(check, timeout_s: float, what: str, proc: subprocess.Popen | None = None,
             log_path: str = ""):
    """``check()``'s first true value, polled every 0.2 s.

    Raises:
      AssertionError: ``timeout_s`` passed, or ``proc`` exited meanwhile (with the tail
        of ``log_path``).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) while waiting for "
                                 f"{what}:\n{tail(log_path)}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                         + (f":\n{tail(log_path)}" if log_path else ""))


def tail(path: str, chars: int = 4000) -> str:
    """The last ``chars`` characters of the file ``path`` ("" if there is none)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()[-chars:]


def pids(netns: str) -> list[int]:
    """Pids of the processes living in ``netns``."""
    out = subprocess.run(["ip", "netns", "pids", netns], check=False, capture_output=True,
                         text=True, timeout=30).stdout
    return [int(p) for p in out.split()]


def cmdlines(netns: str) -> dict[int, str]:
    """pid -> command line of every process living in ``netns``."""
    found = {}
    for pid in pids(netns):
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

    @property
    def driver_prefix(self) -> list[str]:
        """Command prefix of a driver: it runs in the head's namespace."""
        return self.head.host.launch_prefix

    def kill(self, node: RayNode) -> None:
        """The node is lost: SIGKILL every process in its namespace (raylet, workers, actors)."""
        for pid in pids(node.host.netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def processes(self, node: RayNode, needle: str) -> list[int]:
        """Pids in ``node``'s namespace whose command line contains ``needle``."""
        return [pid for pid, cmd in cmdlines(node.host.netns).items() if needle in cmd]

    def alive_nodes(self) -> set[str]:
        """IPs of the nodes the head counts as alive (asked from inside the head's namespace)."""
        code = ("import ray; ray.init(address='%s', logging_level='ERROR'); "
                "print(','.join(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"
                % self.address)
        out = subprocess.run([*self.driver_prefix, sys.executable, "-c", code], env=ray_env(),
                             capture_output=True, text=True, timeout=120, check=False)
        return set(out.stdout.strip().splitlines()[-1].split(",")) if out.returncode == 0 else set()

    def ensure_workers(self) -> None:
        """Start again any worker node a test killed, and wait for the head to count all."""
        for node in self.workers:
            if not self.processes(node, "raylet"):
                self.kill(node)  # leftovers, if any
                ray_start(node)
        want = {n.host.ip for n in self.nodes}
        wait_for(lambda: self.alive_nodes() >= want, 120, f"Ray nodes {sorted(want)} to be alive")


def ray_start(node: RayNode) -> None:
    """``ray start`` the node in its namespace (a fresh ``temp_dir``).

    Raises:
      AssertionError: ``ray start`` failed (its output in the message).
    """
    shutil.rmtree(node.temp_dir, ignore_errors=True)
    os.makedirs(node.temp_dir)
    cmd = [*node.host.launch_prefix, sys.executable, "-m", "ray.scripts.scripts", "start",
           f"--node-ip-address={node.host.ip}", f"--temp-dir={node.temp_dir}", "--num-gpus=0",
           "--object-store-memory=100000000", "--disable-usage-stats", *node.args]
    out = subprocess.run(cmd, env=ray_env(), capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0 or "Ray runtime started" not in out.stdout + out.stderr:
        raise AssertionError(f"ray start on {node.host.ip} failed ({out.returncode}):\n"
                             f"{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


@contextlib.contextmanager
def ray_cluster(workers: int = 2, head_cpus: int = 3, worker_cpus: int = 2,
                actor_slots: int = 2) -> Iterator[Cluster]:
    """A Ray head (``learner_node=1``, ``head_cpus`` CPUs) and ``workers`` worker nodes
    (``actor_node=actor_slots``, ``worker_cpus`` CPUs), each in its own network
    namespace, all counted alive; everything killed and deleted on exit."""
    temp_root = tempfile.mkdtemp(prefix="rayn", dir="/tmp")  # short: Ray's socket paths
    with netns_hosts(1 + workers) as hosts:
        head_ip = hosts[0].ip
        # CPUs to spare on the head: only --actor_resources keeps the actors off it.
        head = RayNode(hosts[0], ["--head", f"--port={HEAD_PORT}", f"--num-cpus={head_cpus}",
                                  "--include-dashboard=false", '--resources={"learner_node": 1}'],
                       os.path.join(temp_root, "head"))
        nodes = [RayNode(hosts[i], [f"--address={head_ip}:{HEAD_PORT}", f"--num-cpus={worker_cpus}",
                                    f'--resources={{"actor_node": {actor_slots}}}'],
                         os.path.join(temp_root, f"w{i}")) for i in range(1, 1 + workers)]
        c = Cluster(f"{head_ip}:{HEAD_PORT}", head, nodes)
        try:
            for node in c.nodes:
                ray_start(node)
            c.ensure_workers()
            yield c
        finally:
            for node in reversed(c.nodes):  # workers first, then the head
                c.kill(node)
            shutil.rmtree(temp_root, ignore_errors=True)
    # netns_hosts has killed what was left in the namespaces and deleted them
