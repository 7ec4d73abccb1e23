"""Multi-process (multi-host) learner: one data-parallel ``learn`` over the devices of
several JAX processes.

Every learner process calls :func:`initialize` before any other JAX call, then builds
:func:`global_mesh` (a 1-D ``"data"`` mesh over ``jax.devices()``, which now lists the
devices of every process). ``learn`` is jitted over it with
:func:`jaxsrl.parallel.devices.jit_learn` exactly as over local devices: each process feeds the
rows it received (:func:`put_batch_global`), the state is replicated on every device
of every process, and XLA's collectives (Gloo over TCP on CPU, NCCL on GPU) average
the gradients across processes. Each process thus ends every update with the full new
state on its own devices: process 0 serves it to its inference servers through a
local view (:class:`LocalViewStore`, no copy) and checkpoints it alone
(:class:`PrimaryCheckpointer`).

A collective waits for every process, with no timeout: a live process that never
joins it leaves the others blocked for ever (and SIGTERM cannot interrupt them; a
process that *dies* mid-collective makes Gloo fail at once, "connection reset"). So
every process first agrees to run an update through the coordination service's
key-value store, with bounded waits (:class:`Lockstep`), and enters ``learn`` only once
all are ready. Likewise, one-off collectives (:func:`broadcast_from_first`) follow a
bounded barrier (:func:`barrier`).

This module holds the JAX side only; the learner process itself is
:mod:`jaxsrl.workers.learner.process`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax._src import distributed as jax_distributed  # private: the only client accessor
from jax._src import xla_bridge  # private: the only way to ask before failing
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from jaxsrl.parallel import devices
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.streams.params import ParameterStore

log = logging.getLogger("jaxsrl.parallel.distributed")

#: prefix of every key this package writes in the coordination service's store.
KEY_PREFIX = "jaxsrl"


class PeerError(RuntimeError):
    """Another learner process died, stopped or did not answer in time."""


def initialize(coordinator_address: str, num_processes: int, process_id: int, *,
               timeout_s: float = 300.0, heartbeat_timeout_s: float = 60.0) -> None:
    """Join the JAX processes of a multi-process learner (before any other JAX call).

    Selects Gloo for cross-process collectives on CPU, turns on JAX's "recoverable"
    mode (a process that dies does not make the coordination service abort the others:
    they notice through :class:`Lockstep` and stop cleanly) and turns off the
    preemption service (which would catch SIGTERM). Blocks until all
    ``num_processes`` processes have joined.

    Args:
      coordinator_address: ``host:port`` of process 0's coordination service (process 0
        binds the port on every interface).
      num_processes: learner processes in all (>= 1).
      process_id: this process, ``0 .. num_processes - 1``.
      timeout_s: most seconds to wait for every process to join.
      heartbeat_timeout_s: a process silent this long is considered dead.

    Raises:
      ValueError: a malformed address or id.
      RuntimeError: JAX already ran something in this process (its backend is fixed),
        or :func:`initialize` was called before.
    """
    host, _, port = coordinator_address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"coordinator_address={coordinator_address!r} must be host:port")
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes={num_processes!r} must be a positive integer")
    if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id!r} must be in 0..{num_processes - 1}")
    if xla_bridge.backends_are_initialized():
        raise RuntimeError("jaxsrl.parallel.distributed.initialize must run before any other JAX call "
                           "in the process (a multi-process learner needs a fresh process)")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_recoverability", True)
    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes,
        process_id=process_id, cluster_detection_method="deactivate",
        initialization_timeout=max(1, int(timeout_s)),
        heartbeat_timeout_seconds=max(1, int(heartbeat_timeout_s)),
        shutdown_timeout_seconds=10)
    log.info("process %d of %d joined %s: %d local, %d global devices", process_id,
             num_processes, coordinator_address, jax.local_device_count(), jax.device_count())


def shutdown() -> None:
    """Leave the multi-process group (no-op when not initialised); does not block on peers."""
    jax.distributed.shutdown()


def client():
    """The coordination service client of this process (key-value store, barriers).

    Raises:
      RuntimeError: :func:`initialize` was not called.
    """
    c = jax_distributed.global_state.client
    if c is None:
        raise RuntimeError("jaxsrl.parallel.distributed.initialize was not called in this process")
    return c


# -- meshes and arrays --------------------------------------------------------------
def global_mesh() -> Mesh:
    """A 1-D ``"data"`` mesh over the devices of every process, in process order.

    Process ``p``'s devices are contiguous and come after those of ``p - 1``, so a global
    batch holds process 0's rows first (:func:`put_batch_global`).
    """
    return devices.local_mesh(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))


def put_batch_global(tree, mesh: Mesh):
    """This process's rows of a batch -> one global array per leaf, split over ``mesh``.

    Args:
      tree: pytree of host arrays ``[b, ...]``; every process passes the same ``b``,
        divisible by its local device count. ``None`` leaves stay ``None``.
      mesh: :func:`global_mesh`.

    Returns:
      Arrays of shape ``[b * num_processes, ...]``, rows of process 0 first.
    """
    shard = devices.batch_sharded(mesh)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(shard, np.asarray(x)),
                        tree)


def put_replicated_global(tree, mesh: Mesh):
    """Host values (the same on every process) -> arrays replicated on every device of
    ``mesh``. Use :func:`broadcast_from_first` first if the processes may disagree."""
    rep = devices.replicated(mesh)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(rep, np.asarray(x)),
                        tree)


def broadcast_from_first(tree) -> Any:
    """Process 0's host copy of ``tree`` on every process (a collective: every process
    must call it, with leaves of the same shapes and dtypes). Returns numpy arrays.

    Every process must have the same number of local devices.
    """
    host = jax.tree.map(np.asarray, jax.device_get(tree))
    return multihost_utils.broadcast_one_to_all(host)


def barrier(name: str, timeout_s: float) -> None:
    """Wait until every process reaches the barrier ``name`` (each name used once).

    Raises:
      PeerError: not every process arrived within ``timeout_s``.
    """
    try:
        client().wait_at_barrier(f"{KEY_PREFIX}/barrier/{name}", int(timeout_s * 1000))
    except jax.errors.JaxRuntimeError as exc:
        raise PeerError(f"barrier {name!r}: not every learner process arrived within "
                        f"{timeout_s:.0f} s ({exc})") from exc


def local_view(tree, mesh: Mesh):
    """Replicated global arrays -> the same values as arrays on this process's ``mesh``.

    No copy: the new arrays are made of this process's own shards. Leaves that are not
    ``jax.Array`` pass through. Raises ``ValueError`` for a leaf that is not replicated.
    """
    order = {d: i for i, d in enumerate(mesh.devices.flat)}
    sharding = devices.replicated(mesh)

    def view(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if not x.is_fully_replicated:
            raise ValueError(f"local_view of a {x.sharding} array: only replicated arrays "
                             "are complete on every process")
        shards = sorted((s for s in x.addressable_shards if s.device in order),
                        key=lambda s: order[s.device])
        return jax.make_array_from_single_device_arrays(x.shape, sharding,
                                                        [s.data for s in shards])

    return jax.tree.map(view, tree)


def host_copy(tree):
    """Numpy copy of a pytree of replicated (global or local) arrays."""
    return jax.tree.map(
        lambda x: np.asarray(x.addressable_data(0)) if isinstance(x, jax.Array) else x, tree)


class LocalViewStore(ParameterStore):
    """A :class:`~jaxsrl.streams.params.ParameterStore` that turns published global parameters
    into arrays on this process's ``mesh`` (what its inference servers jit over)."""

    def __init__(self, mesh: Mesh):
        super().__init__()
        self.mesh = mesh

    def publish(self, policy: str, version: int, params: Any) -> None:
        super().publish(policy, version, local_view(params, self.mesh))


