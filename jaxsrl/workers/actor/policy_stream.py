"""One policy's sample stream as an actor holds it: a PUSH to its learner and which rows
of a group it serves (its inference side is the actor's action client:
:mod:`jaxsrl.workers.actor.action_client`). No JAX here.
"""

from __future__ import annotations

import numpy as np
import zmq

from jaxsrl.streams.sockets import open_socket
from jaxsrl.workers.actor.spec import StreamSpec


class PolicyStream:
    """One policy's view of the actor: its sample socket and the rows of each group it serves.

    Args:
      spec: the stream's part of the actor spec.
      ctx: the actor's ZeroMQ context.
      curve: ``(server_public, public, secret)`` CURVE client keys, or ``None``.
    """

    def __init__(self, spec: StreamSpec, ctx: zmq.Context, curve: tuple | None = None):
        self.policy, self.team = spec.policy, spec.team
        self.sample_address = spec.sample_address
        # Linger: a segment sent just before a clean stop still reaches the learner.
        self.samples = open_socket(ctx, zmq.PUSH, linger_ms=1000, send_hwm=spec.sample_hwm,
                                   send_buffer_bytes=spec.sample_sndbuf, curve_client=curve)
        self.samples.connect(spec.sample_address)

    def rows_of(self, env) -> np.ndarray:
        """Indices of ``env``'s rows this stream serves (every row of an env without
        teams, ``row_team is None``, or for a stream without a team)."""
        if self.team is None or env.row_team is None:
            return np.arange(env.num_rows)
        return np.flatnonzero(np.asarray(env.row_team) == self.team)

    def close(self) -> None:
        self.samples.close()
