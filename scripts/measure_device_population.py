"""Env steps/s of a population's vmapped rollout-and-learn step against one member's
own fused step (``docs/device_actors.md``, "Populations and PBT"): PPO's jaxsrl
defaults on gymnax ``CartPole-v1`` (``--envs`` x ``--steps`` per member and update),
both steps compiled first, then timed alternately (``--rounds`` x ``--calls`` calls
each), by wall clock and by process CPU time (all threads; the fairer figure on a
shared machine).

    python scripts/measure_device_population.py --members=4
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import registry
from jaxsrl.workers.device.fused import make_fused_step
from jaxsrl.workers.device.population import make_population_step, stack
from jaxsrl.workers.device.rollout import make_rollout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args()
    env = registry.make("gymnax:CartPole-v1", {})
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 1000)
    one = make_fused_step(make_rollout(env, fns.act, a.steps), fns.learn)
    args = [(fns.init(jax.random.PRNGKey(i)), env.reset(jax.random.PRNGKey(100 + i), a.envs),
             jax.random.PRNGKey(200 + i), jnp.int32(0)) for i in range(a.members)]
    runs = {"1 member": (jax.jit(one), list(args[0]), a.envs * a.steps),
            f"{a.members} members": (jax.jit(make_population_step(one)),
                                     [stack([x[k] for x in args]) for k in range(4)],
                                     a.members * a.envs * a.steps)}
    for name, (fn, state, _) in runs.items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*state))
        print(f"{name}: compiled and ran once in {time.perf_counter() - t0:.1f} s")
    totals = {name: [0.0, 0.0, 0] for name in runs}
    for _ in range(a.rounds):
        for name, (fn, state, steps) in runs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(a.calls):
                state[:3] = fn(*state)[:3]
            jax.block_until_ready(state)
            t = totals[name]
            t[0] += time.perf_counter() - w0
            t[1] += time.process_time() - c0
            t[2] += a.calls * steps
    for name, (wall, cpu, steps) in totals.items():
        print(f"{name}: {steps / wall:,.0f} env steps/s by wall clock, "
              f"{steps / cpu:,.0f} per CPU second ({steps:,} env steps)")


if __name__ == "__main__":
    main()
