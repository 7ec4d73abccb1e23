"""Self-play draws of one actor ring slot: who plays each environment's episode.

Each time an environment starts an episode it draws: with probability ``p_latest``
every team plays its latest policy, else one of the streams (team policies), chosen
uniformly, plays a snapshot from its pool: its rows of that environment ask their
server to draw one (``jaxsrl.streams.opponents``; one uniform number per environment,
so a team's agents play the same snapshot), the others ask for latest. The server's
reply says what served each row; the rows keep asking for it until the episode ends
(a snapshot evicted meanwhile is replaced by the server, which zeroes the row's carry).

Rows played by a snapshot at any step of a segment are *off-policy* for their learner:
:meth:`SelfPlayDraws.keep` leaves them out of the segment sent on the sample stream.
Each finished episode becomes a game record ``{policy: [opponent, score]}`` (opponent:
``-1`` latest or the snapshot version; score: the team's mean return over its agents
present in the episode), sent to the first stream's server with its next request.
No JAX here.
"""

from __future__ import annotations

import numpy as np

from jaxsrl.streams.opponents import LATEST, draw_value


class SelfPlayDraws:
    """Draws, served versions and game bookkeeping of one group.

    Args:
      p_latest: probability that an episode is played by every latest policy.
      rows: per stream, the group's row indices it serves.
      policies: per stream, its policy's name.
      num_envs: environments of the group (rows are environment-major).
      rng: the actor's NumPy generator.
      num_rows: rows of the group (default: those of the streams together).
    """

    def __init__(self, p_latest: float, rows: list, policies: list, num_envs: int,
                 rng: np.random.Generator, num_rows: int | None = None):
        self.p_latest, self.rng = float(p_latest), rng
        self.policies = list(policies)
        self.num_rows = sum(len(r) for r in rows) if num_rows is None else int(num_rows)
        per_env = self.num_rows // num_envs
        self.rows = [np.asarray(r) for r in rows]
        self.env_of = [r // per_env for r in self.rows]  # [stream][row] -> env
        self.request = [np.full(len(r), LATEST, np.int32) for r in rows]
        self.served = [np.full(len(r), LATEST, np.int32) for r in rows]
        self.off = [np.zeros(len(r), bool) for r in rows]  # a snapshot played it this segment
        self.returns = np.zeros(self.num_rows)
        self.present = np.zeros(self.num_rows, bool)
        self.snapshot_team = np.full(num_envs, -1)
        self.games: list = []
        self.pending_steps, self.pending_episodes = 0, []  # not sent yet (see segment)
        for e in range(num_envs):
            self._draw(e)

    def _draw(self, e: int) -> None:
        team = -1 if self.rng.random() < self.p_latest else int(self.rng.integers(len(self.rows)))
        self.snapshot_team[e] = team
        value = draw_value(self.rng.random())
        for i, env in enumerate(self.env_of):
            self.request[i][env == e] = value if i == team else LATEST

    def answered(self, i: int, served: np.ndarray) -> None:
        """Stream ``i``'s server served its rows with ``served`` (the reply's ``opponent``)."""
        self.served[i][:] = served
        self.request[i][:] = served

    def stepped(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray | None,
                discarded: np.ndarray | None = None) -> None:
        """After a step of the group (``[rows]`` arrays): mark rows played by snapshots,
        add rewards, and for each environment whose episode ended record the game (not
        when it was ``discarded``: its physics failed) and draw the next one."""
        for i, rows in enumerate(self.rows):
            self.off[i] |= self.served[i] != LATEST
        self.returns += reward
        self.present |= True if valid is None else valid
        ended = np.unique(np.concatenate([env[done[rows]] for env, rows in zip(self.env_of, self.rows)]))
        for e in ended:
            game = {}
            for i, (env, rows) in enumerate(zip(self.env_of, self.rows)):
                mine = rows[env == e]
                here = mine[self.present[mine]]
                if len(mine) == 0 or (discarded is not None and discarded[mine].any()):
                    break
                score = float(self.returns[here].mean()) if len(here) else 0.0
                game[self.policies[i]] = [int(self.served[i][env == e][0]), score]
            else:
                self.games.append(game)
            for env, rows in zip(self.env_of, self.rows):
                self.returns[rows[env == e]] = 0
                self.present[rows[env == e]] = False
            self._draw(e)

    def take_games(self) -> list:
        """Finished games not yet sent (then forgotten)."""
        games, self.games = self.games, []
        return games

    def keep(self, i: int) -> np.ndarray:
        """Rows of stream ``i``'s segment that latest played throughout (bool ``[rows]``);
        starts the next segment's marks."""
        keep = ~self.off[i]
        self.off[i] = np.zeros_like(keep)
        return keep

    def segment(self, i: int, arrays: dict, env_steps: int, episodes: list,
                T: int) -> tuple[dict | None, int, list]:
        """Stream ``i``'s full segment as sent: ``(arrays of the kept rows or None when no
        row is kept, env_steps, episodes)``. The env frames and episodes it would carry
        wait for the next segment sent (of any stream) when it sends none, or when they
        exceed what a learner accepts of its rows (``rows * T`` frames)."""
        self.pending_steps += env_steps
        self.pending_episodes.extend(episodes)
        keep = self.keep(i)
        if not keep.any():
            return None, 0, []
        if not keep.all():
            arrays = {k: v[keep] for k, v in arrays.items()}
        steps = min(self.pending_steps, int(keep.sum()) * T)
        self.pending_steps -= steps
        episodes, self.pending_episodes = self.pending_episodes, []
        return arrays, steps, episodes
