"""The learner state shared by the gradient-based agents (PPO, IMPALA)."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import optax


class LearnerState(NamedTuple):
    """Learner state, updated by ``learn`` and saved in checkpoints.

    Attributes:
      params: what ``act`` takes: network variables (``{"params": ...}``), plus, for
        agents that normalise, their running statistics.
      opt_state: optax state of the agent's optimiser.
      update_step: ``[]`` int32 number of ``learn`` calls so far.
    """

    params: chex.ArrayTree
    opt_state: optax.OptState
    update_step: jax.Array
