"""Self-play opponent pools of a run: the ``[opponents]`` table and its checks.

For a multi-team environment with one policy per team (an actor group's ``teams``
table, e.g. ``configs/hide_and_seek_teams.toml``), ``[opponents]`` keeps a pool of past
snapshots of each team's policy and lets actors play them (``docs/population.md``,
"Self-play opponent pools")::

    [opponents]
    snapshot_every = 10      # policy versions between snapshots (0: no pools)
    max_size = 20
    p_latest = 0.8           # per episode and environment: everyone plays latest
    sampling = "uniform"     # or "rating" (softmax of the snapshots' rating ordinals)

Each episode, each environment of an actor draws: with probability ``p_latest`` every
team plays its latest policy, else one team (uniformly) plays a snapshot from its pool
(uniformly or by rating, drawn by the inference server) against the others' latest
policies; rows played by a snapshot are not sent to that team's learner. Pure data and
checks: nothing here builds workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxsrl.population.opponents import OpponentPoolConfig
from jaxsrl.population.ratings import MODELS


@dataclasses.dataclass(frozen=True)
class OpponentSettings:
    """The ``[opponents]`` table (``--opponents.<field>`` flags).

    Attributes:
      snapshot_every: policy versions between two snapshots of a policy (0: no
        opponent pools; the run is plain self-play of the latest policies).
      max_size: snapshots kept per policy (the oldest, or lowest rated, is dropped).
      p_latest: probability that an episode is played by every team's latest policy.
      sampling: ``"uniform"`` or ``"rating"``: which snapshot plays, given one does.
      temperature: of rating-weighted sampling (ordinal units).
      evict: ``"oldest"`` or ``"lowest_rated"``.
      rating_model: an openskill model (``jaxsrl.population.ratings.MODELS``).
      save_interval_s: seconds between saves of the pools and ratings (also saved at
        the end of the run), ``LOGDIR/selfplay/``.
    """

    snapshot_every: int = 0
    max_size: int = 20
    p_latest: float = 0.8
    sampling: str = "uniform"
    temperature: float = 1.0
    evict: str = "oldest"
    rating_model: str = "plackett_luce"
    save_interval_s: float = 60.0

    @property
    def enabled(self) -> bool:
        return self.snapshot_every > 0

    def pool_config(self) -> OpponentPoolConfig:
        """The :class:`~jaxsrl.population.opponents.OpponentPoolConfig` of these settings."""
        return OpponentPoolConfig(int(self.snapshot_every), int(self.max_size), float(self.p_latest),
                                  self.sampling, float(self.temperature), self.evict)


def team_policies(flow: Any) -> list[str]:
    """The policies of the team bindings of ``flow``'s actor groups, sorted."""
    return sorted({t.policy for t in flow.trainers
                   for a in flow.actors for team, _, sample in a.bindings()
                   if team is not None and sample == t.sample_stream})


def check(cfg: Any) -> None:
    """Check the ``[opponents]`` settings of run config ``cfg`` (pairs with other modes:
    :mod:`jaxsrl.experiment.modes`; the teams they need: :func:`check_teams`).

    Raises:
      ValueError: one line naming the bad value.
    """
    s = cfg.opponents
    if not isinstance(s, OpponentSettings):
        raise ValueError(f"opponents={s!r} must be an [opponents] table")
    k = s.snapshot_every
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"opponents.snapshot_every={k!r} must be an integer >= 0 (0: no pools)")
    if not s.enabled:
        return
    s.pool_config().validate()
    if s.rating_model not in MODELS:
        raise ValueError(f"opponents.rating_model={s.rating_model!r}; valid: {', '.join(MODELS)}")
    if not s.save_interval_s > 0:
        raise ValueError(f"opponents.save_interval_s={s.save_interval_s!r} must be > 0")


def check_teams(cfg: Any, flow: Any) -> None:
    """Refuse opponent pools of a run whose dataflow ``flow`` does not have two team
    policies in every actor group (``ValueError``, one line)."""
    if not cfg.opponents.enabled:
        return
    k = cfg.opponents.snapshot_every
    for group in flow.actors:
        policies = {t.policy for t in flow.trainers for team, _, sample in group.bindings()
                    if sample == t.sample_stream and team is not None}
        if len(policies) != 2 or len(group.bindings()) != 2:
            raise ValueError(f"opponents.snapshot_every={k}: actor group {group.name!r} needs a "
                             "teams table of two teams with a policy each (e.g. "
                             "configs/hide_and_seek_teams.toml)")
