"""Observation encoders: a Nature-DQN CNN for images, per-key encoding of ``Dict``s.

Which network a feed-forward agent gets follows the observation space
(:func:`actor_critic`):

* ``Box`` vectors, and ``Dict``s of them -> :class:`agents.networks.ActorCritic` on the
  flattened observation (separate policy and value MLPs; unchanged parameters).
* an *image* -- a ``Box`` of dtype uint8 and shape ``[H, W, C]`` with ``H, W >= 36``,
  e.g. Atari's ``[84, 84, 4]`` stacked frames -- alone or as keys of a ``Dict`` ->
  :class:`EncoderActorCritic`: each image key goes through its own Nature CNN (Mnih et
  al. 2015), every other key is flattened, the features are concatenated (sorted key
  order) and feed policy and value MLPs of ``hidden_sizes`` (``()``: linear heads, as in
  CleanRL's ``ppo_atari.py``). The CNN torso is shared by policy and value.

Pixels stay uint8 up to the network, which scales them by 1/255. Smaller uint8 arrays
(e.g. symbolic 7x7x3 grids) are not images: the CNN's 8x8/4, 4x4/2, 3x3/1 valid
convolutions need at least 36x36 pixels, so those go through the MLP like any vector.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from agents import networks

#: smallest image side the Nature CNN accepts (valid convolutions 8/4, 4/2, 3/1).
MIN_IMAGE_SIZE = 36


class Leaf(NamedTuple):
    """One observation leaf as the encoder sees it.

    Attributes:
      key: the ``Dict`` key, or ``None`` for a bare ``Box`` observation.
      image: encode with a CNN (else flatten).
      shape: per-example shape of the leaf.
    """

    key: str | None
    image: bool
    shape: tuple[int, ...]


def is_image_space(space: gymnasium.spaces.Space) -> bool:
    """A uint8 ``Box`` of shape ``[H, W, C]`` with ``H, W >= 36`` (see module doc)."""
    return (isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8
            and len(space.shape) == 3 and min(space.shape[:2]) >= MIN_IMAGE_SIZE)


def observation_layout(space: gymnasium.spaces.Space) -> tuple[Leaf, ...]:
    """The leaves of a ``Box`` or flat ``Dict`` of ``Box`` space, in sorted key order.

    Raises:
      TypeError: another space, or a nested ``Dict``.
    """
    if isinstance(space, gymnasium.spaces.Box):
        return (Leaf(None, is_image_space(space), tuple(space.shape)),)
    if isinstance(space, gymnasium.spaces.Dict):
        leaves = []
        for key in sorted(space.spaces):
            sub = space.spaces[key]
            if not isinstance(sub, gymnasium.spaces.Box):
                raise TypeError(f"observation key {key!r} has space {sub!r}: "
                                f"only a Dict of Box is supported")
            leaves.append(Leaf(key, is_image_space(sub), tuple(sub.shape)))
        return tuple(leaves)
    raise TypeError(f"unsupported observation space {space!r} (Box or Dict of Box)")


def _conv(features: int, kernel: int, stride: int) -> nn.Conv:
    # CleanRL's layer_init: orthogonal weights with gain sqrt(2), zero bias.
    return nn.Conv(features, (kernel, kernel), (stride, stride), padding="VALID",
                   kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)),
                   bias_init=nn.initializers.zeros)


class NatureCNN(nn.Module):
    """The DQN torso of Mnih et al. 2015 (Nature), as used by PPO on Atari.

    ``x / 255`` -> conv 32 8x8 stride 4 -> conv 64 4x4 stride 2 -> conv 64 3x3
    stride 1 -> dense ``features``, each followed by ReLU; orthogonal init, gain sqrt(2).

    Input ``[..., H, W, C]`` (uint8 pixels, or any number in [0, 255]), any leading
    dims; output ``[..., features]`` float32.
    """

    features: int = 512

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        lead, image = x.shape[:-3], x.shape[-3:]
        x = x.reshape((-1,) + image).astype(jnp.float32) / 255.0  # [N, H, W, C]
        x = nn.relu(_conv(32, 8, 4)(x))
        x = nn.relu(_conv(64, 4, 2)(x))
        x = nn.relu(_conv(64, 3, 1)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(self.features, kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)),
                             bias_init=nn.initializers.zeros)(x))
        return x.reshape(lead + (self.features,))


class ObservationEncoder(nn.Module):
    """Observation (array or dict of arrays) -> features ``[..., F]`` float32.

    Image leaves go through their own :class:`NatureCNN` (named ``cnn`` or
    ``cnn_<key>``), other leaves are flattened to float32; the parts are concatenated
    in ``layout`` order.
    """

    layout: tuple[Leaf, ...]
    cnn_features: int = 512

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        if (self.layout[0].key is None) == isinstance(obs, Mapping):
            raise ValueError(f"observation of type {type(obs).__name__} does not match "
                             f"layout keys {[leaf.key for leaf in self.layout]}")
        parts = []
        for leaf in self.layout:
            x = jnp.asarray(obs if leaf.key is None else obs[leaf.key])
            if leaf.image:
                name = "cnn" if leaf.key is None else f"cnn_{leaf.key}"
                parts.append(NatureCNN(self.cnn_features, name=name)(x))
            else:
                lead = x.shape[: x.ndim - len(leaf.shape)]
                parts.append(x.reshape(lead + (math.prod(leaf.shape),)).astype(jnp.float32))
        return jnp.concatenate(parts, axis=-1)


class EncoderActorCritic(nn.Module):
    """A shared :class:`ObservationEncoder`, then policy and value MLPs.

    Same interface as :class:`agents.networks.ActorCritic` but takes the observation
    pytree itself (``[..., *shape]`` leaves): ``__call__`` -> ``(dist, value [...])``
    (encoding once), ``policy`` and ``value`` for ``apply(..., method=...)``.
    """

    head: networks.ActionHead
    layout: tuple[Leaf, ...]
    hidden_sizes: Sequence[int] = ()
    activation: str = "relu"
    log_std_init: float = 0.0

    def setup(self):
        head = self.head
        out = sum(head.sizes) if head.kind == "multi_categorical" else head.sizes[0]
        self.encoder = ObservationEncoder(self.layout)
        self.policy_net = networks.MLP(self.hidden_sizes, out, 0.01, self.activation)
        self.value_net = networks.MLP(self.hidden_sizes, 1, 1.0, self.activation)
        networks.add_log_std(self, head, self.log_std_init)

    def _dist(self, features: jax.Array) -> networks.Distribution:
        return networks.logits_to_distribution(self.policy_net(features), self.head,
                                               getattr(self, "log_std", None))

    def policy(self, obs: Any) -> networks.Distribution:
        return self._dist(self.encoder(obs))

    def value(self, obs: Any) -> jax.Array:
        return self.value_net(self.encoder(obs))[..., 0]

    def __call__(self, obs: Any) -> tuple[networks.Distribution, jax.Array]:
        features = self.encoder(obs)
        return self._dist(features), self.value_net(features)[..., 0]


def actor_critic(obs_space: gymnasium.spaces.Space, head: networks.ActionHead,
                 hidden_sizes: Sequence[int], activation: str, shared_torso: bool = False,
                 init: str = "orthogonal", log_std_init: float = 0.0
                 ) -> tuple[nn.Module, Callable[[Any], Any]]:
    """The feed-forward actor-critic for ``obs_space`` and how to feed it.

    Vector observations get separate policy and value MLPs (``networks.ActorCritic``),
    or with ``shared_torso`` one MLP torso under both heads
    (``networks.SharedActorCritic``); ``init`` as ``networks._dense``; a Gaussian head's
    ``log_std`` starts at ``log_std_init`` (``networks.add_log_std``).

    Returns:
      ``(net, net_input)``: ``net`` is an ``EncoderActorCritic`` when the space holds an
      image (see :func:`is_image_space`), else an ``ActorCritic``; ``net_input`` maps a
      batch of observations (the wire pytree, ``[..., *shape]`` leaves) to ``net``'s
      input (identity, or ``flatten_observation``).

    Raises:
      TypeError: an unsupported observation space.
    """
    layout = observation_layout(obs_space)
    if any(leaf.image for leaf in layout):
        net = EncoderActorCritic(head, layout, tuple(hidden_sizes), activation, log_std_init)
        return net, lambda obs: obs
    cls = networks.SharedActorCritic if shared_torso else networks.ActorCritic
    net = cls(head, tuple(hidden_sizes), activation, init, log_std_init)
    return net, lambda obs: networks.flatten_observation(obs, obs_space)


def scan_unroll(net: nn.Module) -> bool:
    """Whether ``learn`` should fully unroll its epoch and minibatch ``lax.scan`` loops.

    True for CNN networks on the CPU backend: XLA:CPU runs convolution *gradients*
    inside a while loop 7-15x slower than the same ops outside one (jax-ml/jax#12868;
    measured here: Nature-CNN PPO update on 256 transitions 11.6 s in a scan, 1.9 s
    unrolled). Unrolling costs compile time (~20 s for 4 epochs x 4 minibatches), so
    MLPs and accelerators keep the loops.
    """
    return isinstance(net, EncoderActorCritic) and jax.default_backend() == "cpu"
