"""Learner processes ``1 .. N-1`` of a multi-process (multi-host) learner.

With ``--num_learner_processes=N`` (N > 1) the launcher is learner process 0: it keeps
its trainer thread, inference servers and checkpoints, and
:class:`~jaxsrl.launch.learner_group.LearnerGroup` (process 0's side) starts
processes ``1 .. N-1`` (``python -m jaxsrl.workers.learner '<json spec>'``), or
waits for them to be started on other hosts. All N join one JAX process group
(:func:`jaxsrl.parallel.distributed.initialize`). Each runs a
:class:`~jaxsrl.workers.learner.trainer.TrainerWorker` on its own sample socket, fed by its
share of the actors (actor ``i`` sends its segments to process ``i % N``), and takes
``batch_segments / N`` segments per update; one ``learn`` over the devices of every
process (gradients averaged by XLA's collectives) keeps the state identical
everywhere. Process 0 alone publishes parameters to its inference servers and writes
checkpoints; the others send their metrics (env steps, episodes, counters) to it with
each update (:class:`MetricsRelay`).

Before each update the processes agree to run it (:class:`~jaxsrl.parallel.distributed.Lockstep`,
bounded waits through JAX's coordination service), so a dead or stopped process never
leaves the others blocked in a collective.

Spec of a learner process (JSON, its only argument)::

    {"coordinator_address": "10.0.0.1:6123", "num_processes": 2, "process_id": 1,
     "host": "10.0.0.2",        # optional: interface for its sample socket (default: the
                                # address this host uses to reach the coordinator)
     "timeout_s": 300,          # optional: most seconds to wait for the other processes
     "parent_pid": 1234}        # optional: die with that process (PR_SET_PDEATHSIG)

Everything else (agent, env, hyperparameters, its batch share, the initial state) comes
from process 0, so on another host these keys are all it needs.

Exit codes: 0 stopped by process 0 (or SIGTERM/SIGINT while not inside an update);
1 any error (traceback logged), e.g. another process died or stayed silent.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.core.agent import EnvSpec
from jaxsrl.core.child import start_child
from jaxsrl.envs import env_has_idle_rows
from jaxsrl.experiment.agent_build import factory_of_spec
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices, distributed
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart, TrainerWorker

log = logging.getLogger("jaxsrl.learner_process")
MODULE = "jaxsrl.workers.learner"
#: seconds between a learner process's heartbeats (process 0 watches them:
#: ``jaxsrl.launch.learner_group.DEAD_AFTER_S``).
HEARTBEAT_S = 0.5


class MetricsRelay(MetricsAccumulator):
    """A learner process's metrics, also logged for process 0.

    Every relayed call since the last :meth:`drain` is returned by it as JSON;
    :func:`replay` applies them to process 0's accumulator (env steps, episodes and
    counters add up over processes; interval means average over them).
    """

    RELAYED = ("add_env_steps", "add_episode", "add_means", "count")

    def __init__(self):
        super().__init__()
        self._relay_lock = threading.Lock()
        self._calls: list = []

    def _record(self, name: str, *args) -> None:
        with self._relay_lock:
            self._calls.append([name, list(args)])

    def add_env_steps(self, n: int) -> None:
        super().add_env_steps(n)
        self._record("add_env_steps", n)

    def add_episode(self, episode: dict, suffix: str = "") -> None:
        super().add_episode(episode, suffix)
        self._record("add_episode", episode, suffix)

    def add_means(self, values: dict, prefix: str = "") -> None:
        super().add_means(values, prefix)
        self._record("add_means", {k: float(v) for k, v in values.items()}, prefix)

    def count(self, key: str, n: int = 1) -> None:
        super().count(key, n)
        self._record("count", key, n)

    def drain(self) -> str:
        """The calls since the last drain, as a JSON list of ``[method, args]``."""
        with self._relay_lock:
            calls, self._calls = self._calls, []
        return json.dumps(calls)


def replay(metrics: MetricsAccumulator, payload: str) -> None:
    """Apply a :meth:`MetricsRelay.drain` payload to ``metrics`` (unknown calls are ignored)."""
    for name, args in json.loads(payload or "[]"):
        if name in MetricsRelay.RELAYED and isinstance(args, list):
            getattr(metrics, name)(*args)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def route_host(coordinator_address: str) -> str:
    """This host's address on the route to the coordinator (what peers can reach)."""
    host = coordinator_address.rpartition(":")[0].strip("[]")
    if host == "localhost" or host.startswith("127."):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # UDP: no packet is sent, the kernel only picks the route
        return s.getsockname()[0]


