"""Child processes on Ray: :class:`RaySpawner` runs each ``python -m <module> '<json spec>'``
command of a run in its own :class:`ProcessHost` Ray actor and hands the launcher a
:class:`RayProcess`, a ``subprocess.Popen``-like handle (see :mod:`jaxsrl.launch.ray_placement`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any, Sequence

try:
    import ray
    import ray.exceptions
    import ray.util
except ImportError as exc:  # pragma: no cover - exercised only without Ray installed
    raise ImportError("--launcher=ray needs Ray: pip install -e '.[ray]'") from exc

from jaxsrl.core.paths import child_env
from jaxsrl.experiment.ray_resources import parse_resources
from jaxsrl.launch.ray_nodes import NodeWatch
from jaxsrl.launch.supervision import ComponentDied
from jaxsrl.launch.topology import ACTOR_MODULE, INLINE_MODULE

LEARNER_MODULE = "jaxsrl.workers.learner"
NODE_IP_ENV = "JAXSRL_NODE_IP"  # handed to every hosted process: the address of its node
START_TIMEOUT_S = 300.0  # a child not placed and started by then: the cluster lacks resources


class ProcessHost:
    """Ray actor hosting one worker process on the node Ray placed it on.

    Async actor: every method runs on one event-loop thread that lives as long as the
    actor, so the child's ``PR_SET_PDEATHSIG`` (tied to the thread that forked it)
    fires exactly when the host dies.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    async def start(self, argv: list[str], env: dict[str, str], prefix: Sequence[str] = ()) -> dict:
        """Start ``prefix + argv`` here; return ``{"pid", "node_ip", "node_id"}``.

        ``python -m`` commands run with this node's interpreter; a JSON spec's
        ``parent_pid`` becomes this host's pid (the child dies with its host); the
        child's environment is this node's, plus ``env`` and ``JAXSRL_NODE_IP``.
        """
        argv = list(argv)
        if len(argv) > 2 and argv[1] == "-m":
            argv[0] = sys.executable
        if argv and argv[-1].startswith("{"):
            spec = json.loads(argv[-1])
            if "parent_pid" in spec:
                argv[-1] = json.dumps({**spec, "parent_pid": os.getpid()})
        node_ip = ray.util.get_node_ip_address()
        self.proc = subprocess.Popen([*prefix, *argv], env=child_env({NODE_IP_ENV: node_ip, **env}),
                                     start_new_session=True)
        return {"pid": self.proc.pid, "node_ip": node_ip,
                "node_id": ray.get_runtime_context().get_node_id()}

    async def wait_exit(self) -> int:
        """The child's exit status once it has exited (negative: killed by that signal)."""
        while self.proc.poll() is None:
            await asyncio.sleep(0.05)
        return self.proc.returncode

    async def send_signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)


