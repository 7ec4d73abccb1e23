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
* a server process that dies, or stays silent (no status, or a serving loop that did
  not turn) for ``actor_timeout_s``, is killed and restarted on the same port (actors
  fail over meanwhile and find it again there), at most ``max_server_restarts`` times
  per run; then ``error`` names it and the launcher stops the run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Callable

import zmq

from jaxsrl.experiment import events
from jaxsrl.core.worker import Worker
from jaxsrl.experiment.agent_build import agent_spec
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.streams import wire
from jaxsrl.streams.param_stream import ParamPublisher
from jaxsrl.streams.security import ENV_SERVER_PUBLIC, ENV_SERVER_SECRET
from jaxsrl.streams.sockets import bind, drain, open_socket
from jaxsrl.launch.processes import ChildProcess, exit_reason, kill_for_restart, stop_all
from jaxsrl.launch.topology import server_names

log = logging.getLogger("jaxsrl.launch.remote_inference")

STARTUP_LIMIT_S = 300.0  # a server must be serving this long after its start (compiles)


@dataclasses.dataclass
class RemoteServer:
    """The launcher's view of one remote server."""

    name: str
    policy: str
    stream: str
    child: ChildProcess
    address: str | None = None
    port: int = 0
    serving: bool = False
    version: int = -1
    last_status: float = 0.0  # time.monotonic() of the newest status of the current run
    heartbeat: float = 0.0  # when its serving loop last turned (launcher clock)
    counters: dict = dataclasses.field(default_factory=dict)


