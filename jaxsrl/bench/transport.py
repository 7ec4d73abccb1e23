"""Rung 2, transport: ZeroMQ round trips/s and MB/s at one ``act`` request's size.

An echo server (``python -m jaxsrl.bench.transport '<json>'``, its own process, no
JAX) binds a ROUTER socket on tcp loopback and sends every message straight back. The
client, a DEALER like an actor's, sends one actor group's ``act`` request encoded by
``jaxsrl.streams.wire`` and decodes each echo, keeping ``in_flight`` requests outstanding (the
actor's ring size). Both the encode/decode and the socket costs are in the numbers.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import zmq

from jaxsrl.bench import procs
from jaxsrl.envs import make_actor_env
from jaxsrl.streams import wire
from jaxsrl.streams.spaces import obs_schema
from jaxsrl.streams.sockets import bind, open_socket


def serve(spec: dict) -> int:
    """Echo server: bind, print the address, echo until SIGTERM or the parent exits."""
    parent = os.getppid()
    sock = open_socket(None, zmq.ROUTER)
    print(json.dumps({"address": bind(sock, spec.get("host", "127.0.0.1"))}), flush=True)
    while os.getppid() == parent:
        if sock.poll(200):
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)
    sock.close()
    return 0


def act_request(env: str, env_kwargs: dict | None, envs_per_group: int, observation_space=None
                ) -> dict:
    """One actor group's observations: from a real reset, or zeros from the space."""
    try:
        group = make_actor_env(env, envs_per_group, 0, env_kwargs)
        try:
            return {k: np.ascontiguousarray(v) for k, v in group.reset().items()}
        finally:
            group.close()
    except Exception:  # noqa: BLE001 - fall back to the declared observation space
        if observation_space is None:
            raise
        return {k: np.zeros((envs_per_group,) + s.shape[1:], s.dtype)
                for k, s in obs_schema(observation_space).items()}


def measure(obs: dict, duration_s: float, in_flight: int = 1, host: str = "127.0.0.1") -> dict:
    """Round trips of ``obs`` as an ``act`` request to an echo server for ``duration_s``."""
    server = procs.start_module("jaxsrl.bench.transport", {"host": host})
    sock = None
    try:
        address = procs.read_json_line(server, "echo server")["address"]
        sock = open_socket(None, zmq.DEALER)
        sock.connect(address)
        request_bytes = sum(len(memoryview(f)) for f in wire.encode("act", obs, {"group": 0}))
        sent_at: dict[int, float] = {}

        def send(g: int) -> None:
            sent_at[g] = time.perf_counter()
            sock.send_multipart(wire.encode("act", obs, {"actor": 0, "run": 0, "group": g}),
                                copy=False)

        def receive() -> int:
            if not sock.poll(10_000):
                raise TimeoutError("echo server did not answer in 10 s")
            return wire.decode(sock.recv_multipart()).meta["group"]

        for _ in range(50):  # warm-up: connection set up, caches hot
            send(0)
            receive()
        latencies = []
        t_start = time.perf_counter()
        deadline = t_start + duration_s
        for g in range(in_flight):
            send(g)
        while True:
            g = receive()
            now = time.perf_counter()
            latencies.append(now - sent_at[g])
            if now >= deadline:
                break
            send(g)
        seconds = time.perf_counter() - t_start
        for _ in range(in_flight - 1):  # drain
            receive()
    finally:
        if sock is not None:
            sock.close()
        procs.stop(server)
    rate = len(latencies) / seconds
    lat_us = np.asarray(latencies) * 1e6
    return {
        "request_bytes": request_bytes,
        "in_flight": in_flight,
        "round_trips_per_s": rate,
        "mb_per_s": 2 * rate * request_bytes / 1e6,  # request + echo
        "latency_us_p50": float(np.percentile(lat_us, 50)),
        "latency_us_p99": float(np.percentile(lat_us, 99)),
        "seconds": seconds,
    }


if __name__ == "__main__":
    sys.exit(serve(json.loads(sys.argv[1])))
