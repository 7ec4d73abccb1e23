"""Learner processes of a multi-process (multi-host) learner, and process 0's handle on them.

With ``--num_learner_processes=N`` (N > 1) the launcher is learner process 0: it keeps
its trainer thread, inference servers and checkpoints, and :class:`LearnerGroup` starts
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
import time
from typing import Any

from jaxsrl.parallel import distributed
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.processes import ChildProcess, exit_reason, stop_all
from jaxsrl.core.child import start_child
from jaxsrl.core.worker import Worker

log = logging.getLogger("jaxsrl.learner_process")
MODULE = "jaxsrl.workers.learner"
#: seconds between a learner process's heartbeats; process 0 calls one silent for
#: ``DEAD_AFTER_S`` dead (while it waits for it at an update).
HEARTBEAT_S = 0.5
DEAD_AFTER_S = 30.0


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


# -- process 0 ------------------------------------------------------------------------
class LearnerGroup:
    """Process 0's side of a multi-process learner (the launcher holds one per run).

    Use :meth:`start` (before any other JAX call), then per trainer
    :meth:`share_state`, :meth:`gate`, :meth:`put_batch`, per actor
    :meth:`sample_address`, and :meth:`close` at the end.

    Args:
      cfg: the run config (``num_learner_processes``, ``coordinator_address``,
        ``spawn_learner_processes``, ``actor_timeout_s``, ...).
      spawner: where processes ``1 .. N-1`` start (see :mod:`jaxsrl.launch.processes`).
    """

    def __init__(self, cfg: Any, spawner: Any = None):
        self.cfg, self.spawner = cfg, spawner
        self.n = cfg.num_learner_processes
        self.address = cfg.coordinator_address or f"127.0.0.1:{free_port()}"
        self.timeout_s = 10 * cfg.actor_timeout_s  # like an actor's wait for its learner
        self.children: list[ChildProcess] = []
        self.mesh = None
        self._addresses: dict[int, str] = {}
        self._beats: dict[int, tuple] = {}  # process -> (last heartbeat value, when it changed)
        self._joined = False
        self.watch = PeerWatch(self)

    @classmethod
    def start(cls, cfg: Any, spawner: Any = None) -> "LearnerGroup":
        """Start processes ``1 .. N-1`` (if ``cfg.spawn_learner_processes``) and join them.

        Raises:
          ValueError: ``batch_segments`` not divisible by the devices of all processes,
            or processes with different local device counts.
          distributed.PeerError: a learner process exited, or not all joined within
            ``10 * actor_timeout_s``.
        """
        group = cls(cfg, spawner)
        try:
            group._start()
        except BaseException:
            group.close()
            raise
        return group

    def _start(self) -> None:
        import jax  # noqa: PLC0415

        if self.cfg.spawn_learner_processes:
            for p in range(1, self.n):
                child = ChildProcess(f"learner[{p}]", {
                    "coordinator_address": self.address, "num_processes": self.n,
                    "process_id": p, "timeout_s": self.timeout_s, "parent_pid": os.getpid()},
                    module=MODULE, spawner=self.spawner)
                child.start()
                self.children.append(child)
            log.info("started learner processes 1..%d (%s); joining them at %s", self.n - 1,
                     ", ".join(str(c.proc.pid) for c in self.children), self.address)
        else:
            log.info("waiting for learner processes 1..%d to join at %s (start them with "
                     "python -m %s '{\"coordinator_address\": \"%s\", \"num_processes\": %d, "
                     "\"process_id\": P}')", self.n - 1, self.address, MODULE, self.address, self.n)
        # initialize blocks until all have joined: wait in a thread, watching the children.
        error: list = []
        joiner = threading.Thread(target=lambda: _catch(error, distributed.initialize, self.address,
                                                        self.n, 0, timeout_s=self.timeout_s),
                                  name="jax.distributed.initialize", daemon=True)
        joiner.start()
        while joiner.is_alive():
            joiner.join(0.1)
            self._children_alive()
        if error:
            raise error[0]
        self._joined = True
        self.mesh = distributed.global_mesh()
        per_process = {d.process_index for d in jax.devices()}
        counts = {p: sum(d.process_index == p for d in jax.devices()) for p in per_process}
        if len(set(counts.values())) != 1:
            raise ValueError(f"learner processes have different local device counts {counts}; "
                             "give every process the same number of devices")
        if self.cfg.batch_segments % self.mesh.size:
            raise ValueError(f"batch_segments={self.cfg.batch_segments} is not divisible by the "
                             f"{self.mesh.size} devices of the {self.n} learner processes")

    def share_state(self, trainer: str, policy: str, state: Any, rng: Any, version: int, *,
                    num_updates: int, max_rows: int) -> tuple[Any, Any]:
        """Hand the run to processes ``1 .. N-1`` and process 0's learner state to all.

        Args:
          trainer, policy: the (only) trainer of the dataflow and its policy.
          state, rng, version: process 0's fresh or restored learner state.
          num_updates: planned updates (learning-rate schedules).
          max_rows: most rows one segment may have.

        Returns:
          ``(state, rng)``: the state replicated over every device of every process
          (:func:`jaxsrl.parallel.distributed.global_mesh`), and the RNG key as a local array.
        """
        import jax.numpy as jnp  # noqa: PLC0415
        import numpy as np  # noqa: PLC0415

        from jaxsrl.experiment.agent_build import agent_spec  # noqa: PLC0415

        cfg = self.cfg
        distributed.put_json("run", {
            **agent_spec(cfg), "num_updates": num_updates,
            "segment_length": cfg.segment_length, "batch_segments": cfg.batch_segments // self.n,
            "max_staleness": cfg.max_staleness, "on_nonfinite": cfg.on_nonfinite,
            "trainer": trainer, "policy": policy, "max_rows": max_rows,
            "compilation_cache_dir": cfg.compilation_cache_dir})
        self._barrier(f"state/{policy}")
        host = distributed.broadcast_from_first(
            {"agent": state, "rng": rng, "version": np.int32(version)})
        return distributed.put_replicated_global(host["agent"], self.mesh), jnp.asarray(host["rng"])

    def gate(self, policy: str, metrics: MetricsAccumulator) -> distributed.Lockstep:
        """The trainer's ``before_update`` hook; the others' metrics go into ``metrics``.

        A dead peer does not make it raise: :attr:`watch` reports it, and the launcher's
        stop then ends the gate's wait, so the trainer still saves its checkpoint.
        """
        return distributed.Lockstep(policy, timeout_s=self.timeout_s,
                                    on_payload=lambda p, payload: replay(metrics, payload))

    def jit_learn(self, learn):
        """``learn`` jitted over every process's devices (see :func:`jaxsrl.parallel.devices.jit_learn`);
        an update that fails because a learner process died raises
        :class:`~jaxsrl.parallel.distributed.PeerError` naming it (the state before the update is
        intact: the launcher still checkpoints it)."""
        from jaxsrl.parallel import devices  # noqa: PLC0415

        return _PeerAware(devices.jit_learn(learn, self.mesh), self)

    def blame(self, exc: BaseException, wait_s: float = 2.0) -> None:
        """Raise :class:`~jaxsrl.parallel.distributed.PeerError` from ``exc`` if a learner process
        died (checked for up to ``wait_s``); return otherwise."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.check_peers()
            except distributed.PeerError as dead:
                raise distributed.PeerError(f"an update failed: {dead} ({exc})") from exc
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def put_batch(self, batch):
        """Process 0's rows -> the global batch (:func:`jaxsrl.parallel.distributed.put_batch_global`)."""
        return distributed.put_batch_global(batch, self.mesh)

    def sample_address(self, actor_index: int, own: str) -> str:
        """Sample-stream address for actor ``actor_index``: ``own`` (process 0's trainer)
        or that of learner process ``actor_index % N``.

        Raises:
          distributed.PeerError: that process did not report its address in time.
        """
        p = actor_index % self.n
        if p == 0:
            return own
        if p not in self._addresses:
            self._addresses[p] = distributed.get_json(f"learner/{p}/address", self.timeout_s)
        return self._addresses[p]

    def _barrier(self, name: str) -> None:
        error: list = []
        waiter = threading.Thread(target=lambda: _catch(error, distributed.barrier, name,
                                                        self.timeout_s), daemon=True)
        waiter.start()
        while waiter.is_alive():
            waiter.join(0.1)
            self._children_alive()
        if error:
            raise error[0]

    def _children_alive(self) -> None:
        for child in self.children:
            code = child.proc.poll()
            if code is not None:
                raise distributed.PeerError(f"{child.name} (pid {child.proc.pid}) exited: "
                                            f"{exit_reason(code)}")

    def check_peers(self) -> None:
        """Raise :class:`~jaxsrl.parallel.distributed.PeerError` if a spawned process exited, or a
        process's heartbeat (every ``HEARTBEAT_S``) stopped for ``DEAD_AFTER_S``."""
        self._children_alive()
        now = time.monotonic()
        for p in range(1, self.n):
            beat = distributed.try_get_json(f"learner/{p}/alive")
            last, since = self._beats.get(p, (None, now))
            if beat != last:
                self._beats[p] = (beat, now)
            elif now - since > DEAD_AFTER_S:
                raise distributed.PeerError(
                    f"learner process {p} sent no heartbeat for {now - since:.0f} s: dead or hung")
            if distributed.try_get_json(f"learner/{p}/left") is not None:
                raise distributed.PeerError(f"learner process {p} stopped (see its log)")

    def close(self, grace_s: float = 15.0) -> None:
        """Tell processes ``1 .. N-1`` to stop, wait ``grace_s`` for them (then SIGKILL
        spawned ones), and leave the group. Never raises."""
        try:
            if self._joined:
                distributed.request_stop()
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                if self.children:
                    if all(c.proc.poll() is not None for c in self.children):
                        break
                elif not self._joined or all(distributed.try_get_json(f"learner/{p}/left")
                                             is not None for p in range(1, self.n)):
                    break
                time.sleep(0.1)
            # Still running: stuck in a collective, where SIGTERM is not handled.
            stop_all(self.children, grace_s=2.0)
        except Exception as exc:  # noqa: BLE001 - cleanup goes on
            log.warning("stopping the learner processes: %r", exc)
            stop_all(self.children, grace_s=0.0)
        if self._joined:
            try:
                distributed.shutdown()
            except Exception as exc:  # noqa: BLE001
                log.warning("leaving the JAX process group: %r", exc)


