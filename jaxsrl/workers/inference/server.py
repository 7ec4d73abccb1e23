"""Remote inference server: a policy worker in its own process, fed over the parameter stream.

Run as ``python -m jaxsrl.workers.inference '<json spec>'`` (the launcher does
this through :class:`~jaxsrl.launch.processes.ChildProcess`, so it is placed like an actor:
locally, behind a ``launch_prefix`` or on Ray). The process builds the agent from the
spec (agent name, agent config, env id), hosts an unchanged
:class:`~jaxsrl.workers.inference.policy.PolicyWorker` thread (ROUTER socket, batching, jitted
``act`` over this process's devices) and a
:class:`~jaxsrl.streams.param_stream.ParamSubscriber` that puts each complete parameter
version from the learner into the worker's local ``ParameterStore``. Every
``status_interval_s`` it PUSHes a ``server_status`` message to the launcher::

    meta {server, run, pid, address, serving, version, heartbeat_age_s,
          means {inference/batch_rows, inference/requests}, counters {...}, seen [actor ids]}

``version`` is the policy version it serves (-1: none yet); the launcher logs the
learner's version minus it as ``param_lag/<server>``; ``seen`` lists the actors heard
from since the last status (the launcher's hang detection); ``counters`` are run-long
totals of this process (dropped requests, ``param_dropped/<reason>``).

Requests are checked against the run's actor table like in-process servers do: the
launcher sends it on the parameter stream (``actor_runs``), so requests of unknown
actors or of a restarted actor's previous run are dropped.

Spec keys: ``name``, ``policy``, ``agent``, ``agent_config`` (dict), ``env``,
``env_kwargs``, ``host`` (bind), ``port`` (0: any free one; a restarted server asks
for its previous one and falls back to a free one if it is taken),
``advertise_host`` (host actors connect to; default: the bind host, ``0.0.0.0`` ->
``127.0.0.1``), ``param_address``, ``status_address``, ``max_rows``, ``deadline_ms``,
``seed``, ``run_id``, ``parent_pid``, ``error_file``, ``compilation_cache_dir``,
``status_interval_s`` (0.5), ``curve`` (``None`` or ``{"server_public": z85, "actors": [actor public keys]}``; the
server secret comes in ``$JAXSRL_CURVE_SERVER_SECRET`` and this process's client
keypair, for the parameter and status sockets, in the variables of
:mod:`jaxsrl.streams.security`).

Exit codes: 0 stopped by SIGTERM/SIGINT (or the launcher died); 1 an error (traceback
on stderr and in ``error_file``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import jax
import zmq

from jaxsrl.core.child import serve, start_child
from jaxsrl.core.worker import Worker
from jaxsrl.experiment.agent_build import factory_of_spec
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams import security, wire
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.param_subscriber import ParamSubscriber
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.status import SERVER_STATUS
from jaxsrl.streams.security import ENV_SERVER_PUBLIC, ENV_SERVER_SECRET
from jaxsrl.streams.sockets import open_socket
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker

log = logging.getLogger("jaxsrl.inference_server")
__all__ = ["ENV_SERVER_PUBLIC", "ENV_SERVER_SECRET", "InferenceServer", "ReportingActorTable",
           "bind_host", "main"]


def bind_host(host: str) -> str:
    """The interface to bind: ``host``, except that a server placed on another machine
    (``JAXSRL_NODE_IP`` set by the Ray launcher to a different address) binds that
    machine's address rather than the learner's. Loopback stays loopback."""
    node_ip = os.environ.get("JAXSRL_NODE_IP", "")
    if node_ip and not security.is_loopback(host) and host not in ("0.0.0.0", node_ip):
        return node_ip
    return host


class ReportingActorTable(ActorTable):
    """The run's actor table as a remote server knows it (from ``actor_runs`` messages),
    recording which actors were heard from since the last :meth:`take_heard`."""

    def __init__(self, runs: dict | None = None):
        super().__init__()
        self._heard: set = set()
        self._heard_lock = threading.Lock()
        self.update(runs or {})

    def update(self, runs: dict) -> None:
        """Make ``runs`` (``{actor_id: run_id}``) the accepted runs."""
        for actor, run in runs.items():
            try:
                self.check({"actor": actor, "run": run})
            except wire.WireError:  # unknown actor, or a new run of it
                self.register(actor, run)

    def seen(self, actor_id: int) -> None:
        super().seen(actor_id)
        with self._heard_lock:
            self._heard.add(actor_id)

    def take_heard(self, limit: int = 2000) -> list[int]:
        """Up to ``limit`` actor ids heard from (the rest stay for the next call, so a
        status header stays small)."""
        with self._heard_lock:
            heard = sorted(self._heard)[:limit]
            self._heard.difference_update(heard)
        return heard


class InferenceServer(Worker):
    """One remote inference server process (see module docstring). ``spec`` is the
    launcher's dict. Its :meth:`run` serves (and reports its status) until ``stop`` is set
    or SIGTERM/SIGINT (``SystemExit``); it is ``ready`` once its policy worker bound its
    socket and ``serving`` while that worker serves.

    Raises:
      RuntimeError: the spec asks for CURVE but the keys are not in the environment.
      ValueError: an unknown agent or environment.
    """

    def __init__(self, spec: dict, context: zmq.Context | None = None):
        super().__init__(spec["name"])
        self.spec = spec
        self.policy = spec["policy"]
        self.run_id = int(spec.get("run_id", 0))
        self.status_interval_s = float(spec.get("status_interval_s", 0.5))
        enable_compilation_cache(spec.get("compilation_cache_dir"))
        factory = factory_of_spec(spec)
        fns = factory.make(1)  # num_updates: learn only
        mesh = devices.local_mesh()
        self._mesh_size = mesh.size
        self._act = devices.jit_act(fns.act, mesh)
        self._initial_carry, self._obs_space = fns.initial_carry, factory.env.observation_space
        template = jax.eval_shape(fns.init, jax.random.PRNGKey(0)).params
        self.context = context or zmq.Context()
        self._own_context = context is None
        self.store, self.metrics = ParameterStore(), MetricsAccumulator()
        self.table = ReportingActorTable()  # filled by the launcher's actor_runs messages
        curve = spec.get("curve")
        self._auth = None
        self._server_keys = self._client_curve = None
        if curve:
            secret = os.environ.get(ENV_SERVER_SECRET)
            client = security.client_keys_from_env()
            if not secret or client is None:
                raise RuntimeError(f"spec asks for CURVE but ${ENV_SERVER_SECRET} or this "
                                   "process's client keypair is missing")
            self._server_keys = (curve["server_public"].encode(), secret.encode())
            self._client_curve = (curve["server_public"], *client)
            self._auth = security.start_authenticator(self.context, curve["actors"])
        self.subscriber = ParamSubscriber(
            spec["param_address"], self.policy, template, self.store,
            put=lambda tree: devices.put_replicated(tree, mesh), context=self.context,
            curve=self._client_curve, on_actor_runs=self.table.update)
        self.worker: PolicyWorker | None = None
        self._thread: threading.Thread | None = None

    def _start_worker(self, port: int):
        spec = self.spec
        settings = PolicySettings(
            max_rows=int(spec["max_rows"]), num_devices=self._mesh_size,
            host=bind_host(spec.get("host", "127.0.0.1")),
            deadline_ms=float(spec.get("deadline_ms", 0.0)), seed=int(spec.get("seed", 0)),
            port=port, curve=self._server_keys)
        worker = PolicyWorker(
            self.name, self.policy, self._act, self._initial_carry, self._obs_space, self.store,
            self.metrics, settings, actors=self.table, context=self.context)
        thread = worker.start_thread(wait_ready=True)
        self._thread = thread
        return worker, thread

    def _run(self) -> None:
        """Serve until ``stop`` is set, SIGTERM/SIGINT (``SystemExit``) or an error (raised)."""
        self.subscriber.start()
        port = int(self.spec.get("port") or 0)
        worker, thread = self._start_worker(port)
        if worker.error is not None and port and isinstance(worker.error, zmq.ZMQError):
            log.warning("port %d is taken (%s); binding a free one (actors fail over to the "
                        "other servers)", port, worker.error)
            worker, thread = self._start_worker(0)
        self.worker = worker
        if worker.error is not None:
            raise worker.error
        address = worker.address
        if self.spec.get("advertise_host"):
            address = f"tcp://{self.spec['advertise_host']}:{address.rsplit(':', 1)[1]}"
        self.address = address
        self.ready.set()
        status = open_socket(self.context, zmq.PUSH, send_hwm=8, curve_client=self._client_curve)
        status.connect(self.spec["status_address"])
        log.info("serving %s at %s (parameters from %s)", self.policy, address,
                 self.spec["param_address"])
        try:
            while True:
                worker.raise_error(f"{self.name}: policy worker")
                self.subscriber.raise_error(f"{self.name}: parameter subscriber")
                if not thread.is_alive():
                    raise RuntimeError(f"{self.name}: policy worker stopped unexpectedly")
                if self.subscriber.version < 0 and self.subscriber.dropped["mismatch"] >= 3:
                    # Never serving is worse than stopping: the launcher names this error.
                    raise RuntimeError(f"{self.name}: the learner's parameters do not match this "
                                       f"server's agent ({self.subscriber.last_drop})")
                if worker.serving.is_set():
                    self.serving.set()
                self.heartbeat = worker.heartbeat
                try:
                    status.send_multipart(SERVER_STATUS.encode(self.status()), flags=zmq.NOBLOCK)
                except zmq.Again:  # the launcher is busy or gone: the next status will do
                    pass
                if self.stop.wait(self.status_interval_s):
                    return
        finally:
            status.close()

    def status(self) -> dict:
        """The ``server_status`` meta (:data:`~jaxsrl.streams.status.SERVER_STATUS`)."""
        snap = self.metrics.snapshot(self.status_interval_s)
        means = {k: v for k, v in snap.items() if k.startswith("inference/") and isinstance(v, float)}
        counters = {k: v for k, v in snap.items() if isinstance(v, int) and not isinstance(v, bool)
                    and k not in ("env_steps", "policy_version")}
        counters.update({f"param_dropped/{k}": v for k, v in self.subscriber.dropped.items()})
        w = self.worker
        try:
            version = self.store.get(self.policy).version
        except KeyError:
            version = -1
        return {"server": self.name, "run": self.run_id, "pid": os.getpid(),
                "address": self.address, "serving": bool(w is not None and w.serving.is_set()),
                "version": version,
                "heartbeat_age_s": time.monotonic() - w.heartbeat if w is not None else 0.0,
                "means": means, "counters": counters, "seen": self.table.take_heard()}

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop.set()
        if self._thread is not None:
            self._thread.join(10)  # its socket closes before the context ends
        self.subscriber.close()
        if self._auth is not None:
            self._auth.stop()
        if self._own_context:
            self.context.destroy(linger=0)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxsrl.workers.inference SPEC_JSON``; returns the exit code."""
    spec = start_child(argv, lambda s: s.get("name", "server"))
    return serve(spec, lambda: InferenceServer(spec))


if __name__ == "__main__":
    sys.exit(main())