class RayProcess:
    """``subprocess.Popen``-like handle of a process hosted by a :class:`ProcessHost`.

    ``poll`` and ``wait`` watch one pending ``wait_exit`` result (no remote call per
    poll). A host that dies (node lost, ``ray.kill``) reads as ``-SIGKILL`` and
    ``lost_reason`` names its node; the spawner's :class:`~jaxsrl.launch.ray_nodes.NodeWatch`
    hears of every exit. Once the process has exited, the host is killed so its
    resources are free for a restart.

    Attributes:
      pid: the process id on its node (``node_ip``; -1 if the host died while starting it).
      node_ip, node_id: the Ray node it runs on ("" if unknown).
      returncode: ``None`` while running, then the exit status.
      lost_reason: "" or, once its host died, words naming the node: ``"lost with its
        Ray node 10.0.0.2 (node id 1a2b3c4d...)"`` if Ray already counts that node dead,
        else ``"its Ray host on node 10.0.0.2 died (ActorDiedError)"``.
      args: the command, for ``subprocess.TimeoutExpired``.
    """

    def __init__(self, host: Any, pid: int, node_ip: str, args: list[str], node_id: str = "",
                 watch: NodeWatch | None = None):
        self.pid, self.node_ip, self.node_id, self.args = pid, node_ip, node_id, args
        self.returncode: int | None = None
        self.lost_reason = ""
        self._host = host
        self._watch = watch
        self._exit = host.wait_exit.remote()

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _ = ray.wait([self._exit], timeout=0)
            if ready:
                self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the process exits; ``subprocess.TimeoutExpired`` after ``timeout`` s."""
        if self.returncode is None:
            ready, _ = ray.wait([self._exit], timeout=timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._finish()
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is not None:
            return
        try:
            ray.get(self._host.send_signal.remote(int(signum)), timeout=30)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            ray.kill(self._host)  # unreachable host: kill it, and its process with it

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _finish(self) -> None:
        try:
            self.returncode = ray.get(self._exit)
            if self._watch is not None:
                self._watch.ended(self.node_id, self.pid)
        except ray.exceptions.RayError as exc:  # the host (or its node) died, and the process with it
            self.returncode = -signal.SIGKILL
            if self._watch is not None and self._watch.is_lost(self.node_id):
                self.lost_reason = (f"lost with its Ray node {self.node_ip} "
                                    f"(node id {self.node_id[:8]}...)")
            else:  # Ray may count the node dead later: the watch's node_lost event says so
                self.lost_reason = f"its Ray host on node {self.node_ip or '?'} died ({type(exc).__name__})"
        ray.kill(self._host)


class RaySpawner:
    """A :class:`~jaxsrl.launch.processes.Spawner` that runs each child in its own Ray actor.

    Args:
      resources: Ray resource options per ``python -m`` module, e.g.
        ``{"jaxsrl.workers.actor": {"num_cpus": 1.0}}``.
      default: options of any other module (default ``{"num_cpus": 1.0}``).
      start_timeout_s: a child not placed and started within this many seconds
        raises :class:`~jaxsrl.launch.supervision.ComponentDied` naming its resource request.
    """

    def __init__(self, resources: dict[str, dict] | None = None, default: dict | None = None,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.resources = dict(resources or {})
        self.default = dict(default or {"num_cpus": 1.0})
        self.start_timeout_s = start_timeout_s
        self.watch = NodeWatch()  # names the processes lost with a node (node_lost events)

    def options_for(self, argv: Sequence[str]) -> dict:
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
        return self.resources.get(module, self.default)

    def __call__(self, argv: list[str], env: dict[str, str], prefix: Sequence[str] = ()) -> RayProcess:
        options = self.options_for(argv)
        host = ray.remote(ProcessHost).options(**options).remote()
        try:
            info = ray.get(host.start.remote(list(argv), dict(env), tuple(prefix)),
                           timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.kill(host)
            raise ComponentDied(
                f"Ray did not start {' '.join(argv[1:3])} with {options} within "
                f"{self.start_timeout_s:.0f} s: no node has those resources free "
                f"(available: {ray.available_resources()})") from None
        except ray.exceptions.RayActorError:  # the host died (e.g. its node): reads as killed
            info = {"pid": -1, "node_ip": "", "node_id": ""}
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else argv[0]
        try:
            actor_id = json.loads(argv[-1]).get("actor_id")
        except (ValueError, AttributeError):
            actor_id = None
        self.watch.placed(info["node_id"], info["node_ip"], info["pid"], module, actor_id)
        return RayProcess(host, info["pid"], info["node_ip"], [*prefix, *argv], info["node_id"],
                          self.watch)


def resource_option(text: str, flag: str) -> dict:
    """``{"resources": {...}}`` for a ``NAME=AMOUNT[,...]`` flag value, ``{}`` for "".

    Raises:
      ValueError: a malformed value (see :func:`~jaxsrl.experiment.ray_resources.parse_resources`).
    """
    resources = parse_resources(text, flag)
    return {"resources": resources} if resources else {}


def spawner_for(cfg: Any) -> RaySpawner:
    """The spawner of a run: actors ask for ``num_cpus=cfg.actor_cpus`` and the custom
    resources of ``--actor_resources``, spread over the nodes that have them (Ray's
    ``SPREAD``: a lost node takes fewer actors with it); learner processes
    (``--num_learner_processes``) for what the accelerator process asks; anything
    else (remote inference servers) for one CPU."""
    learner = {"num_cpus": cfg.learner_cpus, "num_gpus": cfg.learner_gpus,
               **resource_option(cfg.learner_resources, "learner_resources")}
    actor = {"num_cpus": cfg.actor_cpus, "scheduling_strategy": "SPREAD",
             **resource_option(cfg.actor_resources, "actor_resources")}
    return RaySpawner({ACTOR_MODULE: actor, INLINE_MODULE: actor, LEARNER_MODULE: learner})