class _PeerAware:
    """A jitted (or compiled) ``learn`` whose failures are blamed on a dead peer if one
    died; ``lower(...).compile()`` keeps the wrapper (the trainer compiles ahead of time)."""

    def __init__(self, fn, group: LearnerGroup):
        self.fn, self.group = fn, group

    def lower(self, *args) -> "_PeerAwareLowered":
        return _PeerAwareLowered(self.fn.lower(*args), self.group)

    def __call__(self, *args):
        import jax  # noqa: PLC0415

        try:  # a collective's failure shows when the result is ready (the trainer waits anyway)
            return jax.block_until_ready(self.fn(*args))
        except Exception as exc:  # noqa: BLE001 - re-raised, named if a peer died
            self.group.blame(exc)
            raise


class _PeerAwareLowered:
    def __init__(self, lowered, group: LearnerGroup):
        self.lowered, self.group = lowered, group

    def compile(self) -> _PeerAware:
        return _PeerAware(self.lowered.compile(), self.group)


class PeerWatch(Worker):
    """A worker of the launcher (:class:`~jaxsrl.core.worker.Worker`) that sets ``error``
    when a learner process dies, stops, or stops sending heartbeats, so the run stops
    naming it.
    """

    def __init__(self, group: LearnerGroup, interval_s: float = 0.5):
        super().__init__("learner processes")
        self.group, self.interval_s = group, interval_s

    def _run(self) -> None:
        self.ready.set()
        self.start_serving()
        while not self.stop.wait(self.interval_s):
            self.beat()
            self.group.check_peers()


