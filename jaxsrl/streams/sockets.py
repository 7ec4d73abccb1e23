"""ZeroMQ sockets of every stream, set up in one place.

Each stream end asks :func:`open_socket` for its socket with the options it needs
(linger, high-water marks, a frame-size cap, CURVE) and, for a server end,
:func:`bind` for its address. Nothing else in jaxsrl calls ``setsockopt``.

No JAX here: actors import this.
"""

from __future__ import annotations

from typing import Callable, Sequence

import secrets

import zmq

from jaxsrl.streams import security


def open_socket(context: zmq.Context | None, kind: int, *, linger_ms: int = 0,
                send_hwm: int | None = None, recv_hwm: int | None = None,
                send_buffer_bytes: int | None = None, recv_buffer_bytes: int | None = None,
                max_frame_bytes: int | None = None, recv_timeout_ms: int | None = None,
                curve_server: tuple | None = None,
                curve_client: tuple | None = None, subscribe: Sequence[bytes] = ()
                ) -> zmq.Socket:
    """A new socket of ``kind`` (``zmq.PUSH``, ``zmq.ROUTER``, ...), options set, not yet
    bound or connected.

    Args:
      context: the ZeroMQ context (``None``: the process-wide one).
      kind: the socket type.
      linger_ms: how long ``close`` waits to deliver queued messages (0: drop them).
      send_hwm, recv_hwm: high-water marks in messages (``None``: ZeroMQ's default).
      send_buffer_bytes, recv_buffer_bytes: the kernel's ``SO_SNDBUF`` / ``SO_RCVBUF``
        of the socket's TCP connections (``None`` or -1: the OS default, autotuned).
      max_frame_bytes: frames larger than this disconnect the peer before they are
        buffered (``None``, or -1: no cap).
      recv_timeout_ms: a blocking receive raises ``zmq.Again`` after this long (``None``
        or -1: it waits for ever).
      curve_server: ``(public, secret)`` z85 keys: the socket is a CURVE server.
      curve_client: ``(server_public, public, secret)`` z85 keys (bytes or text): the
        socket is a CURVE client of that server.
      subscribe: topics a SUB socket subscribes to.

    Raises:
      ValueError: both ``curve_server`` and ``curve_client`` given.
    """
    if curve_server is not None and curve_client is not None:
        raise ValueError("a socket is a CURVE server or a CURVE client, not both")
    sock = (context or zmq.Context.instance()).socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    if send_hwm is not None:
        sock.setsockopt(zmq.SNDHWM, int(send_hwm))
    if recv_hwm is not None:
        sock.setsockopt(zmq.RCVHWM, int(recv_hwm))
    if send_buffer_bytes is not None:
        sock.setsockopt(zmq.SNDBUF, int(send_buffer_bytes))
    if recv_buffer_bytes is not None:
        sock.setsockopt(zmq.RCVBUF, int(recv_buffer_bytes))
    if max_frame_bytes is not None:
        sock.setsockopt(zmq.MAXMSGSIZE, int(max_frame_bytes))
    if recv_timeout_ms is not None:
        sock.setsockopt(zmq.RCVTIMEO, int(recv_timeout_ms))
    if curve_server is not None:
        security.make_server(sock, *curve_server)
    if curve_client is not None:
        security.make_client(sock, *curve_client)
    for topic in subscribe:
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    return sock


#: Pending TCP connections a bound socket queues (``ZMQ_BACKLOG``; ZeroMQ's default is 100,
#: the kernel caps it at ``net.core.somaxconn``): thousands of actors connecting at once
#: overflowed 100, and each dropped SYN waits out TCP's retry back-off (1, 3, 7, 15 s ...).
LISTEN_BACKLOG = 4096

#: Bind host of serial mode: a fresh ``inproc://`` endpoint per socket.
INPROC = "inproc"


