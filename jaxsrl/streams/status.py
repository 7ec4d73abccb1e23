"""Schemas of the status messages that children PUSH to the launcher.

Three :mod:`jaxsrl.streams.wire` messages without arrays carry a child's state in their
meta (every key is required; other keys are ignored):

=================  ==========================  ================================================
kind               sender                      meta
=================  ==========================  ================================================
``server_status``  remote inference server     ``server`` str, ``run`` int, ``pid`` int,
                   (every ``status_interval_s``) ``address`` str, ``serving`` bool, ``version``
                                               int (served; -1: none), ``heartbeat_age_s``
                                               finite number (seconds since its serving loop
                                               turned), ``means`` {str: number}, ``counters``
                                               {str: int} (run-long), ``seen`` [int] (actor ids)
``buffer_status``  buffer process              ``buffer`` str, ``run``, ``pid``,
                                               ``sample_address`` str, ``request_address`` str,
                                               ``serving``, ``heartbeat_age_s``, ``pending`` int,
                                               ``insert_allowed`` bool, ``env_steps`` int
                                               (run-long), ``episodes`` [{str: finite number,
                                               ``team``: str}], ``means``, ``counters``, ``seen``
``inline_status``  inline actor                ``actor`` int, ``run`` int, ``versions``
                                               {policy: int}, ``dropped`` {policy: {reason: int}}
=================  ==========================  ================================================

A receiver checks a status once, with :meth:`StatusSchema.decode`; what it then reads has
the types above (numbers in ``means`` may still be NaN or Inf); it drops a malformed one
with a warning and counts it (:data:`DROPPED_STATUS`). The senders of servers and
buffers encode with :meth:`StatusSchema.encode`, which checks the same way.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import zmq

from jaxsrl.streams import wire
from jaxsrl.streams.sockets import bind, open_socket

#: counter of statuses a receiver dropped as malformed.
DROPPED_STATUS = "dropped_status"


class Spec(NamedTuple):
    """The expected type of one meta value: ``ok(value)`` says whether it matches;
    ``what`` names it in errors (``"an integer"``)."""

    what: str
    ok: Callable[[Any], bool]


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


INTEGER = Spec("an integer", _integer)
BOOLEAN = Spec("true or false", lambda v: isinstance(v, bool))
TEXT = Spec("a string", lambda v: isinstance(v, str))
NUMBER = Spec("a number", _number)
FINITE = Spec("a finite number", lambda v: _number(v) and math.isfinite(v))


def map_of(key: Spec, value: Spec) -> Spec:
    """A map whose keys match ``key`` and values match ``value``."""
    return Spec(f"a map of {key.what} to {value.what}", lambda v: isinstance(v, dict) and all(
        key.ok(k) and value.ok(x) for k, x in v.items()))


def list_of(item: Spec) -> Spec:
    """A list whose items match ``item``."""
    return Spec(f"a list of {item.what}", lambda v: isinstance(v, list) and all(
        item.ok(x) for x in v))


#: An episode record as :class:`~jaxsrl.streams.episodes.EpisodeFilter` leaves it.
EPISODE = Spec("an episode record ({name: finite number}, 'team': string)",
               lambda v: isinstance(v, dict) and all(
                   isinstance(k, str) and (isinstance(x, str) if k == "team" else FINITE.ok(x))
                   for k, x in v.items()))


@dataclasses.dataclass(frozen=True)
class StatusSchema:
    """One status message: its ``kind``, the meta key naming its ``sender``, and the
    :class:`Spec` of every meta key (``fields``)."""

    kind: str
    sender: str
    fields: Mapping[str, Spec]

    def check(self, meta: Mapping[str, Any]) -> dict:
        """``meta`` as a dict, if every field matches.

        Raises:
          WireError: a missing field or one of another type, in one line naming it.
        """
        for key, spec in self.fields.items():
            if key not in meta:
                raise wire.WireError(f"{self.kind}: no {key!r}")
            if not spec.ok(meta[key]):
                raise wire.WireError(f"{self.kind}: {key!r} is not {spec.what}: "
                                     f"{_short(meta[key])}")
        return dict(meta)

    def decode(self, frames: Sequence) -> dict:
        """The checked meta of a received message.

        Raises:
          WireError: not a well-formed wire message, another kind, arrays, or a meta
          that fails :meth:`check`.
        """
        msg = wire.decode(frames, max_bytes=0)
        if msg.kind != self.kind:
            raise wire.WireError(f"expected a {self.kind!r}, got kind {msg.kind!r}")
        if msg.arrays:
            raise wire.WireError(f"{self.kind}: unexpected arrays {sorted(msg.arrays)}")
        return self.check(msg.meta)

    def encode(self, meta: Mapping[str, Any]) -> list:
        """Frames of the status ``meta``.

        Raises:
          WireError: ``meta`` fails :meth:`check` (a sender's bug).
        """
        return wire.encode(self.kind, {}, self.check(meta))


def bind_status(context: zmq.Context, host: str, name: str, curve: tuple | None = None
                ) -> tuple[zmq.Socket, str]:
    """A receiver's status socket: PULL, frames of at most ``wire.MAX_HEADER_BYTES``,
    bound on ``host`` (``name``: the ``inproc`` endpoint's readable part).

    Args:
      curve: ``(public, secret)`` server keys to require CURVE, or ``None``.

    Returns:
      ``(socket, address its senders connect to)``.

    Raises:
      zmq.ZMQError: ``host`` is no interface here (the socket is closed).
    """
    sock = open_socket(context, zmq.PULL, max_frame_bytes=wire.MAX_HEADER_BYTES,
                       curve_server=curve)
    try:
        return sock, bind(sock, host, name=name)
    except BaseException:
        sock.close()
        raise


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


_COMMON = {"run": INTEGER, "pid": INTEGER, "serving": BOOLEAN, "heartbeat_age_s": FINITE,
           "means": map_of(TEXT, NUMBER), "counters": map_of(TEXT, INTEGER),
           "seen": list_of(INTEGER)}

SERVER_STATUS = StatusSchema("server_status", "server", {
    "server": TEXT, **_COMMON, "address": TEXT, "version": INTEGER})
BUFFER_STATUS = StatusSchema("buffer_status", "buffer", {
    "buffer": TEXT, **_COMMON, "sample_address": TEXT, "request_address": TEXT,
    "pending": INTEGER, "insert_allowed": BOOLEAN, "env_steps": INTEGER,
    "episodes": list_of(EPISODE)})
INLINE_STATUS = StatusSchema("inline_status", "actor", {
    "actor": INTEGER, "run": INTEGER, "versions": map_of(TEXT, INTEGER),
    "dropped": map_of(TEXT, map_of(TEXT, INTEGER))})
