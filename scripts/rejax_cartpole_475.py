"""Time rejax 0.1.3's PPO on gymnax CartPole-v1 to a mean evaluation return >= 475.

The reference for jaxsrl's `--env=gymnax:CartPole-v1 --target_return=475` (docs/device_actors.md,
"Figures: launch to 475 against rejax"). Runs in a venv of its own, not jaxsrl's:

    python -m venv /tmp/rejaxvenv
    /tmp/rejaxvenv/bin/pip install rejax==0.1.3 gymnax==0.0.9 jax==0.10.2 jaxlib==0.10.2 \
        flax==0.12.8 optax==0.2.8 distrax==0.1.9 chex==0.1.92
    /tmp/rejaxvenv/bin/python scripts/rejax_cartpole_475.py [--seed 0] [--max_timesteps 1000000]

PPO is created with rejax's own CartPole config (rejax's configs/gymnax/cartpole.yaml, `ppo:`
section, the same in configs/cartpole.yaml; the yaml ships with the repository, not the wheel,
so it is copied below). rejax evaluates inside its compiled `train`: every `eval_freq` (1,000)
env steps, 128 episodes of the current policy (actions sampled, `rejax.evaluate`, up to 500
steps), and returns all evaluations when `train` ends. To stop at the first evaluation whose
mean return is >= 475, `train` is compiled for one evaluation period (`total_timesteps =
eval_freq`, `skip_initial_evaluation=True`) and called with the previous call's train state
until then: PPO's state carries everything (networks, optimiser, envs, key, no schedule tied
to total_timesteps), so the training is the one a single `train` call over the whole budget
runs, evaluated after each period as rejax does. The config's budget is 100,000 steps; this
script goes on past it (up to --max_timesteps) and says when it did.

Prints one line per evaluation and a final line `RESULT ...` with the times since the
interpreter started this file (imports, compile, first evaluation >= 475). Exit 0 when 475
was reached, 1 otherwise.
"""

import time

T0 = time.perf_counter()

import argparse

import jax
import numpy as np
from rejax import PPO

T_IMPORTS = time.perf_counter() - T0

# rejax's configs/gymnax/cartpole.yaml, `ppo:` (rejax at 4954fbf; configs/cartpole.yaml agrees)
CARTPOLE_PPO = {
    "env": "CartPole-v1",
    "agent_kwargs": {"activation": "tanh"},
    "num_envs": 5,
    "num_steps": 100,
    "num_epochs": 5,
    "num_minibatches": 5,
    "learning_rate": 0.00075,
    "max_grad_norm": 0.5,
    "total_timesteps": 100_000,
    "eval_freq": 1000,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_eps": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=475.0)
    p.add_argument("--max_timesteps", type=int, default=1_000_000)
    args = p.parse_args()

    config = dict(CARTPOLE_PPO)
    budget = config["total_timesteps"]
    eval_freq = config["eval_freq"]
    config["total_timesteps"] = eval_freq  # one evaluation period per call
    config["skip_initial_evaluation"] = True
    algo = PPO.create(**config)

    init = jax.jit(algo.init_state)
    period = jax.jit(lambda ts: algo.train(train_state=ts))

    t = time.perf_counter()
    ts = init(jax.random.PRNGKey(args.seed))
    compiled = period.lower(ts).compile()
    jax.block_until_ready(ts)
    t_compile = time.perf_counter() - t

    steps_per_period = int(np.ceil(eval_freq / (algo.num_envs * algo.num_steps))) * (
        algo.num_envs * algo.num_steps
    )
    steps = 0
    t_train = time.perf_counter()
    while steps < args.max_timesteps:
        ts, (lengths, returns) = compiled(ts)
        steps += steps_per_period
        mean = float(np.asarray(returns).mean())  # blocks until the call is done
        now = time.perf_counter()
        print(
            f"env_steps={steps} eval_return_mean={mean:.1f} "
            f"eval_length_mean={float(np.asarray(lengths).mean()):.1f} t={now - T0:.2f}s",
            flush=True,
        )
        if mean >= args.target:
            print(
                f"RESULT reached=1 env_steps={steps} past_config_budget={int(steps > budget)} "
                f"imports_s={T_IMPORTS:.2f} compile_s={t_compile:.2f} "
                f"train_s={now - t_train:.2f} since_start_s={now - T0:.2f} "
                f"env_steps_per_s_incl_eval={steps / (now - t_train):.0f}",
                flush=True,
            )
            return 0
    print(
        f"RESULT reached=0 env_steps={steps} since_start_s={time.perf_counter() - T0:.2f}"
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