def bind(sock: zmq.Socket, host: str, port: int = 0, name: str = "socket") -> str:
    """Bind ``sock`` and return the address its peers connect to.

    Args:
      sock: an unbound ZeroMQ socket.
      host: an interface (``tcp://host:port``; ``0.0.0.0`` -> loopback in the returned
        address) or :data:`INPROC` (``inproc://<name>-<8 hex digits>``, unique within the
        socket's context): ZeroMQ's in-process transport, used by serial mode
        (``--launcher=serial``): the same sockets, messages and checks between threads
        sharing one ``zmq.Context``. ZeroMQ does not enforce ``MAXMSGSIZE`` on
        ``inproc``; the receivers' own size checks still drop oversized messages.
      port: TCP port (0: a free one); ignored for :data:`INPROC`. A TCP socket queues up
        to :data:`LISTEN_BACKLOG` connections not yet accepted.
      name: the endpoint's readable part for :data:`INPROC` (e.g. the worker's name).

    Raises:
      zmq.ZMQError: the port or endpoint is taken, or ``host`` is no interface here.
    """
    if host == INPROC:
        address = f"inproc://{name}-{secrets.token_hex(4)}"
        sock.bind(address)
        return address
    sock.setsockopt(zmq.BACKLOG, LISTEN_BACKLOG)
    if port:
        sock.bind(f"tcp://{host}:{port}")
    else:
        port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{security.connect_host(host)}:{port}"


def drain(sock: zmq.Socket, handle: Callable[[list], None], timeout_ms: int = 50) -> int:
    """Wait up to ``timeout_ms`` for a message on ``sock``, then pass every waiting one to
    ``handle`` (multipart frames, as bytes); returns how many were handled."""
    n = 0
    if sock.poll(timeout_ms):
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return n
            handle(frames)
            n += 1
    return n


# pyzmq's own methods, below its Python-level wrappers (``Socket.send`` handles DRAFT
# routing ids and groups, ``send_multipart``/``recv_multipart`` loop in Python with enum
# flags): a server sending several frames per message saves about a third of their cost.
_send = zmq.backend.Socket.send
_recv = zmq.backend.Socket.recv
_SNDMORE = int(zmq.SNDMORE)


def send_frames(sock: zmq.Socket, head: bytes, frames: Sequence) -> None:
    """``sock.send_multipart([head, *frames])`` (copying each frame; ``frames`` not empty),
    for small messages sent often."""
    _send(sock, head, _SNDMORE)
    for frame in frames[:-1]:
        _send(sock, frame, _SNDMORE)
    _send(sock, frames[-1], 0)


def recv_frames(sock: zmq.Socket, flags: int = 0) -> list:
    """``sock.recv_multipart(flags)`` (the frames as bytes), for small messages received often.

    Raises:
      zmq.Again: nothing to receive (``zmq.NOBLOCK``, or the socket's receive timeout).
    """
    frame = _recv(sock, flags, False)  # a zmq.Frame knows whether more parts follow: no
    parts = [frame.bytes]             # getsockopt(RCVMORE) per part (its option lookup is slow)
    while frame.more:
        frame = _recv(sock, flags, False)
        parts.append(frame.bytes)
    return parts


def recv_routed(sock: zmq.Socket, flags: int = 0) -> list:
    """:func:`recv_frames` for a ROUTER socket: ``[identity, *the peer's frames]``. The
    identity frame, which a ROUTER always follows with the peer's (one at least), is
    received as bytes straight away (no ``zmq.Frame`` object: a third of the cost of the
    others, which still say whether more parts follow).

    Raises:
      zmq.Again: nothing to receive (``zmq.NOBLOCK``, or the socket's receive timeout).
    """
    parts = [_recv(sock, flags, True)]
    frame = _recv(sock, flags, False)
    parts.append(frame.bytes)
    while frame.more:
        frame = _recv(sock, flags, False)
        parts.append(frame.bytes)
    return parts
