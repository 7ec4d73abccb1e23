"""Where an actor gets its actions: the :class:`ActionClient` protocol and the
:class:`Actions` it hands back.

An :class:`~jaxsrl.workers.actor.worker.Actor` holds one action client, picked once
when it is built: :class:`~jaxsrl.workers.actor.server_client.ServerClient` (its
inference servers, over DEALER sockets, with deadlines and failover) unless the spec
has ``inline`` settings, then :class:`~jaxsrl.workers.inline.client.InlineClient` (the
policy run in the actor's own process; it imports JAX, so only
:mod:`jaxsrl.workers.inline` builds it and hands it to the actor). No JAX here.

Indices: ``group`` is a ring slot of the actor (``0 <= group < ring_size``); ``stream``
is the index of one of its policy streams (``spec.streams``).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import zmq


@dataclasses.dataclass
class Actions:
    """The actions chosen for one group's rows of one stream.

    Attributes:
      stream: index of the stream they answer.
      group: the ring slot they answer.
      version: version of the policy's parameters that chose them.
      arrays: ``action`` ``[n, ...]``, ``logp`` float32 ``[n]``, the rows' new carry
        ``carry/i`` ``[n, ...]`` and, in self-play, ``opponent`` int ``[n]`` (what served
        each row); ``n`` is the number of rows of the request.
    """

    stream: int
    group: int
    version: int
    arrays: dict


class Alive(Protocol):
    """What a client needs of its actor while it blocks: ``stop`` (an event: return
    soon once it is set) and ``beat()`` (call it on every turn of a wait; the hang
    detection reads it). :class:`~jaxsrl.core.worker.Worker` is one."""

    stop: threading.Event

    def beat(self) -> None: ...


class ActionClient(Protocol):
    """The actor's one meeting point with inference (module docstring).

    The actor calls :meth:`prepare` once before its first request, then per group and
    stream :meth:`request` and :meth:`receive` until every stream of the group was
    answered; :meth:`ping` while it is blocked on its learner; :meth:`close` at the end.
    """

    def prepare(self, examples: Sequence[tuple[int, dict]], alive: Alive) -> bool:
        """Get ready to answer requests like ``examples`` (``(stream, arrays)`` pairs,
        the arrays as :meth:`request` gets them); returns False if ``alive.stop`` was
        set first.

        Raises:
          TimeoutError: inference could not get ready in the spec's ``startup_timeout_s``.
        """

    def request(self, group: int, stream: int, arrays: dict, meta: dict,
                kept: np.ndarray | None = None) -> None:
        """Ask for actions for one group's rows of one stream.

        Args:
          group, stream: the ring slot and the stream index.
          arrays: ``obs`` (or ``obs/<key>``) ``[n, ...]``, ``carry/i`` ``[n, ...]`` and, in
            self-play, ``opponent`` int32 ``[n]``: the rows' inputs.
          meta: extra plain data for the request (self-play: ``games``).
          kept: ``[n]`` uint8, or ``None`` (not known): 1 where the row's carry is, bit for
            bit, the carry of the last :class:`Actions` of this group and stream that the
            actor accepted, 0 where the actor zeroed the row since (a new episode). A
            client whose server keeps carries may then send the mask instead of the carry
            (``jaxsrl/streams/kept_carry.py``); others ignore it.
        """

    def receive(self, waiting: Mapping[int, Sequence[int]], alive: Alive) -> Actions | None:
        """The next ready :class:`Actions`, blocking until one is ready; ``None`` once
        ``alive.stop`` is set.

        Args:
          waiting: stream -> groups still waiting for its actions (asked and not answered
            with actions the actor accepted).
          alive: the actor (beaten on every turn of the wait).

        Raises:
          TimeoutError: inference stayed silent past the spec's limits.
          RuntimeError: nothing is pending that could ever be answered.
        """

    def ping(self) -> None:
        """Tell the launcher's side this actor is alive (it is blocked on its learner)."""

    def take_failovers(self) -> int:
        """Failovers to another inference server since the last call (segment meta)."""

    def close(self) -> None:
        """Close its sockets (idempotent)."""


#: builds an actor's client: ``(spec, context, curve) -> ActionClient``, with ``spec`` the
#: :class:`~jaxsrl.workers.actor.spec.ActorSpec`, ``context`` the actor's ZeroMQ context and
#: ``curve`` its ``(server_public, public, secret)`` CURVE client keys or ``None``.
ClientFactory = Callable[[Any, zmq.Context, "tuple | None"], ActionClient]

