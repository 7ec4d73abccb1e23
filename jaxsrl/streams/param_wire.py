"""The messages of the parameter stream: topics, and one version of a policy's
parameters as ``param_chunk`` messages (the protocol is described in
:mod:`jaxsrl.streams.param_stream`)."""

from __future__ import annotations

import math
import zlib
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxsrl.streams import wire

CHUNK_BYTES = 1 << 20  # 1 MiB: one chunk never holds a socket for long
ACTORS_TOPIC = b"actors\0"


def topic(policy: str) -> bytes:
    """PUB/SUB topic of ``policy``'s parameters (``\\0`` ends it: ``a`` is no prefix of ``ab``)."""
    return b"params/" + policy.encode() + b"\0"


class LeafSpec(NamedTuple):
    """Name (``jax.tree_util.keystr`` of its path), dtype name and shape of one leaf."""

    name: str
    dtype: str
    shape: tuple


def leaf_specs(tree: Any) -> tuple[list[LeafSpec], Any]:
    """``([LeafSpec, ...], treedef)`` of a pytree of arrays (or ``ShapeDtypeStruct``)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [LeafSpec(jax.tree_util.keystr(path), np.dtype(x.dtype).name, tuple(x.shape))
            for path, x in flat], treedef


def encode_chunks(policy: str, version: int, params: Any, stream: int = 0,
                  chunk_bytes: int = CHUNK_BYTES) -> list[list]:
    """Split one version of host (NumPy) parameters into ``param_chunk`` messages.

    Args:
      policy: policy name.
      version: policy version (learner updates).
      params: pytree of host arrays (e.g. ``jax.device_get`` of the learner's).
      stream: the publisher's id.
      chunk_bytes: most data bytes per chunk.

    Returns:
      One frame list per chunk (topic frame first), ready for ``send_multipart``.

    Raises:
      ValueError: a leaf dtype not allowed on the wire, ``chunk_bytes`` < 1, or a tree
        with so many leaves that chunk 0's header exceeds the wire's header limit.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes={chunk_bytes} must be >= 1")
    specs, _ = leaf_specs(params)
    bad = [s for s in specs if s.dtype not in wire.ALLOWED_DTYPES]
    if bad:
        raise ValueError(f"parameter leaves {[s.name for s in bad]} have dtypes "
                         f"{[s.dtype for s in bad]}, not allowed on the wire")
    leaves = [np.ascontiguousarray(x).reshape(-1).view(np.uint8) for x in jax.tree.leaves(params)]
    blob = np.concatenate(leaves) if leaves else np.zeros(0, np.uint8)
    nbytes = int(blob.size)
    chunks = max(1, math.ceil(nbytes / chunk_bytes))
    meta = {"policy": policy, "version": int(version), "stream": int(stream), "chunks": chunks,
            "chunk_bytes": int(chunk_bytes), "nbytes": nbytes,
            "crc32": zlib.crc32(memoryview(blob))}
    out = []
    for k in range(chunks):
        extra = {"chunk": k}
        if k == 0:
            extra["leaves"] = [[s.name, s.dtype, list(s.shape)] for s in specs]
        frames = wire.encode("param_chunk", {"data": blob[k * chunk_bytes:(k + 1) * chunk_bytes]},
                             meta | extra)
        if len(frames[0]) > wire.MAX_HEADER_BYTES:
            raise ValueError(f"{len(specs)} parameter leaves do not fit one wire header "
                             f"({len(frames[0])} > {wire.MAX_HEADER_BYTES} bytes)")
        out.append([topic(policy)] + frames)
    return out
