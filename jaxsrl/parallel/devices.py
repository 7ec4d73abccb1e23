"""Data parallelism over the local devices with ``jit`` and ``NamedSharding``.

Agents write single-device code. Here the runtime jits it over a 1-D device mesh
(axis ``"data"``): batch leaves are sharded along their leading axis, parameters and
optimiser state are replicated. XLA's SPMD partitioner then runs the per-example work
on each device's shard and inserts the cross-device reductions, so gradients are
averaged over all devices exactly as on one device (``jax.pmap`` + ``pmean`` done
by the compiler). With one device this is plain ``jit``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "data"


def describe(devices: Sequence) -> str:
    """Names of ``devices`` for a log line: ``"cpu:0 (x1)"``, ``"gpu:0,gpu:1 (x2 NVIDIA H200)"``.

    Each device is ``<platform>:<id>`` (JAX's ``Device.platform`` and ``.id``); more than
    four show as ``first,...,last``. The count follows in brackets, with the device kind
    of the first device for anything but CPUs.

    Raises:
      ValueError: no devices.
    """
    devices = list(devices)
    if not devices:
        raise ValueError("describe(devices): no devices")
    names = [f"{d.platform}:{d.id}" for d in devices]
    shown = names if len(names) <= 4 else [names[0], "...", names[-1]]
    kind = "" if devices[0].platform == "cpu" else f" {devices[0].device_kind}"
    return f"{','.join(shown)} (x{len(names)}{kind})"


def local_mesh(devices=None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: every local device) named ``"data"``."""
    devices = jax.local_devices() if devices is None else devices
    return Mesh(np.asarray(devices), (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """Sharding that keeps a full copy on every device of ``mesh``."""
    return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    """Sharding that splits the leading (batch) axis across the devices of ``mesh``."""
    return NamedSharding(mesh, P(AXIS))


def jit_learn(learn: Callable, mesh: Mesh) -> Callable:
    """``learn(state, batch, rng)`` jitted with the batch sharded, state replicated.

    The batch's leading dimension must be divisible by ``mesh.size``.
    """
    rep, shard = replicated(mesh), batch_sharded(mesh)
    return jax.jit(learn, in_shardings=(rep, shard, rep), out_shardings=(rep, rep))


def jit_replay_learn(learn: Callable, mesh: Mesh) -> Callable:
    """An off-policy ``learn(state, batch, rng) -> (state, metrics, priorities)`` jitted
    like :func:`jit_learn`; ``priorities`` ``[B]`` come back sharded like the batch.

    The batch's leading dimension (the replay batch size) must be divisible by
    ``mesh.size``.
    """
    rep, shard = replicated(mesh), batch_sharded(mesh)
    return jax.jit(learn, in_shardings=(rep, shard, rep), out_shardings=(rep, rep, shard))


def jit_act(act: Callable, mesh: Mesh, **static) -> Callable:
    """``act(params, obs, carry, rng)`` jitted with obs and carry batch-sharded.

    Keyword arguments (e.g. ``deterministic=True``) are bound statically.
    """
    rep, shard = replicated(mesh), batch_sharded(mesh)

    def bound(params, obs, carry, rng):
        return act(params, obs, carry, rng, **static)

    return jax.jit(bound, in_shardings=(rep, shard, shard, rep), out_shardings=(shard, shard, shard))


def put_replicated(tree, mesh: Mesh):
    """Place a pytree on every device of ``mesh``."""
    return jax.device_put(tree, replicated(mesh))


def put_batch(tree, mesh: Mesh):
    """Place a pytree of host arrays with their leading axis split across ``mesh``."""
    return jax.device_put(tree, batch_sharded(mesh))
