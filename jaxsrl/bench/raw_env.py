"""Rung 1, raw environment: env steps/s of the actor layout with random actions.

Each of ``processes`` child processes (``python -m jaxsrl.bench.raw_env '<json>'``;
no JAX imported) builds the same ring of ``ring_size`` groups of ``envs_per_group``
environments as an actor (``jaxsrl.envs.make_actor_env``), steps the groups in turn
with uniformly random actions, and reports frames stepped and the CPU time of its
``env.step`` calls (``time.thread_time``: the children are single-threaded), whence
``env_steps_per_core_s`` and ``env_core_ms_per_step``. The children start
stepping together (a stdin handshake), so the total is what this machine's cores
give the actor layout when nothing else (inference, learning) runs: the ceiling.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np

from jaxsrl.bench import procs
from jaxsrl.envs import make_actor_env
from jaxsrl.streams.spaces import action_leaf


def random_actions(space, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` uniformly random actions of a Gymnasium action space, in the wire dtype."""
    dtype, shape = action_leaf(space)
    if hasattr(space, "nvec"):  # MultiDiscrete
        return rng.integers(0, np.asarray(space.nvec), size=(rows,) + shape).astype(dtype)
    if hasattr(space, "n"):  # Discrete
        start = int(space.start)
        return rng.integers(start, start + int(space.n), size=(rows,)).astype(dtype)
    low = np.nan_to_num(np.asarray(space.low, np.float64), neginf=-1.0, posinf=1.0)
    high = np.nan_to_num(np.asarray(space.high, np.float64), neginf=-1.0, posinf=1.0)
    return rng.uniform(low, high, size=(rows,) + shape).astype(dtype)


def peak_rss_mib() -> float:
    """This process's peak RSS: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``, which
    still counts the forked parent's pages)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child_main(spec: dict) -> int:
    """Build the ring, handshake, step for ``duration_s``, print one JSON line."""
    n, ring = int(spec["envs_per_group"]), int(spec["ring_size"])
    groups = [make_actor_env(spec["env"], n, int(spec["seed"]) + n * g, spec.get("env_kwargs"))
              for g in range(ring)]
    rng = np.random.default_rng(int(spec["seed"]))
    frames_per_step = [e.num_envs for e in groups]
    for env in groups:
        env.reset()
    print(json.dumps({"ready": True}), flush=True)
    if sys.stdin.readline().strip() != "go":  # parent gone: stop quietly
        return 0
    frames = steps = 0
    env_s = env_cpu_s = 0.0
    t_start = time.perf_counter()
    deadline = t_start + float(spec["duration_s"])
    while time.perf_counter() < deadline:
        for g, env in enumerate(groups):
            action = random_actions(env.action_space, env.num_rows, rng)
            t0, c0 = time.perf_counter(), time.thread_time()
            env.step(action)
            env_s += time.perf_counter() - t0
            env_cpu_s += time.thread_time() - c0
            frames += frames_per_step[g]
            steps += 1
    seconds = time.perf_counter() - t_start
    for env in groups:
        env.close()
    print(json.dumps({"frames": frames, "group_steps": steps, "seconds": seconds,
                      "env_s": env_s, "env_cpu_s": env_cpu_s,
                      "peak_rss_mib": round(peak_rss_mib(), 1)}), flush=True)
    return 0


def measure(env: str, env_kwargs: dict | None, layout: list[int], ring_size: int,
            duration_s: float, seed: int = 0) -> dict:
    """One raw-environment child per entry of ``layout`` (its envs per group), stepping
    together for ``duration_s``; aggregate result."""
    children = []
    processes = len(layout)
    try:
        for i, envs_per_group in enumerate(layout):
            spec = {"env": env, "env_kwargs": env_kwargs or {}, "envs_per_group": envs_per_group,
                    "ring_size": ring_size, "seed": seed + 10_000 * i, "duration_s": duration_s}
            children.append(procs.start_module("jaxsrl.bench.raw_env", spec))
        for i, c in enumerate(children):
            procs.read_json_line(c, f"raw env process {i}")
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        results = [procs.read_json_line(c, f"raw env process {i}") for i, c in enumerate(children)]
    finally:
        for c in children:
            procs.stop(c)
    frames = sum(r["frames"] for r in results)
    seconds = max(r["seconds"] for r in results)
    per_process = [r["frames"] / r["seconds"] for r in results]
    env_cpu_s = sum(r["env_cpu_s"] for r in results)
    return {
        "processes": processes,
        "envs_per_process": sorted({n * ring_size for n in layout}),
        "env_steps_per_s": frames / seconds,
        "env_steps_per_s_per_process": sum(per_process) / len(per_process),
        "env_time_fraction": sum(r["env_s"] for r in results) / sum(r["seconds"] for r in results),
        # CPU time of env.step only (not the random actions): the env's core time per step
        "env_steps_per_core_s": frames / max(env_cpu_s, 1e-9),
        "env_core_ms_per_step": 1e3 * env_cpu_s / max(frames, 1),
        "seconds": seconds,
        "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
    }


if __name__ == "__main__":
    sys.exit(child_main(json.loads(sys.argv[1])))
