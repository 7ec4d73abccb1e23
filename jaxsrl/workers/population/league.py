"""The self-play league of a run: each team policy's opponent pool, the snapshots'
parameters and the ratings of every version (see ``docs/population.md``).

:class:`League` is shared by the run's inference servers (through
:meth:`League.view` and :meth:`League.record_games`, the
:class:`~jaxsrl.streams.opponents.Opponents` protocol) and its
:class:`LeagueWorker`, a thread that watches the parameter store: every published
version of a team policy goes to that policy's
:class:`~jaxsrl.population.opponents.OpponentPool`; when the pool takes a snapshot
(every ``snapshot_every`` versions) its parameters are copied on device and the
snapshot's rating starts from the latest policy's (``Ratings.fork``); evicted snapshots
are forgotten. Thread-safe: views are immutable tuples replaced under a lock.

Games come from the actors (a request's ``games`` meta): one record per finished
episode, ``{policy: [opponent, score]}`` for both team policies, ``opponent`` ``-1``
for the latest policy else the snapshot version that played, ``score`` the team's mean
return over its agents. The team with the higher score wins (equal scores, within
1e-6: a draw); the two players are ``<policy>:latest`` or ``<policy>:<version>``
(openskill Plackett-Luce, ``jaxsrl.population.ratings``). Games naming a snapshot no
longer in the pool are counted (``unrated``) but not rated.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Mapping

import jax
import numpy as np

from jaxsrl.core.worker import Worker
from jaxsrl.population.opponents import OpponentPool, OpponentPoolConfig
from jaxsrl.population.ratings import Ratings
from jaxsrl.streams.opponents import LATEST, PoolView

log = logging.getLogger("jaxsrl.selfplay")
FORMAT = 1  # version of state_dict's layout
MAX_GAMES = 4096  # game records taken from one request


def latest_id(policy: str) -> str:
    return f"{policy}:latest"


def _copy(tree: Any) -> Any:
    """Fresh buffers (same sharding): the snapshot must outlive the learner's arrays."""
    return jax.tree.map(lambda x: x.copy() if isinstance(x, (jax.Array, np.ndarray)) else x, tree)


