"""Launcher side of remote inference servers: start, feed, watch and restart them.

With ``--remote_inference`` each inference server of the dataflow runs in its own
process (:mod:`jaxsrl.workers.inference.server`). :class:`RemoteInferenceServers`
looks like a worker to the launcher (``name``, ``ready``, ``stop``, ``error``,
``serving``, ``heartbeat``, ``run``) and runs as one thread of the learner process:

* it binds the parameter stream (:class:`~jaxsrl.streams.param_stream.ParamPublisher`, fed
  from the learner's :class:`~jaxsrl.streams.params.ParameterStore`) and a status socket
  (PULL) that the servers report to;
* it starts every server with :class:`~jaxsrl.launch.processes.ChildProcess` (so placement
  through ``launch_prefix`` or a Ray spawner applies) and is ``ready`` once all of
  them bound their sockets and compiled (``serving``);
* from each ``server_status`` it logs ``param_lag/<server>`` (``policy[1]`` -> ``policy_1``; learner version minus the
  version served, in versions), the servers' ``inference/*`` means and counters, and
  marks the actors they heard from as seen (the launcher's hang detection);
* a server process that dies, is not serving :data:`~jaxsrl.launch.children.STARTUP_LIMIT_S`
  after its start, or once serving stays silent (no status, or a serving loop that did
  not turn) for ``actor_timeout_s``, is killed and restarted on the same port (actors
  fail over meanwhile and find it again there), at most ``max_server_restarts`` times
  per run; then ``error`` names it and the launcher stops the run. These rules, the
  status socket and the restart events are :class:`~jaxsrl.launch.children.ChildSupervisor`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any, Callable

import zmq

from jaxsrl.experiment.agent_build import agent_spec
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.children import Child, ChildSupervisor
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.launch.topology import server_names
from jaxsrl.streams.param_stream import ParamPublisher
from jaxsrl.streams.security import ENV_SERVER_PUBLIC, ENV_SERVER_SECRET
from jaxsrl.streams.status import SERVER_STATUS

log = logging.getLogger("jaxsrl.launch.remote_inference")


@dataclasses.dataclass
class RemoteServer(Child):
    """The launcher's view of one remote server (and, keyword-only, :class:`Child`'s)."""

    name: str
    policy: str
    stream: str
    child: ChildProcess
    address: str | None = None
    port: int = 0  # its first run's; a restart asks for it again
    version: int = -1

    def reset(self) -> None:
        super().reset()
        self.child.spec = self.child.spec | {"port": self.port}


class RemoteInferenceServers(ChildSupervisor):
    """Supervisor thread of a run's remote inference servers (see module docstring); a
    :class:`~jaxsrl.core.worker.Worker` without an address of its own.

    Args:
      cfg: the run config.
      flow: the run's dataflow.
      rows: inference stream -> rows of all its actors (each server's largest batch).
      store: the learner's parameter store.
      metrics: the run's metrics.
      table: the run's actor table (actors heard by a server are marked seen there).
      actor_runs: ``() -> {actor_id: run_id}`` of the live actor processes.
      context: the run's ZeroMQ context.
      logdir: the run folder (``errors/<server>.txt``).
      keys: the run's :class:`~jaxsrl.streams.security.CurveKeys` (``None``: no CURVE); client
        ids ``first_key_id ...`` are the servers' (the actors' come before).
      first_key_id: see ``keys``.
      spawner: where processes start (``None``: this machine).
    """

    def __init__(self, cfg: Any, flow: Any, rows: dict, store: Any, metrics: Any, table: Any,
                 actor_runs: Callable[[], dict], context: zmq.Context, logdir: str,
                 keys: Any = None, first_key_id: int = 0, spawner: Any = None):
        servers: list[RemoteServer] = []
        base = {**agent_spec(cfg), "host": cfg.host, "port": 0,
                "deadline_ms": cfg.inference_deadline_ms, "parent_pid": os.getpid(),
                "compilation_cache_dir": cfg.compilation_cache_dir}
        key_id = first_key_id
        for i, p in enumerate(flow.policy_workers):
            for j, name in enumerate(server_names(p.name, p.count)):
                env = {"XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get(
                    "XLA_PYTHON_CLIENT_PREALLOCATE", "false")}  # share a GPU with the learner
                if keys is not None:
                    env.update(keys.client_env(key_id))
                    env.update({ENV_SERVER_PUBLIC: keys.server_public.decode(),
                                ENV_SERVER_SECRET: keys.server_secret.decode()})
                key_id += 1
                spec = base | {"name": name, "policy": p.policy, "max_rows": rows[p.inference_stream],
                               "seed": cfg.seed + 7919 * (i + 1) + 104729 * j,
                               "error_file": RunDir(logdir).error_file(name)}
                child = ChildProcess(name, spec, module="jaxsrl.workers.inference", env=env,
                                     prefix=tuple(p.launch_prefix), spawner=spawner)
                servers.append(RemoteServer(name, p.policy, p.inference_stream, child))
        super().__init__("remote inference servers", "inference server", SERVER_STATUS,
                         servers, cfg, table, context, log,
                         (keys.server_public, keys.server_secret) if keys else None)
        self.servers: list[RemoteServer] = self.children
        self.store, self.metrics, self.logdir, self.keys = store, metrics, logdir, keys
        self._actor_runs, self._first_key_id = actor_runs, first_key_id
        self.publisher: ParamPublisher | None = None

    def addresses(self, stream: str) -> list[str]:
        """Addresses of ``stream``'s servers, in index order (after ``ready``)."""
        return [s.address for s in self.servers if s.stream == stream]

    def liveness(self, addresses: set) -> list[tuple[bool, float]]:
        """``(serving, last heartbeat)`` of each server listening at one of ``addresses``."""
        return [(s.serving, s.heartbeat) for s in self.servers if s.address in addresses]

    # -- ChildSupervisor hooks ------------------------------------------------------------
    def _prepare(self, status_address: str) -> dict:
        self.publisher = ParamPublisher(
            self.store, sorted({s.policy for s in self.servers}), self.context, self.cfg.host,
            interval_s=self.cfg.param_publish_interval_s, curve=self.curve,
            actor_runs=self._actor_runs, metrics=self.metrics)
        param_address = self.publisher.start()
        curve = None
        if self.keys is not None:
            actors = [pub.decode() for i, (pub, _) in sorted(self.keys.clients.items())
                      if i < self._first_key_id]  # the servers' keys come after
            curve = {"server_public": self.keys.server_public.decode(), "actors": actors}
        return {"param_address": param_address, "curve": curve}

    def _turn(self) -> None:
        if self.publisher.error is not None:
            raise RuntimeError(f"parameter publisher failed: {self.publisher.error!r}")

    def _close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()

    def _metrics(self, s: RemoteServer) -> Any:
        return self.metrics

    def _apply(self, s: RemoteServer, meta: dict) -> None:
        """Address, served version (``param_lag/<server>``) and ``inference/*`` means."""
        address = meta["address"]
        if address != s.address:
            if s.address is not None:
                log.warning("%s now listens at %s, not %s: its actors keep using the other "
                            "servers of %s", s.name, address, s.address, s.stream)
            s.address = address
            port = address.rsplit(":", 1)[-1]
            s.port = s.port or (int(port) if port.isdigit() else 0)
        s.version = meta["version"]
        learner = self.metrics.policy_version.get(s.policy)
        if s.version >= 0 and learner is not None:
            self.metrics.add_means({f"param_lag/{metric_name(s.name)}": learner - s.version})
        self.metrics.add_means({k: v for k, v in meta["means"].items()
                                if k.startswith("inference/") and math.isfinite(v)})

    def _describe(self, s: RemoteServer) -> str:
        return f"{s.name} at {s.address}"

    def _where(self, s: RemoteServer) -> str:
        return f" on port {s.port or 'any'} (its actors fail over meanwhile)"


def metric_name(server: str) -> str:
    """``policy[1]`` -> ``policy_1``: a metric-key part TensorBoard accepts as is."""
    return server.replace("[", "_").replace("]", "")
