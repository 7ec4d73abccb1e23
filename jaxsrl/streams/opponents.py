"""The `opponent` array of self-play requests and replies: one policy served at several
parameter versions in one batch (the wire contract, and how a server resolves it).

With an opponent pool, each ``act`` request carries ``opponent`` (int32 ``[n]``), what
each row asks to be played by:

* ``-1`` (:data:`LATEST`): the latest parameters (what the learner trains);
* ``v >= 0``: the pool's snapshot taken at policy version ``v``;
* ``<= -2``: a snapshot drawn by the server (the first step of an episode played by a
  snapshot): ``u = (-2 - value) / 2**31`` in ``[0, 1)`` picks the snapshot whose
  cumulative sampling probability first exceeds ``u`` (inverse-CDF sampling over the
  pool's probabilities, uniform or by rating). Rows of one environment's team share
  ``u``, so they get the same snapshot; an empty pool serves latest.

The reply's ``opponent`` array says what served each row (``-1`` latest, else the
snapshot's version); the actor asks for that from then on. A requested snapshot that
left the pool (evicted mid-episode) is replaced by the next newer one in the pool (else
the newest, else latest), and the row's carry is zeroed before it acts: a recurrent
state is never carried from one policy to another.

The rows of each distinct version are run through the server's bucketed ``act`` with
that version's parameters: parameters are an input of the jitted ``act``, with the same
shapes and shardings for every version, so serving several never recompiles.
No ZeroMQ here; :class:`~jaxsrl.workers.inference.policy.PolicyWorker` calls it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

OPPONENT = "opponent"
LATEST = -1
DRAW_SCALE = 2 ** 31


class PoolView(NamedTuple):
    """An immutable view of one policy's pool (replaced, never changed, by its owner).

    Attributes:
      versions: snapshot versions, ascending.
      params: the snapshots' parameters (device arrays laid out like the latest ones).
      cdf: cumulative sampling probabilities of the snapshots (``[len(versions)]``,
        last 1), given that a snapshot plays.
    """

    versions: tuple = ()
    params: tuple = ()
    cdf: Any = np.zeros(0)


EMPTY = PoolView()


class Opponents(Protocol):
    """What a server needs of the run's opponent pools (``jaxsrl.workers.population.league``)."""

    def view(self, policy: str) -> PoolView: ...

    def record_games(self, games: Any) -> int: ...


def draw_value(u: float) -> int:
    """The request value asking the server to draw a snapshot with uniform ``u``."""
    return -2 - min(int(u * DRAW_SCALE), DRAW_SCALE - 3)


def resolve(requested: np.ndarray, view: PoolView) -> tuple[np.ndarray, np.ndarray]:
    """What serves each row, and which rows change policy now.

    Args:
      requested: the request's ``opponent`` array (int ``[n]``, see module docstring).
      view: the policy's pool.

    Returns:
      ``(served, reset)``: int32 ``[n]`` (``-1`` latest, else a snapshot version in
      ``view``) and bool ``[n]``, True for rows that asked for a snapshot no longer in
      the pool (their carry must be zeroed).
    """
    requested = np.asarray(requested, np.int64)
    served = np.full(requested.shape, LATEST, np.int32)
    reset = np.zeros(requested.shape, bool)
    versions = np.asarray(view.versions, np.int64)
    draw = requested <= -2
    if len(versions) and draw.any():
        u = (-2 - requested[draw]) / DRAW_SCALE
        idx = np.minimum(np.searchsorted(np.asarray(view.cdf), u, side="right"), len(versions) - 1)
        served[draw] = versions[idx]
    asked = requested >= 0
    if asked.any():
        present = np.isin(requested, versions) & asked
        served[present] = requested[present]
        gone = asked & ~present
        if gone.any():
            reset[gone] = True
            if len(versions):
                nxt = np.minimum(np.searchsorted(versions, requested[gone], side="right"),
                                 len(versions) - 1)
                served[gone] = versions[nxt]
    return served, reset


def params_of(view: PoolView, version: int) -> Any:
    """The parameters of snapshot ``version`` of ``view`` (``KeyError`` if absent)."""
    try:
        return view.params[view.versions.index(int(version))]
    except ValueError:
        raise KeyError(f"snapshot {version} is not in the pool") from None
