"""Simulated actors of the fan-in rung: per actor one DEALER (``act`` requests) and one PUSH
(segments) socket, paced at a per-actor rate.

``python jaxsrl/bench/fan_in_clients.py '<json spec>'`` (run by path like
:mod:`jaxsrl.bench.fake_clients`; no JAX, no environments). The spec::

    {"server": "tcp://...", "samples": "tcp://...", "actors": 1000, "actor_base": 0,
     "ring": 2, "rate": 1.0, "T": 32, "env_steps": 512, "seed": 0,
     "request": [[name, dtype, shape], ...], "segment": [[name, dtype, shape], ...],
     "first_reply_s": 60.0, "reply_timeout_s": 10.0}

``request`` and ``segment`` hold whole-array shapes (rows, and the segment's steps,
included); both messages are encoded once per actor and group
(:func:`jaxsrl.streams.wire.encode`, zeros). Each of ``actors`` simulated actors (ids
``actor_base`` ..; run 0) runs ``ring`` groups; a group sends its request, waits for the
reply, then "steps its environments" for ``ring / rate`` seconds on average (uniform in
0.5..1.5 of that), so one actor sends about ``rate`` requests per second; every ``T``
replies a group pushes one segment (``NOBLOCK``: a full queue counts
``segments_blocked``). Latency = reply time - send time, in a histogram of
:data:`EDGES` (log bins, 10 µs .. 100 s). The first reply of each actor is decoded and
checked.

Protocol on stdin/stdout (one JSON line each): after every actor's groups got their first
reply (or ``first_reply_s`` passed) ``{"ready": true, "connected", "refused", "answered",
"connect_s", "fd_limit", "fds", "rss_mib"}``; each ``count`` line gets the cumulative
``{"replies", "hist", "segments_sent", "segments_blocked", "lost", "cpu_s", "rss_mib",
"fds"}`` (``lost``: requests unanswered after ``reply_timeout_s``, sent again);
``stop`` or the end of stdin ends it. A socket that cannot be opened or connected (e.g.
``EMFILE``: too many open files) counts in ``refused``, and that actor does not run.
"""

from __future__ import annotations

import bisect
import heapq
import json
import os
import random
import sys
import time

if __name__ == "__main__":  # run by path: this folder's modules must not shadow others
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import msgpack
import numpy as np
import psutil
import zmq

from jaxsrl.core.limits import raise_fd_limit
from jaxsrl.streams import wire
from jaxsrl.streams.sockets import open_socket

#: latency histogram bin edges in seconds: 40 log bins per decade, 10 µs .. 100 s
EDGES = [10 ** (-5 + i / 40) for i in range(7 * 40 + 1)]


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _zeros(specs: list) -> dict:
    return {name: np.zeros(shape, dtype) for name, dtype, shape in specs}


