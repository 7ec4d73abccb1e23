"""The optimiser the gradient-based agents share: global-norm clipping, then Adam."""

from __future__ import annotations

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
