"""Messages between an off-policy trainer and its buffer processes (the replay stream).

With a ``[dataflow]`` buffer placed as ``"process"`` the actors' segments go to buffer
processes (:mod:`jaxsrl.workers.buffer.server`); the trainer asks them for batches
over a DEALER -> ROUTER connection and sends back priorities. Every message is a
:mod:`jaxsrl.streams.wire` message:

=================  =====================  ==========================================  ==========================
kind               direction              meta                                        arrays
=================  =====================  ==========================================  ==========================
``sample``         trainer -> buffer      ``req`` (request number), ``version``        none
                                          (the learner's policy version)
``replay_batch``   buffer -> trainer      ``req``, ``run`` (buffer process run id),    ``items/<path>``
                                          ``shard``                                    ``[B, ...]``, ``weights``
                                                                                      float32 ``[B]``, ``ids``
                                                                                      int32 ``[B]``
``priorities``     trainer -> buffer      ``run`` (of the batch), ``version``          ``ids`` int32 ``[K]``,
                                                                                      ``priorities`` float32
                                                                                      ``[K]``
``actor_runs``     launcher -> buffer     ``runs`` (``[[actor, run], ...]``)           none
=================  =====================  ==========================================  ==========================

``<path>`` is an item leaf's ``jax.tree_util.keystr`` path (``['obs']``, ``.reward``,
...). :func:`item_schema` is what the trainer checks a ``replay_batch`` against, so a
malformed batch is dropped (counted), never learned from.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxsrl.streams import wire

SAMPLE, BATCH, PRIORITIES, ACTOR_RUNS = "sample", "replay_batch", "priorities", "actor_runs"
ITEM_PREFIX = "items/"


def item_names(item_spec: Any) -> list[str]:
    """Wire names of the leaves of an item pytree, in ``jax.tree.leaves`` order."""
    return [ITEM_PREFIX + jax.tree_util.keystr(path)
            for path, _ in jax.tree_util.tree_flatten_with_path(item_spec)[0]]


def item_schema(item_spec: Any, batch_size: int) -> dict:
    """``{name: ArraySpec}`` of a ``replay_batch`` of ``batch_size`` items shaped like
    ``item_spec`` (leaves with ``shape`` and ``dtype``, no leading axis)."""
    schema = {name: wire.ArraySpec(np.dtype(leaf.dtype).name, (batch_size, *leaf.shape))
              for name, leaf in zip(item_names(item_spec), jax.tree.leaves(item_spec))}
    schema["weights"] = wire.ArraySpec("float32", (batch_size,))
    schema["ids"] = wire.ArraySpec("int32", (batch_size,))
    return schema


def encode_batch(items: Any, weights: Any, ids: Any, meta: dict) -> list:
    """Frames of a ``replay_batch`` (host copies of ``items``' leaves, ``weights``, ``ids``)."""
    arrays = dict(zip(item_names(items), (np.asarray(x) for x in jax.tree.leaves(items))))
    arrays["weights"] = np.asarray(weights, np.float32)
    arrays["ids"] = np.asarray(ids, np.int32)
    return wire.encode(BATCH, arrays, meta)


def decode_batch(frames: list, item_spec: Any, batch_size: int,
                 max_bytes: int = wire.DEFAULT_MAX_BYTES) -> tuple[wire.Message, Any]:
    """Decode and check a ``replay_batch``; returns ``(message, items pytree)``.

    Raises:
      WireError: not a ``replay_batch``, arrays that do not match :func:`item_schema`,
        or meta ``req`` / ``run`` that are not integers.
    """
    msg = wire.decode(frames, max_bytes=max_bytes)
    if msg.kind != BATCH:
        raise wire.WireError(f"expected a {BATCH!r}, got kind {msg.kind!r}")
    for key in ("req", "run"):
        if type(msg.meta.get(key)) is not int:  # noqa: E721
            raise wire.WireError(f"{BATCH} meta {key!r}={msg.meta.get(key)!r} is not an integer")
    schema = item_schema(item_spec, batch_size)
    wire.check_arrays(msg.arrays, schema)
    leaves = [msg.arrays[name] for name in item_names(item_spec)]
    return msg, jax.tree.unflatten(jax.tree.structure(item_spec), leaves)


def check_priorities(msg: wire.Message, max_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, priorities)`` of a ``priorities`` message.

    Raises:
      WireError: other arrays, dtypes or shapes than ``ids`` int32 ``[K]`` and
        ``priorities`` float32 ``[K]`` with ``K <= max_ids``.
    """
    wire.check_arrays(msg.arrays, {"ids": wire.ArraySpec("int32", (None,)),
                                   "priorities": wire.ArraySpec("float32", (None,))})
    ids, priorities = msg.arrays["ids"], msg.arrays["priorities"]
    if len(ids) != len(priorities) or len(ids) > max_ids:
        raise wire.WireError(f"priorities: {len(ids)} ids and {len(priorities)} priorities; "
                             f"expected the same count, at most {max_ids}")
    return ids, priorities
