"""Rung 3, inference: real actor processes + a real policy worker, frozen parameters.

The actors are ``python -m jaxsrl.workers.actor`` processes started exactly like the
launcher starts them (:class:`jaxsrl.launch.processes.ChildProcess`); the server is a
:class:`jaxsrl.workers.inference.policy.PolicyWorker` thread serving parameters that never
change. There is no learner: a PULL socket counts the segments' ``env_steps`` and
throws the segments away. Reported, from the server's metrics as ``metrics.jsonl``
has them: env steps/s, the server's batch sizes (``inference/batch_rows``), batches/s
(``inference/batches``), its latency p50/p99 (``inference/latency_ms_p50``/``_p99``:
from a request's arrival being noticed to the last reply sent), and the share of
actor time spent waiting for actions. The CPU time of this process over the window
(``time.process_time``: the policy worker thread and XLA's threads; also the segment
sink's decoding, which is small) per env step is ``server_core_ms_per_env_step``, the
act part of the compute-bound ceiling (:mod:`jaxsrl.cli.bench_report.ceiling`);
``server_busy_ms_per_env_step`` is the latency-based estimate (p50 latency x batches
per env step) beside it.
"""

from __future__ import annotations

import threading
import time

import jax
import zmq

from jaxsrl.bench import agentfns
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch import specs
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from jaxsrl.streams.sockets import bind, open_socket


class SegmentSink:
    """A PULL socket in a thread that counts segments and env steps, then drops them."""

    def __init__(self, host: str):
        self.sock = open_socket(None, zmq.PULL)
        self.address = bind(self.sock, host)
        self.env_steps = 0
        self.segments_by_actor: dict[int, int] = {}
        self.timing = {"env_s": 0.0, "wait_s": 0.0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="segment-sink", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.sock.poll(100):
                continue
            msg = wire.decode(self.sock.recv_multipart(copy=False))
            meta = msg.meta
            self.env_steps += int(meta.get("env_steps", 0))
            actor = int(meta.get("actor", -1))
            self.segments_by_actor[actor] = self.segments_by_actor.get(actor, 0) + 1
            for k in self.timing:
                self.timing[k] += float(meta.get("timing", {}).get(k, 0.0))
        self.sock.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def actor_spec(cfg, actor_id: int, inference_address: str, sample_address: str,
               carry_spec: list) -> dict:
    """The JSON spec of one actor process, built as the launcher builds it
    (:func:`jaxsrl.launch.specs.actor_spec`), with one stream (every row served by one
    policy)."""
    stream = specs.stream_spec("bench", sample_address, [inference_address])
    return specs.actor_spec(cfg, actor_id, [stream], carry_spec)


def measure(cfg, num_actors: int, duration_s: float, warmup_s: float, built=None,
            sampler_factory=None, start_timeout_s: float = 120.0) -> dict:
    """Serve ``num_actors`` actor processes for ``duration_s`` after warm-up."""
    b = built or agentfns.build(cfg)
    act = devices.jit_act(b.fns.act, b.mesh)
    store, metrics = ParameterStore(), MetricsAccumulator()
    state = devices.put_replicated(b.fns.init(jax.random.PRNGKey(cfg.seed)), b.mesh)
    store.publish("bench", 0, state.params)
    settings = PolicySettings(max_rows=num_actors * cfg.envs_per_actor * b.rows_per_env,
                              num_devices=b.mesh.size, host=cfg.host,
                              deadline_ms=cfg.inference_deadline_ms, seed=cfg.seed + 7919)
    worker = PolicyWorker("bench-policy", "bench", act, b.fns.initial_carry, b.observation_space,
                          store, metrics, settings)
    thread = threading.Thread(target=worker.run, name="bench-policy", daemon=True)
    sink = SegmentSink(cfg.host)
    actors: list = []
    sampler = sampler_factory() if sampler_factory else None
    try:
        thread.start()
        worker.ready.wait()
        if worker.error is not None:
            raise RuntimeError(f"policy worker failed: {worker.error!r}")
        t_compile = time.perf_counter()
        for i in range(num_actors):
            spec = actor_spec(cfg, i, worker.address, sink.address, agentfns.carry_spec(b.fns))
            actors.append(ChildProcess(f"bench-actor[{i}]", spec))
            actors[-1].start()
        if sampler:
            sampler.__enter__()
        deadline = time.perf_counter() + start_timeout_s
        while len(sink.segments_by_actor) < num_actors:  # every actor is producing
            if worker.error is not None:
                raise RuntimeError(f"policy worker died: {worker.error!r}")
            dead = [a.name for a in actors if a.proc.poll() is not None]
            if dead:
                raise RuntimeError(f"actor processes exited: {dead}")
            if time.perf_counter() > deadline:
                raise TimeoutError(f"actors produced no segments in {start_timeout_s} s")
            time.sleep(0.05)
        startup_s = time.perf_counter() - t_compile
        time.sleep(warmup_s)
        metrics.snapshot(1.0)  # start a fresh interval
        batches0 = metrics.counter("inference/batches")
        steps0, timing0, t0 = sink.env_steps, dict(sink.timing), time.perf_counter()
        cpu0 = time.process_time()
        time.sleep(duration_s)
        steps1, timing1, t1 = sink.env_steps, dict(sink.timing), time.perf_counter()
        cpu_s = time.process_time() - cpu0
        record = metrics.snapshot(t1 - t0)
        batches = metrics.counter("inference/batches") - batches0
    finally:
        if sampler:
            sampler.__exit__(None, None, None)
        for a in actors:
            a.stop()
        worker.stop.set()
        thread.join(30)
        sink.close()
    env_s = timing1["env_s"] - timing0["env_s"]
    wait_s = timing1["wait_s"] - timing0["wait_s"]
    steps = max(steps1 - steps0, 1)
    p50 = record.get("inference/latency_ms_p50")
    out = {
        "actors": num_actors,
        "envs_per_actor": cfg.envs_per_actor,
        "env_steps_per_s": (steps1 - steps0) / (t1 - t0),
        "batch_rows_mean": record.get("inference/batch_rows"),
        "requests_per_batch_mean": record.get("inference/requests"),
        "batches_per_s": batches / (t1 - t0),
        "latency_ms_p50": record.get("inference/latency_ms_p50"),
        "latency_ms_p99": record.get("inference/latency_ms_p99"),
        "actor_wait_fraction": wait_s / (env_s + wait_s) if env_s + wait_s > 0 else None,
        "server_core_ms_per_env_step": 1e3 * cpu_s / steps,
        "server_busy_ms_per_env_step": None if p50 is None else p50 * batches / steps,
        "server_cpu_s": cpu_s,
        "buckets": list(worker.buckets),
        "startup_s": startup_s,
        "seconds": t1 - t0,
    }
    if sampler:
        out["memory"] = sampler.peaks()
    return out
