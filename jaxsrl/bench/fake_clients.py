"""Fake actors of the server-only rung: DEALER sockets keeping ``act`` requests in flight.

``python jaxsrl/bench/fake_clients.py '<json spec>'`` (run by path, so that a copy of the
rung runs against another checkout's server too; no JAX, no environments). The spec::

    {"address": "tcp://127.0.0.1:PORT", "clients": 8, "in_flight": 2, "rows": 16,
     "arrays": [[name, dtype, per-row shape], ...], "actor_base": 0}

Each of ``clients`` DEALER sockets (actor ids ``actor_base`` .. ``actor_base + clients - 1``,
run 0; ``actor_base`` defaults to 0, so that several such processes can feed one server
with distinct ids) sends ``in_flight``
requests of ``rows`` zero rows (encoded once, by :func:`jaxsrl.streams.wire.encode`)
and sends a group's request again as soon as its reply comes, like an actor whose
environments take no time. The first reply of every group is decoded and checked
(kind ``action``, ``rows`` rows); later replies are only matched to their group (the
header's ``group``), so the clients spend little CPU per round trip.

Protocol on stdin/stdout (one JSON line per answer): once every group got its first
reply it prints ``{"ready": true}``; then each ``count`` line read from stdin is
answered with ``{"replies": n, "cpu_s": s}`` (replies received so far, this process's
CPU seconds); ``stop`` (or the end of stdin, or a parent that died) ends it. Exit
code 1 when a reply is malformed or none comes in ``timeout_s`` (120).
"""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__":  # run by path: this folder's modules must not shadow others
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import msgpack
import numpy as np
import zmq

from jaxsrl.streams import wire
from jaxsrl.streams.sockets import open_socket


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _check_first(frames: list, rows: int) -> int:
    msg = wire.decode(frames)
    if msg.kind != "action" or len(msg.arrays["action"]) != rows:
        raise RuntimeError(f"bad reply: kind {msg.kind!r}, arrays "
                           f"{ {k: v.shape for k, v in msg.arrays.items()} }")
    return msg.meta["group"]


def run(spec: dict) -> int:
    """Serve the protocol of the module docstring; returns the exit code."""
    rows, clients, in_flight = int(spec["rows"]), int(spec["clients"]), int(spec["in_flight"])
    timeout_ms = int(1000 * float(spec.get("timeout_s", 120.0)))
    base = int(spec.get("actor_base", 0))
    arrays = {name: np.zeros((rows, *shape), dtype) for name, dtype, shape in spec["arrays"]}
    ctx = zmq.Context()
    poller = zmq.Poller()
    socks, requests = [], []
    for i in range(clients):
        sock = open_socket(ctx, zmq.DEALER)
        sock.connect(spec["address"])
        socks.append(sock)
        requests.append([wire.encode("act", arrays, {"actor": base + i, "run": 0, "group": g})
                         for g in range(in_flight)])
        poller.register(sock, zmq.POLLIN)
    stdin = sys.stdin.fileno()
    poller.register(stdin, zmq.POLLIN)
    parent = os.getppid()
    for sock, reqs in zip(socks, requests):
        for frames in reqs:
            sock.send_multipart(frames)
    unchecked = clients * in_flight
    replies = 0
    try:
        while os.getppid() == parent:
            events = poller.poll(timeout_ms)
            if not events:
                raise RuntimeError(f"no reply in {timeout_ms / 1000:.0f} s")
            for sock, _ in events:
                if sock == stdin:
                    line = sys.stdin.readline().strip()
                    if line in ("stop", ""):
                        return 0
                    _say({"replies": replies, "cpu_s": time.process_time()})
                    continue
                i = socks.index(sock)
                while True:  # every reply waiting on this socket
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if unchecked:
                        group = _check_first(frames, rows)
                        unchecked -= 1
                        if not unchecked:
                            _say({"ready": True})
                    else:
                        group = msgpack.unpackb(frames[0])["meta"]["group"]
                    replies += 1
                    sock.send_multipart(requests[i][group])
        return 0
    finally:
        for sock in socks:
            sock.close()
        ctx.term()


if __name__ == "__main__":
    try:
        sys.exit(run(json.loads(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001 - one line for the parent's error message
        print(f"fake_clients: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
