"""Feed-forward actor-critic networks and the action distributions they output.

Distributions are small named tuples of arrays with pure helpers ``sample``, ``mode``,
``log_prob`` and ``entropy`` that dispatch on the tuple's type. Which one a network
outputs follows the action space (``head_for_space``):

* ``Discrete(n, start)`` -> ``Categorical``: action ``[...]`` int32 in
  ``[start, start + n)``.
* ``MultiDiscrete(nvec, start)`` (1-D ``nvec``) -> ``MultiCategorical``: independent
  categoricals, action ``[..., K]`` int32, log-probabilities summed over ``K``.
* ``Box`` (1-D) -> ``DiagGaussian`` with a state-independent, learned log std: action
  ``[..., A]`` float32. Actions are NOT squashed or clipped here; whoever steps the
  environment clips them to the bounds, and the unclipped action is what must be
  stored (``log_prob`` is of the unclipped action).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Sequence, Union

import chex
import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

# Logit given to the padding entries of a MultiCategorical (finite, so that
# ``p * log p`` is an exact 0 rather than ``0 * -inf = nan``).
_PAD_LOGIT = -1e9


# ----------------------------------------------------------------------------------
# Distributions.


class Categorical(NamedTuple):
    """Categorical over ``start + [0, n)``; ``logits`` is ``[..., n]``."""

    logits: jax.Array
    start: jax.Array | int = 0


class MultiCategorical(NamedTuple):
    """``K`` independent categoricals, padded to a common width ``n_max``.

    ``logits`` is ``[..., K, n_max]`` with ``_PAD_LOGIT`` where ``j >= nvec[k]``;
    ``start`` is ``[K]`` (or a scalar).
    """

    logits: jax.Array
    start: jax.Array | int = 0


class DiagGaussian(NamedTuple):
    """Diagonal Gaussian; ``mean`` is ``[..., A]``, ``log_std`` broadcasts to it."""

    mean: jax.Array
    log_std: jax.Array


Distribution = Union[Categorical, MultiCategorical, DiagGaussian]


def sample(dist: Distribution, rng: chex.PRNGKey) -> jax.Array:
    """Draws one action per batch element (int32 for categoricals, float32 else)."""
    if isinstance(dist, (Categorical, MultiCategorical)):
        index = jax.random.categorical(rng, dist.logits, axis=-1)
        return (index + dist.start).astype(jnp.int32)
    noise = jax.random.normal(rng, dist.mean.shape, dist.mean.dtype)
    return (dist.mean + jnp.exp(dist.log_std) * noise).astype(jnp.float32)


def mode(dist: Distribution) -> jax.Array:
    """The most likely action (argmax, or the mean of a Gaussian)."""
    if isinstance(dist, (Categorical, MultiCategorical)):
        return (jnp.argmax(dist.logits, axis=-1) + dist.start).astype(jnp.int32)
    return dist.mean.astype(jnp.float32)


def log_prob(dist: Distribution, action: chex.Array) -> jax.Array:
    """``log pi(a)``, summed over the independent components; shape ``[...]``.

    Gaussian: ``sum_i -((a_i - mu_i) / sigma_i)^2 / 2 - log sigma_i - log(2 pi) / 2``.
    """
    if isinstance(dist, (Categorical, MultiCategorical)):
        logp_all = jax.nn.log_softmax(dist.logits, axis=-1)
        index = (action - dist.start).astype(jnp.int32)[..., None]
        logp = jnp.take_along_axis(logp_all, index, axis=-1)[..., 0]
        return logp.sum(-1) if isinstance(dist, MultiCategorical) else logp
    log_std = jnp.broadcast_to(dist.log_std, dist.mean.shape)
    z = (action - dist.mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)


def kl_divergence(p: Distribution, q: Distribution) -> jax.Array:
    """``KL(p || q)`` in closed form, summed over the independent components; ``[...]``.

    Categorical: ``sum_j p_j (log p_j - log q_j)``. Diagonal Gaussian (Sample Factory's
    ``kl_divergence`` of its ``ContinuousActionDistribution``)::

        sum_i log(sigma_q,i / sigma_p,i)
              + (sigma_p,i^2 + (mu_p,i - mu_q,i)^2) / (2 sigma_q,i^2) - 1/2

    Raises:
      TypeError: ``p`` and ``q`` are not the same kind of distribution.
    """
    if type(p) is not type(q):
        raise TypeError(f"KL between a {type(p).__name__} and a {type(q).__name__}")
    if isinstance(p, (Categorical, MultiCategorical)):
        lp = jax.nn.log_softmax(p.logits, axis=-1)
        lq = jax.nn.log_softmax(q.logits, axis=-1)
        kl = jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1)
        return kl.sum(-1) if isinstance(p, MultiCategorical) else kl
    ls_p = jnp.broadcast_to(p.log_std, p.mean.shape)
    ls_q = jnp.broadcast_to(q.log_std, q.mean.shape)
    var_ratio = jnp.exp(2.0 * (ls_p - ls_q))
    mean_term = (p.mean - q.mean) ** 2 * jnp.exp(-2.0 * ls_q)
    return jnp.sum(ls_q - ls_p + 0.5 * (var_ratio + mean_term) - 0.5, axis=-1)


def entropy(dist: Distribution) -> jax.Array:
    """Entropy, summed over the independent components; shape ``[...]``.

    Categorical: ``-sum_j p_j log p_j``; Gaussian: ``sum_i log sigma_i + log(2 pi e) / 2``.
    """
    if isinstance(dist, (Categorical, MultiCategorical)):
        logp_all = jax.nn.log_softmax(dist.logits, axis=-1)
        ent = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
        return ent.sum(-1) if isinstance(dist, MultiCategorical) else ent
    log_std = jnp.broadcast_to(dist.log_std, dist.mean.shape)
    return jnp.sum(log_std + 0.5 * math.log(2 * math.pi * math.e), axis=-1)


# ----------------------------------------------------------------------------------
# Observations and action heads.


def flatten_observation(obs, space: gymnasium.spaces.Space) -> jax.Array:
    """Flattens a batch of observations to ``[..., D]`` float32.

    Args:
      obs: ``[..., *space.shape]`` for a ``Box``; for a ``Dict`` of ``Box``, a dict of
        such arrays (same leading dims), concatenated in sorted key order.
      space: the per-agent observation space.
    """
    if isinstance(space, gymnasium.spaces.Dict):
        keys = sorted(space.spaces)
        if set(obs) != set(keys):
            raise ValueError(f"observation keys {sorted(obs)} != space keys {keys}")
        parts = [flatten_observation(obs[k], space.spaces[k]) for k in keys]
        return jnp.concatenate(parts, axis=-1)
    if isinstance(space, gymnasium.spaces.Box):
        obs = jnp.asarray(obs)
        lead = obs.shape[: obs.ndim - len(space.shape)]
        return obs.reshape(lead + (math.prod(space.shape),)).astype(jnp.float32)
    raise TypeError(f"unsupported observation space {space!r} (Box or Dict of Box)")


def dummy_observation(space: gymnasium.spaces.Space, batch: int = 1):
    """Zeros shaped like a batch of ``batch`` observations (for ``init``)."""
    if isinstance(space, gymnasium.spaces.Dict):
        return {k: dummy_observation(s, batch) for k, s in space.spaces.items()}
    return jnp.zeros((batch,) + tuple(space.shape), jnp.float32)


@dataclasses.dataclass(frozen=True)
class ActionHead:
    """Static description of a policy head, derived from an action space.

    Attributes:
      kind: ``"categorical"``, ``"multi_categorical"`` or ``"gaussian"``.
      sizes: number of choices per categorical (``(n,)`` or ``nvec``), or ``(A,)``.
      start: lowest action per component (categoricals; zeros for Gaussian).
    """

    kind: str
    sizes: tuple[int, ...]
    start: tuple[int, ...]


def head_for_space(space: gymnasium.spaces.Space) -> ActionHead:
    """The policy head for a ``Discrete``, 1-D ``MultiDiscrete`` or 1-D ``Box``."""
    if isinstance(space, gymnasium.spaces.Discrete):
        return ActionHead("categorical", (int(space.n),), (int(space.start),))
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise ValueError(f"only 1-D MultiDiscrete is supported, got {space!r}")
        start = np.broadcast_to(np.asarray(space.start), space.nvec.shape)
        return ActionHead(
            "multi_categorical", tuple(int(n) for n in space.nvec),
            tuple(int(s) for s in start),
        )
    if isinstance(space, gymnasium.spaces.Box):
        if len(space.shape) != 1:
            raise ValueError(f"only 1-D Box actions are supported, got {space!r}")
        return ActionHead("gaussian", (int(space.shape[0]),), (0,) * space.shape[0])
    raise TypeError(f"unsupported action space {space!r}")


def logits_to_distribution(out: jax.Array, head: ActionHead, log_std: jax.Array | None = None
                           ) -> Distribution:
    """The distribution of ``head`` from a policy network's raw output.

    Args:
      out: ``[..., n]`` logits (categorical), ``[..., sum(nvec)]`` concatenated logits
        (multi-categorical) or ``[..., A]`` means (Gaussian).
      head: the action head.
      log_std: ``[A]`` learned log standard deviation (Gaussian only).
    """
    if head.kind == "categorical":
        return Categorical(out, head.start[0])
    if head.kind == "gaussian":
        return DiagGaussian(out, log_std)
    # Split the K groups of logits and pad each to n_max: [..., K, n_max].
    n_max = max(head.sizes)
    bounds = np.cumsum(head.sizes)[:-1]
    groups = [
        jnp.pad(g, [(0, 0)] * (g.ndim - 1) + [(0, n_max - g.shape[-1])],
                constant_values=_PAD_LOGIT)
        for g in jnp.split(out, bounds, axis=-1)
    ]
    return MultiCategorical(jnp.stack(groups, axis=-2), jnp.asarray(head.start))


# ----------------------------------------------------------------------------------
# Modules.

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": nn.relu,
    "gelu": nn.gelu,
    "elu": nn.elu,
    "silu": nn.silu,
}


INITS = ("orthogonal", "torch_default")


def _dense(features: int, scale: float, init: str = "orthogonal") -> nn.Dense:
    """A dense layer with zero bias and weights initialised as ``init`` names.

    ``orthogonal``: CleanRL's ``layer_init``, orthogonal weights with gain ``scale``.
    ``torch_default``: PyTorch's ``nn.Linear`` default, ``U(+-1/sqrt(fan_in))``
    (``scale`` ignored), as Sample Factory's ``policy_initialization=torch_default``,
    which also zeroes the biases.
    """
    if init == "torch_default":
        kernel = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
    else:
        kernel = nn.initializers.orthogonal(scale)
    return nn.Dense(features, kernel_init=kernel, bias_init=nn.initializers.zeros)


def _hidden_layers(x: jax.Array, hidden_sizes: Sequence[int], activation: str, init: str) -> jax.Array:
    """Dense (gain sqrt(2)) + activation per hidden size; call inside a compact method, so
    the layers belong to (and are named ``Dense_i`` in) the calling module."""
    act = ACTIVATIONS[activation]
    for size in hidden_sizes:
        x = act(_dense(size, math.sqrt(2.0), init)(x))
    return x


class MLP(nn.Module):
    """``len(hidden_sizes)`` dense+activation layers, then a linear output layer.

    Hidden layers use orthogonal init with gain ``sqrt(2)``; the output layer uses
    ``out_scale`` (CleanRL: 0.01 for policy logits/means, 1.0 for the value).
    """

    hidden_sizes: Sequence[int]
    out_features: int
    out_scale: float
    activation: str = "tanh"
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _hidden_layers(x, self.hidden_sizes, self.activation, self.init_scheme)
        return _dense(self.out_features, self.out_scale, self.init_scheme)(x)


def policy_outputs(head: ActionHead) -> int:
    """Width of the policy network's output for ``head``: logits, or Gaussian means."""
    return sum(head.sizes) if head.kind == "multi_categorical" else head.sizes[0]


