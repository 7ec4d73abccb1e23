"""Rung 9, server only: the real inference server with a trivial policy, fed by fake actors.

What one request costs the server itself, without the policy's arithmetic: a
:class:`~jaxsrl.workers.inference.policy.PolicyWorker` thread in this process (its
ROUTER socket, request loop, checks (the actor table's too: the fake actors are
registered as a run's), batching, jitted ``act`` over the local mesh, replies) serves
:func:`trivial_act` (zeros for actions and ``logp``, the carry passed through: no XLA
arithmetic to speak of) to the DEALER sockets of ``client_procs`` (default 1) fake-actor
processes (:mod:`jaxsrl.bench.fake_clients`, no JAX, no environments) over tcp loopback,
``client_procs`` x ``clients`` x ``in_flight`` requests of ``rows`` rows outstanding (each
socket a distinct actor id registered in the server's actor table). For each
rows-per-request size the window of ``duration_s`` (after ``warmup_s``) gives:

* ``requests_per_s``, ``rows_per_s``: round trips the clients completed, per wall second
  (all client processes together; ``requests_by_client_proc``: each one's count);
* ``server_cpu_s``: CPU seconds of this process over the window (``time.process_time``:
  user + system of every thread: the policy thread, XLA's threads, ZeroMQ's I/O thread; the
  main thread sleeps); ``server_cores`` = that / wall seconds;
* ``rows_per_server_core_s`` = rows / ``server_cpu_s`` (rows/s per server core) and
  ``cpu_us_per_request`` = 1e6 x ``server_cpu_s`` / requests: what the issue measures;
* ``cpu_us_per_request_by_thread``: that split by thread kind (psutil's per-thread times:
  ``policy`` thread, ``zmq`` I/O, ``xla`` pool, ``other``), ``client_cores``: the fake
  actors' CPU per wall second (summed over their processes), and the server's batch
  means (``inference/batch_rows``, ``inference/requests``).

On a shared machine the rates vary with the other load; the CPU figures much less. They
do vary with how full the clients keep the server's queue (``requests_per_batch_mean``):
one client process no longer saturates a fast server, and several
(``--client_procs``) take cores the server would otherwise have.

``python jaxsrl/bench/server_only.py [--env=CartPole-v1] [--rows=1,16,64] [--seconds=3]
[--client_procs=1]``
prints one JSON report; run by path, a copy of this file and of ``fake_clients.py``
measures another checkout's server (``PYTHONPATH=<checkout> python /tmp/x/server_only.py``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time

if __name__ == "__main__":  # run by path: this folder's modules must not shadow others
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import jax
import jax.numpy as jnp
import psutil

from jaxsrl.bench.procs import ask, end_clients
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.processes import local_spawner
from jaxsrl.parallel import devices
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.spaces import action_leaf, obs_schema
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker

CLIENTS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_clients.py")


def trivial_act(action_space):
    """``act(params, obs, carry, rng) -> (action, carry, {"logp"})`` returning zeros
    (actions of ``action_space``'s wire dtype and shape, float32 ``logp`` ``[n]``) and the
    carry unchanged: the cheapest policy a server can run."""
    dtype, shape = action_leaf(action_space)

    def act(params, obs, carry, rng):
        n = jax.tree.leaves(obs)[0].shape[0]
        return jnp.zeros((n, *shape), dtype), carry, {"logp": jnp.zeros((n,), jnp.float32)}

    return act


def _cpu_s() -> float:
    return time.process_time()  # every thread of this process, ns resolution


def _threads_cpu_s(policy_tid: int) -> dict:
    """CPU seconds of this process's threads by kind: ``policy`` (the policy worker's
    thread), ``zmq`` (ZeroMQ's I/O and reaper threads), ``xla`` (XLA's Eigen pool),
    ``other`` (the rest: JAX's own threads, the main thread)."""
    out = {"policy": 0.0, "zmq": 0.0, "xla": 0.0, "other": 0.0}
    for t in psutil.Process().threads():
        try:
            with open(f"/proc/self/task/{t.id}/comm") as f:
                comm = f.read().strip()
        except OSError:  # the thread ended
            comm = ""
        kind = ("policy" if t.id == policy_tid else "zmq" if comm.startswith("ZMQbg")
                else "xla" if "XLA" in comm else "other")
        out[kind] += t.user_time + t.system_time
    return out


_ask = functools.partial(ask, what="fake clients")


def _tell(proc: subprocess.Popen, line: str) -> None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _count(procs: list) -> list:
    """Every client process's ``{"replies", "cpu_s"}``, asked of all before any is read
    (the processes answer at nearly the same instant)."""
    for proc in procs:
        _tell(proc, "count")
    return [_ask(proc) for proc in procs]


def _point(worker: PolicyWorker, thread: threading.Thread, metrics: MetricsAccumulator,
           arrays: list, rows: int, clients: int, in_flight: int, duration_s: float,
           warmup_s: float, client_procs: int = 1) -> dict:
    procs = []
    try:
        for j in range(client_procs):  # process j's sockets are actors j*clients ..
            spec = {"address": worker.address, "clients": clients, "in_flight": in_flight,
                    "rows": rows, "arrays": arrays, "actor_base": j * clients}
            procs.append(local_spawner(
                [sys.executable, CLIENTS_SCRIPT, json.dumps(spec)], {}, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1))
        for proc in procs:
            _ask(proc)  # {"ready": true}: every group was answered once
        time.sleep(warmup_s)
        metrics.snapshot(1.0)  # a fresh interval of batch means
        c0, t0, cpu0, th0 = _count(procs), time.perf_counter(), _cpu_s(), \
            _threads_cpu_s(thread.native_id)
        time.sleep(duration_s)
        c1, t1, cpu1, th1 = _count(procs), time.perf_counter(), _cpu_s(), \
            _threads_cpu_s(thread.native_id)
        record = metrics.snapshot(t1 - t0)
    finally:
        end_clients(procs, 10)
    worker.raise_error()
    seconds, cpu = t1 - t0, max(cpu1 - cpu0, 1e-9)
    by_proc = [b["replies"] - a["replies"] for a, b in zip(c0, c1)]
    requests = sum(by_proc)
    return {
        "rows_per_request": rows,
        "requests_per_s": requests / seconds,
        "rows_per_s": requests * rows / seconds,
        "server_cpu_s": cpu,
        "server_cores": cpu / seconds,
        "rows_per_server_core_s": requests * rows / cpu,
        "cpu_us_per_request": 1e6 * cpu / max(requests, 1),
        "cpu_us_per_request_by_thread": {k: 1e6 * (th1[k] - th0[k]) / max(requests, 1)
                                         for k in th0},
        "client_cores": sum(b["cpu_s"] - a["cpu_s"] for a, b in zip(c0, c1)) / seconds,
        "requests_by_client_proc": by_proc,
        "batch_rows_mean": record.get("inference/batch_rows"),
        "requests_per_batch_mean": record.get("inference/requests"),
        "seconds": seconds,
    }


def measure(observation_space, action_space, initial_carry, rows: tuple = (1, 16, 64),
            clients: int = 8, in_flight: int = 2, duration_s: float = 3.0,
            warmup_s: float = 0.5, host: str = "127.0.0.1", mesh=None,
            client_procs: int = 1) -> dict:
    """Measure the server at each rows-per-request size of ``rows`` (see module docstring).

    Args:
      observation_space, action_space: per-row spaces of the requests and replies.
      initial_carry: the agent's ``initial_carry`` (its carry travels in every request).
      rows: rows per request, one point each (one server, ``max_rows`` =
        ``client_procs * clients * in_flight * max(rows)``, serves them all).
      clients, in_flight: fake actor sockets (of each client process) and requests each
        socket keeps outstanding.
      duration_s, warmup_s: measured and warm-up seconds of each point.
      host: interface the server binds.
      mesh: device mesh (default: the local one).
      client_procs: fake-actor processes, each with ``clients`` sockets (actor ids
        ``j * clients`` ..), counted together: replies and client CPU summed.

    Raises:
      ValueError: a size in ``rows``, ``clients``, ``in_flight`` or ``client_procs`` below 1.
      RuntimeError: the server or the fake clients failed.
    """
    if min(rows, default=0) < 1 or clients < 1 or in_flight < 1 or client_procs < 1:
        raise ValueError(f"rows {rows}, clients {clients}, in_flight {in_flight} and "
                         f"client_procs {client_procs} must be >= 1")
    mesh = mesh or devices.local_mesh()
    act = devices.jit_act(trivial_act(action_space), mesh)
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("bench", 0, devices.put_replicated({"w": jnp.zeros(())}, mesh))
    actors = ActorTable()  # the fake actors' ids are checked like a run's
    for i in range(client_procs * clients):
        actors.register(i, 0)
    settings = PolicySettings(max_rows=client_procs * clients * in_flight * max(rows),
                              num_devices=mesh.size, host=host)
    worker = PolicyWorker("bench-server", "bench", act, initial_carry, observation_space, store,
                          metrics, settings, actors=actors)
    arrays = [[k, s.dtype, list(s.shape[1:])] for k, s in obs_schema(observation_space).items()]
    arrays += [[k, s.dtype, list(s.shape[1:])]
               for k, s in CarryCodec(initial_carry).schema().items()]
    thread = worker.start_thread(wait_ready=True)
    try:
        worker.raise_error()
        t_start = time.perf_counter()
        points = [_point(worker, thread, metrics, arrays, n, clients, in_flight, duration_s,
                         warmup_s, client_procs) for n in rows]
    finally:
        worker.stop.set()
        thread.join(30)
    return {"points": points, "clients": clients, "in_flight": in_flight,
            "client_procs": client_procs,
            "buckets": list(worker.buckets), "request_arrays": arrays,
            "measure_wall_s": time.perf_counter() - t_start}


def main(argv: list[str] | None = None) -> int:
    """Standalone: ``server_only.py [--env=...] [--rows=1,16,64] [--seconds=3]
    [--client_procs=1] [train flags]``."""
    import argparse

    from jaxsrl.bench import agentfns
    from jaxsrl.experiment.config import load_config

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="1,16,64")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup_s", type=float, default=0.5)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--in_flight", type=int, default=2)
    p.add_argument("--client_procs", type=int, default=1,
                   help="fake-actor processes, each with --clients sockets")
    args, rest = p.parse_known_args(argv)
    cfg = load_config(rest or ["--env=CartPole-v1"])
    b = agentfns.build(cfg)
    out = measure(b.observation_space, b.action_space, b.fns.initial_carry,
                  tuple(int(x) for x in args.rows.split(",")), args.clients, args.in_flight,
                  args.seconds, args.warmup_s, cfg.host, b.mesh, args.client_procs)
    out["env"] = cfg.env
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
