"""Seeded arena layouts: walls with doors, and start poses of agents, boxes and ramps.

A :class:`Layout` is plain data (NumPy arrays in metres and radians). Walls sit on
the centres of the original's 30-cell placement grid of 0.2 m (mae:envs/base.py:68-70;
our frame: floor centred on the origin, cell ``i`` at x = -3 + 0.2 (i + 0.5), the
original's y mirrored, so its corner room is our (+x, +y) corner).

- ``quadrant`` (mae:walls.py:386-405): 4 m outer walls on cells 0 and 29 (inner faces
  at +-2.85 m) and a room behind two 0.5 m walls on cell 15. With probability
  ``door_dropout`` only one of the two walls (drawn at random) gets a 2-cell door, else
  both do. Boxes spawn inside the room, seekers outside it, hiders and the ramp anywhere
  (mae:hide_and_seek.py:191-216, 296-299; Q.jsonnet:26).
- ``full``: outer walls with probability ``p_outer_walls``; ``n_rooms`` (1-4) rooms made
  by random perpendicular walls on the grid, each more than ``min_room_size`` from the
  walls already leaving the wall it starts from, one ``door_cells`` door per inner wall,
  no dropout (mae:walls.py:126-204, 320-355; see ``rooms.py``). Teammates spawn within
  ``teammate_radius`` (rounded up to cells, per axis) of their first member.

Every start yaw is 0 (only slide joints are set, wg:obj.py:447-474); elongated boxes
are aligned with x or y (mae:objects.py:55-61). With ``check_connected`` (ours, off by
default as the released code has no such check) a layout whose free floor is not one
connected region for an agent is resampled. Pass a hand-built ``Layout`` to
``HideAndSeekEnv.reset(options={"layout": ...})``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

try:
    from scipy.ndimage import label as _label
except ImportError:  # optional speed-up only
    _label = None

from jaxsrl.envs.hide_and_seek import rooms
from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig

MARGIN = 0.02
"""Clearance (m) kept between spawned entities and walls or each other."""


@dataclasses.dataclass
class Layout:
    """One arena. Poses are ``(x, y, yaw)`` rows; the floor is centred on the origin.

    Attributes:
      walls: ``[W, 5]`` float64 axis-aligned wall boxes ``(cx, cy, half_x, half_y, height)``.
      hiders: ``[H, 3]`` start poses of the hiders.
      seekers: ``[S, 3]`` start poses of the seekers.
      boxes: ``[B, 3]`` start poses of the boxes.
      box_sizes: ``[B, 3]`` full sizes ``(x, y, z)`` of each box in its own frame.
      ramps: ``[R, 3]`` start poses of the ramps (the slope rises towards local +x).
    """

    walls: np.ndarray
    hiders: np.ndarray
    seekers: np.ndarray
    boxes: np.ndarray
    box_sizes: np.ndarray
    ramps: np.ndarray

    def __post_init__(self):
        self.walls = np.asarray(self.walls, np.float64).reshape(-1, 5)
        for name in ("hiders", "seekers", "boxes", "ramps", "box_sizes"):
            setattr(self, name, np.asarray(getattr(self, name), np.float64).reshape(-1, 3))
        if len(self.box_sizes) != len(self.boxes):
            raise ValueError("box_sizes needs one row per box")


def _cell_size(cfg: HideAndSeekConfig) -> float:
    return cfg.floor_size / cfg.grid_cells


def _cx(cfg, i: float) -> float:
    """x (m) of the centre of grid column ``i``."""
    return -cfg.floor_size / 2 + (i + 0.5) * _cell_size(cfg)


def _cy(cfg, j: float) -> float:
    """y (m) of the centre of grid row ``j`` (the original's y, mirrored)."""
    return cfg.floor_size / 2 - (j + 0.5) * _cell_size(cfg)


def outer_walls(cfg: HideAndSeekConfig) -> list[tuple[float, ...]]:
    """Four ``outer_wall_height`` walls on the border cells; inner faces at
    ``+-(floor/2 - cell/2 - thickness/2)`` (mae:walls.py:286-291)."""
    c, t, z = cfg.floor_size / 2 - _cell_size(cfg) / 2, cfg.wall_thickness, cfg.outer_wall_height
    return [(0.0, c, c + t / 2, t / 2, z), (0.0, -c, c + t / 2, t / 2, z),
            (c, 0.0, t / 2, c + t / 2, z), (-c, 0.0, t / 2, c + t / 2, z)]


def _grid_wall(cfg, vertical: bool, at: int, a: int, b: int, door: int | None):
    """Segments of an inner wall on grid line ``at`` from cell ``a`` to ``b``
    (inclusive); a door occupies ``door_cells`` cells from ``door`` on. Segments end 0.05 m
    (half a thickness) short of their end cells' centres (mae:walls.py:64-123, 246-283)."""
    t, z = cfg.wall_thickness, cfg.inner_wall_height
    spans = [(a, b)] if door is None else [(a, door - 1), (door + cfg.door_cells, b)]
    segs = []
    for lo, hi in spans:
        if hi <= lo:  # zero-length segments are dropped (mae:walls.py:113-117)
            continue
        if vertical:
            p, q = sorted((_cy(cfg, lo), _cy(cfg, hi)))
            segs.append((_cx(cfg, at), (p + q) / 2, t / 2, (q - p - t) / 2, z))
        else:
            p, q = sorted((_cx(cfg, lo), _cx(cfg, hi)))
            segs.append(((p + q) / 2, _cy(cfg, at), (q - p - t) / 2, t / 2, z))
    return segs


def _quadrant_walls(cfg, rng) -> list[tuple[float, ...]]:
    g, q = cfg.grid_cells, cfg.room_cells
    walls = [(True, g - q, 0, q), (False, q, g - q, g - 1)]  # (vertical, line, from, to)
    with_door = [True, True]
    if rng.random() < cfg.door_dropout:  # mae:walls.py:400-405
        with_door[1 - int(rng.integers(2))] = False
    out = []
    for (vertical, at, a, b), door in zip(walls, with_door):
        start = a + int(rng.integers(1, b - a - cfg.door_cells + 1)) if door else None  # mae:walls.py:99
        out += _grid_wall(cfg, vertical, at, a, b, start)
    return out


def _room_walls(cfg, rng) -> list[tuple[float, ...]] | None:
    """Full game: ``n_rooms`` rooms as mae:walls.py:320-355 builds them (``rooms.py``);
    None when the generator gave up (the caller draws again)."""
    cs = _cell_size(cfg)
    plan = rooms.random_rooms(int(rng.integers(cfg.n_rooms[0], cfg.n_rooms[1] + 1)), cfg.grid_cells,
                              int(round(cfg.min_room_size / cs)), cfg.door_cells, rng)
    if plan is None:
        return None
    return [seg for w in plan for seg in _grid_wall(cfg, w.vertical, w.at, w.a, w.b, w.door)]


def free_grid(cfg: HideAndSeekConfig, walls: np.ndarray, clearance: float) -> tuple[np.ndarray, np.ndarray]:
    """Boolean grid ``[N, N]`` of floor cells whose centre is at least ``clearance``
    from every wall, and the ``[N]`` cell-centre coordinates (same for x and y)."""
    h = cfg.floor_size / 2
    n = max(32, int(cfg.floor_size / 0.1))
    xs = -h + (np.arange(n) + 0.5) * (cfg.floor_size / n)
    free = np.ones((n, n), bool)  # indexed [ix, iy]
    for cx, cy, hx, hy, _ in walls:
        bx = np.abs(xs - cx) < hx + clearance
        by = np.abs(xs - cy) < hy + clearance
        free[bx[:, None] & by[None, :]] = False
    return free, xs


def is_connected(free: np.ndarray) -> bool:
    """True when all ``free`` cells form one 4-connected component."""
    if not free.any():
        return False
    if _label is not None:  # scipy's C labelling when available, else a NumPy flood fill
        return _label(free)[1] == 1
    reach = np.zeros_like(free)
    reach[np.unravel_index(int(np.argmax(free)), free.shape)] = True
    total, count = int(free.sum()), 1
    while True:
        grow = reach.copy()
        grow[1:] |= reach[:-1]
        grow[:-1] |= reach[1:]
        grow[:, 1:] |= reach[:, :-1]
        grow[:, :-1] |= reach[:, 1:]
        grow &= free
        new = int(grow.sum())
        if new == count:
            return new == total
        reach, count = grow, new


def room_box(cfg: HideAndSeekConfig) -> tuple[float, float]:
    """Quadrant: ``(x0, y0)``, the room's inner faces; the room is ``x > x0, y > y0``."""
    t = cfg.wall_thickness / 2
    return _cx(cfg, cfg.grid_cells - cfg.room_cells) + t, _cy(cfg, cfg.room_cells) + t


def _place(cfg, rng, walls: np.ndarray, half: np.ndarray, region: list[str], anchor: list[int]):
    """Non-overlapping axis-aligned footprints (half-sizes ``half [N, 2]``) on the floor.
    ``region[k]``: ``"any"``, ``"room"`` or ``"outside"``; ``anchor[k] >= 0``: spawn
    within ``teammate_radius`` (in cells, per axis) of entity ``anchor[k]``. None on failure."""
    h = cfg.floor_size / 2 - _cell_size(cfg) / 2 - cfg.wall_thickness / 2  # inner faces of the border
    cs = _cell_size(cfg)
    spread = np.ceil(cfg.teammate_radius / cs - 1e-9) * cs
    x0, y0 = room_box(cfg)
    pos: list[tuple[float, float]] = []  # (x, y) of entities 0 .. k - 1
    # the tests on Python floats: the same float64 operations as NumPy's, without its
    # per-call cost on arrays of a few rows (a layout is drawn at every reset)
    wall_boxes = [(cx, cy, wx, wy) for cx, cy, wx, wy, _ in walls.tolist()]
    placed: list[tuple[float, float, float, float]] = []  # (x, y, hx, hy) of entities 0 .. k - 1
    uniform = rng.uniform
    for k, (hx, hy) in enumerate(half.tolist()):
        where, near = region[k], anchor[k]
        if near >= 0:
            ax, ay = pos[near]
        elif where == "room":
            lo_x, hi_x, lo_y, hi_y = x0 + hx + MARGIN, h - hx - MARGIN, y0 + hy + MARGIN, h - hy - MARGIN
        else:
            lo_x, hi_x, lo_y, hi_y = -h + hx + MARGIN, h - hx - MARGIN, -h + hy + MARGIN, h - hy - MARGIN
        for _ in range(200):
            if near >= 0:
                dx, dy = uniform(-spread, spread, size=2).tolist()
                x, y = ax + dx, ay + dy
            else:
                x, y = uniform(lo_x, hi_x), uniform(lo_y, hi_y)
            if abs(x) > h - hx or abs(y) > h - hy:
                continue
            if where == "outside" and x + hx > x0 and y + hy > y0:
                continue
            if _overlaps(x, y, hx, hy, wall_boxes) or _overlaps(x, y, hx, hy, placed):
                continue
            pos.append((x, y))
            placed.append((x, y, hx, hy))
            break
        else:
            return None
    return np.array([(x, y, 0.0) for x, y in pos], np.float64).reshape(-1, 3)


def _overlaps(x: float, y: float, hx: float, hy: float, boxes: list[tuple[float, float, float, float]]) -> bool:
    """Whether the footprint at ``(x, y)`` with half sizes ``(hx, hy)`` (m) comes within
    ``MARGIN`` of any of ``boxes``: ``(cx, cy, wx, wy)`` rows, centre and half sizes (m).
    The sums in NumPy's order (``hx + wx + MARGIN``), so the test's rounding is the same."""
    for cx, cy, wx, wy in boxes:
        if abs(x - cx) < hx + wx + MARGIN and abs(y - cy) < hy + wy + MARGIN:
            return True
    return False


def _count(rng, rng_range) -> int:
    return int(rng.integers(rng_range[0], rng_range[1] + 1))


def generate_layout(cfg: HideAndSeekConfig, rng: np.random.Generator) -> Layout:
    """A random valid layout of ``cfg.variant``, deterministic given ``rng``'s state.

    Raises:
      RuntimeError: no valid layout after ``cfg.max_layout_tries`` attempts.
    """
    n_h, n_s = _count(rng, cfg.n_hiders), _count(rng, cfg.n_seekers)
    n_b, n_r = _count(rng, cfg.n_boxes), _count(rng, cfg.n_ramps)
    n_long = int(rng.integers(cfg.n_elongated[0], min(cfg.n_elongated[1], n_b) + 1)) if n_b else 0
    n_along_x = int(rng.integers(n_long + 1))  # mae:objects.py:57
    lx, wy, hz = cfg.elongated_size
    sizes = np.array([(lx, wy, hz)] * n_along_x + [(wy, lx, hz)] * (n_long - n_along_x)
                     + [(cfg.box_size,) * 3] * (n_b - n_long), np.float64).reshape(-1, 3)
    r, ramp = cfg.agent_radius, cfg.ramp_size
    half = np.array([(r, r)] * (n_h + n_s) + [tuple(s[:2] / 2) for s in sizes] + [(ramp[0] / 2, ramp[1] / 2)] * n_r)
    quadrant = cfg.variant == "quadrant"
    region = ["any"] * n_h + ["outside" if quadrant else "any"] * n_s + ["room" if quadrant else "any"] * n_b
    region += ["any"] * n_r
    anchor = [-1] * len(half)
    if cfg.teammate_radius > 0:
        anchor[1:n_h] = [0] * (n_h - 1)
        anchor[n_h + 1 : n_h + n_s] = [n_h] * (n_s - 1)
    for _ in range(cfg.max_layout_tries):
        if quadrant:
            inner = _quadrant_walls(cfg, rng)
        else:
            inner = _room_walls(cfg, rng)
            if inner is None:
                continue
        outer = outer_walls(cfg) if quadrant or rng.random() < cfg.p_outer_walls else []
        walls = np.array(outer + inner, np.float64).reshape(-1, 5)
        if cfg.check_connected and not is_connected(
                free_grid(cfg, np.array(outer_walls(cfg) + inner).reshape(-1, 5), cfg.agent_radius)[0]):
            continue
        poses = _place(cfg, rng, walls, half, region, anchor)
        if poses is None:
            continue
        a, b = n_h + n_s, n_h + n_s + n_b
        return Layout(walls, poses[:n_h], poses[n_h:a], poses[a:b], sizes, poses[b:])
    raise RuntimeError(f"no valid {cfg.variant} layout in {cfg.max_layout_tries} tries")
