"""Topology: which inference server each actor process talks to, and its fallbacks.

An inference stream may be served by several servers (``count`` of its
:class:`~jaxsrl.experiment.dataflow.PolicyWorkerSpec`; ``--inference_servers`` for the default
dataflow). Actors of a stream are dealt out round-robin: the ``k``-th actor process on
a stream (in launcher order) gets server ``k % S``. With ``fallbacks`` (remote servers,
which can die and be restarted without stopping the run) an actor also gets every
other server of its stream, in an order rotated per actor, so the actors of a dead
server spread evenly over the others instead of all moving to the same one.

This module imports neither JAX nor ZeroMQ.
"""

from __future__ import annotations

from typing import Any, Sequence

#: The ``python -m`` modules of an actor process and of an inline actor process.
ACTOR_MODULE, INLINE_MODULE = "jaxsrl.workers.actor", "jaxsrl.workers.inline"


def envs_of(cfg: Any, group: Any) -> int:
    """Environments per actor process of actor group ``group`` (its ``envs_per_actor``,
    else ``cfg.envs_per_actor``)."""
    return group.envs_per_actor or cfg.envs_per_actor


def server_names(name: str, count: int) -> list[str]:
    """Names of the ``count`` servers of policy worker ``name``: ``[name]`` for one,
    ``[name[0], name[1], ...]`` for several.

    Raises:
      ValueError: ``count`` < 1.
    """
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"policy worker {name!r}: count={count!r} must be a positive integer")
    return [name] if count == 1 else [f"{name}[{j}]" for j in range(count)]


def server_order(k: int, count: int, fallbacks: bool) -> list[int]:
    """Server indices, in the order the ``k``-th actor process of a stream tries them.

    The first is ``k % count`` (round-robin, so servers get actor counts that differ
    by at most one). With ``fallbacks`` the other servers follow, rotated by
    ``k // count`` so that the actors sharing a first server have different second ones.

    Raises:
      ValueError: ``k`` < 0 or ``count`` < 1.
    """
    if k < 0 or count < 1:
        raise ValueError(f"actor index k={k} must be >= 0 and count={count} >= 1")
    home = k % count
    if not fallbacks or count == 1:
        return [home]
    others = [j for j in range(count) if j != home]
    r = (k // count) % len(others)
    return [home] + others[r:] + others[:r]


class Assigner:
    """Deals the actor processes of each inference stream out to its servers.

    Args:
      addresses: inference stream -> addresses of its servers (index order).
      fallbacks: give each actor the other servers of its stream too.
    """

    def __init__(self, addresses: dict[str, Sequence[str]], fallbacks: bool):
        self.addresses, self.fallbacks = addresses, fallbacks
        self._next: dict[str, int] = {}

    def next(self, stream: str) -> dict:
        """Actor-spec fields of the next actor process on ``stream``:
        ``{"inference_address": own server}``, plus ``"inference_addresses"`` (own
        first, then the fallbacks) when there are fallbacks.

        Raises:
          KeyError: an unknown stream.
        """
        servers = self.addresses[stream]
        k = self._next.get(stream, 0)
        self._next[stream] = k + 1
        order = [servers[j] for j in server_order(k, len(servers), self.fallbacks)]
        return {"inference_address": order[0]} | (
            {"inference_addresses": order} if len(order) > 1 else {})
