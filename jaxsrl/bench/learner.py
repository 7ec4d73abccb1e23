"""Rung 4, learner only: samples/s of the jitted ``learn`` on synthetic batches.

A batch has the configured shape (``batch_segments`` segments of ``segment_length``
steps, the trainer's wire schema) filled with random observations and actions. It is
placed on the devices once (``devices.put_batch``), ``learn`` is jitted with
``devices.jit_learn`` and compiled ahead of time, then called back to back (waiting
for each result, as the trainer does when it reads the metrics) for ``duration_s``.
Samples are rows x steps, i.e. env frames for single-agent environments. The CPU time
of this process over the calls (``time.process_time``: every thread, XLA's included)
per env step is ``core_ms_per_env_step``, the learn part of the compute-bound ceiling
(:mod:`jaxsrl.cli.bench_report.ceiling`).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxsrl.bench import agentfns
from jaxsrl.bench.raw_env import random_actions
from jaxsrl.parallel import devices
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.segment import segment_schema, to_trajectory


def synthetic_batch(observation_space, action_space, T: int, B: int, fns, seed: int = 0):
    """A host ``Trajectory`` of ``B`` random segments of ``T`` steps."""
    rng = np.random.default_rng(seed)
    carry = CarryCodec(fns.initial_carry)
    schema = segment_schema(observation_space, action_space, T, carry)
    host = {}
    for name, spec in schema.items():
        shape = (B,) + tuple(spec.shape[1:])
        if np.issubdtype(np.dtype(spec.dtype), np.floating) and not name.startswith("carry/"):
            host[name] = rng.standard_normal(shape).astype(spec.dtype)
        else:
            host[name] = np.zeros(shape, spec.dtype)
    host["action"] = random_actions(action_space, B * T, rng).reshape(host["action"].shape)
    host["terminated"] = rng.random((B, T)) < 0.02
    host["logp"] = np.full((B, T), -0.7, np.float32)
    return to_trajectory(host, observation_space, carry)


def measure(cfg, duration_s: float, built=None, min_calls: int = 3) -> dict:
    """Time ``learn`` on one synthetic batch for ``duration_s`` (at least ``min_calls``)."""
    b = built or agentfns.build(cfg)
    n_dev = b.mesh.size
    B, T = cfg.batch_segments, cfg.segment_length
    rng = jax.random.PRNGKey(cfg.seed)
    state = devices.put_replicated(b.fns.init(rng), b.mesh)
    batch = devices.put_batch(synthetic_batch(b.observation_space, b.action_space, T, B, b.fns,
                                              cfg.seed), b.mesh)
    t0 = time.perf_counter()
    learn = devices.jit_learn(b.fns.learn, b.mesh).lower(state, batch, rng).compile()
    compile_s = time.perf_counter() - t0
    state, metrics = learn(state, batch, rng)  # first call: allocations
    jax.block_until_ready(metrics)
    calls, times = 0, []
    t_start, cpu_start = time.perf_counter(), time.process_time()
    while calls < min_calls or time.perf_counter() - t_start < duration_s:
        t0 = time.perf_counter()
        rng, key = jax.random.split(rng)
        state, metrics = learn(state, batch, key)
        jax.device_get(metrics)
        times.append(time.perf_counter() - t0)
        calls += 1
    seconds = time.perf_counter() - t_start
    cpu_s = time.process_time() - cpu_start
    env_steps = calls * B * T / b.rows_per_env
    samples_per_s = calls * B * T / seconds
    return {
        "batch": [B, T],
        "devices": n_dev,
        "updates_per_s": calls / seconds,
        "update_ms_p50": float(np.percentile(times, 50) * 1e3),
        "samples_per_s": samples_per_s,
        "samples_per_s_per_device": samples_per_s / n_dev,
        "env_steps_per_s": samples_per_s / b.rows_per_env,
        "core_ms_per_env_step": 1e3 * cpu_s / env_steps,
        "cpu_s": cpu_s,
        "compile_s": compile_s,
        "calls": calls,
        "seconds": seconds,
    }