class RemoteInferenceServers(Worker):
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
        super().__init__("remote inference servers")
        self.cfg, self.store, self.metrics, self.table = cfg, store, metrics, table
        self.context, self.logdir, self.keys = context, logdir, keys
        self._actor_runs, self._first_key_id = actor_runs, first_key_id
        self.restarts = 0
        self.publisher: ParamPublisher | None = None
        self.servers: list[RemoteServer] = []
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
                self.servers.append(RemoteServer(name, p.policy, p.inference_stream, child))

    def addresses(self, stream: str) -> list[str]:
        """Addresses of ``stream``'s servers, in index order (after ``ready``)."""
        return [s.address for s in self.servers if s.stream == stream]

    # -- thread ------------------------------------------------------------------
    def _run(self) -> None:
        """Supervise until ``stop`` is set (``run()`` calls this; exceptions end up in ``error``)."""
        status = None
        try:
            server_keys = (self.keys.server_public, self.keys.server_secret) if self.keys else None
            status = open_socket(self.context, zmq.PULL, max_frame_bytes=wire.MAX_HEADER_BYTES,
                                 curve_server=server_keys)
            status_address = bind(status, self.cfg.host)
            self.publisher = ParamPublisher(
                self.store, sorted({s.policy for s in self.servers}), self.context, self.cfg.host,
                interval_s=self.cfg.param_publish_interval_s, curve=server_keys,
                actor_runs=self._actor_runs, metrics=self.metrics)
            param_address = self.publisher.start()
            curve = None
            if self.keys is not None:
                actors = [pub.decode() for i, (pub, _) in sorted(self.keys.clients.items())
                          if i < self._first_key_id]  # the servers' keys come after
                curve = {"server_public": self.keys.server_public.decode(), "actors": actors}
            for s in self.servers:
                s.child.spec = s.child.spec | {"param_address": param_address, "curve": curve,
                                               "status_address": status_address}
                self._start(s)
            while not self.stop.is_set():
                if self.publisher.error is not None:
                    raise RuntimeError(f"parameter publisher failed: {self.publisher.error!r}")
                drain(status, self._on_status)
                self._watch()
        finally:
            stop_all([s.child for s in self.servers])
            if self.publisher is not None:
                self.publisher.close()
            if status is not None:
                status.close()

    def _start(self, s: RemoteServer) -> None:
        path = s.child.spec["error_file"]
        if os.path.exists(path):
            os.remove(path)
        s.child.spec = s.child.spec | {"port": s.port}
        s.serving, s.last_status, s.counters = False, 0.0, {}
        s.child.start()

    def _on_status(self, frames: list) -> None:
        try:
            meta = wire.decode(frames, max_bytes=0).meta
            s = next(x for x in self.servers if x.name == meta.get("server"))
        except (wire.WireError, StopIteration):
            return  # not from a server of this run
        if meta.get("run") != s.child.spec.get("run_id"):
            return  # from a previous (killed) process of this server
        now = time.monotonic()
        s.last_status = now
        age = meta.get("heartbeat_age_s")
        s.heartbeat = now - (age if isinstance(age, (int, float)) and math.isfinite(age) else 0.0)
        s.serving = meta.get("serving") is True
        address = meta.get("address")
        if isinstance(address, str) and address != s.address:
            if s.address is not None:
                log.warning("%s now listens at %s, not %s: its actors keep using the other "
                            "servers of %s", s.name, address, s.address, s.stream)
            s.address = address
            s.port = s.port or int(address.rsplit(":", 1)[1])
        version = meta.get("version")
        if type(version) is int:  # noqa: E721
            s.version = version
            learner = self.metrics.policy_version.get(s.policy)
            if version >= 0 and learner is not None:
                self.metrics.add_means({f"param_lag/{metric_name(s.name)}": learner - version})
        means = meta.get("means")
        if isinstance(means, dict):
            self.metrics.add_means({k: v for k, v in means.items() if isinstance(k, str)
                                    and k.startswith("inference/") and type(v) in (int, float)})
        counters = meta.get("counters")
        if isinstance(counters, dict):
            for k, v in counters.items():
                if isinstance(k, str) and len(k) < 64 and type(v) is int and v > s.counters.get(k, 0):  # noqa: E721
                    self.metrics.count(k, v - s.counters.get(k, 0))
                    s.counters[k] = v
        seen = meta.get("seen")
        if isinstance(seen, list):
            for actor in seen[:100_000]:
                if type(actor) is int:  # noqa: E721
                    self.table.seen(actor)

    def _watch(self) -> None:
        """Restart dead or silent servers; update ``ready``, ``serving``, ``heartbeat``."""
        now = time.monotonic()
        silent_s = self.cfg.actor_timeout_s
        for s in self.servers:
            code = s.child.proc.poll()
            reason = None
            if code is not None:
                reason = exit_reason(code)
            elif s.last_status and now - s.last_status > silent_s:
                reason = f"sent no status for {now - s.last_status:.1f} s"
            elif s.serving and now - s.heartbeat > silent_s:
                reason = f"its serving loop stalled for {now - s.heartbeat:.1f} s"
            elif not s.serving and now - s.child.started_at > STARTUP_LIMIT_S:
                reason = f"was not serving {STARTUP_LIMIT_S:g} s after its start"
            if reason is not None:
                self._restart(s, reason)
        serving = all(s.serving for s in self.servers)
        if serving:
            self.serving.set()
            self.heartbeat = min(s.heartbeat for s in self.servers)
            if not self.ready.is_set():
                log.info("remote inference servers serving: %s",
                         ", ".join(f"{s.name} at {s.address}" for s in self.servers))
                self.ready.set()
        else:
            self.serving.clear()

    def liveness(self, addresses: set) -> list[tuple[bool, float]]:
        """``(serving, last heartbeat)`` of each server listening at one of ``addresses``."""
        return [(s.serving, s.heartbeat) for s in self.servers if s.address in addresses]

    def _restart(self, s: RemoteServer, reason: str) -> None:
        error = kill_for_restart(s.child, f"inference server {s.name}", "remote inference servers",
                                 reason, self.restarts, self.cfg.max_server_restarts)
        self.restarts += 1
        self.metrics.count("server_restarts")
        events.emit(log, logging.WARNING, "server_restart",
                    {"server": s.name, "reason": reason, "error": error, "restart": self.restarts},
                    "inference server %s (pid %d) %s%s; restarting it on port %s (restart %d of "
                    "at most %d; its actors fail over meanwhile)", s.name, s.child.proc.pid, reason,
                    f": {error}" if error else "", s.port or "any", self.restarts,
                    self.cfg.max_server_restarts)
        self._start(s)


def metric_name(server: str) -> str:
    """``policy[1]`` -> ``policy_1``: a metric-key part TensorBoard accepts as is."""
    return server.replace("[", "_").replace("]", "")