class League:
    """Opponent pools and ratings of the two team policies of a run.

    Args:
      policies: the two team policies.
      config: pool settings (shared by both pools).
      rating_model: an openskill model name (``jaxsrl.population.ratings.MODELS``).

    Raises:
      ValueError: not two distinct policies, or bad settings.
    """

    def __init__(self, policies: list[str], config: OpponentPoolConfig,
                 rating_model: str = "plackett_luce"):
        if len(set(policies)) != 2 or len(policies) != 2:
            raise ValueError(f"self-play league: needs two team policies, got {policies!r}")
        self.policies = sorted(policies)
        self.config = config
        self.pools = {p: OpponentPool(config, name=p) for p in self.policies}
        self.ratings = Ratings(rating_model)
        self._params: dict[str, dict[int, Any]] = {p: {} for p in self.policies}
        self._views: dict[str, PoolView] = {p: PoolView() for p in self.policies}
        self.totals = {"games": 0, "unrated": 0, "malformed": 0,
                       **{f"vs_snapshot/{p}": 0 for p in self.policies}}
        self._lock = threading.Lock()

    # -- read by the inference servers --------------------------------------------
    def view(self, policy: str) -> PoolView:
        """The current pool of ``policy`` (``KeyError`` for another policy)."""
        return self._views[policy]

    def _rebuild(self, policy: str) -> None:
        pool = self.pools[policy]
        ids = pool.snapshots
        versions = tuple(pool.version_of(i) for i in ids)
        probs = pool.probabilities(self.ratings.ordinal)
        p = np.array([probs[i] for i in ids], np.float64)
        cdf = np.cumsum(p / p.sum()) if len(p) else np.zeros(0)
        if len(cdf):
            cdf[-1] = 1.0
        self._views[policy] = PoolView(versions, tuple(self._params[policy][v] for v in versions), cdf)

    # -- snapshots ---------------------------------------------------------------
    def observe(self, policy: str, version: int, params: Any) -> None:
        """The learner of ``policy`` published ``version`` with ``params`` (device arrays)."""
        with self._lock:
            change = self.pools[policy].observe(version, self.ratings.ordinal)
            if change.added is None:
                return
            self._params[policy][int(version)] = _copy(params)
            self.ratings.forget(change.added)  # (a rating left from an earlier run's pool)
            self.ratings.fork(latest_id(policy), change.added)
            for sid in change.dropped:
                self._params[policy].pop(int(sid.rpartition(":")[2]), None)
                self.ratings.forget(sid)
            self._rebuild(policy)
        log.debug("self-play: snapshot %s (pool of %d%s)", change.added, len(self.pools[policy].snapshots),
                 f", dropped {', '.join(change.dropped)}" if change.dropped else "")

    # -- games -------------------------------------------------------------------
    def _player(self, policy: str, opponent: Any) -> str | None:
        """The rating id of what played ``policy``'s team (``None``: not in the pool)."""
        if opponent == LATEST:
            return latest_id(policy)
        sid = f"{policy}:{int(opponent)}"
        return sid if sid in self.pools[policy].snapshots else None

    def _parse(self, game: Any) -> tuple[list, list] | None:
        if not isinstance(game, dict) or sorted(game) != self.policies:
            return None
        opponents, scores = [], []
        for p in self.policies:
            entry = game[p]
            if not isinstance(entry, (list, tuple)) or len(entry) != 2:
                return None
            o, s = entry
            if type(o) is not int or o < LATEST or type(s) not in (int, float) \
                    or not math.isfinite(s):  # noqa: E721
                return None
            opponents.append(o)
            scores.append(float(s))
        return opponents, scores

    def record_games(self, games: Any) -> int:
        """Rate the finished games of one request (see module docstring); malformed
        records are counted and skipped. Returns the games rated; never raises."""
        if not isinstance(games, list):
            self.totals["malformed"] += 1
            return 0
        rated = 0
        with self._lock:
            for game in games[:MAX_GAMES]:
                parsed = self._parse(game)
                if parsed is None:
                    self.totals["malformed"] += 1
                    continue
                opponents, scores = parsed
                self.totals["games"] += 1
                for p, o in zip(self.policies, opponents):
                    if o != LATEST:
                        self.totals[f"vs_snapshot/{p}"] += 1
                a, b = (self._player(p, o) for p, o in zip(self.policies, opponents))
                if a is None or b is None:
                    self.totals["unrated"] += 1
                    continue
                outcome = 0.5 if math.isclose(scores[0], scores[1], abs_tol=1e-6) else \
                    float(scores[0] > scores[1])
                self.ratings.record(a, b, 1 if outcome == 1.0 else 0 if outcome == 0.0 else 0.5)
                rated += 1
            if rated and self.config.sampling == "rating":
                for p in self.policies:
                    self._rebuild(p)
        return rated

    # -- reporting ------------------------------------------------------------------
    def gauges(self) -> dict:
        """Metrics of now: ``selfplay/pool_size/<policy>``, ``selfplay/rating/<policy>/<version
        or latest>`` (ordinals of the pool's snapshots and of latest), and the run-long
        totals ``selfplay/games``, ``selfplay/games_vs_snapshot/<policy>``,
        ``selfplay/unrated_games``, ``selfplay/malformed_games``."""
        with self._lock:
            out = {"selfplay/games": self.totals["games"],
                   "selfplay/unrated_games": self.totals["unrated"],
                   "selfplay/malformed_games": self.totals["malformed"]}
            for p in self.policies:
                out[f"selfplay/pool_size/{p}"] = len(self.pools[p].snapshots)
                out[f"selfplay/games_vs_snapshot/{p}"] = self.totals[f"vs_snapshot/{p}"]
                for pid in [latest_id(p)] + self.pools[p].snapshots:
                    out[f"selfplay/rating/{p}/{pid.rpartition(':')[2]}"] = self.ratings.ordinal(pid)
            return out

    def table(self) -> list[dict]:
        """League rows (``ratings.Row`` fields), highest ordinal first."""
        with self._lock:
            return [vars(r) for r in self.ratings.table()]

    # -- checkpoints --------------------------------------------------------------
    def state(self) -> tuple[dict, dict]:
        """``(state, snapshots)``: JSON state (pools, ratings, totals) and the snapshots'
        parameters ``{policy: {version: params}}`` (device arrays, not copied)."""
        with self._lock:
            state = {"format": FORMAT, "policies": self.policies,
                     "pools": {p: self.pools[p].state_dict() for p in self.policies},
                     "ratings": self.ratings.state_dict(), "totals": dict(self.totals)}
            return state, {p: dict(self._params[p]) for p in self.policies}

    def load(self, state: Mapping, snapshots: Mapping[str, Mapping[int, Any]],
             versions: Mapping[str, int]) -> None:
        """Restore :meth:`state` (``--resume``). Snapshots newer than the policy's restored
        version ``versions[policy]`` (saved after its last learner checkpoint) are
        dropped, so versions keep increasing.

        Raises:
          ValueError: another format or other policies; a snapshot without parameters.
        """
        if state.get("format") != FORMAT:
            raise ValueError(f"self-play state: format={state.get('format')!r}; this version "
                             f"reads {FORMAT}")
        if sorted(state.get("policies", [])) != self.policies:
            raise ValueError(f"self-play state of policies {state.get('policies')!r}, this run "
                             f"has {self.policies}")
        with self._lock:
            self.ratings.load(state["ratings"])
            for p in self.policies:
                saved = dict(state["pools"][p])
                limit = int(versions.get(p, 2 ** 62))
                keep = [[sid, v] for sid, v in saved["snapshots"] if v <= limit]
                for sid, v in saved["snapshots"]:
                    if v > limit:
                        self.ratings.forget(sid)
                missing = [v for _, v in keep if v not in snapshots.get(p, {})]
                if missing:
                    raise ValueError(f"self-play state: no parameters for snapshots {missing} of {p}")
                last_seen = saved["last_seen"]
                saved.update(snapshots=keep,
                             last_seen=None if last_seen is None else min(last_seen, limit),
                             last_snapshot=max([v for _, v in keep], default=None))
                self.pools[p].load(saved)
                self._params[p] = {int(v): snapshots[p][v] for _, v in keep}
                self._rebuild(p)
            self.totals.update({k: int(v) for k, v in state.get("totals", {}).items()
                                if k in self.totals})