# -- processes 1 .. N-1 ---------------------------------------------------------------
def run(spec: dict, stop: threading.Event) -> None:
    """Learn in lockstep with process 0 until it says stop (or ``stop`` is set).

    Raises:
      distributed.PeerError: process 0 silent or gone; the trainer's error otherwise.
    """
    p, timeout_s = spec["process_id"], float(spec.get("timeout_s", 300.0))
    job = distributed.get_json("run", timeout_s)
    enable_compilation_cache(job["compilation_cache_dir"])
    factory = factory_of_spec(job)
    fns = factory.make(job["num_updates"])
    obs_space, action_space = factory.env.observation_space, factory.env.action_space
    mesh = distributed.global_mesh()
    # Shapes only: the values come from process 0.
    like = jax.eval_shape(lambda: {"agent": fns.init(jax.random.PRNGKey(0)),
                                   "rng": jax.random.PRNGKey(0), "version": jnp.int32(0)})
    distributed.barrier(f"state/{job['policy']}", timeout_s)
    host = distributed.broadcast_from_first(
        jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), like))
    relay = MetricsRelay()
    start = TrainerStart(distributed.put_replicated_global(host["agent"], mesh),
                         jnp.asarray(host["rng"]), int(host["version"]))
    settings = TrainerSettings(
        job["segment_length"], job["batch_segments"], max_staleness=job["max_staleness"],
        max_rows=job["max_rows"], on_nonfinite=job["on_nonfinite"],
        idle_rows=env_has_idle_rows(job["env"]),
        host=spec.get("host") or route_host(spec["coordinator_address"]))
    trainer = TrainerWorker(
        f"{job['trainer']}[{p}]", job["policy"], devices.jit_learn(fns.learn, mesh),
        lambda batch: distributed.put_batch_global(batch, mesh), start,
        EnvSpec(obs_space, action_space), settings, ParameterStore(), relay,
        initial_carry=fns.initial_carry,
        before_update=distributed.Lockstep(job["policy"], timeout_s=timeout_s, payload=relay.drain))
    thread = threading.Thread(target=trainer.run, name=trainer.name, daemon=True)
    thread.start()
    trainer.ready.wait()
    if trainer.error is not None:
        raise trainer.error
    distributed.put_json(f"learner/{p}/address", trainer.address)
    log.info("learning on %s with %d of %d devices; %d segments per update", trainer.address,
             jax.local_device_count(), mesh.size, job["batch_segments"])
    beat = 0
    while thread.is_alive():
        thread.join(HEARTBEAT_S)
        beat += 1
        distributed.put_json(f"learner/{p}/alive", beat)
        if stop.is_set() or distributed.stop_requested():
            trainer.stop.set()
    if trainer.error is not None:
        raise trainer.error
    log.info("stopped at policy version %d", trainer.version)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxsrl.workers.learner SPEC_JSON``: exits the process (``os._exit``)."""
    stop = threading.Event()  # SIGTERM/SIGINT set it: a collective cannot be interrupted
    spec = start_child(argv, lambda s: f"learner {s['process_id']}", stop=stop,
                       required=("coordinator_address", "num_processes", "process_id"))
    p = spec["process_id"]
    code, joined = 1, False
    try:
        distributed.initialize(spec["coordinator_address"], spec["num_processes"], p,
                               timeout_s=float(spec.get("timeout_s", 300.0)))
        joined = True
        run(spec, stop)
        code = 0
    except Exception:  # noqa: BLE001
        log.exception("learner process %d failed", p)
    finally:
        if joined:
            try:
                distributed.put_json(f"learner/{p}/left", code)
            except Exception:  # noqa: BLE001 - process 0 is gone: nobody to tell
                pass
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    # Exit without leaving the group: process 0's coordination service (recoverable mode)
    # takes a vanished process in its stride, while a process that leaves after process 0
    # is gone, or whose client is destroyed at interpreter exit, aborts.
    os._exit(code)


if __name__ == "__main__":
    main()
