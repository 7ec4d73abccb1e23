"""Rung 10, fan in: thousands of simulated actors on ONE inference server and ONE learner
sample socket.

In this process: a :class:`~jaxsrl.workers.inference.policy.PolicyWorker` thread serving
:func:`~jaxsrl.bench.server_only.trivial_act` (sized like the launcher's: ``max_rows`` =
every actor's rows), with every actor id registered in its
:class:`~jaxsrl.streams.admission.ActorTable`, and a sample receiver thread: the learner's
receive loop without ``learn`` (a PULL socket with the trainer's queue settings, every
segment through the trainer's :class:`~jaxsrl.streams.segment_gate.SegmentGate`). In
``client_procs`` processes (:mod:`jaxsrl.bench.fan_in_clients`, no JAX): the simulated
actors, one DEALER and one PUSH socket each, with the workload's request and segment sizes,
each actor sending about ``rate`` requests per second and a segment every ``T`` replies
of a group.

Each point (workload x actor count) reports, over ``duration_s`` after ``warmup_s``:
``latency_ms_p50``/``p99`` (send to reply, at the actors), ``requests_per_s``,
``server_cpu_us_per_request`` (this process's CPU, both threads and ZeroMQ's, per request;
``cpu_us_per_request_by_thread`` splits it), ``segments_per_s`` and the receiver's CPU per
segment, ``server_kib_per_actor`` (this process's RSS growth from before the actors
connected to the end, per actor: its two connections and table entries), the actors'
``refused`` (sockets that could not open or connect), ``unanswered`` (no first reply in
``first_reply_s``), ``lost`` requests and ``segments_blocked``/``segments_dropped``, and
the file descriptors used against the limits (soft limits raised to the hard limit,
:func:`~jaxsrl.core.limits.raise_fd_limit`).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
import threading
import time

import jax.numpy as jnp
import numpy as np
import psutil
import zmq

from jaxsrl.bench import agentfns
from jaxsrl.bench.fan_in_clients import EDGES
from jaxsrl.bench.server_only import trivial_act
from jaxsrl.bench.procs import ask, end_clients
from jaxsrl.core.limits import raise_fd_limit
from jaxsrl.core.paths import CONFIG_DIR
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.processes import local_spawner
from jaxsrl.parallel import devices
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.segment import pack_final_obs, segment_schema
from jaxsrl.streams.segment_gate import SegmentGate
from jaxsrl.streams.sockets import bind, open_socket
from jaxsrl.streams.spaces import obs_schema
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from jaxsrl.workers.learner.trainer import TrainerWorker

CLIENTS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fan_in_clients.py")

#: the workloads measured by default: name -> load_config argv (the other rungs' layouts:
#: docs/benchmarks.json and docs/benchmarks_hide_and_seek.json)
WORKLOADS = {"CartPole-v1": ["--env=CartPole-v1"],
             "hide_and_seek": ["--env=hide_and_seek",
                               f"--config={os.path.join(CONFIG_DIR, 'hide_and_seek.toml')}"]}


class Workload:
    """Request and segment arrays of one run config (whole shapes, rows included).

    Attributes:
      name: label. rows: rows per request (envs per ring group x agents per env).
      ring: groups per actor. T: steps per segment. envs: envs per group.
      request, segment: ``[[name, dtype, shape], ...]`` of one ``act`` request and one
        segment as sent (final observations sparse, none truncated).
      request_bytes, segment_bytes: their array bytes.
    """

    def __init__(self, name: str, argv: list[str]):
        cfg = load_config(argv)
        b = agentfns.build(cfg)
        self.name, self.built, self.ring, self.T = name, b, cfg.ring_size, cfg.segment_length
        self.envs = cfg.envs_per_actor // cfg.ring_size
        self.rows = self.envs * b.rows_per_env
        carry = CarryCodec(b.fns.initial_carry)
        req = {k: np.zeros((self.rows,) + s.shape[1:], s.dtype)
               for k, s in (obs_schema(b.observation_space) | carry.schema()).items()}
        self.schema = segment_schema(b.observation_space, b.action_space, self.T, carry)
        seg = pack_final_obs({k: np.zeros((self.rows,) + tuple(s.shape[1:]), s.dtype)
                              for k, s in self.schema.items()})
        self.request = [[k, str(v.dtype), list(v.shape)] for k, v in req.items()]
        self.segment = [[k, str(v.dtype), list(v.shape)] for k, v in seg.items()]
        self.request_bytes = sum(v.nbytes for v in req.values())
        self.segment_bytes = sum(v.nbytes for v in seg.values())


class SampleReceiver(threading.Thread):
    """The learner's receive loop without ``learn``: PULL with the trainer's queue
    settings, every message through a :class:`SegmentGate`; counts admitted segments."""

    def __init__(self, gate: SegmentGate, host: str):
        super().__init__(name="fan-in-samples", daemon=True)
        self.gate, self.admitted, self.error = gate, 0, None
        self.stop, self.ready = threading.Event(), threading.Event()
        self.sock = open_socket(None, zmq.PULL, recv_hwm=TrainerWorker.sample_recv_hwm,
                                recv_buffer_bytes=TrainerWorker.sample_buffer_bytes,
                                max_frame_bytes=gate.max_frame_bytes)
        self.address = bind(self.sock, host)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.sock.poll(100):
                    while True:
                        try:
                            frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        if self.gate.admit(frames) is not None:
                            self.admitted += 1
        except Exception as exc:  # noqa: BLE001 - reported by the rung
            self.error = exc
        finally:
            self.sock.close()


_ask = functools.partial(ask, what="fan-in clients")


def _count(procs: list) -> list:
    for proc in procs:
        proc.stdin.write("count\n")
        proc.stdin.flush()
    return [_ask(proc) for proc in procs]


def _threads_cpu_s(tids: dict) -> dict:
    """CPU seconds of this process's threads: those of ``tids`` (name -> native id), ``zmq``
    (ZeroMQ's I/O threads) and ``other``."""
    out = {**{k: 0.0 for k in tids}, "zmq": 0.0, "other": 0.0}
    names = {v: k for k, v in tids.items()}
    for t in psutil.Process().threads():
        try:
            with open(f"/proc/self/task/{t.id}/comm") as f:
                comm = f.read().strip()
        except OSError:
            comm = ""
        kind = names.get(t.id) or ("zmq" if comm.startswith("ZMQbg") else "other")
        out[kind] += t.user_time + t.system_time
    return out


def percentile_ms(hist: list, q: float) -> float | None:
    """The ``q``-th percentile (0..100) of a latency histogram over :data:`EDGES`, in ms
    (a bin's upper edge); ``None`` for an empty histogram."""
    total = sum(hist)
    if not total:
        return None
    cum = np.cumsum(hist)
    i = int(np.searchsorted(cum, q / 100 * total))
    return 1e3 * EDGES[min(i, len(EDGES) - 1)]


def point(w: Workload, actors: int, client_procs: int, rate: float, duration_s: float,
          warmup_s: float, host: str = "127.0.0.1", first_reply_s: float = 120.0) -> dict:
    """One measurement: ``actors`` simulated actors of workload ``w`` (module docstring)."""
    b, me = w.built, psutil.Process()
    mesh = b.mesh or devices.local_mesh()
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("bench", 0, devices.put_replicated({"w": jnp.zeros(())}, mesh))
    table = ActorTable()
    for i in range(actors):
        table.register(i, 0)
    server = PolicyWorker("fan-in-server", "bench", devices.jit_act(trivial_act(b.action_space), mesh),
                          b.fns.initial_carry, b.observation_space, store, metrics,
                          PolicySettings(max_rows=actors * w.ring * w.rows,
                                         num_devices=mesh.size, host=host),
                          actors=table)
    gate = SegmentGate(w.schema, w.T, actors * w.ring * w.rows, table, metrics, name="fan-in")
    receiver = SampleReceiver(gate, host)
    thread = server.start_thread(wait_ready=True)
    receiver.start()
    procs = []
    try:
        if not server.serving.wait(300):
            raise RuntimeError("the inference server did not warm up in 300 s")
        server.raise_error()
        rss0, fds0 = me.memory_info().rss, me.num_fds()
        per = -(-actors // client_procs)
        for j in range(client_procs):
            n = min(per, actors - j * per)
            spec = {"server": server.address, "samples": receiver.address, "actors": n,
                    "actor_base": j * per, "ring": w.ring, "rate": rate, "T": w.T,
                    "env_steps": w.envs * w.T, "seed": j, "request": w.request,
                    "segment": w.segment, "first_reply_s": first_reply_s}
            procs.append(local_spawner([sys.executable, CLIENTS_SCRIPT, json.dumps(spec)], {},
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, bufsize=1))
        ready = [_ask(p) for p in procs]
        time.sleep(warmup_s)
        tids = {"policy": thread.native_id, "samples": receiver.native_id}
        c0, t0, cpu0, th0, seg0 = (_count(procs), time.perf_counter(), time.process_time(),
                                   _threads_cpu_s(tids), receiver.admitted)
        time.sleep(duration_s)
        c1, t1, cpu1, th1, seg1 = (_count(procs), time.perf_counter(), time.process_time(),
                                   _threads_cpu_s(tids), receiver.admitted)
        rss1, fds1 = me.memory_info().rss, me.num_fds()
        counters = metrics.snapshot(t1 - t0)
        server.raise_error()
        if receiver.error is not None:
            raise RuntimeError(f"the sample receiver failed: {receiver.error!r}")
    finally:
        end_clients(procs, 30)
        server.stop.set()
        receiver.stop.set()
        thread.join(30)
        receiver.join(30)
    seconds = t1 - t0
    requests = sum(b_["replies"] - a["replies"] for a, b_ in zip(c0, c1))
    hist = np.sum([np.subtract(b_["hist"], a["hist"]) for a, b_ in zip(c0, c1)], axis=0).tolist()
    segments = seg1 - seg0
    sent = sum(b_["segments_sent"] - a["segments_sent"] for a, b_ in zip(c0, c1))
    cpu = cpu1 - cpu0
    return {
        "workload": w.name, "actors": actors, "client_procs": client_procs,
        "rate_per_actor": rate, "rows_per_request": w.rows,
        "request_bytes": w.request_bytes, "segment_bytes": w.segment_bytes,
        "requests_per_s": requests / seconds,
        "latency_ms_p50": percentile_ms(hist, 50), "latency_ms_p99": percentile_ms(hist, 99),
        "server_cores": cpu / seconds,
        "server_cpu_us_per_request": 1e6 * cpu / max(requests, 1),
        "cpu_us_per_request_by_thread": {k: 1e6 * (th1[k] - th0[k]) / max(requests, 1)
                                         for k in th0 if k != "samples"},
        "segments_per_s": segments / seconds,
        "receiver_cpu_us_per_segment": 1e6 * (th1["samples"] - th0["samples"]) / max(segments, 1),
        "segments_sent_per_s": sent / seconds,
        "segments_blocked": sum(b_["segments_blocked"] - a["segments_blocked"]
                                for a, b_ in zip(c0, c1)),
        "segments_dropped": int(counters.get("dropped_segments", 0) or 0),
        "requests_dropped": int(sum(v for k, v in counters.items()
                                    if "drop" in k and "segment" not in k
                                    and isinstance(v, (int, float))) or 0),
        "server_rss_mib": rss1 / 2**20,
        "server_kib_per_actor": (rss1 - rss0) / 1024 / actors,
        "server_fds": fds1, "server_fds_per_actor": (fds1 - fds0) / actors,
        "client_rss_mib_per_actor": sum(r["rss_mib"] for r in c1) / actors,
        "client_cores": sum(b_["cpu_s"] - a["cpu_s"] for a, b_ in zip(c0, c1)) / seconds,
        "client_fd_limit": min(r["fd_limit"] for r in ready),
        "connect_s": max(r["connect_s"] for r in ready),
        "refused": sum(r["refused"] for r in ready),
        "unanswered": sum(r["connected"] - r["answered"] for r in ready),
        "lost": sum(r["lost"] for r in c1),
        "batch_rows_mean": counters.get("inference/batch_rows"),
        "requests_per_batch_mean": counters.get("inference/requests"),
        "seconds": seconds,
    }


def measure(counts: tuple = (1000, 2000, 4000), workloads: tuple = tuple(WORKLOADS),
            client_procs: int = 4, rate: float = 1.0, duration_s: float = 5.0,
            warmup_s: float = 2.0, host: str = "127.0.0.1", log=print) -> dict:
    """Every workload at every actor count (a fresh server each); a failed point is
    recorded as ``{"error"}`` and the larger counts of that workload are still tried.

    Args:
      counts: simulated actors per point.
      workloads: names of :data:`WORKLOADS`.
      client_procs: processes the actors are spread over (at most ``max(counts)``).
      rate: requests per second of one actor (all its groups together).
      duration_s, warmup_s: measured and warm-up seconds of each point.
      host: interface the server and the receiver bind.
      log: progress printer.

    Raises:
      ValueError: a count, ``client_procs`` or ``rate`` not positive, or an unknown workload.
    """
    if min(counts, default=0) < 1 or client_procs < 1 or not rate > 0:
        raise ValueError(f"counts {counts}, client_procs {client_procs} and rate {rate} "
                         "must be positive")
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        raise ValueError(f"unknown fan-in workloads {sorted(unknown)}; known: {sorted(WORKLOADS)}")
    soft0, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = raise_fd_limit()[0]
    points = []
    for name in workloads:
        w = Workload(name, WORKLOADS[name])
        for n in counts:
            log(f"[bench] fan in: {name}, {n} actors ...")
            try:
                points.append(point(w, n, min(client_procs, n), rate, duration_s, warmup_s, host))
            except Exception as exc:  # noqa: BLE001 - recorded, the next point still runs
                points.append({"workload": name, "actors": n,
                               "error": f"{type(exc).__name__}: {exc}"[:2000]})
    return {"points": points, "fd_limit_soft_before": soft0, "fd_limit_soft": soft,
            "fd_limit_hard": hard, "rate_per_actor": rate, "client_procs": client_procs}
