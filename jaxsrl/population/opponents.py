"""A self-play opponent pool: past policy snapshots to play against.

The learner publishes policy versions; every ``snapshot_every`` versions the pool keeps a
snapshot (the runtime stores the parameters under the returned id). Each episode's
opponent is ``"latest"`` (the current policy, plain self-play) with probability
``p_latest``, else a snapshot, uniformly or weighted by rating. Playing against past
selves as well as the latest one keeps self-play from overfitting to (and cycling
with) the current opponent: Bansal et al. 2018, "Emergent Complexity via Multi-Agent
Competition", sample opponents uniformly from older snapshots; OpenAI Five (Berner et
al. 2019, "Dota 2 with Large Scale Deep Reinforcement Learning", the appendix on
opponent sampling) plays 80% of games against the latest parameters and 20% against
past versions chosen by a softmax of quality scores, the source of the defaults here.

When the pool is over ``max_size`` one snapshot is dropped:

* ``evict="oldest"``: the one with the smallest version (a sliding window of recent
  opponents);
* ``evict="lowest_rated"``: the one with the lowest score (e.g. a rating's ordinal,
  ``jaxsrl.population.ratings.Ratings.ordinal``), never the snapshot just added (it has
  not played yet); ties drop the oldest.

Rating-weighted sampling draws snapshot ``i`` with probability ``softmax(score_i / T)``
(OpenAI Five's quality-score sampling), ``T = temperature``. Pure bookkeeping: no
parameters, no I/O; randomness from a NumPy generator passed in.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, NamedTuple, Optional

import numpy as np

LATEST = "latest"
FORMAT = 1  # version of state_dict's layout

Score = Callable[[str], float]


@dataclasses.dataclass(frozen=True)
class OpponentPoolConfig:
    """Opponent pool settings.

    Attributes:
      snapshot_every: policy versions between snapshots (``K >= 1``).
      max_size: snapshots kept (``>= 1``).
      p_latest: probability of playing the latest policy, in ``[0, 1]``.
      sampling: ``"uniform"`` or ``"rating"`` (softmax of scores) over the snapshots.
      temperature: ``T > 0`` of rating-weighted sampling, in score units (an openskill
        ordinal moves by a few units per few games).
      evict: ``"oldest"`` or ``"lowest_rated"`` (see the module docstring).
    """

    snapshot_every: int = 10
    max_size: int = 20
    p_latest: float = 0.8
    sampling: str = "uniform"
    temperature: float = 1.0
    evict: str = "oldest"

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        k = self.snapshot_every
        checks = [("snapshot_every", isinstance(k, int) and k >= 1),
                  ("max_size", isinstance(self.max_size, int) and self.max_size >= 1),
                  ("p_latest", 0 <= self.p_latest <= 1), ("temperature", self.temperature > 0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"opponents.{name}={getattr(self, name)!r} is out of range")
        if self.sampling not in ("uniform", "rating"):
            raise ValueError(f"opponents.sampling={self.sampling!r}; valid: 'uniform', 'rating'")
        if self.evict not in ("oldest", "lowest_rated"):
            raise ValueError(f"opponents.evict={self.evict!r}; valid: 'oldest', 'lowest_rated'")


class PoolChange(NamedTuple):
    """What ``observe`` changed: the id of a new snapshot (``None``: none taken) and the
    ids dropped (the runtime deletes their parameters)."""

    added: Optional[str]
    dropped: list[str]


class OpponentPool:
    """Snapshots of one policy, oldest first.

    Args:
      config: pool settings (validated).
      name: prefix of snapshot ids, ``f"{name}:{version}"`` (e.g. the policy's name).
    """

    def __init__(self, config: OpponentPoolConfig = OpponentPoolConfig(), name: str = "snapshot"):
        config.validate()
        self.config, self.name = config, name
        self._snapshots: list[tuple[str, int]] = []  # (id, version), oldest first
        self._last_snapshot: Optional[int] = None
        self._last_seen: Optional[int] = None

    @property
    def snapshots(self) -> list[str]:
        """Snapshot ids, oldest first."""
        return [sid for sid, _ in self._snapshots]

    def version_of(self, snapshot_id: str) -> int:
        """The policy version a snapshot was taken at (``KeyError`` if not in the pool)."""
        return dict(self._snapshots)[snapshot_id]

    def observe(self, version: int, score: Optional[Score] = None) -> PoolChange:
        """The learner published ``version``: snapshot it if ``snapshot_every`` versions
        have passed since the last snapshot (the first version seen is always taken),
        then drop snapshots beyond ``max_size``.

        Args:
          version: the policy version (non-decreasing from call to call).
          score: ``score(id) -> float``, needed by ``evict="lowest_rated"``.

        Raises:
          ValueError: a version below the last one seen, or ``lowest_rated`` eviction
            without ``score``.
        """
        version = int(version)
        if self._last_seen is not None and version < self._last_seen:
            raise ValueError(f"opponents: version {version} is below the last one seen "
                             f"({self._last_seen})")
        self._last_seen = version
        last = self._last_snapshot
        if last is not None and version - last < self.config.snapshot_every:
            return PoolChange(None, [])
        sid = f"{self.name}:{version}"
        self._snapshots.append((sid, version))
        self._last_snapshot = version
        dropped = []
        while len(self._snapshots) > self.config.max_size:
            dropped.append(self._evict(score))
        return PoolChange(sid, dropped)

    def _evict(self, score: Optional[Score]) -> str:
        if self.config.evict == "oldest":
            i = 0
        else:
            if score is None:
                raise ValueError("opponents.evict='lowest_rated' needs score (e.g. Ratings.ordinal)")
            # The newest (last) snapshot is never dropped; min() keeps the first (oldest) tie.
            candidates = range(len(self._snapshots) - 1)
            i = min(candidates, key=lambda j: float(score(self._snapshots[j][0])))
        return self._snapshots.pop(i)[0]

    def probabilities(self, score: Optional[Score] = None) -> dict[str, float]:
        """``{opponent: probability}`` of :meth:`sample`, ``"latest"`` included.

        Raises:
          ValueError: ``sampling="rating"`` without ``score`` (and a non-empty pool).
        """
        ids = self.snapshots
        if not ids:
            return {LATEST: 1.0}
        p_pool = 1.0 - self.config.p_latest
        if self.config.sampling == "uniform":
            w = np.full(len(ids), 1.0 / len(ids))
        else:
            if score is None:
                raise ValueError("opponents.sampling='rating' needs score (e.g. Ratings.ordinal)")
            logits = np.array([float(score(i)) for i in ids]) / self.config.temperature
            w = np.exp(logits - logits.max())
            w /= w.sum()
        return {LATEST: self.config.p_latest, **{i: p_pool * float(wi) for i, wi in zip(ids, w)}}

    def sample(self, rng: np.random.Generator, score: Optional[Score] = None) -> str:
        """The opponent of the next episode: ``"latest"`` or a snapshot id, drawn from
        :meth:`probabilities` (``"latest"`` when the pool is empty)."""
        probs = self.probabilities(score)
        names = list(probs)
        p = np.array([probs[n] for n in names])
        return names[int(rng.choice(len(names), p=p / p.sum()))]

    def state_dict(self) -> dict:
        """JSON-serialisable contents (not the config: a resumed run brings its own)."""
        return {"format": FORMAT, "name": self.name,
                "snapshots": [[sid, v] for sid, v in self._snapshots],
                "last_snapshot": self._last_snapshot, "last_seen": self._last_seen}

    def load(self, state: Mapping) -> None:
        """Replace the contents by those of ``state_dict()``.

        Raises:
          ValueError: an unknown format, another pool's name, or more snapshots than
            this pool's ``max_size``.
        """
        if state.get("format") != FORMAT:
            raise ValueError(f"opponents: format={state.get('format')!r}; this version reads {FORMAT}")
        if state["name"] != self.name:
            raise ValueError(f"opponents: state of pool {state['name']!r} loaded into {self.name!r}")
        snaps = [(str(sid), int(v)) for sid, v in state["snapshots"]]
        if len(snaps) > self.config.max_size:
            raise ValueError(f"opponents: {len(snaps)} saved snapshots exceed "
                             f"max_size={self.config.max_size}")
        self._snapshots = snaps
        self._last_snapshot = state["last_snapshot"]
        self._last_seen = state["last_seen"]