def jit_act_local(act: Callable, mesh: Mesh, **static) -> Callable:
    """:func:`jaxsrl.parallel.devices.jit_act` for a process of a multi-process group.

    There, ``jit`` refuses host arrays for sharded inputs, so observations and carry are
    placed on ``mesh`` first (the single-process path passes them as they are).
    """
    jitted = devices.jit_act(act, mesh, **static)
    shard = devices.batch_sharded(mesh)

    def call(params, obs, carry, rng):
        return jitted(params, jax.device_put(obs, shard), jax.device_put(carry, shard), rng)

    return call


class PrimaryCheckpointer(Checkpointer):
    """Checkpoints written by process 0 alone.

    The learner state is replicated, so process 0 holds all of it: it saves a host copy
    with Orbax told that it is the only process taking part (no cross-process barrier,
    so the other learner processes never wait for a checkpoint). Restoring gives host
    arrays (:func:`broadcast_from_first` then :func:`put_replicated_global` share them).
    """

    def __init__(self, directory: str, max_to_keep: int = 3):  # noqa: D107
        # Not super().__init__: Orbax's create=True would wait for every process.
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)  # Orbax's create=True needs every process
        primary = jax.process_index()
        self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=False,
            multiprocessing_options=ocp.options.MultiprocessingOptions(
                primary_host=primary, active_processes={primary})))

    def save(self, step: int, state: Any, meta: dict) -> None:
        super().save(step, host_copy(state), meta)

    def restore(self, like: Any, step: int | None = None, **kwargs: Any) -> tuple[Any, dict]:
        """Like :meth:`Checkpointer.restore`, into host (numpy) arrays shaped as ``like``."""
        return super().restore(host_copy(like), step, **kwargs)


