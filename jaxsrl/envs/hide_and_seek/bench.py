"""Single-core throughput of the hide-and-seek env with uniformly random actions.

Usage (pin to one core)::

    taskset -c 0 python -m jaxsrl.envs.hide_and_seek.bench --variant quadrant --steps 4000
    taskset -c 0 python -m jaxsrl.envs.hide_and_seek.bench --variant full --steps 2000 --physics

Counts env steps (one step = all agents act once) including resets; ``--physics``
also times bare ``mj_step`` on the same scenes for reference. ``--group N`` steps ``N``
envs as an actor does (``MultiAgentVectorEnv``: ``HideAndSeekEnv.step_rows`` into the
group's arrays, the ``StepResult`` copies included) instead of one env through
PettingZoo's per-agent dicts; the physics reference stays one env's. Prints the best of
``--repeats`` runs of the same seeded workload, since other processes on a shared
machine only slow things down.
"""

from __future__ import annotations

import argparse
import time

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek.env import make_env


def env_steps_per_second(variant: str, steps: int, seed: int = 0, clock=time.perf_counter) -> float:
    """Env steps per second over ``steps`` random-action steps (resets included), timed
    by ``clock`` (wall seconds, or ``time.thread_time`` for steps per CPU-second)."""
    env = make_env(variant)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    nvec = env.action_space(env.possible_agents[0]).nvec
    acts = rng.integers(0, nvec, size=(steps, len(env.possible_agents), len(nvec)))
    t0 = clock()
    for k in range(steps):
        env.step({a: acts[k, i] for i, a in enumerate(env.agents)})
        if not env.agents:
            env.reset()
    return steps / (clock() - t0)


def group_env_steps_per_second(variant: str, steps: int, group: int, seed: int = 0,
                               clock=time.perf_counter) -> float:
    """Env steps per second of ``group`` envs stepped together by ``MultiAgentVectorEnv``
    (``steps // group`` group steps of random actions, resets included), timed by ``clock``."""
    from jaxsrl.envs.multi_agent import MultiAgentVectorEnv  # noqa: PLC0415  (this option only)

    venv = MultiAgentVectorEnv(make_env, {"variant": variant}, group, seed)
    venv.reset()
    rng = np.random.default_rng(seed)
    nvec = venv.action_space.nvec
    n = max(steps // group, 1)
    acts = rng.integers(0, nvec, size=(n, venv.num_rows, len(nvec)))
    t0 = clock()
    for k in range(n):
        venv.step(acts[k])
    return n * group / (clock() - t0)


def physics_steps_per_second(variant: str, steps: int, seed: int = 0,
                             clock=time.perf_counter) -> float:
    """Bare ``mj_step`` x n_substeps per second, random controls, on the same sequence
    of scenes as ``env_steps_per_second`` (a new layout every ``horizon`` steps; only
    the physics is timed, by ``clock``: wall seconds, or ``time.thread_time`` for
    steps per CPU-second of this thread, as ``jaxsrl.bench.physics`` does).

    Same model, substeps and sleeping as the env. Not included (the env pays them):
    resets (the layout, laid out on the env's cached model: ``scene_cache.py``), the physics guard (``mj_getState`` and
    the velocity check) and the ``mj_kinematics`` after each step. Also different: the
    controls are uniform in [-0.9, 0.9] for every motor at every step (the env: 11 bins,
    seekers frozen in the preparation phase) and nothing is grabbed or locked (no weld
    or joint-limit constraints)."""
    env = make_env(variant)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n_sub, horizon = env.config.n_substeps, env.config.horizon
    elapsed = 0.0
    done = 0
    while done < steps:
        m, d = env.model, env.data
        n = min(horizon, steps - done)
        ctrl = rng.uniform(-0.9, 0.9, size=(n, m.nu))
        t0 = clock()
        for k in range(n):
            d.ctrl[:] = ctrl[k]
            mujoco.mj_step(m, d, nstep=n_sub)
        elapsed += clock() - t0
        done += n
        env.reset()
    return steps / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="quadrant", choices=["quadrant", "full"])
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--physics", action="store_true", help="also time bare physics")
    p.add_argument("--cpu", action="store_true",
                   help="time by this thread's CPU time (time.thread_time) instead of the wall clock: "
                        "less sensitive to other processes on a shared core")
    p.add_argument("--group", type=int, default=0,
                   help="step this many envs together as an actor's MultiAgentVectorEnv does (0: one env, dicts)")
    args = p.parse_args()
    clock, unit = (time.thread_time, "CPU-s") if args.cpu else (time.perf_counter, "s")
    if args.group > 0:
        env_rate = max(group_env_steps_per_second(args.variant, args.steps, args.group, clock=clock)
                       for _ in range(args.repeats))
        how = f"a group of {args.group}"
    else:
        env_rate = max(env_steps_per_second(args.variant, args.steps, clock=clock) for _ in range(args.repeats))
        how = "one env"
    print(f"{args.variant}: {env_rate:,.0f} env steps/{unit} ({how}, random actions, resets included)")
    if args.physics:
        phys = max(physics_steps_per_second(args.variant, args.steps, clock=clock) for _ in range(args.repeats))
        print(f"{args.variant}: {phys:,.0f} physics-only steps/{unit} (15 substeps each)")
        print(f"{args.variant}: ratio env / physics {env_rate / phys:.2f}")


if __name__ == "__main__":
    main()
