"""Rung 12, the actor core: one real actor pinned to one core, a real inference server on
another, and what the actor spends besides its environments.

The actor is a :class:`~jaxsrl.workers.actor.worker.Actor` built from the spec the
launcher would build (:func:`jaxsrl.bench.inference.actor_spec`), run in its own process
(``python -m jaxsrl.bench.actor_core``, this module's :func:`child_main`) pinned to
``actor_core``; the server is a real :class:`~jaxsrl.workers.inference.policy.PolicyWorker`
thread with frozen initial parameters in this process, pinned (every thread of it) to
``server_core``; segments go to a PULL socket that counts and drops them
(:class:`~jaxsrl.bench.inference.SegmentSink`). Server placement, the run config's layout
(``envs_per_actor / ring_size`` envs per request, ``segment_length``).

The child wraps, without changing them, the parts of the actor's loop it times (after
``warmup_s``, over ``duration_s``): each group's ``env.step`` (CPU time of the thread,
``time.thread_time``), the action client's ``request`` (taking the rows, encoding and
sending a request: CPU, and the bytes of its frames), its ``receive`` (waiting and
decoding replies: wall and CPU, and the replies' bytes), the actor's ``_send_segment``
(assembling, encoding and pushing a segment: CPU, and the bytes of the pushed frames). The
process's own CPU time (``time.process_time``: every thread, ZeroMQ's I/O thread included,
all on the actor's core) minus the env steps' is the actor's **overhead**: everything but
the env step and waiting for actions (waiting in ``poll`` costs no CPU). With
``JAXSRL_ACTOR_CORE_PROFILE=PATH`` in its environment the child writes cProfile stats of its
loop there (the figures are then the profiler's, slower).

Result (per env step = per environment stepped once): ``env_ms`` (CPU), ``overhead_ms``
and ``overhead_fraction`` (of ``env_ms``), its parts ``request_ms``, ``receive_ms``,
``segment_ms`` and ``other_ms`` (the rest: recording steps into the segment buffers, the
loop, and ``other_threads_ms``: ZeroMQ's I/O thread), ``wait_ms`` (wall time in ``receive`` less its CPU), ``request_bytes``,
``segment_bytes`` (sent by the actor) and ``reply_bytes`` (received), ``env_steps_per_s``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import jax

from jaxsrl.bench import agentfns
from jaxsrl.bench.inference import SegmentSink, actor_spec
from jaxsrl.core.paths import child_env
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker

#: the counters the child keeps (seconds or bytes), in its result's ``counters``.
COUNTERS = ("env_cpu_s", "env_steps", "request_cpu_s", "request_bytes", "requests",
            "receive_cpu_s", "receive_wall_s", "reply_bytes", "segment_cpu_s", "segment_bytes",
            "segments")


def pin_process(core: int) -> None:
    """Pin every thread of this process (and threads it starts later) to ``core``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:  # a thread that ended meanwhile
            pass


