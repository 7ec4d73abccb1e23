"""The action client of an actor whose inference servers act: one DEALER socket per
stream, a deadline per stream, failover to the stream's next server.

Messages (see ``docs/architecture.md``):
  -> inference: ``act``    meta {actor, run, group[, games]}; arrays obs..., carry/i...[, opponent]
  <- inference: ``action`` meta {group, version}; arrays action [n, ...], logp [n], carry/i...[, opponent]
  -> inference: ``ping``   meta {actor, run}; no arrays, no reply (the actor is blocked on
                its learner: it is alive, not hung)
  <- inference: ``resend`` meta {group}; no arrays: the server keeps no carry for a request
                that sent ``carry_kept`` [n] uint8 in place of its carry (below)

Kept carry (:mod:`jaxsrl.streams.kept_carry`; with ``spec.kept_carry``): once a group of a stream has had a reply
from the stream's current server, its next request sends ``carry_kept`` instead of the
``carry/i`` arrays when every row of its carry is that reply's row or all zero bits
(checked bit for bit); the server fills in the carry it sent. Otherwise, after a
failover (the next server keeps nothing yet) and when asked to ``resend``, the carry
travels in full.

Deadlines: a stream waiting for actions gives its servers ``timeout_s`` of silence
(``startup_timeout_s`` until its first answer: servers compile while actors start).
Failover: a stream may list several inference servers (``inference_addresses``, its own
first; remote servers, see ``jaxsrl/launch/topology.py``). If the current one leaves a
request unanswered for ``failover_s``, the client connects a fresh DEALER socket to the
next address (replies still on their way from the old one are lost with the old socket)
and re-sends the stream's outstanding requests; failovers are logged and counted
(:meth:`ServerClient.take_failovers`, the segment meta's ``failovers``). No JAX here.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Mapping, Sequence

import numpy as np
import zmq

from jaxsrl.streams import wire
from jaxsrl.streams.kept_carry import KEPT, RESEND, keep_mask
from jaxsrl.streams.sockets import open_socket
from jaxsrl.workers.actor.action_client import Actions, Alive
from jaxsrl.workers.actor.spec import ActorSpec, StreamSpec

log = logging.getLogger("jaxsrl.actor")
#: longest single wait (ms): how soon a set ``stop`` is noticed.
POLL_SLICE_MS = 100


class _Link:
    """One stream's connection to its inference servers and its failover state: since
    when requests wait without an answer (``silent_since``), since when the current
    server has been tried (``tried_at``), servers tried since the last answer (``tried``)."""

    def __init__(self, spec: StreamSpec, ctx: zmq.Context, curve: tuple | None):
        if not spec.inference_addresses:
            raise ValueError(f"actor stream {spec.policy!r} has no inference address")
        self.addresses = list(spec.inference_addresses)
        self.current = 0  # index of the server in use
        self._ctx, self._curve = ctx, curve
        self.socket = self._connect(self.addresses[0])
        self.silent_since = self.tried_at = time.monotonic()
        self.tried = 1
        self.has_answered = False

    @property
    def address(self) -> str:
        return self.addresses[self.current]

    def _connect(self, address: str) -> zmq.Socket:
        sock = open_socket(self._ctx, zmq.DEALER, curve_client=self._curve)
        sock.connect(address)
        return sock

    def failover(self) -> zmq.Socket:
        """Close the socket and connect a fresh one to the next server."""
        self.socket.close()
        self.current = (self.current + 1) % len(self.addresses)
        self.socket = self._connect(self.address)
        self.tried += 1
        self.tried_at = time.monotonic()
        return self.socket

    def answered(self) -> None:
        """A message came from the current server: it is alive."""
        self.silent_since = self.tried_at = time.monotonic()
        self.tried = 1
        self.has_answered = True


class ServerClient:
    """:class:`~jaxsrl.workers.actor.action_client.ActionClient` over the spec's
    inference servers (module docstring).

    Args:
      spec: the actor's spec (every stream needs an inference address).
      context: ZeroMQ context of its sockets.
      curve: ``(server_public, public, secret)`` CURVE client keys, or ``None``.

    Raises:
      ValueError: a stream has no inference address.
    """

    def __init__(self, spec: ActorSpec, context: zmq.Context, curve: tuple | None = None):
        self.actor_id, self.run_id = spec.actor_id, spec.run_id
        self.timeout_s, self.startup_timeout_s = spec.timeout_s, spec.startup_timeout_s
        self.failover_s = spec.failover_s
        self.links = [_Link(s, context, curve) for s in spec.streams]
        self.poller = zmq.Poller()
        for link in self.links:
            self.poller.register(link.socket, zmq.POLLIN)
        self._socket_stream = {link.socket: i for i, link in enumerate(self.links)}
        self._frames: dict = {}  # (stream, group) -> frames of its latest request (re-sent on failover)
        self._open: list[set] = [set() for _ in self.links]  # groups asked and not answered, per stream
        self._failovers = 0
        # carry leaves the servers may keep (spec.kept_carry; none: the carry always travels)
        self._carry_names = [name for name, _, _ in spec.carry_spec] if spec.kept_carry else []
        self._last: dict = {}  # (stream, group) -> carry arrays of the current server's last reply
        self._pending: dict = {}  # (stream, group) -> (arrays, meta) of its latest request (resend)
        self._replies = wire.SchemaDecoder(None)  # replies' headers repeat: checked once each

    def prepare(self, examples: Sequence[tuple[int, dict]], alive: Alive) -> bool:
        """Nothing to prepare: the servers compile on their side (hence ``startup_timeout_s``)."""
        return not alive.stop.is_set()

    def request(self, group: int, stream: int, arrays: dict, meta: dict,
                kept: np.ndarray | None = None) -> None:
        link = self.links[stream]
        if not self._open[stream]:  # the stream's silence clock runs while it waits
            link.silent_since = link.tried_at = time.monotonic()
        meta = {"actor": self.actor_id, "run": self.run_id, "group": group, **meta}
        frames = self._encode(stream, group, arrays, meta, self._last.get((stream, group)), kept)
        self._frames[stream, group] = frames
        self._open[stream].add(group)
        link.socket.send_multipart(frames, copy=False)

    def _encode(self, stream: int, group: int, arrays: dict, meta: dict, last: dict | None,
                kept: np.ndarray | None = None) -> list:
        """The ``act`` request's frames: the carry replaced by ``carry_kept`` when the
        current server holds the group's last reply (``last``: its carry, or ``None``:
        send the carry in full) and the actor's ``kept`` mask (:meth:`request`) says how
        the carry relates to it, else when :func:`~jaxsrl.streams.kept_carry.keep_mask`
        finds so bit for bit."""
        names = self._carry_names
        if not names:
            return wire.encode("act", arrays, meta)
        self._pending[stream, group] = (arrays, meta)
        if last is None:
            keep = None
        elif kept is not None:
            keep = kept
        else:
            keep = keep_mask({k: arrays[k] for k in names}, last)
        if keep is None:
            return wire.encode("act", arrays, meta)
        sent = {k: v for k, v in arrays.items() if k not in names}
        sent[KEPT] = keep
        return wire.encode("act", sent, meta)

    def _in_full(self, stream: int, group: int) -> list:
        """The frames of the group's latest request with its carry in full."""
        self._last.pop((stream, group), None)
        arrays, meta = self._pending[stream, group]
        frames = self._frames[stream, group] = self._encode(stream, group, arrays, meta, None)
        return frames

    def _limit_s(self, i: int) -> float:
        """Longest silence of stream ``i``'s servers before the actor gives up. Until
        a stream's first answer its servers may still be compiling: wait longer."""
        return self.timeout_s if self.links[i].has_answered else self.startup_timeout_s

    def _deadline(self, i: int) -> float:
        link = self.links[i]
        if len(link.addresses) == 1:
            return link.silent_since + self._limit_s(i)
        return link.tried_at + min(self.failover_s, self._limit_s(i))

    def _fail_over(self, i: int, groups: Sequence[int]) -> None:
        """Stream ``i``'s server missed its deadline: try the next one, re-sending the
        requests of ``groups`` (those still waiting on the stream).

        Raises:
          TimeoutError: the stream was silent for its whole limit and every server of it
            was tried (or it has only one).
        """
        link, now = self.links[i], time.monotonic()
        limit = self._limit_s(i)
        if len(link.addresses) == 1:
            raise TimeoutError(f"inference server(s) at {link.address} did not "
                               f"answer within {limit:.1f} s")
        if now - link.silent_since >= limit and link.tried >= len(link.addresses):
            raise TimeoutError(f"inference servers at {', '.join(link.addresses)} did not "
                               f"answer within {limit:.1f} s (each tried, failing over after "
                               f"{self.failover_s:g} s)")
        old, waited = link.address, now - link.tried_at
        self.poller.unregister(link.socket)
        del self._socket_stream[link.socket]
        sock = link.failover()
        self.poller.register(sock, zmq.POLLIN)
        self._socket_stream[sock] = i
        for key in [k for k in self._last if k[0] == i]:  # the next server keeps no carry
            del self._last[key]
        for g in groups:
            frames = self._in_full(i, g) if (i, g) in self._pending else self._frames[i, g]
            sock.send_multipart(frames, copy=False)
        self._failovers += 1
        log.warning("inference server %s did not answer in %.1f s; failing over to %s "
                    "(re-sent %d request(s))", old, waited, link.address, len(groups))

    def receive(self, waiting: Mapping[int, Sequence[int]], alive: Alive) -> Actions | None:
        """The next well-formed ``action`` reply for a waiting group (others are logged
        and dropped); ``None`` once ``alive.stop`` is set.

        Raises:
          TimeoutError: a stream's servers stayed silent too long (module docstring).
        """
        while True:
            if alive.stop.is_set():
                return None
            alive.beat()
            pending = [i for i, groups in waiting.items() if groups]
            now = time.monotonic()
            deadline = min((self._deadline(i) for i in pending), default=now + self.timeout_s)
            wait_ms = min(POLL_SLICE_MS, max(0, math.ceil(1000 * (deadline - now))))
            ready = dict(self.poller.poll(wait_ms))
            if not ready:
                now = time.monotonic()
                for i in pending:
                    if now >= self._deadline(i):
                        self._fail_over(i, waiting[i])
                continue
            sock = next(iter(ready))
            i = self._socket_stream[sock]
            self.links[i].answered()
            actions = self._actions(i, sock.recv_multipart(), waiting.get(i, ()))
            if actions is not None:
                self._open[i].discard(actions.group)
                if self._carry_names:
                    self._last[i, actions.group] = {k: actions.arrays[k] for k in self._carry_names
                                                    if k in actions.arrays}
                return actions

    def _actions(self, i: int, frames: list, waiting: Sequence[int]) -> Actions | None:
        """Stream ``i``'s reply as :class:`Actions`, or ``None`` (logged) if it is not an
        ``action`` reply with an int ``version`` for a group in ``waiting``. A ``resend``
        for a waiting group sends that group's request again, its carry in full (``None``)."""
        try:
            msg = self._replies.decode(frames).message
        except wire.WireError as exc:
            log.warning("dropping a malformed reply: %s", exc)
            return None
        g, version = msg.meta.get("group"), msg.meta.get("version")
        if msg.kind == RESEND and isinstance(g, int) and g in waiting and (i, g) in self._pending:
            self.links[i].socket.send_multipart(self._in_full(i, g), copy=False)
            return None
        if (msg.kind != "action" or not isinstance(g, int) or g not in waiting
                or not isinstance(version, int)):
            log.warning("dropping unexpected reply kind=%r group=%r version=%r %s", msg.kind, g,
                        version, msg.meta.get("error", ""))
            return None
        return Actions(i, g, version, msg.arrays)

    def ping(self) -> None:
        """Send ``ping`` to every stream's current server (dropped if one is busy)."""
        meta = {"actor": self.actor_id, "run": self.run_id}
        for link in self.links:
            try:
                link.socket.send_multipart(wire.encode("ping", {}, meta), flags=zmq.NOBLOCK)
            except zmq.Again:
                pass

    def take_failovers(self) -> int:
        n, self._failovers = self._failovers, 0
        return n

    def close(self) -> None:
        for link in self.links:
            link.socket.close()
