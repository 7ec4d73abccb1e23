"""Where a server socket binds, and the address its peers connect to.

A server worker (policy worker, trainer) binds on a *host*: a network interface
(TCP, a free port unless told one), or :data:`INPROC`, ZeroMQ's in-process transport,
used by serial mode (``--launcher=serial``): the same sockets, messages and checks,
between threads that share one ``zmq.Context`` (an ``inproc://`` endpoint exists only in
the context that bound it). ZeroMQ does not enforce ``MAXMSGSIZE`` on ``inproc``; the
receivers' own size checks (``wire.decode(max_bytes=...)``) still drop oversized messages.
"""

from __future__ import annotations

import secrets

import zmq

from jaxsrl.streams.security import connect_host

#: Bind host of serial mode: a fresh ``inproc://`` endpoint per socket.
INPROC = "inproc"


def bind(sock: zmq.Socket, host: str, port: int = 0, name: str = "socket") -> str:
    """Bind ``sock`` and return the address its peers connect to.

    Args:
      sock: an unbound ZeroMQ socket.
      host: an interface (``tcp://host:port``) or :data:`INPROC`
        (``inproc://<name>-<8 hex digits>``, unique within the socket's context).
      port: TCP port (0: a free one); ignored for :data:`INPROC`.
      name: the endpoint's readable part for :data:`INPROC` (e.g. the worker's name).

    Raises:
      zmq.ZMQError: the port or endpoint is taken, or ``host`` is no interface here.
    """
    if host == INPROC:
        address = f"inproc://{name}-{secrets.token_hex(4)}"
        sock.bind(address)
        return address
    if port:
        sock.bind(f"tcp://{host}:{port}")
    else:
        port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{connect_host(host)}:{port}"
