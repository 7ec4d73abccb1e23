"""Full-game rooms on the placement grid, as mae:modules/walls.py generates them.

Walls are segments between grid cells ``p1 <= p2`` (same x: vertical, same y:
horizontal). Starting from the four border walls, each step picks a random wall
``w1`` and proposes, for every parallel wall ``w2``, the perpendicular wall from a
random cell of ``w1`` straight across to ``w2``; a proposal counts when it ends on
``w2``, is more than ``min_cells`` from every wall already leaving ``w1`` on that side
(``w1``'s ends included), and crosses no wall; one is drawn
(``connect_walls``/``choose_new_split``, mae:walls.py:126-187). Each such wall adds a
room: ``n`` rooms take ``n - 1`` of them; a step with no proposal after 10 picks of
``w1`` starts over from the border, and 10 restarts give up (mae:walls.py:320-340).
Then each inner wall gets one door of ``door_cells`` cells in a random stretch between
the walls joining it that is at least ``door_cells + 1`` long, at a random offset that
leaves at least one cell of wall at the stretch's start (``split_for_doors``,
mae:walls.py:64-123); the border walls get none, and there is no door dropout.

Not ported: the original may create a zero-length wall where a proposal is collinear
with ``w2`` (we drop such proposals), and keeps a wall with no stretch long enough for
a door closed (we do too; ``layout.generate_layout`` then resamples layouts whose floor
is not connected, which the original does not check).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np


class InnerWall(NamedTuple):
    """One generated wall: on grid line ``at`` (x if ``vertical``, else y) from cell
    ``a`` to ``b`` (inclusive, ``a < b``); ``door`` is its door's first cell or None."""

    vertical: bool
    at: int
    a: int
    b: int
    door: int | None


@dataclasses.dataclass
class _Wall:
    """Grid wall ``p1 -> p2`` and the points where perpendicular walls leave it
    (``left``: below/left of it, ``right``: above/right; both start with its ends)."""

    p1: tuple[int, int]
    p2: tuple[int, int]
    left: list = dataclasses.field(default_factory=list)
    right: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.p1, self.p2 = sorted((tuple(int(v) for v in self.p1), tuple(int(v) for v in self.p2)))
        self.left, self.right = [self.p1, self.p2], [self.p1, self.p2]

    @property
    def vertical(self) -> bool:
        return self.p1[0] == self.p2[0]

    @property
    def length(self) -> int:
        return abs(self.p2[0] - self.p1[0]) + abs(self.p2[1] - self.p1[1])

    def touches(self, pt) -> bool:
        i = 0 if self.vertical else 1  # the fixed coordinate
        return pt[i] == self.p1[i] and self.p1[1 - i] <= pt[1 - i] <= self.p2[1 - i]

    def crosses(self, other: "_Wall") -> bool:
        """Perpendicular and overlapping in both interiors (touching does not count)."""
        if self.vertical == other.vertical:
            return False
        return all(a < b for a, b in zip(self.p1, other.p2)) and all(a < b for a, b in zip(other.p1, self.p2))

    def note_joint(self, other: "_Wall") -> None:
        """Record where a perpendicular ``other`` starts (right) or ends (left) on this wall."""
        if self.vertical == other.vertical:
            return
        if self.touches(other.p1):
            self.right.append(other.p1)
        elif self.touches(other.p2):
            self.left.append(other.p2)


def _border(grid: int) -> list[_Wall]:
    """The four outer walls on the border cells (mae:walls.py:286-291)."""
    e = grid - 1
    return [_Wall((0, 0), (0, e)), _Wall((0, 0), (e, 0)), _Wall((e, 0), (e, e)), _Wall((0, e), (e, e))]


def _propose(w1: _Wall, w2: _Wall, min_cells: int, rng: np.random.Generator) -> _Wall | None:
    """A wall from a random cell of ``w1`` across to the parallel ``w2``, or None."""
    if w1.vertical != w2.vertical or w1.length < 2:
        return None
    off = int(rng.integers(1, w1.length))  # randint(1, length), mae:walls.py:140
    if w1.vertical:
        a, b = (w1.p1[0], w1.p1[1] + off), (w2.p1[0], w1.p1[1] + off)
    else:
        a, b = (w1.p1[0] + off, w1.p1[1]), (w1.p1[0] + off, w2.p1[1])
    if a == b:
        return None
    side = w1.left if (b[0] < a[0] or b[1] < a[1]) else w1.right
    gap = min(abs(a[0] - p[0]) + abs(a[1] - p[1]) for p in side)
    if w2.touches(b) and gap > min_cells:
        return _Wall(a, b)
    return None


def _split(walls: list[_Wall], min_cells: int, rng: np.random.Generator, tries: int = 10):
    """One new wall joined to ``walls`` (its joints recorded), or None after ``tries``."""
    for _ in range(tries):
        w1 = walls[int(rng.integers(len(walls)))]
        props = [_propose(w1, w2, min_cells, rng) for w2 in walls if w2 is not w1]
        props = [p for p in props if p is not None and not any(p.crosses(w) for w in walls)]
        if props:
            new = props[int(rng.integers(len(props)))]
            for w in walls:
                w.note_joint(new)
                new.note_joint(w)
            return new
    return None


def _door(w: _Wall, door_cells: int, rng: np.random.Generator) -> int | None:
    """First cell of ``w``'s one door, or None where no stretch between joints fits one."""
    i = 1 if w.vertical else 0  # the coordinate along the wall
    joints = sorted({p[i] for p in w.left + w.right})
    gaps = np.diff(joints)
    fits = np.flatnonzero(gaps >= door_cells + 1)
    if not len(fits) or door_cells == 0:
        return None
    k = int(fits[int(rng.integers(len(fits)))])
    return joints[k] + int(rng.integers(1, gaps[k] - door_cells + 1))


def random_rooms(n_rooms: int, grid: int, min_cells: int, door_cells: int,
                 rng: np.random.Generator, tries: int = 10) -> list[InnerWall] | None:
    """Inner walls of ``n_rooms`` rooms on a ``grid`` x ``grid`` placement grid (border
    walls on cells 0 and ``grid - 1`` are implied), or None when ``tries`` restarts
    failed. Returns ``n_rooms - 1`` walls (module docstring)."""
    walls, failures = _border(grid), 0
    while len(walls) < n_rooms + 3:
        new = _split(walls, min_cells, rng)
        if new is None:
            walls, failures = _border(grid), failures + 1
            if failures == tries:
                return None
        else:
            walls.append(new)
    out = []
    for w in walls[4:]:
        fixed, along = (0, 1) if w.vertical else (1, 0)
        out.append(InnerWall(w.vertical, w.p1[fixed], w.p1[along], w.p2[along], _door(w, door_cells, rng)))
    return out
