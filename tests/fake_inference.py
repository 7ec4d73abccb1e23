"""A fake inference server for actor tests: a ROUTER answering ``act`` requests with
zero actions, the first ``limit`` of them (then it takes requests and never answers,
like a dead server), and recording the pings of actors blocked on their learner."""

from __future__ import annotations

import threading

import numpy as np
import zmq

from jaxsrl.streams import sockets, wire


class FakeInferenceServer:
    """Args:
      limit: requests answered before it goes silent (``None``: all).
      context: ZeroMQ context (default: the process-wide one).
      host: interface to bind, or ``sockets.INPROC`` (serial-mode tests).
    """

    def __init__(self, limit: int | None = None, context: zmq.Context | None = None,
                 host: str = "127.0.0.1"):
        self.router = (context or zmq.Context.instance()).socket(zmq.ROUTER)
        self.address = sockets.bind(self.router, host, name="fake-server")
        self.limit, self.answered, self.pings = limit, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            identity, *body = self.router.recv_multipart()
            msg = wire.decode(body)
            if msg.kind == "ping":  # the actor, blocked on its learner, says it is alive
                self.pings.append(msg.meta)
                continue
            if self.limit is not None and self.answered >= self.limit:
                continue  # "dead": takes requests, never answers
            n = len(msg.arrays["obs"])
            self.router.send_multipart([identity] + wire.encode(
                "action", {"action": np.zeros(n, np.int32), "logp": np.zeros(n, np.float32)},
                {"group": msg.meta["group"], "version": 0}))
            self.answered += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.router.close(0)
