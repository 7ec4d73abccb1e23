"""Process 0's side of a multi-process (multi-host) learner: :class:`LearnerGroup`.

With ``--num_learner_processes=N`` (N > 1) the launcher is learner process 0: it keeps
its trainer thread, inference servers and checkpoints, and :class:`LearnerGroup` starts
processes ``1 .. N-1`` (``python -m jaxsrl.workers.learner '<json spec>'``, see
:mod:`jaxsrl.workers.learner.process`), or waits for them to be started on other hosts.
All N join one JAX process group (:func:`jaxsrl.parallel.distributed.initialize`);
one ``learn`` over the devices of every process keeps the state identical everywhere,
and process 0 alone publishes parameters and writes checkpoints.

:class:`LearnerGroup` is a :class:`~jaxsrl.launch.placement.LearnerPlacement`: the
launcher wires its trainer through the same methods whether the learner is this
process alone (:class:`~jaxsrl.launch.placement.SingleProcess`) or a group.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.core.worker import Worker
from jaxsrl.experiment.agent_build import agent_spec
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.processes import ChildProcess, exit_reason, stop_all
from jaxsrl.parallel import devices
from jaxsrl.parallel import distributed
from jaxsrl.workers.learner.process import MODULE, free_port, replay

log = logging.getLogger("jaxsrl.learner_process")
#: process 0 calls a learner process whose heartbeat (every
#: ``jaxsrl.workers.learner.process.HEARTBEAT_S``) stopped this long dead (while it
#: waits for it at an update).
DEAD_AFTER_S = 30.0


class LearnerGroup:
    """Process 0's side of a multi-process learner (the launcher holds one per run).

    Use :meth:`start` (before any other JAX call), then the
    :class:`~jaxsrl.launch.placement.LearnerPlacement` methods: per trainer
    :meth:`share_state`, :meth:`gate`, :meth:`jit_learn`, :meth:`put_batch`, per actor
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
        self.mesh = None  # every process's devices (after start)
        self.local_mesh = None  # this process's devices (after start)
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
        self.local_mesh = devices.local_mesh()
        per_process = {d.process_index for d in jax.devices()}
        counts = {p: sum(d.process_index == p for d in jax.devices()) for p in per_process}
        if len(set(counts.values())) != 1:
            raise ValueError(f"learner processes have different local device counts {counts}; "
                             "give every process the same number of devices")
        if self.cfg.batch_segments % self.mesh.size:
            raise ValueError(f"batch_segments={self.cfg.batch_segments} is not divisible by the "
                             f"{self.mesh.size} devices of the {self.n} learner processes")

    # -- LearnerPlacement ---------------------------------------------------------
    @property
    def processes(self) -> int:
        return self.n

    def jit_act(self, act):
        """``act`` jitted over this process's devices (:func:`~jaxsrl.parallel.distributed.jit_act_local`)."""
        return distributed.jit_act_local(act, self.local_mesh)

    def parameter_store(self) -> distributed.LocalViewStore:
        """The parameters span every process: servers read this one's shards (no copy)."""
        return distributed.LocalViewStore(self.local_mesh)

    def checkpointer(self, directory: str, keep: int) -> distributed.PrimaryCheckpointer:
        """Process 0 checkpoints alone (no cross-process barrier)."""
        return distributed.PrimaryCheckpointer(directory, keep)

    def watchers(self) -> list:
        """Workers of the launcher that stop the run naming a dead learner process."""
        return [self.watch]

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
