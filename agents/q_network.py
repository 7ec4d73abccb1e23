"""Action-value networks for discrete actions: plain or dueling (Wang et al. 2016).

The observation goes through :class:`agents.encoders.ObservationEncoder` (a Nature
CNN per uint8 image leaf, every other leaf flattened; see ``agents/encoders.py``), then
dense layers of ``hidden_sizes`` (gain sqrt(2) orthogonal init, zero biases, as
``agents.networks.MLP``):

* plain: ``MLP(hidden_sizes, A)`` -> ``Q [..., A]``.
* dueling: a shared torso of ``hidden_sizes[:-1]``, then a value stream and an
  advantage stream, each with one hidden layer of ``hidden_sizes[-1]`` and a linear
  output (1 and ``A`` units): the paper's architecture, where the two streams of the
  Atari network each have one fully connected hidden layer after the shared
  convolutions (Wang et al. 2016, Sec. 3). They are combined by
  :func:`dueling_combine`.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from agents import encoders, networks


def dueling_combine(value: jax.Array, advantage: jax.Array) -> jax.Array:
    """``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` (Wang et al. 2016, Eq. 9).

    Args:
      value: ``[...]`` state values.
      advantage: ``[..., A]`` advantages.

    Returns:
      ``[..., A]`` action values.
    """
    return value[..., None] + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


class QNetwork(nn.Module):
    """Observation pytree (``[..., *shape]`` leaves) -> ``Q [..., num_actions]`` float32.

    ``streams`` (with ``apply(..., method="streams")``, dueling only) returns the
    uncombined ``(value [...], advantage [..., A])``.
    """

    layout: tuple[encoders.Leaf, ...]
    num_actions: int
    hidden_sizes: Sequence[int] = (120, 84)
    activation: str = "relu"
    dueling: bool = True

    def setup(self):
        self.encoder = encoders.ObservationEncoder(self.layout)
        if not self.dueling:
            self.q_head = networks.MLP(tuple(self.hidden_sizes), self.num_actions, 1.0,
                                       self.activation)
            return
        shared, stream = tuple(self.hidden_sizes[:-1]), tuple(self.hidden_sizes[-1:])
        self.torso = networks.Torso(shared, self.activation)
        self.value_stream = networks.MLP(stream, 1, 1.0, self.activation)
        self.advantage_stream = networks.MLP(stream, self.num_actions, 1.0, self.activation)

    def streams(self, obs) -> tuple[jax.Array, jax.Array]:
        if not self.dueling:
            raise ValueError("QNetwork.streams needs dueling=True")
        h = self.torso(self.encoder(obs))
        return self.value_stream(h)[..., 0], self.advantage_stream(h)

    def __call__(self, obs) -> jax.Array:
        if not self.dueling:
            return self.q_head(self.encoder(obs))
        return dueling_combine(*self.streams(obs))
