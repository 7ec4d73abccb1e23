"""Bytes per ``segment`` message on the sample stream, final observations dense (every
step, as actors sent them before) and sparse (truncated steps only, as they send now).

Usage::

    python -m jaxsrl.bench.segment_bytes                     # CartPole, HalfCheetah, hide-and-seek
    python -m jaxsrl.bench.segment_bytes --run="--env=Hopper-v5" --steps=3000

For each run config (train.py flags), one actor group of the config's layout
(``envs_per_actor / ring_size`` environments, ``segment_length`` steps, the agent's
carry leaves) is stepped with uniformly random actions for ``--steps`` group steps;
each full segment is encoded by :func:`jaxsrl.streams.wire.encode` both ways and the
frames' bytes are summed. Random actions end episodes earlier than a trained policy
(more terminations, and for CartPole no truncation at all), so the sparse figure is
what the time limit alone costs.
"""

from __future__ import annotations

import argparse
import shlex

import numpy as np

from jaxsrl.bench import agentfns
from jaxsrl.bench.raw_env import random_actions
from jaxsrl.envs import env_has_idle_rows, make_actor_env
from jaxsrl.experiment.config import load_config
from jaxsrl.streams import wire
from jaxsrl.streams.segment import pack_final_obs
from jaxsrl.streams.spaces import action_leaf
from jaxsrl.workers.actor.segments import SegmentBuffer

#: the default run configs (``--env`` loads ``configs/<env>.toml``).
RUNS = ("--env=CartPole-v1", "--env=HalfCheetah-v5", "--env=hide_and_seek")


def _bytes(arrays: dict, meta: dict) -> int:
    return sum(len(f) for f in wire.encode("segment", arrays, meta))


def measure(flags: list[str], steps: int, seed: int = 0) -> dict:
    """Mean bytes per segment, dense and sparse, of one actor group of run ``flags``."""
    cfg = load_config(flags)
    spec = agentfns.carry_spec(agentfns.build(cfg).fns)  # recurrent agents' carry leaves
    env = make_actor_env(cfg.env, cfg.envs_per_actor // cfg.ring_size, seed, cfg.env_kwargs)
    rng = np.random.default_rng(seed)
    obs = env.reset()
    rows = env.num_rows
    carry = {name: np.zeros((rows,) + tuple(shape), dtype) for name, dtype, shape in spec}
    adtype, ashape = action_leaf(env.action_space)
    with_valid = env_has_idle_rows(cfg.env)
    buf = SegmentBuffer(obs, cfg.segment_length, adtype, ashape, carry, with_valid)
    dense, sparse, truncated = [], [], []
    meta = {"actor": 0, "run": 1, "group": 0, "env_steps": env.num_envs * cfg.segment_length,
            "episodes": [], "timing": {"env_s": 0.0, "wait_s": 0.0}, "failovers": 0}
    try:
        for _ in range(steps):
            action = random_actions(env.action_space, rows, rng)
            step = env.step(action)
            final = step.final_obs if step.truncated.any() else {}
            if buf.record(action, np.zeros(rows, np.float32), 0, step.reward, step.terminated,
                          step.truncated, step.obs, final, step.valid if with_valid else None):
                arrays = buf.arrays()
                dense.append(_bytes(arrays, meta))
                sparse.append(_bytes(pack_final_obs(arrays), meta))
                truncated.append(int(arrays["truncated"].sum()))
                buf.start(step.obs, carry)
    finally:
        env.close()
    return {"run": shlex.join(flags), "env": cfg.env, "rows": rows, "T": cfg.segment_length,
            "segments": len(dense), "dense_bytes": float(np.mean(dense)),
            "sparse_bytes": float(np.mean(sparse)), "sparse_bytes_max": int(np.max(sparse)),
            "truncated_steps_per_segment": float(np.mean(truncated))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", default=None,
                   help=f"train.py flags of one run config (repeatable; default: {list(RUNS)})")
    p.add_argument("--steps", type=int, default=2000, help="group steps per run config")
    args = p.parse_args(argv)
    print("| run | rows x T | segments | truncated steps / segment | dense B / segment | "
          "sparse B / segment (max) | sparse / dense |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run in args.run or RUNS:
        r = measure(shlex.split(run), args.steps)
        print(f"| `{r['run']}` | {r['rows']} x {r['T']} | {r['segments']} | "
              f"{r['truncated_steps_per_segment']:.2f} | {r['dense_bytes']:,.0f} | "
              f"{r['sparse_bytes']:,.0f} ({r['sparse_bytes_max']:,}) | "
              f"{r['sparse_bytes'] / r['dense_bytes']:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
