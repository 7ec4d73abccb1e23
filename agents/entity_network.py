"""Entity-centric, recurrent actor-critic for hide-and-seek (Baker et al. 2019, §B / Fig. 8).

Observations are a ``Dict`` with ``self [ds]``, ``lidar [L]`` and, per entity kind
``k`` in :data:`ENTITY_KINDS`, ``k [K, dk]``, ``k_mask [K]`` (visible to this agent)
and ``k_present [K]`` (real, not padding). One torso (used twice, with separate
parameters, for the policy and the value):

1. lidar ``[L]`` -> circular 1-D convolution -> flattened, concatenated to ``self``,
   embedded: the self token ``[d]``;
2. each entity embedded together with the self features (one dense layer per kind);
3. residual multi-head self-attention over ``[self, entities...]`` with a key mask,
   then masked average pooling over the tokens;
4. a dense layer and an LSTM core.

The **policy** masks entities it cannot see (``k_mask * k_present``); the **value**
network is omniscient and sees every real entity (``k_present``). Masked entities
cannot influence the policy's output (attention keys and pooling exclude them).
The recurrent state is ``((c_pi, h_pi), (c_v, h_v))``, zeros at episode start.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from agents import networks

ENTITY_KINDS = ("agents", "boxes", "ramps")


def _circular_conv(lidar: jax.Array, features: int, kernel: int) -> jax.Array:
    """``[N, L]`` ranges -> ``[N, L * features]`` with wrap-around padding."""
    pad = kernel // 2
    x = jnp.concatenate([lidar[:, -pad:], lidar, lidar[:, :pad]], axis=1)[..., None]  # [N, L+2p, 1]
    x = nn.relu(nn.Conv(features, (kernel,), padding="VALID")(x))  # [N, L, F]
    return x.reshape(x.shape[0], -1)


class EntityTorso(nn.Module):
    """Steps 1-4 of the module docstring for one batch of observations ``[N, ...]``."""

    width: int = 64
    heads: int = 4
    lidar_features: int = 4
    omniscient: bool = False

    @nn.compact
    def __call__(self, obs: dict) -> jax.Array:
        self_f = obs["self"].astype(jnp.float32)  # [N, ds]
        tokens = [nn.Dense(self.width, name="embed_self")(
            jnp.concatenate([self_f, _circular_conv(obs["lidar"], self.lidar_features, 3)], -1))[:, None]]
        masks = [jnp.ones((self_f.shape[0], 1), bool)]
        for kind in ENTITY_KINDS:
            if kind not in obs:
                continue
            ent = obs[kind].astype(jnp.float32)  # [N, K, dk]
            both = jnp.concatenate([ent, jnp.broadcast_to(self_f[:, None], ent.shape[:2] + self_f.shape[-1:])], -1)
            tokens.append(nn.Dense(self.width, name=f"embed_{kind}")(both))
            seen = obs[f"{kind}_present"] > 0.5
            if not self.omniscient:
                seen = seen & (obs[f"{kind}_mask"] > 0.5)
            masks.append(seen)
        x = nn.relu(jnp.concatenate(tokens, axis=1))  # [N, E, d]
        mask = jnp.concatenate(masks, axis=1)  # [N, E]; the self token is always there
        attn = nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.width)(
            x, x, mask=mask[:, None, None, :])
        x = nn.LayerNorm()(x + attn)
        x = nn.LayerNorm()(x + nn.Dense(self.width)(nn.relu(nn.Dense(self.width)(x))))
        w = mask.astype(jnp.float32)[..., None]
        pooled = (x * w).sum(1) / w.sum(1)  # masked average pooling: [N, d]
        return nn.relu(nn.Dense(self.width)(jnp.concatenate([x[:, 0], pooled], -1)))


class RecurrentEntityActorCritic(nn.Module):
    """Policy and (omniscient) value networks, each an :class:`EntityTorso` + LSTM.

    ``__call__(obs, carry, reset)`` takes one step for a batch of ``N`` rows:
    ``obs`` leaves ``[N, ...]``, ``carry`` as :meth:`initial_carry`, ``reset [N]`` bool
    (zero the carry first where True). Returns ``(dist, value [N], new_carry)``.
    """

    head: networks.ActionHead
    width: int = 64
    heads: int = 4

    def setup(self):
        self.pi_torso = EntityTorso(self.width, self.heads, omniscient=False)
        self.v_torso = EntityTorso(self.width, self.heads, omniscient=True)
        self.pi_core = nn.OptimizedLSTMCell(self.width)
        self.v_core = nn.OptimizedLSTMCell(self.width)
        out = sum(self.head.sizes) if self.head.kind == "multi_categorical" else self.head.sizes[0]
        self.pi_out = networks._dense(out, 0.01)
        self.v_out = networks._dense(1, 1.0)
        if self.head.kind == "gaussian":
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.head.sizes[0],))

    def initial_carry(self, n: int):
        zeros = jnp.zeros((n, self.width), jnp.float32)
        return ((zeros, zeros), (zeros, zeros))

    @staticmethod
    def _reset(carry, reset):
        keep = (~reset)[:, None].astype(jnp.float32)
        return jax.tree.map(lambda c: c * keep, carry)

    def policy(self, obs, carry, reset):
        carry = self._reset(carry, reset)
        new, h = self.pi_core(carry, self.pi_torso(obs))
        return networks.logits_to_distribution(self.pi_out(h), self.head,
                                               getattr(self, "log_std", None)), new

    def value(self, obs, carry, reset):
        carry = self._reset(carry, reset)
        new, h = self.v_core(carry, self.v_torso(obs))
        return self.v_out(h)[..., 0], new

    def __call__(self, obs, carry, reset):
        dist, pi_carry = self.policy(obs, carry[0], reset)
        value, v_carry = self.value(obs, carry[1], reset)
        return dist, value, (pi_carry, v_carry)


def widths(hidden_sizes: Sequence[int]) -> int:
    """The torso width used for a PPO ``hidden_sizes`` config (its first entry)."""
    return int(hidden_sizes[0]) if hidden_sizes else 64
