"""One policy's streams as an actor holds them: a DEALER to its inference server (with
the failover state, see ``jaxsrl/workers/actor/worker.py``; none for an inline actor,
which acts itself), a PUSH to its learner, and which rows of a group it serves. No JAX
here.
"""

from __future__ import annotations

import time

import numpy as np
import zmq

from jaxsrl.streams.sockets import open_socket
from jaxsrl.workers.actor.spec import StreamSpec


class PolicyStream:
    """One policy's view of the actor: its sockets and the rows of each group it serves.

    Args:
      spec: the stream's part of the actor spec.
      ctx: the actor's ZeroMQ context.
      curve: ``(server_public, public, secret)`` CURVE client keys, or ``None``.
    """

    def __init__(self, spec: StreamSpec, ctx: zmq.Context, curve: tuple | None = None):
        self.policy, self.team = spec.policy, spec.team
        self.addresses = list(spec.inference_addresses)
        self.current = 0  # index of the server in use
        self.sample_address = spec.sample_address
        self._ctx, self._curve = ctx, curve
        self.inference = self._connect(self.addresses[0]) if self.addresses else None
        # Linger: a segment sent just before a clean stop still reaches the learner.
        self.samples = open_socket(ctx, zmq.PUSH, linger_ms=1000, send_hwm=spec.sample_hwm,
                                   send_buffer_bytes=spec.sample_sndbuf, curve_client=curve)
        self.samples.connect(spec.sample_address)
        # Failover state: since when requests wait without an answer, since when the
        # current server has been tried, servers tried since the last answer.
        self.silent_since = self.tried_at = time.monotonic()
        self.tried = 1
        self.has_answered = False

    @property
    def inference_address(self) -> str | None:
        return self.addresses[self.current] if self.addresses else None

    def _connect(self, address: str) -> zmq.Socket:
        sock = open_socket(self._ctx, zmq.DEALER, curve_client=self._curve)
        sock.connect(address)
        return sock

    def failover(self) -> zmq.Socket:
        """Close the inference socket and connect a fresh one to the next server."""
        self.inference.close()
        self.current = (self.current + 1) % len(self.addresses)
        self.inference = self._connect(self.addresses[self.current])
        self.tried += 1
        self.tried_at = time.monotonic()
        return self.inference

    def answered(self) -> None:
        """A message came from the current server: it is alive."""
        self.silent_since = self.tried_at = time.monotonic()
        self.tried = 1
        self.has_answered = True

    def rows_of(self, env) -> np.ndarray:
        """Indices of ``env``'s rows this stream serves (every row of an env without
        teams, ``row_team is None``, or for a stream without a team)."""
        if self.team is None or env.row_team is None:
            return np.arange(env.num_rows)
        return np.flatnonzero(np.asarray(env.row_team) == self.team)

    def close(self) -> None:
        if self.inference is not None:
            self.inference.close()
        self.samples.close()