def _stats(proc: psutil.Process) -> dict:
    return {"rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds()}


def run(spec: dict) -> int:
    """Serve the protocol of the module docstring; returns the exit code."""
    fd_limit = raise_fd_limit()[0]
    n, base, ring = int(spec["actors"]), int(spec.get("actor_base", 0)), int(spec["ring"])
    T, period = int(spec["T"]), ring / float(spec["rate"])  # seconds between a group's requests
    rng = random.Random(int(spec.get("seed", 0)))
    request, segment = _zeros(spec["request"]), _zeros(spec["segment"])
    me = psutil.Process()
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 2 * n + 64)  # libzmq's default is 1023 sockets per context
    t_connect = time.perf_counter()
    dealers, pushes, refused = [], [], 0
    for i in range(n):
        try:
            d = open_socket(ctx, zmq.DEALER)
            p = open_socket(ctx, zmq.PUSH, send_hwm=2)
            d.connect(spec["server"])
            p.connect(spec["samples"])
        except zmq.ZMQError:
            refused += 1
            continue
        dealers.append((base + i, d, p))
    m = len(dealers)
    by_sock = {d: k for k, (_, d, _) in enumerate(dealers)}
    reqs = [[wire.encode("act", request, {"actor": a, "run": 0, "group": g}) for g in range(ring)]
            for a, _, _ in dealers]
    segs = [wire.encode("segment", segment, {"actor": a, "run": 0, "env_steps": int(spec["env_steps"]),
                                             "episodes": []}) for a, _, _ in dealers]
    sent_at = [[0.0] * ring for _ in range(m)]
    replies_of = [[rng.randrange(T) for _ in range(ring)] for _ in range(m)]  # segments spread out
    outstanding = [0] * m
    poller = zmq.Poller()
    stdin = sys.stdin.fileno()
    poller.register(stdin, zmq.POLLIN)
    now = time.perf_counter()
    due = [(now + rng.uniform(0, period), k, g) for k in range(m) for g in range(ring)]
    heapq.heapify(due)
    hist = [0] * (len(EDGES) + 1)
    replies = sent = blocked = lost = 0
    unanswered = {k for k in range(m)}
    first_deadline = now + float(spec.get("first_reply_s", 60.0))
    reply_timeout = float(spec.get("reply_timeout_s", 10.0))
    next_sweep = now + 1.0
    ready = False
    parent = os.getppid()
    try:
        while os.getppid() == parent:
            now = time.perf_counter()
            while due and due[0][0] <= now:
                _, k, g = heapq.heappop(due)
                _, d, _ = dealers[k]
                d.send_multipart(reqs[k][g], copy=False)
                sent_at[k][g] = now
                if not outstanding[k]:
                    poller.register(d, zmq.POLLIN)
                outstanding[k] += 1
            if not ready and (not unanswered or now >= first_deadline):
                ready = True
                _say({"ready": True, "connected": m, "refused": refused,
                      "answered": m - len(unanswered), "connect_s": now - t_connect,
                      "fd_limit": fd_limit, **_stats(me)})
            if now >= next_sweep:  # requests lost (never answered): count, send again
                next_sweep = now + 1.0
                for k in range(m):
                    for g in range(ring):
                        if sent_at[k][g] and now - sent_at[k][g] > reply_timeout:
                            lost += 1
                            sent_at[k][g] = now
                            dealers[k][1].send_multipart(reqs[k][g], copy=False)
            wait_ms = 100 if not due else min(100, max(0, int(1000 * (due[0][0] - now))))
            for sock, _ in poller.poll(wait_ms):
                if sock == stdin:
                    line = sys.stdin.readline().strip()
                    if line in ("stop", ""):
                        return 0
                    _say({"replies": replies, "hist": hist, "segments_sent": sent,
                          "segments_blocked": blocked, "lost": lost,
                          "cpu_s": time.process_time(), **_stats(me)})
                    continue
                k = by_sock[sock]
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    t = time.perf_counter()
                    if k in unanswered:
                        msg = wire.decode(frames)
                        if msg.kind != "action":
                            raise RuntimeError(f"bad reply to actor {dealers[k][0]}: {msg.kind!r}")
                        g = msg.meta["group"]
                        unanswered.discard(k)
                    else:
                        g = msgpack.unpackb(frames[0])["meta"]["group"]
                    if not sent_at[k][g]:
                        continue  # a late reply to a request counted lost and sent again
                    hist[bisect.bisect(EDGES, t - sent_at[k][g])] += 1
                    sent_at[k][g] = 0.0
                    replies += 1
                    outstanding[k] -= 1
                    replies_of[k][g] += 1
                    if replies_of[k][g] % T == 0:
                        try:
                            dealers[k][2].send_multipart(segs[k], zmq.NOBLOCK, copy=False)
                            sent += 1
                        except zmq.Again:
                            blocked += 1
                    heapq.heappush(due, (t + period * rng.uniform(0.5, 1.5), k, g))
                if not outstanding[k]:
                    poller.unregister(sock)
        return 0
    finally:
        for _, d, p in dealers:
            d.close()
            p.close()
        ctx.term()


if __name__ == "__main__":
    try:
        sys.exit(run(json.loads(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001 - one line for the parent's error message
        print(f"fan_in_clients: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
