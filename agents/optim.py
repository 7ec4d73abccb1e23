"""The optimiser the gradient-based agents share: global-norm clipping, then Adam."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def clipped_adam(learning_rate: float, anneal: bool, total_steps: int, max_grad_norm: float
                 ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """``clip_by_global_norm`` + Adam (eps 1e-5), with a constant or linearly annealed step size.

    Args:
      learning_rate: the (starting) step size.
      anneal: decay it linearly to 0 over ``total_steps`` optimiser steps.
      total_steps: planned optimiser steps (``num_updates * steps per update``).
      max_grad_norm: global gradient-norm clip.

    Returns:
      ``(optimiser, schedule)``; ``schedule(step)`` is the step size Adam uses at ``step``.
    """
    schedule = (optax.linear_schedule(learning_rate, 0.0, max(1, total_steps)) if anneal
                else optax.constant_schedule(learning_rate))
    optimiser = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(schedule, eps=1e-5))
    return optimiser, schedule


def clipped_adam_lr_arg(anneal: bool, total_steps: int, max_grad_norm: float
                        ) -> tuple[optax.GradientTransformationExtraArgs, optax.Schedule]:
    """:func:`clipped_adam` whose base step size is an argument of every ``update``.

    ``optimiser.update(grads, opt_state, params, learning_rate=lr)`` with ``lr`` a ``[]``
    float32 array (the learner state's ``hyper["learning_rate"]``): the step at Adam
    count ``c`` is ``-(lr * multiplier(c))``, ``multiplier`` being the linear anneal
    ``1 - c / total_steps`` (clipped at 0) or 1. A new ``lr`` therefore takes effect at
    the next step without rebuilding (or re-jitting) anything. With ``lr`` equal to the
    configured step size this is bit-for-bit :func:`clipped_adam`: ``lr0 * frac`` is the
    same float32 product either way (``optax.linear_schedule`` computes
    ``(lr0 - 0) * frac + 0``), and the optimiser state has the same structure
    (``ScaleByScheduleState`` holds the count).

    The base step size is passed in rather than injected into the optimiser state
    (``optax.inject_hyperparams``) so that it lives in one place only, the learner
    state's ``hyper``, which population-based training edits.

    Args:
      anneal: decay the step size linearly to 0 over ``total_steps`` optimiser steps.
      total_steps: planned optimiser steps (``num_updates * steps per update``).
      max_grad_norm: global gradient-norm clip.

    Returns:
      ``(optimiser, multiplier)``; the step size Adam uses at count ``c`` is
      ``lr * multiplier(c)``.
    """
    multiplier = (optax.linear_schedule(1.0, 0.0, max(1, total_steps)) if anneal
                  else optax.constant_schedule(1.0))

    def init(params):
        del params
        return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update(updates, state, params=None, *, learning_rate, **extra_args):
        del params, extra_args
        step_size = -1 * (learning_rate * multiplier(state.count))  # as scale_by_learning_rate
        updates = jax.tree.map(lambda g: jnp.array(step_size, dtype=g.dtype) * g, updates)
        return updates, optax.ScaleByScheduleState(
            count=optax.safe_increment(state.count))

    scale_by_lr = optax.GradientTransformationExtraArgs(init, update)
    # Nested like optax.adam (= chain(scale_by_adam, scale_by_learning_rate)), so the
    # state has clipped_adam's structure.
    optimiser = optax.chain(optax.clip_by_global_norm(max_grad_norm),
                            optax.chain(optax.scale_by_adam(eps=1e-5), scale_by_lr))
    return optimiser, multiplier