# -- lockstep -------------------------------------------------------------------------
class Lockstep:
    """Makes the learner processes run each update together, with bounded waits.

    Called by every process's trainer before each update (its ``before_update`` hook,
    with the trainer's stop event).
    Process ``p > 0`` posts "ready for update k" (with a ``payload`` string, e.g. its
    metrics since the last update) and waits for process 0's verdict; process 0 waits
    for every "ready", hands each payload to ``on_payload`` and posts "learn". Only
    then does anyone enter ``learn``'s collectives, so a dead or stopped process makes
    the others stop at the gate (``False``) or raise :class:`PeerError`, never hang.

    Args:
      name: names this gate's keys (e.g. the policy), the same on every process.
      timeout_s: most seconds to wait for the other processes at one gate.
      payload: (process ``p > 0``) string sent with each "ready".
      on_payload: (process 0) ``on_payload(p, payload)`` for each process's payload.
      peers_alive: (process 0) raises :class:`PeerError` naming a dead peer; polled
        while waiting (default: none, only ``timeout_s`` bounds the wait).
      poll_s: seconds between checks of ``stop``, peers and the deadline.
    """

    def __init__(self, name: str, *, timeout_s: float = 300.0,
                 payload: Callable[[], str] = lambda: "",
                 on_payload: Callable[[int, str], None] = lambda p, s: None,
                 peers_alive: Callable[[], None] | None = None, poll_s: float = 0.1):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s} must be > 0")
        self.client = client()
        self.process_id, self.num_processes = jax.process_index(), jax.process_count()
        self.prefix = f"{KEY_PREFIX}/lockstep/{name}"
        self.timeout_s, self.poll_ms = timeout_s, max(1, int(poll_s * 1000))
        self.payload, self.on_payload = payload, on_payload
        self.peers_alive = peers_alive or (lambda: None)
        self.step = 0  # gates passed

    def __call__(self, stop: threading.Event) -> bool:
        """Wait at the gate of the next update; True: run it, False: stop learning.

        ``stop`` is this process's trainer stop event: once set, the gate returns False
        (on process 0 it also tells the others to stop at this gate).

        Raises:
          PeerError: a peer did not arrive (process 0) or no verdict came (others)
            within ``timeout_s``, or a peer died.
        """
        k = self.step
        go = self._lead(k, stop) if self.process_id == 0 else self._follow(k, stop)
        if go:
            self.step += 1
        return go

    def _lead(self, k: int, stop: threading.Event) -> bool:
        deadline = time.monotonic() + self.timeout_s
        for p in range(1, self.num_processes):
            key = f"{self.prefix}/ready/{k}/{p}"
            while True:
                if stop.is_set():
                    self.client.key_value_set(f"{self.prefix}/go/{k}", "stop", allow_overwrite=True)
                    return False
                value = self._get(key)
                if value is not None:
                    break
                self.peers_alive()
                if time.monotonic() > deadline:
                    raise PeerError(f"learner process {p} was not ready for update {k} within "
                                    f"{self.timeout_s:.0f} s (its actors slow or stuck?)")
            self.client.key_value_delete(key)
            self.on_payload(p, value)
        self.client.key_value_set(f"{self.prefix}/go/{k}", "learn")
        if k:  # every process posted ready/k, so all of them read go/(k-1)
            self.client.key_value_delete(f"{self.prefix}/go/{k - 1}")
        return True

    def _follow(self, k: int, stop: threading.Event) -> bool:
        self.client.key_value_set(f"{self.prefix}/ready/{k}/{self.process_id}", self.payload())
        deadline = time.monotonic() + self.timeout_s
        while True:
            verdict = self._get(f"{self.prefix}/go/{k}")
            if verdict is not None:
                return verdict == "learn"
            if stop.is_set() or stop_requested():
                return False
            if time.monotonic() > deadline:
                raise PeerError(f"learner process 0 gave no verdict on update {k} within "
                                f"{self.timeout_s:.0f} s")

    def _get(self, key: str) -> str | None:
        try:
            return self.client.blocking_key_value_get(key, self.poll_ms)
        except jax.errors.JaxRuntimeError as exc:
            if "DEADLINE_EXCEEDED" in str(exc):
                return None
            raise PeerError(f"coordination service: {exc}") from exc


