"""Stream security: loopback by default, optional ZeroMQ CURVE encryption + authentication.

* Every server socket binds ``RunConfig.host`` (``127.0.0.1`` unless set explicitly).
* No message is ever unpickled (see :mod:`jaxsrl.streams.wire`).
* ``--curve`` turns on CURVE (Curve25519 key exchange, encrypted and authenticated
  streams) for every stream of the run. The launcher generates, per run, one server
  keypair and one client keypair per actor id (:meth:`CurveKeys.generate`); servers
  use the server secret key, actors get the server's *public* key in their JSON spec
  and their own keypair through environment variables (not the command line, which
  other users can read in ``ps``). A ZAP handler (:func:`start_authenticator`) admits
  only the run's client public keys: a client without the server key cannot complete
  the handshake, and a client with an unknown keypair is refused.
"""

from __future__ import annotations

import dataclasses
import os

import zmq
from zmq.auth.thread import ThreadAuthenticator

#: environment variables carrying an actor's CURVE keypair (z85 text).
ENV_CLIENT_PUBLIC = "JAXSRL_CURVE_CLIENT_PUBLIC"
ENV_CLIENT_SECRET = "JAXSRL_CURVE_CLIENT_SECRET"
#: environment variables carrying the run's CURVE server keypair to a remote server.
ENV_SERVER_PUBLIC = "JAXSRL_CURVE_SERVER_PUBLIC"
ENV_SERVER_SECRET = "JAXSRL_CURVE_SERVER_SECRET"

LOOPBACK = "127.0.0.1"


def check_curve_available() -> None:
    """Raise ``ValueError`` if this libzmq has no CURVE support."""
    if not zmq.has("curve"):
        raise ValueError("--curve needs a libzmq built with CURVE (libsodium); "
                         "this pyzmq reports zmq.has('curve') == False")


@dataclasses.dataclass(frozen=True)
class CurveKeys:
    """One run's keys (z85-encoded bytes)."""

    server_public: bytes
    server_secret: bytes
    clients: dict  # actor id -> (public, secret)

    @classmethod
    def generate(cls, actor_ids) -> "CurveKeys":
        check_curve_available()
        server_public, server_secret = zmq.curve_keypair()
        return cls(server_public, server_secret, {int(i): zmq.curve_keypair() for i in actor_ids})

    def allowed(self) -> set:
        return {pub for pub, _ in self.clients.values()}

    def client_env(self, actor_id: int) -> dict:
        """Environment variables handing ``actor_id`` its keypair."""
        public, secret = self.clients[int(actor_id)]
        return {ENV_CLIENT_PUBLIC: public.decode(), ENV_CLIENT_SECRET: secret.decode()}


def make_server(sock: zmq.Socket, public: bytes, secret: bytes) -> None:
    """Turn ``sock`` (before ``bind``) into a CURVE server."""
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True


def make_client(sock: zmq.Socket, server_public: bytes | str, public: bytes | str,
                secret: bytes | str) -> None:
    """Turn ``sock`` (before ``connect``) into a CURVE client of ``server_public``."""
    enc = (lambda k: k.encode() if isinstance(k, str) else k)
    sock.curve_serverkey = enc(server_public)
    sock.curve_publickey = enc(public)
    sock.curve_secretkey = enc(secret)


def client_keys_from_env() -> tuple[str, str] | None:
    """``(public, secret)`` from the environment, or ``None`` if not both are set."""
    public, secret = os.environ.get(ENV_CLIENT_PUBLIC), os.environ.get(ENV_CLIENT_SECRET)
    return (public, secret) if public and secret else None


class _AllowList:
    def __init__(self, keys):
        self.keys = {k if isinstance(k, bytes) else k.encode() for k in keys}

    def callback(self, domain, key):  # noqa: ARG002  (ZAP credentials-provider interface)
        return (key if isinstance(key, bytes) else key.encode()) in self.keys


def start_authenticator(context: zmq.Context, allowed_public_keys):
    """Start a ZAP handler on ``context`` admitting only ``allowed_public_keys``.

    Returns the ``ThreadAuthenticator``; call ``.stop()`` when the run ends. Only one
    may run per context, so a run that uses CURVE should use its own context.
    """
    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve_callback("*", credentials_provider=_AllowList(allowed_public_keys))
    return auth


def connect_host(bind_host: str) -> str:
    """Host that local clients connect to for a server bound on ``bind_host``."""
    return LOOPBACK if bind_host in ("0.0.0.0", "*", "") else bind_host


def is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.") or host == "::1"
