"""Entity-centric, recurrent actor-critic for hide-and-seek (Baker et al. 2019, §B / Fig. 8).

Observations are a ``Dict`` with ``self [ds]``, ``lidar [L]`` and, per entity kind
``k`` in :data:`ENTITY_KINDS`, ``k [K, dk]``, ``k_mask [K]`` (visible to this agent)
and ``k_present [K]`` (real, not padding). One torso (used twice, with separate
parameters, for the policy and the value):

1. lidar ``[L]`` -> circular 1-D convolution (``lidar_filters``, kernel 3, relu) ->
   flattened ``[L * F]``. ``lidar_to_entities=False`` (ours): it joins ``self`` in the
   self token only. ``True`` (released): it joins ``self`` before everything, so the
   self features concatenated to every entity carry it too (the released graph starts
   from ``main = observation_self`` and concatenates the flattened conv to it,
   mae:ma_policy/graph_construct.py:92, 135-151, 200-212; mae:ma_policy/layers.py:263-284);
2. each entity concatenated with the self features and embedded by one dense layer per
   kind (relu), width ``embed``; the self features get their own dense layer (the self
   token);
3. self-attention over ``[self, entities...]`` with a key mask, then masked average
   pooling over the tokens (mae:ma_policy/layers.py:10-20). ``style="ours"``: Flax
   multi-head attention, residual + LayerNorm, then a 2-layer feed-forward block,
   residual + LayerNorm; the pooled vector joins the *attended* self token, then
   ``relu(dense)``. ``style="released"``: ``residual_sa_block`` with ``layer_norm`` and
   ``post_sa_layer_norm`` and ``n_mlp=1`` (mae:ma_policy/layers.py:89-139, 210-227):
   ``LN(x + W_o attn(LN(x)))``, no feed-forward block, attention weights drawn with
   std ``sqrt(0.125 / fan_in)`` (:91, 226-243); the pooled vector joins the self
   embedding from step 2, then ``LN -> relu(dense) -> LN`` (third-party dump of the
   released spec, see /work/shared/hide_and_seek_original.md §2);
4. an LSTM core of ``lstm`` units (the original: ``BasicLSTMCell``,
   graph_construct.py:123-134); ``style="released"`` puts a LayerNorm on its output.

The **policy** masks entities it cannot see (``k_mask * k_present``); the **value**
network is omniscient and sees every real entity (``k_present``). Masked entities
cannot influence the policy's output (attention keys and pooling exclude them).
The recurrent state is ``((c_pi, h_pi), (c_v, h_v))``, each ``[N, lstm]``, zeros at
episode start.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from agents import networks

ENTITY_KINDS = ("agents", "boxes", "ramps")
STYLES = ("ours", "released")

# Initial std sqrt(0.125 / fan_in) of the released attention's q/k, v and output
# weights (qk_w = v_w = post_w = 0.125, mae:ma_policy/layers.py:91, 230-243).
_SA_INIT = nn.initializers.variance_scaling(0.125, "fan_in", "normal")


def _circular_conv(lidar: jax.Array, features: int, kernel: int, init=None) -> jax.Array:
    """``[N, L]`` ranges -> ``[N, L * features]`` with wrap-around padding
    (mae:ma_policy/layers.py:263-284)."""
    pad = kernel // 2
    x = jnp.concatenate([lidar[:, -pad:], lidar, lidar[:, :pad]], axis=1)[..., None]  # [N, L+2p, 1]
    kw = {} if init is None else {"kernel_init": init}
    x = nn.relu(nn.Conv(features, (kernel,), padding="VALID", **kw)(x))  # [N, L, F]
    return x.reshape(x.shape[0], -1)


class EntityTorso(nn.Module):
    """Steps 1-3 of the module docstring for one batch of observations ``[N, ...]``.

    Returns ``[N, dense]``: the input of the LSTM core.
    """

    width: int = 64
    """Entity embedding and attention width (``embed``)."""
    heads: int = 4
    lidar_features: int = 4
    omniscient: bool = False
    style: str = "ours"
    lidar_to_entities: bool = False
    dense: int = 0
    """Width of the dense layer after pooling (0: ``width``)."""

    @nn.compact
    def __call__(self, obs: dict) -> jax.Array:
        released = self.style == "released"
        xavier = nn.initializers.xavier_uniform() if released else None  # graph_construct.py:118
        dense_kw = {} if xavier is None else {"kernel_init": xavier}
        self_f = obs["self"].astype(jnp.float32)  # [N, ds]
        lidar_f = _circular_conv(obs["lidar"], self.lidar_features, 3, xavier)  # [N, L * F]
        if self.lidar_to_entities:
            self_f = jnp.concatenate([self_f, lidar_f], -1)  # [N, ds + L * F]
            self_in = self_f
        else:
            self_in = jnp.concatenate([self_f, lidar_f], -1)
        tokens = [nn.Dense(self.width, name="embed_self", **dense_kw)(self_in)[:, None]]
        masks = [jnp.ones((self_f.shape[0], 1), bool)]
        for kind in ENTITY_KINDS:
            if kind not in obs:
                continue
            ent = obs[kind].astype(jnp.float32)  # [N, K, dk]
            both = jnp.concatenate([ent, jnp.broadcast_to(self_f[:, None], ent.shape[:2] + self_f.shape[-1:])], -1)
            tokens.append(nn.Dense(self.width, name=f"embed_{kind}", **dense_kw)(both))
            seen = obs[f"{kind}_present"] > 0.5
            if not self.omniscient:
                seen = seen & (obs[f"{kind}_mask"] > 0.5)
            masks.append(seen)
        x = nn.relu(jnp.concatenate(tokens, axis=1))  # [N, E, d]
        mask = jnp.concatenate(masks, axis=1)  # [N, E]; the self token is always there
        w = mask.astype(jnp.float32)[..., None]
        out = self.dense or self.width
        if released:  # residual_sa_block(layer_norm=True, post_sa_layer_norm=True, n_mlp=1)
            embedded = x[:, 0]  # the self embedding, before attention
            h = nn.LayerNorm(epsilon=1e-5, name="pre_sa_ln")(x)  # layers.py:224-227
            attn = nn.MultiHeadDotProductAttention(
                num_heads=self.heads, qkv_features=self.width, out_features=self.width,
                kernel_init=_SA_INIT, name="self_attention")(h, h, mask=mask[:, None, None, :])
            x = nn.LayerNorm(epsilon=1e-5, name="post_sa_ln")(x + attn)  # layers.py:117-123
            pooled = (x * w).sum(1) / w.sum(1)  # [N, d]
            y = jnp.concatenate([embedded, pooled], -1)  # [N, 2d]
            y = nn.LayerNorm(epsilon=1e-5, name="pre_dense_ln")(y)
            y = nn.relu(nn.Dense(out, name="dense", **dense_kw)(y))
            return nn.LayerNorm(epsilon=1e-5, name="post_dense_ln")(y)
        attn = nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.width)(
            x, x, mask=mask[:, None, None, :])
        x = nn.LayerNorm()(x + attn)
        x = nn.LayerNorm()(x + nn.Dense(self.width)(nn.relu(nn.Dense(self.width)(x))))
        pooled = (x * w).sum(1) / w.sum(1)  # masked average pooling: [N, d]
        return nn.relu(nn.Dense(out)(jnp.concatenate([x[:, 0], pooled], -1)))


class RecurrentEntityActorCritic(nn.Module):
    """Policy and (omniscient) value networks, each an :class:`EntityTorso` + LSTM.

    ``__call__(obs, carry, reset)`` takes one step for a batch of ``N`` rows:
    ``obs`` leaves ``[N, ...]``, ``carry`` as :meth:`initial_carry`, ``reset [N]`` bool
    (zero the carry first where True). Returns ``(dist, value [N], new_carry)``.
    ``width`` is the embedding/attention width; ``dense`` and ``lstm`` default (0) to it.
    """

    head: networks.ActionHead
    width: int = 64
    heads: int = 4
    lidar_features: int = 4
    style: str = "ours"
    lidar_to_entities: bool = False
    dense: int = 0
    lstm: int = 0

    @property
    def lstm_size(self) -> int:
        return self.lstm or self.width

    def setup(self):
        kw = dict(width=self.width, heads=self.heads, lidar_features=self.lidar_features,
                  style=self.style, lidar_to_entities=self.lidar_to_entities, dense=self.dense)
        self.pi_torso = EntityTorso(omniscient=False, **kw)
        self.v_torso = EntityTorso(omniscient=True, **kw)
        self.pi_core = nn.OptimizedLSTMCell(self.lstm_size)
        self.v_core = nn.OptimizedLSTMCell(self.lstm_size)
        if self.style == "released":  # LayerNorm after the LSTM (dump of the released spec)
            self.pi_core_ln = nn.LayerNorm(epsilon=1e-5)
            self.v_core_ln = nn.LayerNorm(epsilon=1e-5)
        out = sum(self.head.sizes) if self.head.kind == "multi_categorical" else self.head.sizes[0]
        self.pi_out = networks._dense(out, 0.01)
        self.v_out = networks._dense(1, 1.0)
        if self.head.kind == "gaussian":
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.head.sizes[0],))

    def initial_carry(self, n: int):
        zeros = jnp.zeros((n, self.lstm_size), jnp.float32)
        return ((zeros, zeros), (zeros, zeros))

    @staticmethod
    def _reset(carry, reset):
        keep = (~reset)[:, None].astype(jnp.float32)
        return jax.tree.map(lambda c: c * keep, carry)

    def policy(self, obs, carry, reset):
        carry = self._reset(carry, reset)
        new, h = self.pi_core(carry, self.pi_torso(obs))
        if self.style == "released":
            h = self.pi_core_ln(h)
        return networks.logits_to_distribution(self.pi_out(h), self.head,
                                               getattr(self, "log_std", None)), new

    def value(self, obs, carry, reset):
        carry = self._reset(carry, reset)
        new, h = self.v_core(carry, self.v_torso(obs))
        if self.style == "released":
            h = self.v_core_ln(h)
        return self.v_out(h)[..., 0], new

    def __call__(self, obs, carry, reset):
        dist, pi_carry = self.policy(obs, carry[0], reset)
        value, v_carry = self.value(obs, carry[1], reset)
        return dist, value, (pi_carry, v_carry)


def widths(hidden_sizes: Sequence[int]) -> int:
    """The torso width used for a PPO ``hidden_sizes`` config (its first entry)."""
    return int(hidden_sizes[0]) if hidden_sizes else 64


def from_config(head: networks.ActionHead, config) -> RecurrentEntityActorCritic:
    """The network a ``PPOConfig`` asks for (``entity_embed``/``dense_size``/``lstm_size``
    0: ``hidden_sizes[0]``, as before these fields existed)."""
    return RecurrentEntityActorCritic(
        head, width=config.entity_embed or widths(config.hidden_sizes), heads=config.attention_heads,
        lidar_features=config.lidar_filters, style=config.attention_style,
        lidar_to_entities=config.lidar_to_entities, dense=config.dense_size, lstm=config.lstm_size)