def request_stop() -> None:
    """(Process 0) tell every learner process to stop learning and exit."""
    client().key_value_set(f"{KEY_PREFIX}/stop", "1", allow_overwrite=True)


def stop_requested() -> bool:
    """Whether process 0 called :func:`request_stop` (False when not initialised)."""
    try:
        return client().key_value_try_get(f"{KEY_PREFIX}/stop") == "1"
    except (RuntimeError, jax.errors.JaxRuntimeError):
        return False


def put_json(key: str, value: Any) -> None:
    """Store ``value`` as JSON under ``jaxsrl/<key>`` in the coordination service."""
    client().key_value_set(f"{KEY_PREFIX}/{key}", json.dumps(value), allow_overwrite=True)


def try_get_json(key: str) -> Any:
    """The JSON value under ``jaxsrl/<key>``, or ``None`` if there is none (yet)."""
    try:
        return json.loads(client().key_value_try_get(f"{KEY_PREFIX}/{key}"))
    except jax.errors.JaxRuntimeError as exc:
        if "NOT_FOUND" in str(exc):
            return None
        raise PeerError(f"coordination service: {exc}") from exc


def get_json(key: str, timeout_s: float) -> Any:
    """The JSON value stored under ``jaxsrl/<key>``, waiting up to ``timeout_s`` for it.

    Raises:
      PeerError: nothing was stored under the key in time.
    """
    try:
        return json.loads(client().blocking_key_value_get(f"{KEY_PREFIX}/{key}",
                                                          int(timeout_s * 1000)))
    except jax.errors.JaxRuntimeError as exc:
        raise PeerError(f"no {key!r} from the other learner processes within "
                        f"{timeout_s:.0f} s ({exc})") from exc
