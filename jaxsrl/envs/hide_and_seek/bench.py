"""Single-core throughput of the hide-and-seek env with uniformly random actions.

Usage (pin to one core)::

    taskset -c 0 python -m jaxsrl.envs.hide_and_seek.bench --variant quadrant --steps 4000
    taskset -c 0 python -m jaxsrl.envs.hide_and_seek.bench --variant full --steps 2000 --physics

Counts env steps (one step = all agents act once) including resets. ``--physics`` also
times the physics alone, two ways: the env's own physics replayed (the same episodes'
``mj_step`` calls from the states the env stepped from, grab welds and lock limits
included: ``replayed_physics_steps_per_second``), against which the printed ratio is the
share of an env step that is physics; and random controls on the same layouts with nothing
grabbed or locked (``physics_steps_per_second``, the physics ceiling of ``jaxsrl.bench``). ``--group N`` steps ``N``
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
            mujoco.mj_step(m, d, n_sub)
        elapsed += clock() - t0
        done += n
        env.reset()
    return steps / elapsed


class _Recorder:
    """Stands in for an episode's ``GuardedStep``: before each step it records what the
    step starts from (the integration state, ``mjSTATE_INTEGRATION``: positions,
    velocities, controls, warm start, active welds) and the model fields grab and lock
    edit (``eq_data``: weld poses; ``jnt_limited``, ``jnt_range``: locks), then steps."""

    def __init__(self, guard, model: mujoco.MjModel, data: mujoco.MjData):
        self._guard, self._m, self._d = guard, model, data
        self._state = np.empty(mujoco.mj_stateSize(model, _STATE))
        self.steps: list[tuple[np.ndarray, ...]] = []

    def step(self, nstep: int) -> bool:
        m = self._m
        mujoco.mj_getState(m, self._d, self._state, _STATE)
        self.steps.append((self._state.copy(), m.eq_data.copy(), m.jnt_limited.copy(), m.jnt_range.copy(), nstep))
        return self._guard.step(nstep)


_STATE = mujoco.mjtState.mjSTATE_INTEGRATION


def _replay(model: mujoco.MjModel, data: mujoco.MjData, steps: list, clock, episode_start: bool = True) -> float:
    """Redo ``steps`` (``_Recorder.steps``) on ``model``/``data``; seconds in ``mj_step`` by ``clock``.

    ``episode_start``: ``steps`` begin an episode, so ``data`` is reset first (untimed), as the
    env's reset left it: the integration state does not hold MuJoCo's sleep state, and the
    data would otherwise start the episode's first step with the bodies that slept at the end
    of the episode asleep."""
    elapsed = 0.0
    if episode_start:
        mujoco.mj_resetData(model, data)
    for state, eq_data, limited, jrange, nstep in steps:
        model.eq_data[:] = eq_data
        model.jnt_limited[:] = limited
        model.jnt_range[:] = jrange
        mujoco.mj_setState(model, data, state, _STATE)
        t0 = clock()
        mujoco.mj_step(model, data, nstep)  # positional, as the env calls it
        elapsed += clock() - t0
    return elapsed


def replayed_physics_steps_per_second(variant: str, steps: int, seed: int = 0, clock=time.perf_counter,
                                      check: bool = False) -> float:
    """The env's own physics per second: the ``steps`` env steps of ``env_steps_per_second``
    (same seed, same actions, resets included) are taken untimed while each step's start is
    recorded (``_Recorder``); at each episode's end, before the next reset lays the model
    out anew, that episode's ``mj_step(nstep=n_substeps)`` calls are redone from the recorded
    states and only they are timed by ``clock``. So the physics is the env's, bit for bit
    (grab welds, lock limits and frozen seekers included), and nothing else is timed: the
    ratio of ``env_steps_per_second`` to this is the share of an env step spent in physics.

    Args:
      check: also compare each replayed step's positions and velocities with the env's
        after the same step (untimed).

    Raises:
      AssertionError: ``check`` and a replayed step differs from the env's (the state the
        replay starts from, or the model fields it restores, are not all of the physics).
    """
    env = make_env(variant)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    nvec = env.action_space(env.possible_agents[0]).nvec
    acts = rng.integers(0, nvec, size=(steps, len(env.possible_agents), len(nvec)))
    elapsed = 0.0
    rec, after = _Recorder(env._guard, env.model, env.data), []
    env._guard = rec
    for k in range(steps):
        env.step({a: acts[k, i] for i, a in enumerate(env.agents)})
        if check:
            after.append(np.concatenate([env.data.qpos, env.data.qvel]))
        if not env.agents or k == steps - 1:
            elapsed += _replay(env.model, env.data, rec.steps, clock)
            if check:
                _check_replay(env.model, env.data, rec.steps, after)
            if not env.agents:
                env.reset()
            rec, after = _Recorder(env._guard, env.model, env.data), []
            env._guard = rec
    return steps / elapsed


def _check_replay(model, data, steps: list, after: list) -> None:
    for k, (state, eq_data, limited, jrange, nstep) in enumerate(steps):
        _replay(model, data, [(state, eq_data, limited, jrange, nstep)], time.perf_counter, episode_start=k == 0)
        got = np.concatenate([data.qpos, data.qvel])
        if not np.array_equal(got, after[k]):
            raise AssertionError(f"replayed step {k} of the episode differs from the env's")


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
        own = max(replayed_physics_steps_per_second(args.variant, args.steps, clock=clock)
                  for _ in range(args.repeats))
        print(f"{args.variant}: {own:,.0f} physics-only steps/{unit} (the env's own 15 substeps per step, "
              f"replayed: grabs and locks included)")
        print(f"{args.variant}: ratio env / physics {env_rate / own:.2f}")
        phys = max(physics_steps_per_second(args.variant, args.steps, clock=clock) for _ in range(args.repeats))
        print(f"{args.variant}: {phys:,.0f} physics-only steps/{unit} (random controls on the same layouts, "
              f"nothing grabbed or locked)")
        print(f"{args.variant}: ratio env / that physics {env_rate / phys:.2f}")


if __name__ == "__main__":
    main()
