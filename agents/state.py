"""The learner state shared by the gradient-based agents (PPO, IMPALA)."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp
import optax


class LearnerState(NamedTuple):
    """Learner state, updated by ``learn`` and saved in checkpoints.

    Attributes:
      params: what ``act`` takes: network variables (``{"params": ...}``), plus, for
        agents that normalise, their running statistics.
      opt_state: optax state of the agent's optimiser.
      update_step: ``[]`` int32 number of ``learn`` calls so far.
      hyper: ``{name: [] float32}``, the hyperparameters ``learn`` reads from the state
        rather than from the config (the agent module's ``HYPERPARAMETERS``), so that
        population-based training can change them between ``learn`` calls without a
        recompilation (``jaxsrl/population/pbt.py``). ``None`` for agents that declare
        none (the default keeps three-field constructions such as ``examples/a2c.py``
        working). Replace a value by an array of the same shape and dtype (``[]``
        float32, not weakly typed): anything else is a new jit signature.
    """

    params: chex.ArrayTree
    opt_state: optax.OptState
    update_step: jax.Array
    hyper: dict[str, jax.Array] | None = None


def hyper_from_config(config: Any, names: Sequence[str]) -> dict[str, jax.Array]:
    """``{name: float32 scalar of getattr(config, name)}`` for each declared name: the
    initial ``LearnerState.hyper``.

    Raises:
      AttributeError: ``config`` has no field ``name``.
    """
    return {n: jnp.asarray(getattr(config, n), jnp.float32) for n in names}


def hyper_of(state: LearnerState, names: Sequence[str], agent: str) -> dict[str, jax.Array]:
    """``state.hyper``, checked to hold every declared name (at trace time).

    Raises:
      ValueError: ``state.hyper`` is ``None`` (a state built without hyperparameters,
        e.g. restored from a checkpoint written before they moved into the state) or
        lacks one of ``names``; the message names the missing ones.
    """
    hyper = state.hyper
    missing = [n for n in names if hyper is None or n not in hyper]
    if missing:
        raise ValueError(f"{agent}: state.hyper lacks {missing} (has "
                         f"{None if hyper is None else sorted(hyper)}); build the state with "
                         f"{agent}'s init, or add them with agents.state.hyper_from_config")
    return hyper
