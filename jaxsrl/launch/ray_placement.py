"""Cluster placement on Ray: ``--launcher=ray`` runs a training run's processes on a Ray cluster.

What runs where:
  * the **accelerator process** (the launcher's :func:`~jaxsrl.launch.launcher.train`: learner
    and inference server threads, metrics, checkpoints) is an :class:`AcceleratorHost`
    Ray actor with the resource request ``num_cpus=learner_cpus,
    num_gpus=learner_gpus``, on whichever node Ray picks;
  * every **child process** the launcher starts (actors; remote inference servers and
    learner processes once the dataflow has them) is hosted by a
    :class:`~jaxsrl.launch.ray_spawner.ProcessHost` Ray actor with its own resource
    request (``num_cpus=actor_cpus`` for actors), which runs the same ``python -m
    <module> '<json spec>'`` command on its node. The launcher sees a
    :class:`~jaxsrl.launch.ray_spawner.RayProcess`, a ``subprocess.Popen``-like handle,
    so its watch / restart / stop logic is the one of a local run: a crashed or hung
    actor is started again through the same spawner, possibly on another node.

Code on the nodes: the driver ships this checkout as the job's Ray ``runtime_env``
``working_dir`` (a zip of the repository, ``.gitignore`` respected), so every node
imports the same ``jaxsrl`` and ``agents`` without a shared filesystem; the Python
packages (JAX, gymnasium, Ray, ...) must already be installed on every node.

Teardown: Ctrl-C or SIGTERM on the driver sends SIGTERM to the accelerator process,
which stops as a local run does (actors stopped, final checkpoint); a second Ctrl-C,
or no end within ``STOP_GRACE_S``, kills it. Child processes die with their host (the
actor worker sets ``PR_SET_PDEATHSIG`` with the host's pid, which ``ProcessHost``
writes into the spec's ``parent_pid``), hosts die with the accelerator actor that owns
them, and that one with the driver (Ray's ownership), so nothing outlives the run.

See ``docs/cluster.md`` for running on a cluster.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import socket
import threading
from typing import Any

try:
    import ray
    import ray.exceptions
    import ray.util
except ImportError as exc:  # pragma: no cover - exercised only without Ray installed
    raise ImportError("--launcher=ray needs Ray: pip install -e '.[ray]'") from exc

from jaxsrl.core.paths import REPO_ROOT
from jaxsrl.launch import ray_loss
from jaxsrl.launch.ray_spawner import (ACTOR_MODULE, LEARNER_MODULE, RaySpawner, resource_option,
                                       spawner_for)
from jaxsrl.launch.supervision import ComponentDied
from jaxsrl.streams import security

#: Also importable from here: the spawner of child processes on Ray.
__all__ = ["ACTOR_MODULE", "LEARNER_MODULE", "AcceleratorHost", "LOOPBACK_ENV", "RaySpawner",
           "check_reachable", "connect", "cpus_wanted", "spawner_for", "train_on_ray"]

log = logging.getLogger("jaxsrl")

STOP_GRACE_S = 120.0  # a clean stop saves a checkpoint: give it this long after Ctrl-C
START_TIMEOUT_S = 300.0  # the accelerator process not placed by then: the cluster lacks resources
# Not shipped to the nodes: version control, run folders, documentation, tests.
WORKING_DIR_EXCLUDES = [".git", "runs", "docs", "tests", "*.egg-info", "__pycache__"]


def _server_host(cfg: Any) -> str:
    """Interface the servers bind on the accelerator's node.

    On a cluster given by ``ray_address`` actors may run on other nodes: a loopback or
    wildcard ``--host`` becomes this node's IP (``--curve`` is advised, the launcher
    warns without it). A cluster started by this run has one node: ``cfg.host`` stays.
    """
    if cfg.ray_address and (security.is_loopback(cfg.host) or cfg.host in ("0.0.0.0", "*")):
        return ray.util.get_node_ip_address()
    return cfg.host


class AcceleratorHost:
    """Ray actor running the accelerator process: :func:`jaxsrl.launch.launcher.train`.

    A plain (synchronous, one-at-a-time) Ray actor runs its methods on the worker's main
    thread, where ``train`` installs its SIGTERM handler: SIGTERM to this process is a
    clean stop (actors stopped, final checkpoint), as for a local run.
    """

    def where(self) -> dict:
        """``{"node_id", "node_ip", "pid"}`` of this process."""
        return {"node_id": ray.get_runtime_context().get_node_id(),
                "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def train(self, cfg: Any) -> dict:
        """``{"record": train's result, "interrupted": False}``, or ``interrupted: True``
        after a clean stop on SIGTERM."""
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                            datefmt="%H:%M:%S")
        logging.getLogger("absl").setLevel(logging.WARNING)
        logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
        from jaxsrl.launch.launcher import train  # noqa: PLC0415  (imports JAX, on this node only)
        cfg = dataclasses.replace(cfg, host=_server_host(cfg))
        log.info("accelerator process on node %s (pid %d); servers bind %s",
                 ray.util.get_node_ip_address(), os.getpid(), cfg.host)
        try:
            return {"record": train(cfg, spawner=spawner_for(cfg)), "interrupted": False}
        except KeyboardInterrupt:
            return {"record": None, "interrupted": True}


def _send_signal(where: dict, signum: int) -> None:
    """Send ``signum`` to process ``where["pid"]`` on node ``where["node_id"]``."""
    if where["node_id"] == ray.get_runtime_context().get_node_id():
        os.kill(where["pid"], signum)
        return
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415  (Ray: optional)
    strategy = NodeAffinitySchedulingStrategy(where["node_id"], soft=False)
    ray.get(ray.remote(os.kill).options(num_cpus=0, scheduling_strategy=strategy)
            .remote(where["pid"], signum), timeout=60)


def cpus_wanted(cfg: Any) -> float:
    """CPUs the processes of a run ask Ray for, all together (see :func:`spawner_for`)."""
    flow = cfg.get_dataflow()
    servers = sum(p.count for p in flow.policy_workers)
    return (cfg.learner_cpus * cfg.num_learner_processes
            + cfg.actor_cpus * sum(a.count for a in flow.actors)
            + (servers if cfg.remote_inference else 0))


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _stay_on_loopback() -> None:
    """Make a Ray cluster started by this process bind and advertise 127.0.0.1.

    Ray's switch for one-machine clusters (``ray/_private/ray_constants.py``,
    ``ENABLE_RAY_CLUSTER``; read by ``services.get_node_ip_address``) is an environment
    variable read when Ray is imported: set it for the processes Ray starts, and on the
    already imported constant for this one. Without it Ray uses the machine's network
    address even for a cluster that no other node can join.
    """
    if os.environ.get(LOOPBACK_ENV) == "1":
        return  # the user asked for a joinable cluster
    os.environ[LOOPBACK_ENV] = "0"
    from ray._private import ray_constants  # noqa: PLC0415  (Ray: optional; private module)
    if hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        ray_constants.ENABLE_RAY_CLUSTER = False


def connect(cfg: Any) -> bool:
    """Join the cluster at ``cfg.ray_address``, or start a one-node cluster here.

    Returns True if this call connected (the caller disconnects, which also stops a
    cluster started here). A cluster started here stays on loopback (no node but this
    one can join it), and so does a driver given a loopback ``ray_address``.
    """
    runtime_env = {"working_dir": REPO_ROOT, "excludes": WORKING_DIR_EXCLUDES}
    if ray.is_initialized():
        return False
    if not cfg.ray_address or security.is_loopback(cfg.ray_address.rsplit(":", 1)[0]):
        _stay_on_loopback()  # else Ray rewrites 127.0.0.1 to the machine's network address
    local = {}
    if not cfg.ray_address:  # as many CPUs as the run asks for: a local run oversubscribes too
        local["num_cpus"] = max(os.cpu_count() or 1, math.ceil(cpus_wanted(cfg)))
        # Ray runs workers at nice 15 (RayConfig worker_niceness); a local run's processes
        # have the default priority: same here, or other work on the machine starves them.
        os.environ.setdefault("RAY_worker_niceness", "0")
    check_reachable(cfg.ray_address)
    ray.init(address=cfg.ray_address or None, runtime_env=runtime_env,
             include_dashboard=False, logging_level=logging.WARNING, **local)
    return True


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``--ray_address`` nobody listens at (``ray.init`` would retry for
    minutes). ``""`` and ``auto`` are left to Ray.

    Raises:
      ValueError: no TCP connection to ``HOST:PORT`` within ``timeout_s``, naming it.
    """
    if not address or address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--ray_address={address!r} must be HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ValueError(f"--ray_address={address}: no Ray head answers there ({exc}); start one "
                         "with `ray start --head --port=PORT` or fix the address") from None