def measure(cfg, duration_s: float, warmup_s: float, built=None, actor_core: int = 0,
            server_core: int = 1, start_timeout_s: float = 300.0) -> dict:
    """Run one pinned actor against a real policy worker and return the module's figures.

    Args:
      cfg: the resolved run config (env, layout, agent).
      duration_s: measured seconds (after ``warmup_s`` of serving).
      warmup_s: seconds the actor runs (after its first reply) before the window.
      built: :func:`jaxsrl.bench.agentfns.build`'s result for ``cfg`` (built if ``None``).
      actor_core, server_core: the CPU cores of the actor process and of this process.
      start_timeout_s: longest wait for the server's compilation and the actor's result.

    Raises:
      RuntimeError: the policy worker or the actor process failed.
      TimeoutError: no result within ``start_timeout_s + warmup_s + duration_s``.
    """
    b = built or agentfns.build(cfg)
    affinity = os.sched_getaffinity(0)
    pin_process(server_core)
    act = devices.jit_act(b.fns.act, b.mesh)
    store, metrics = ParameterStore(), MetricsAccumulator()
    state = devices.put_replicated(b.fns.init(jax.random.PRNGKey(cfg.seed)), b.mesh)
    store.publish("bench", 0, state.params)
    settings = PolicySettings(max_rows=cfg.envs_per_actor * b.rows_per_env, num_devices=b.mesh.size,
                              host=cfg.host, deadline_ms=cfg.inference_deadline_ms,
                              seed=cfg.seed + 7919)
    worker = PolicyWorker("bench-policy", "bench", act, b.fns.initial_carry, b.observation_space,
                          store, metrics, settings)
    thread = threading.Thread(target=worker.run, name="bench-policy", daemon=True)
    sink = SegmentSink(cfg.host)
    proc = None
    fd, out_path = tempfile.mkstemp(prefix="jaxsrl-actor-core-", suffix=".json")
    os.close(fd)
    try:
        thread.start()
        worker.ready.wait()
        if worker.error is not None:
            raise RuntimeError(f"policy worker failed: {worker.error!r}")
        spec = actor_spec(cfg, 0, worker.address, sink.address, agentfns.carry_spec(b.fns))
        spec["run_id"] = 1
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxsrl.bench.actor_core", json.dumps(spec), out_path,
             str(warmup_s), str(duration_s), str(actor_core)], env=child_env())
        proc.wait(start_timeout_s + warmup_s + duration_s)
        if proc.returncode != 0:
            raise RuntimeError(f"actor process exited with {proc.returncode}")
        with open(out_path) as f:
            child = json.load(f)
    except subprocess.TimeoutExpired:
        raise TimeoutError("the actor process gave no result in time") from None
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        worker.stop.set()
        thread.join(30)
        sink.close()
        os.unlink(out_path)
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), affinity)
            except OSError:
                pass
    return summarize(child, envs_per_group=cfg.envs_per_actor // cfg.ring_size)


def summarize(child: dict, envs_per_group: int) -> dict:
    """Per-env-step figures (module docstring) from the child's counters."""
    c, wall, cpu = child["counters"], child["wall_s"], child["process_cpu_s"]
    steps = max(c["env_steps"], 1)
    per = 1e3 / steps  # seconds -> ms per env step
    overhead = cpu - c["env_cpu_s"]
    parts = c["request_cpu_s"] + c["receive_cpu_s"] + c["segment_cpu_s"]
    return {
        "env_steps": c["env_steps"], "seconds": wall, "env_steps_per_s": c["env_steps"] / wall,
        "envs_per_request": envs_per_group,
        "env_ms": c["env_cpu_s"] * per,
        "overhead_ms": overhead * per,
        "overhead_fraction": overhead / c["env_cpu_s"] if c["env_cpu_s"] else None,
        "request_ms": c["request_cpu_s"] * per, "receive_ms": c["receive_cpu_s"] * per,
        "segment_ms": c["segment_cpu_s"] * per, "other_ms": (overhead - parts) * per,
        "wait_ms": (c["receive_wall_s"] - c["receive_cpu_s"]) * per,
        "actor_cpu_fraction": cpu / wall,
        "request_bytes": c["request_bytes"] / steps, "segment_bytes": c["segment_bytes"] / steps,
        "reply_bytes": c["reply_bytes"] / steps,
        "sent_bytes": (c["request_bytes"] + c["segment_bytes"]) / steps,
        "requests": c["requests"], "segments": c["segments"],
        # CPU of the other threads (ZeroMQ's I/O thread: the sockets' system calls; this
        # rung's clock, asleep), at the kernel's tick resolution
        "other_threads_ms": child.get("other_threads_cpu_s", 0.0) * per,
        "counters": c,
    }


def thread_cpu_s() -> dict:
    """CPU seconds (user + system) of each thread of this process, by thread id
    (``/proc/self/task/<tid>/stat``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _frames_bytes(frames) -> int:
    return sum(len(f) if not hasattr(f, "bytes") else len(f.bytes) for f in frames)


def _instrument(actor, counters: dict) -> None:
    """Wrap the parts of ``actor``'s loop the module docstring lists; each adds to
    ``counters`` (its values are not read until the loop stops)."""
    tt = time.thread_time
    for group in actor.groups:
        env, step = group.env, group.env.step
        n = env.num_envs

        def timed_step(action, _step=step, _n=n):
            t0 = tt()
            out = _step(action)
            counters["env_cpu_s"] += tt() - t0
            counters["env_steps"] += _n
            return out
        env.step = timed_step
    client = actor.client
    request, receive = client.request, client.receive

    def timed_request(group, stream, arrays, meta, kept=None):
        t0 = tt()
        request(group, stream, arrays, meta, kept=kept)
        counters["request_cpu_s"] += tt() - t0
        counters["request_bytes"] += _frames_bytes(client._frames[stream, group])
        counters["requests"] += 1

    def timed_receive(waiting, alive):
        t0, w0 = tt(), time.perf_counter()
        out = receive(waiting, alive)
        counters["receive_cpu_s"] += tt() - t0
        counters["receive_wall_s"] += time.perf_counter() - w0
        return out
    client.request, client.receive = timed_request, timed_receive
    push, send_segment = actor._push, actor._send_segment

    def counted_push(stream, frames):
        counters["segment_bytes"] += _frames_bytes(frames)
        counters["segments"] += 1
        push(stream, frames)

    def timed_send_segment(g, i):
        t0 = tt()
        send_segment(g, i)
        counters["segment_cpu_s"] += tt() - t0
    actor._push, actor._send_segment = counted_push, timed_send_segment
    # replies' bytes: counted where ServerClient decodes them
    actions = client._actions

    def counted_actions(i, frames, waiting):
        counters["reply_bytes"] += _frames_bytes(frames)
        return actions(i, frames, waiting)
    client._actions = counted_actions


def child_main(argv: list[str]) -> int:
    """``python -m jaxsrl.bench.actor_core SPEC_JSON OUT_JSON WARMUP_S DURATION_S CORE``."""
    spec, out_path = json.loads(argv[0]), argv[1]
    warmup_s, duration_s, core = float(argv[2]), float(argv[3]), int(argv[4])
    os.sched_setaffinity(0, {core})
    from jaxsrl.workers.actor.worker import Actor  # after pinning: its threads inherit it
    actor = Actor(spec)
    counters = dict.fromkeys(COUNTERS, 0)
    _instrument(actor, counters)
    result: dict = {}

    def clock():
        while not counters["env_steps"] and not actor.stop.is_set():  # first reply: served
            time.sleep(0.01)
        time.sleep(warmup_s)
        before, w0, c0 = dict(counters), time.perf_counter(), time.process_time()
        t0 = thread_cpu_s()
        time.sleep(duration_s)
        after, w1, c1 = dict(counters), time.perf_counter(), time.process_time()
        t1 = thread_cpu_s()
        main = threading.main_thread().native_id
        result.update(counters={k: after[k] - before[k] for k in COUNTERS}, wall_s=w1 - w0,
                      process_cpu_s=c1 - c0,
                      main_thread_cpu_s=t1.get(main, 0.0) - t0.get(main, 0.0),
                      other_threads_cpu_s=sum(t1[k] - t0.get(k, 0.0) for k in t1 if k != main))
        actor.stop.set()
    timer = threading.Thread(target=clock, daemon=True)
    timer.start()
    profile = os.environ.get("JAXSRL_ACTOR_CORE_PROFILE")  # a path: cProfile stats of the loop
    if profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    try:
        actor.run()
    finally:
        if profile:
            profiler.disable()
            profiler.dump_stats(profile)
        actor.close()
    timer.join(1)
    if not result:
        return 1
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