def add_log_std(module: nn.Module, head: ActionHead, init: float = 0.0) -> None:
    """Give ``module`` (in its ``setup``) the learned state-independent ``log_std [A]``
    of a Gaussian head, initialised to ``init`` (0: std 1, as CleanRL and Sample Factory's
    ``initial_stddev=1``; -0.5 .. -2 start with less exploration noise, as RL Zoo's tuned
    MuJoCo PPO ``log_std_init``); nothing for other heads."""
    if head.kind == "gaussian":
        module.log_std = module.param("log_std", nn.initializers.constant(init),
                                      (head.sizes[0],))


class Torso(nn.Module):
    """``len(hidden_sizes)`` dense+activation layers (no output layer); ``[..., D] -> [..., H]``."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return _hidden_layers(x, self.hidden_sizes, self.activation, self.init_scheme)


class SharedActorCritic(nn.Module):
    """One MLP torso shared by a linear policy head and a linear value head.

    Sample Factory's default feed-forward model (``actor_critic_share_weights=True``:
    encoder MLP, then ``critic_linear`` and the action parameterisation; its
    ``sample_factory/model/actor_critic.py``). Same interface as :class:`ActorCritic`;
    the value head's output layer is ``value_out`` (PopArt rescales it).
    """

    head: ActionHead
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    init_scheme: str = "orthogonal"
    log_std_init: float = 0.0

    def setup(self):
        self.torso = Torso(self.hidden_sizes, self.activation, self.init_scheme)
        self.policy_out = _dense(policy_outputs(self.head), 0.01, self.init_scheme)
        self.value_out = _dense(1, 1.0, self.init_scheme)
        add_log_std(self, self.head, self.log_std_init)

    def _dist(self, h: jax.Array) -> Distribution:
        return logits_to_distribution(self.policy_out(h), self.head, getattr(self, "log_std", None))

    def policy(self, x: jax.Array) -> Distribution:
        return self._dist(self.torso(x))

    def value(self, x: jax.Array) -> jax.Array:
        return self.value_out(self.torso(x))[..., 0]

    def __call__(self, x: jax.Array) -> tuple[Distribution, jax.Array]:
        h = self.torso(x)
        return self._dist(h), self.value_out(h)[..., 0]


class ActorCritic(nn.Module):
    """Separate policy and value MLP torsos over a flat observation ``[..., D]``.

    ``__call__`` returns ``(dist, value)`` with ``value`` ``[...]``; ``policy`` and
    ``value`` (use with ``apply(..., method=...)``) run one torso only.
    """

    head: ActionHead
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    init_scheme: str = "orthogonal"
    log_std_init: float = 0.0

    def setup(self):
        self.policy_net = MLP(self.hidden_sizes, policy_outputs(self.head), 0.01, self.activation,
                              self.init_scheme)
        self.value_net = MLP(self.hidden_sizes, 1, 1.0, self.activation, self.init_scheme)
        add_log_std(self, self.head, self.log_std_init)

    def policy(self, x: jax.Array) -> Distribution:
        return logits_to_distribution(self.policy_net(x), self.head, getattr(self, "log_std", None))

    def value(self, x: jax.Array) -> jax.Array:
        return self.value_net(x)[..., 0]

    def __call__(self, x: jax.Array) -> tuple[Distribution, jax.Array]:
        return self.policy(x), self.value(x)
