"""Periodic evaluation of a device-actor run (``--eval_every``; ``docs/device_actors.md``).

The CPU path (:mod:`jaxsrl.launch.periodic_eval`) checkpoints policy version ``v`` and
runs ``jaxsrl.cli.evaluate`` on it in a process of its own. A device-actor run does the
same in its run loop, on the device: every ``eval_every`` policy versions, once the
checkpoint of version ``v`` is written, ``eval_episodes`` separate evaluation
environments (key ``PRNGKey(0)``, as ``jaxsrl.cli.evaluate``'s default ``--seed 0``) run
whole episodes with the agent's most likely actions under one compiled loop
(:mod:`jaxsrl.workers.device.evaluate`). It writes ``eval/v<v>.json`` (``summary``,
``episodes``, ``checkpoints``) and adds the same ``eval/*`` means to the next metrics
record (``eval/return_mean``, ``eval/policy_version``, ...). The training steps wait
while it runs (a few milliseconds to seconds: the episodes of ``eval_episodes``
environments, stepped together).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any

import jax

from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.periodic_eval import eval_metrics
from jaxsrl.tools.device_evaluation import result_of
from jaxsrl.tools.evaluation import supports_deterministic
from jaxsrl.workers.device.evaluate import make_evaluation

log = logging.getLogger("jaxsrl.eval")

#: The evaluation key's seed: ``jaxsrl.cli.evaluate``'s default ``--seed``.
EVAL_SEED = 0


class DeviceEvaluator:
    """Evaluations of one device-actor run.

    Args:
      logdir: the run folder.
      every: policy versions between evaluations (``--eval_every``, > 0).
      episodes: episodes per evaluation (``--eval_episodes``).
      env: the run's JAX-native environment (a :mod:`jaxsrl.envs.jax_native` adapter).
      fns: the agent's functions (``act``, ``initial_carry``).

    Raises:
      ValueError: the agent's ``act`` takes no ``deterministic`` keyword (the CPU
        evaluation's most likely action), or ``episodes`` < 1.
    """

    def __init__(self, logdir: str, every: int, episodes: int, env: Any, fns: Any):
        if not supports_deterministic(fns.act):
            raise ValueError("--eval_every: the agent's act() has no 'deterministic' keyword "
                             "(evaluations take the most likely action)")
        evaluation = make_evaluation(env, functools.partial(fns.act, deterministic=True),
                                     episodes, fns.initial_carry)
        self._run = jax.jit(evaluation.run)
        self.every, self.next_version = every, every
        self._run_dir = RunDir(logdir)

    def due(self, version: int) -> bool:
        """True when policy ``version`` is to be evaluated now."""
        return version >= self.next_version

    def evaluate(self, params: Any, version: int, checkpoints: dict) -> dict:
        """Evaluate ``params`` (policy ``version``; ``checkpoints``: policy -> the path
        it is saved at); write ``eval/v<version>.json`` and return the ``eval/*`` metrics."""
        returns, lengths = jax.device_get(self._run(params, jax.random.PRNGKey(EVAL_SEED)))
        result = result_of(returns, lengths, deterministic=True)
        path = self._run_dir.eval_file(version)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"summary": result.summary(), "episodes": result.episodes,
                       "checkpoints": checkpoints}, f, indent=2)
        self.next_version = version + self.every
        return eval_metrics(result.summary(), version)
