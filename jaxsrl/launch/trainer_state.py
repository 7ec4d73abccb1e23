"""Where a trainer of a run starts: a fresh learner state, or the one restored from its
newest checkpoint on ``--resume``. Shared by the CPU trainers' builder
(:func:`jaxsrl.launch.builders.trainers`) and the device learners'
(:func:`jaxsrl.launch.device_trainers.device_trainers`)."""

from __future__ import annotations

import logging
from typing import Any

import jax

from jaxsrl.experiment import events
from jaxsrl.experiment import resume as resumption
from jaxsrl.parallel import devices

log = logging.getLogger("jaxsrl")


def initial_state(run: Any, t: Any, i: int, fns: Any, ckpt: Any) -> tuple[Any, Any, int]:
    """``(learner state, rng, version)`` of trainer ``t`` (the ``i``-th of the run's
    :class:`~jaxsrl.launch.control.Run`): fresh (key ``PRNGKey(seed + 1000 * i)``, split
    into the trainer's key and ``init``'s), or restored from ``ckpt`` on ``--resume``
    (hyperparameters given with it applied; the run's env steps follow the checkpoint).

    Raises:
      FileNotFoundError, ValueError: no readable checkpoint to restore (``Checkpointer.restore``).
    """
    cfg, placement = run.cfg, run.placement
    rng = jax.random.PRNGKey(cfg.seed + 1000 * i)
    rng, init_key = jax.random.split(rng)
    # one compiled program, not one per operation (seconds of XLA compiles for a network)
    state = devices.put_replicated(jax.jit(fns.init)(init_key), placement.local_mesh)
    if not cfg.resume:
        return state, rng, 0
    tree, meta = ckpt.restore({"agent": state, "rng": rng}, set_aside_unreadable=True)
    state = resumption.apply_hyperparameters(tree["agent"], state, t.policy, cfg)
    rng, version = tree["rng"], int(meta["policy_version"])
    run.metrics.env_steps = max(run.metrics.env_steps, int(meta.get("env_steps", 0)))
    events.emit(log, logging.INFO, "resumed", {"policy": t.policy, "version": version,
                "env_steps": run.metrics.env_steps},
                "resumed %s from version %d, %d env steps", t.policy, version,
                run.metrics.env_steps)
    return state, rng, version