def _catch(error: list, fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
        error.append(exc)


# -- processes 1 .. N-1 ---------------------------------------------------------------
def run(spec: dict, stop: threading.Event) -> None:
    """Learn in lockstep with process 0 until it says stop (or ``stop`` is set).

    Raises:
      distributed.PeerError: process 0 silent or gone; the trainer's error otherwise.
    """
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from jaxsrl.envs import env_has_idle_rows  # noqa: PLC0415
    from jaxsrl.experiment.agent_build import factory_of_spec  # noqa: PLC0415
    from jaxsrl.parallel import devices  # noqa: PLC0415
    from jaxsrl.parallel.compile_cache import enable_compilation_cache  # noqa: PLC0415
    from jaxsrl.streams.params import ParameterStore  # noqa: PLC0415
    from jaxsrl.workers.learner.trainer import TrainerWorker  # noqa: PLC0415

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
    trainer = TrainerWorker(
        f"{job['trainer']}[{p}]", job["policy"], devices.jit_learn(fns.learn, mesh),
        lambda batch: distributed.put_batch_global(batch, mesh),
        distributed.put_replicated_global(host["agent"], mesh), jnp.asarray(host["rng"]),
        int(host["version"]), obs_space, action_space, job["segment_length"],
        job["batch_segments"], ParameterStore(), relay, None, job["max_staleness"],
        spec.get("host") or route_host(spec["coordinator_address"]), fns.initial_carry,
        max_rows=job["max_rows"], on_nonfinite=job["on_nonfinite"],
        before_update=distributed.Lockstep(job["policy"], timeout_s=timeout_s, payload=relay.drain),
        idle_rows=env_has_idle_rows(job["env"]))
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