def train_on_ray(cfg: Any) -> dict:
    """Run the experiment ``cfg`` on a Ray cluster; same result as :func:`jaxsrl.launch.launcher.train`.

    Connects to ``cfg.ray_address`` (or starts a one-node cluster, shut down at the end;
    an already connected driver is used as it is), runs the accelerator process in an
    :class:`AcceleratorHost` (``num_cpus=learner_cpus``, ``num_gpus=learner_gpus``, the
    custom resources of ``learner_resources``) whose actors are Ray actors
    (``num_cpus=actor_cpus`` and ``actor_resources``), and waits for it.
    ``cfg.logdir`` is made absolute: it is a path on the accelerator's node (use a
    shared filesystem to read it elsewhere).

    Returns:
      The last metrics record plus ``logdir``, as :func:`~jaxsrl.launch.launcher.train`.

    Raises:
      As :func:`~jaxsrl.launch.launcher.train` (``ComponentDied``, ``ValueError``, ...), raised
      on the driver; ``ComponentDied`` also when Ray cannot place the accelerator
      process in ``START_TIMEOUT_S`` or it dies (one line naming it, also recorded as
      an ``accelerator_lost`` run event: :mod:`jaxsrl.launch.ray_loss`; the run can
      continue with ``--resume``); ``KeyboardInterrupt`` after Ctrl-C or
      SIGTERM and a clean stop.
    """
    cfg.validate()
    from jaxsrl.launch.launcher import default_logdir  # noqa: PLC0415  (imports JAX: not on the driver)
    cfg = dataclasses.replace(cfg, logdir=os.path.abspath(cfg.logdir or default_logdir(cfg)))
    started = connect(cfg)
    host = where = None
    try:
        options = {"num_cpus": cfg.learner_cpus, "num_gpus": cfg.learner_gpus,
                   **resource_option(cfg.learner_resources, "learner_resources")}
        host = ray.remote(AcceleratorHost).options(max_restarts=0, **options).remote()
        log.info("placing the accelerator process (%s); actors ask for num_cpus=%g%s each; "
                 "logs in %s", options, cfg.actor_cpus,
                 f" and {cfg.actor_resources}" if cfg.actor_resources else "", cfg.logdir)
        try:
            where = ray.get(host.where.remote(), timeout=START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ComponentDied(
                f"Ray did not start the accelerator process with {options} within "
                f"{START_TIMEOUT_S:.0f} s: no node has those resources free "
                f"(available: {ray.available_resources()})") from None
        result = _wait(host.train.remote(cfg), where)
        if result["interrupted"]:  # its process got SIGTERM from elsewhere
            raise KeyboardInterrupt("the accelerator process was stopped")
        return result["record"]
    except ray.exceptions.RayActorError as exc:  # named in one line and in run_events.jsonl
        raise ComponentDied(ray_loss.lost(cfg.logdir, where, exc)) from exc
    finally:
        if host is not None:
            ray.kill(host)  # frees its GPU now; its process hosts (and children) die with it
        if started:
            ray.shutdown()


def _raise_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def _wait(ref: Any, where: dict) -> dict:
    """``ray.get(ref)`` of ``AcceleratorHost.train``; on Ctrl-C/SIGTERM here, stop it
    cleanly (SIGTERM to the accelerator process), or kill it on a second Ctrl-C or
    after ``STOP_GRACE_S``, then raise ``KeyboardInterrupt``."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _raise_interrupt) if main else None
    try:
        try:
            return ray.get(ref)
        except KeyboardInterrupt:
            log.warning("interrupted: stopping the run on the cluster (checkpoint; Ctrl-C "
                        "again to kill it)")
            try:
                _send_signal(where, signal.SIGTERM)
                ray.get(ref, timeout=STOP_GRACE_S)
            except (KeyboardInterrupt, ray.exceptions.GetTimeoutError):
                log.warning("killing the accelerator process (its actors die with it)")
            except ray.exceptions.RayError as exc:
                log.warning("the accelerator process failed while stopping: %s", exc)
            raise KeyboardInterrupt from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)
