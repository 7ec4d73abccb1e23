"""Recurrent state (``carry``) on the wire: a pytree <-> named arrays ``carry/0``, ...

Only the accelerator process uses this module (it imports JAX); actors treat carry
arrays as opaque per-row buffers described by :func:`carry_spec`.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

from jaxsrl.streams.wire import ArraySpec


class CarryCodec:
    """Names and shapes of an agent's carry leaves, built from ``initial_carry``.

    Raises:
      ValueError: the initial carry is not all zeros (actors reset rows by zeroing).
    """

    def __init__(self, initial_carry: Callable[[int], Any]):
        example = initial_carry(1)
        leaves, self.treedef = jax.tree.flatten(example)
        self.names = [f"carry/{i}" for i in range(len(leaves))]
        self.leaves = [(np.dtype(x.dtype).name, tuple(x.shape[1:])) for x in leaves]
        if any(np.any(np.asarray(x) != 0) for x in leaves):
            raise ValueError("initial_carry must be all zeros: actors reset a row's carry by zeroing it")

    def spec(self) -> list:
        """``[[name, dtype, per-row shape], ...]`` for the actor's JSON spec."""
        return [[n, d, list(s)] for n, (d, s) in zip(self.names, self.leaves)]

    def schema(self, lead: tuple = (None,)) -> dict:
        return {n: ArraySpec(d, tuple(lead) + s) for n, (d, s) in zip(self.names, self.leaves)}

    def to_tree(self, named: dict) -> Any:
        if not self.names:
            return None
        return jax.tree.unflatten(self.treedef, [named[n] for n in self.names])

    def to_named(self, tree: Any) -> dict:
        if not self.names:
            return {}
        return dict(zip(self.names, jax.tree.leaves(tree)))
