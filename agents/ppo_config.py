"""PPO's hyperparameters (:class:`PPOConfig`) and their range checks.

The configuration of :mod:`agents.ppo` (``[ppo]`` in a TOML config, ``--ppo.<field>`` on
the command line); ``agents.ppo`` re-exports it.
"""

from __future__ import annotations

import dataclasses

from agents import networks
from agents.ppo_loss import RATIO_CLIPS

__all__ = ["PPOConfig"]


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters.

    Defaults follow CleanRL's ``ppo.py`` except a 12x larger learning rate, tuned on
    CartPole-v1 with 8 envs x 128 steps per update (solves it in ~50-100k env steps).
    """

    learning_rate: float = 3e-3
    """Adam step size (the start value when ``anneal_lr``). Tuned on CartPole-v1;
    CleanRL's 2.5e-4 is the safer start for harder tasks."""
    anneal_lr: bool = True
    """Anneal the step size linearly to 0 over ``num_updates * num_epochs *
    num_minibatches`` optimiser steps."""
    num_epochs: int = 4
    """Passes over each batch per ``learn`` call."""
    num_minibatches: int = 4
    """Minibatches per epoch; ``B * T`` must be divisible by it."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (bias-variance trade-off of the advantage estimate)."""
    clip_eps: float = 0.2
    """Surrogate clipping range epsilon: ratios outside ``1 +- eps`` get no gradient."""
    vf_coef: float = 0.5
    """Weight of the value loss in the total loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (subtracted from the total loss)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip applied before Adam."""
    clip_value_loss: bool = True
    """Clip the value change to ``+- clip_eps`` around the pre-update values (PPO2)."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of both the policy and the value MLP (after the CNN for
    image observations; ``()``: linear heads, as CleanRL's Atari PPO)."""
    activation: str = "tanh"
    """Hidden activation: one of ``networks.ACTIVATIONS`` (tanh, relu, gelu, ...)."""
    network: str = "mlp"
    """``mlp`` (feed-forward, any Box/Dict observation; uint8 ``[H, W, C]`` images get a
    Nature CNN first, see ``agents/encoders.py``) or ``entity_lstm`` (entity
    attention + LSTM for hide-and-seek; see ``agents/ppo_recurrent.py``)."""
    attention_heads: int = 4
    """Heads of the entity self-attention (``entity_lstm`` only)."""
    entity_embed: int = 0
    """``entity_lstm``: entity embedding and attention width (0: ``hidden_sizes[0]``).
    Released spec: 128."""
    dense_size: int = 0
    """``entity_lstm``: the dense layer between pooling and the LSTM (0: ``hidden_sizes[0]``).
    Released spec: 256."""
    lstm_size: int = 0
    """``entity_lstm``: LSTM units (0: ``hidden_sizes[0]``). Released spec: 256."""
    attention_style: str = "ours"
    """``entity_lstm``: ``ours`` (residual attention + LN, then a feed-forward block +
    LN; the attended self token joins the pool) or ``released`` (OpenAI's
    ``residual_sa_block`` with pre- and post-LayerNorm and no feed-forward block, the
    self embedding joins the pool, LN around the dense layer and after the LSTM;
    mae:ma_policy/layers.py:89-139). See ``agents/entity_network.py``."""
    lidar_filters: int = 4
    """``entity_lstm``: filters of the circular lidar convolution (released spec: 9)."""
    lidar_to_entities: bool = False
    """``entity_lstm``: the flattened lidar features join the self features that are
    concatenated to every entity (as released) instead of the self token only."""
    normalize_observations: bool = False
    """Running mean/std observation normalisation, clipped to +-10 (statistics in the
    learner state, saved with checkpoints). For vector/MuJoCo observations."""
    normalize_values: bool = False
    """Value head predicts returns standardised by a running mean/std of the GAE returns
    (plays the part of the reward scaling of PPO for MuJoCo, Engstrom et al. 2020). When
    the statistics change, the head's last layer is rescaled so its unnormalised output
    is preserved (PopArt, van Hasselt et al. 2016; ``agents.ppo_loss.pop_art_preserve``)."""
    kl_coef: float = 0.0
    """Weight of a KL(pi_old || pi) penalty added to the clipped loss (0: none).
    Sample Factory's ``kl_loss_coeff`` (0.1 in its MuJoCo settings)."""
    kl_estimator: str = "sample"
    """The KL of the ``kl_coef`` penalty: ``sample`` (``mean((r - 1) - log r)``, an
    estimate of KL(pi_old || pi) from the taken actions) or ``closed_form`` (KL(pi ||
    pi_old) of the whole distributions, as Sample Factory; ``pi_old`` is the policy at
    the start of the update, so the actors' lag does not enter it; ``mlp`` networks)."""
    shared_torso: bool = False
    """Vector observations: one MLP torso under the policy and value heads (Sample
    Factory's default, ``actor_critic_share_weights``) instead of two MLPs (CleanRL)."""
    init: str = "orthogonal"
    """Weight initialisation of the MLPs: ``orthogonal`` (CleanRL: gain sqrt(2), 0.01 for
    the policy output, 1 for the value) or ``torch_default`` (PyTorch's ``nn.Linear``
    default with zero biases, Sample Factory's ``policy_initialization=torch_default``)."""
    value_clip_eps: float = 0.0
    """Value clipping range around the pre-update values, in the value head's units
    (0: ``clip_eps``). Sample Factory's ``ppo_clip_value`` (1.0)."""
    ratio_clip: str = "symmetric"
    """Clipping interval of the ratio: ``symmetric`` ``[1 - eps, 1 + eps]`` (Schulman et
    al. 2017) or ``inverse`` ``[1/(1 + eps), 1 + eps]`` (Sample Factory; see
    ``agents.ppo_loss.ppo_loss``)."""
    ratio_clamp: float = 0.0
    """Clamp the ratio to ``[1/c, c]`` before the surrogate (0: no clamp; Sample Factory:
    20, i.e. [0.05, 20])."""
    shuffle_minibatches: bool = True
    """Draw each epoch's minibatches as a random permutation of the batch (CleanRL);
    ``False``: the same contiguous slices of whole segments every epoch, in order
    (Sample Factory's ``shuffle_minibatches=False``)."""
    log_std_init: float = 0.0
    """Initial learned log standard deviation of a Box action's Gaussian (``mlp`` networks; 0: std 1; RL
    Zoo's tuned MuJoCo PPO uses -2 to -0.5)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first out-of-range hyperparameter."""
        checks = [("learning_rate", self.learning_rate > 0), ("num_epochs", self.num_epochs >= 1),
                  ("num_minibatches", self.num_minibatches >= 1), ("gamma", 0 <= self.gamma <= 1),
                  ("gae_lambda", 0 <= self.gae_lambda <= 1), ("clip_eps", self.clip_eps > 0),
                  ("vf_coef", self.vf_coef >= 0), ("ent_coef", self.ent_coef >= 0),
                  ("max_grad_norm", self.max_grad_norm > 0), ("kl_coef", self.kl_coef >= 0),
                  ("value_clip_eps", self.value_clip_eps >= 0), ("attention_heads", self.attention_heads >= 1),
                  ("ratio_clamp", self.ratio_clamp == 0 or self.ratio_clamp > 1),
                  ("entity_embed", self.entity_embed >= 0), ("dense_size", self.dense_size >= 0),
                  ("lstm_size", self.lstm_size >= 0), ("lidar_filters", self.lidar_filters >= 1),
                  ("hidden_sizes", all(h >= 1 for h in self.hidden_sizes))]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"ppo.{name}={getattr(self, name)!r} is out of range")
        if self.kl_estimator not in ("sample", "closed_form"):
            raise ValueError(f"ppo.kl_estimator={self.kl_estimator!r}; valid: 'sample', "
                             "'closed_form'")
        if self.kl_estimator == "closed_form" and self.network != "mlp":
            raise ValueError("ppo.kl_estimator='closed_form' needs ppo.network='mlp'; got "
                             f"{self.network!r}")
        if self.ratio_clip not in RATIO_CLIPS:
            raise ValueError(f"ppo.ratio_clip={self.ratio_clip!r}; valid: {', '.join(RATIO_CLIPS)}")
        if self.attention_style not in ("ours", "released"):
            raise ValueError(f"ppo.attention_style={self.attention_style!r}; valid: 'ours', 'released'")
        width = self.entity_embed or (self.hidden_sizes[0] if self.hidden_sizes else 64)
        if self.network == "entity_lstm" and width % self.attention_heads:
            raise ValueError(f"entity width {width} is not divisible by ppo.attention_heads="
                             f"{self.attention_heads}")
        if self.init not in networks.INITS:
            raise ValueError(f"ppo.init={self.init!r}; valid: {', '.join(networks.INITS)}")
        if self.network not in ("mlp", "entity_lstm"):
            raise ValueError(f"ppo.network={self.network!r}; valid: 'mlp', 'entity_lstm'")
