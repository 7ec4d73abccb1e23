"""Ratings of policies (``"latest"`` and snapshots) from finished two-team episodes.

Uses openskill's Plackett-Luce model (Weng & Lin 2011, "A Bayesian Approximation Method
for Online Ranking", JMLR 12): each player has a Gaussian skill belief ``N(mu, sigma^2)``
(defaults 25 and 25/3); a game moves the winner's ``mu`` up and the
loser's down by an amount that grows with the surprise of the result, and shrinks both
``sigma``; a draw is a shared rank. The league table sorts by the *ordinal*
``mu - 3 sigma``, a conservative skill estimate: a snapshot that has won its only game
does not top the table (TrueSkill's leaderboard rule, Herbrich et al. 2006).

Chosen over Elo because the uncertainty ``sigma`` tells a new snapshot from a well-known
one (the pool's rating-weighted sampling and lowest-rated eviction should not trust two
games); over TrueSkill because openskill is maintained, pure Python and MIT-licensed,
and Plackett-Luce is its default model. Each policy is one openskill "player" (a team
of agents driven by one policy is one player): ``record(a, b, outcome)``.

``"latest"`` is one moving player: its rating follows the improving policy (openskill's
``tau`` adds ``tau^2`` to every ``sigma^2`` before a game, so old results fade). A new
snapshot of it starts from its rating (:meth:`Ratings.fork`).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from openskill.models import BradleyTerryFull, PlackettLuce, ThurstoneMostellerFull

MODELS = {"plackett_luce": PlackettLuce, "bradley_terry_full": BradleyTerryFull,
          "thurstone_mosteller_full": ThurstoneMostellerFull}
FORMAT = 1  # version of state_dict's layout


@dataclasses.dataclass
class Row:
    """One line of the league table (``ordinal = mu - 3 sigma``)."""

    id: str
    mu: float
    sigma: float
    ordinal: float
    games: int = 0
    wins: int = 0
    losses: int = 0
    draws: int = 0


class Ratings:
    """openskill ratings by policy id.

    Args:
      model: a key of ``MODELS`` (openskill's default parameters).

    Raises:
      ValueError: an unknown model.
    """

    def __init__(self, model: str = "plackett_luce"):
        if model not in MODELS:
            raise ValueError(f"ratings.model={model!r}; valid: {', '.join(MODELS)}")
        self.model_name, self.model = model, MODELS[model]()
        self._rows: dict[str, Row] = {}

    def _row(self, pid: str) -> Row:
        if not isinstance(pid, str):
            raise ValueError(f"ratings: ids must be strings, got {pid!r}")
        if pid not in self._rows:
            self._rows[pid] = Row(pid, self.model.mu, self.model.sigma,
                                  self.model.mu - 3 * self.model.sigma)
        return self._rows[pid]

    def rating(self, pid: str) -> tuple[float, float]:
        """``(mu, sigma)`` of ``pid`` (the model's prior for an unseen id; not added)."""
        row = self._rows.get(pid)
        return (self.model.mu, self.model.sigma) if row is None else (row.mu, row.sigma)

    def ordinal(self, pid: str) -> float:
        """``mu - 3 sigma`` of ``pid`` (the prior's, 0 by default, for an unseen id): the
        ``score`` of ``OpponentPool.sample``/``observe``."""
        mu, sigma = self.rating(pid)
        return mu - 3 * sigma

    def fork(self, src: str, new: str) -> None:
        """``new`` (a snapshot of ``src``) starts with ``src``'s ``mu`` and ``sigma`` and
        no games.

        Raises:
          ValueError: ``new`` already has a rating.
        """
        if new in self._rows:
            raise ValueError(f"ratings: {new!r} already has a rating")
        mu, sigma = self.rating(src)
        self._rows[new] = Row(new, mu, sigma, mu - 3 * sigma)

    def record(self, team_a_id: str, team_b_id: str, outcome: float) -> bool:
        """Update both ratings from one finished episode.

        Args:
          team_a_id, team_b_id: the policies of the two teams (``"latest"`` or ids).
          outcome: team A's score: 1 (A won), 0 (B won) or 0.5 (a draw).

        Returns:
          False (nothing changed) when both ids are the same policy: a mirror game
          carries no information about relative skill; else True.

        Raises:
          ValueError: an outcome not in {0, 0.5, 1}, or a non-string id.
        """
        if outcome not in (0, 0.5, 1) or isinstance(outcome, bool):
            raise ValueError(f"ratings.record: outcome={outcome!r} must be 1 (A won), 0 (B won) "
                             "or 0.5 (draw)")
        a, b = self._row(team_a_id), self._row(team_b_id)
        if team_a_id == team_b_id:
            return False
        ranks = {1: [0, 1], 0: [1, 0], 0.5: [0, 0]}[outcome]
        ra = self.model.create_rating([a.mu, a.sigma], name=a.id)
        rb = self.model.create_rating([b.mu, b.sigma], name=b.id)
        [[na], [nb]] = self.model.rate([[ra], [rb]], ranks=ranks)
        for row, new, score in ((a, na, outcome), (b, nb, 1 - outcome)):
            row.mu, row.sigma = float(new.mu), float(new.sigma)
            row.ordinal = row.mu - 3 * row.sigma
            row.games += 1
            row.wins += score == 1
            row.losses += score == 0
            row.draws += score == 0.5
        return True

    def table(self) -> list[Row]:
        """Every rated id, highest ordinal first (ties by id)."""
        return sorted((dataclasses.replace(r) for r in self._rows.values()),
                      key=lambda r: (-r.ordinal, r.id))

    def forget(self, pid: str) -> None:
        """Drop ``pid`` (a snapshot evicted from the pool); unknown ids are ignored."""
        self._rows.pop(pid, None)

    def state_dict(self) -> dict:
        """JSON-serialisable: ``{"format", "model", "rows": [Row fields]}``."""
        return {"format": FORMAT, "model": self.model_name,
                "rows": [dataclasses.asdict(r) for r in self._rows.values()]}

    def load(self, state: Mapping) -> None:
        """Replace the ratings by those of ``state_dict()``.

        Raises:
          ValueError: an unknown format, or ratings of another model.
        """
        if state.get("format") != FORMAT:
            raise ValueError(f"ratings: format={state.get('format')!r}; this version reads {FORMAT}")
        if state["model"] != self.model_name:
            raise ValueError(f"ratings: saved with model {state['model']!r}, loading into "
                             f"{self.model_name!r}")
        self._rows = {r["id"]: Row(**r) for r in state["rows"]}