class LeagueWorker(Worker):
    """The thread feeding a :class:`League` from the parameter store; logs its gauges
    every ``log_interval_s`` and saves it (``store``) every ``save_interval_s`` and when
    it stops.

    Args:
      league: the run's league.
      params: the run's :class:`~jaxsrl.streams.params.ParameterStore`.
      metrics: the run's accumulator.
      store: a :class:`~jaxsrl.workers.population.league_store.LeagueStore`, or ``None``.
    """

    def __init__(self, name: str, league: League, params: Any, metrics: Any, store: Any = None,
                 save_interval_s: float = 60.0, log_interval_s: float = 1.0):
        super().__init__(name)
        self.league, self.params, self.metrics, self.store = league, params, metrics, store
        self.save_interval_s, self.log_interval_s = save_interval_s, log_interval_s

    def poll(self, seen: dict) -> None:
        """Give the league every policy version not seen yet."""
        for p in self.league.policies:
            try:
                v = self.params.get(p)
            except KeyError:
                continue
            if v.version != seen.get(p):
                self.league.observe(p, v.version, v.params)
                seen[p] = v.version

    def _run(self) -> None:
        self.ready.set()
        self.start_serving()
        seen: dict = {}
        last_log = last_save = time.monotonic()
        try:
            while not self.stop.is_set():
                self.beat()
                self.params.wait_changed({p: seen.get(p, -1) for p in self.league.policies}, 0.2)
                self.poll(seen)
                now = time.monotonic()
                if now - last_log >= self.log_interval_s:
                    last_log = now
                    self.metrics.add_means(self.league.gauges())
                if self.store is not None and now - last_save >= self.save_interval_s:
                    last_save = now
                    self.store.save(self.league)
        finally:
            if self.store is not None:
                self.poll(seen)
                self.store.save(self.league)
                self.store.close()
