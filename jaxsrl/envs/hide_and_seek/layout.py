"""Seeded arena layouts: walls with doors, and start poses of agents, boxes and ramps.

A :class:`Layout` is plain data (NumPy arrays in metres and radians). Generators:

- ``quadrant``: outer walls around a square floor and a room in the (+x, +y) corner
  whose two inner walls each carry a door; doors close at random (``door_dropout``)
  but at least one stays open.
- ``full``: the floor is split recursively (axis-aligned cuts) into up to
  ``n_rooms`` rooms; every cut wall carries one or two doors, at least one open.

Every generated layout is checked for reachability (all free floor connected for an
agent of the configured radius, on a grid) and resampled until it passes; entities
are placed without overlapping walls or each other. Pass a hand-built ``Layout`` to
``HideAndSeekEnv.reset(options={"layout": ...})`` to set up exact situations.
"""

from __future__ import annotations

import dataclasses

import numpy as np

try:
    from scipy.ndimage import label as _label
except ImportError:  # optional speed-up only
    _label = None

from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig


@dataclasses.dataclass
class Layout:
    """One arena. Poses are ``(x, y, yaw)`` rows; the floor is centred on the origin.

    Attributes:
      walls: ``[W, 5]`` float64 axis-aligned wall boxes ``(cx, cy, half_x, half_y, height)``.
      hiders: ``[H, 3]`` start poses of the hiders.
      seekers: ``[S, 3]`` start poses of the seekers.
      boxes: ``[B, 3]`` start poses of the boxes.
      box_sizes: ``[B, 3]`` full sizes ``(length, width, height)`` of each box.
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


def outer_walls(cfg: HideAndSeekConfig) -> list[tuple[float, ...]]:
    """Four walls just outside the floor square ``[-floor/2, floor/2]^2``."""
    h, t, z = cfg.floor_size / 2, cfg.wall_thickness, cfg.outer_wall_height
    return [
        (0.0, h + t / 2, h + t, t / 2, z),
        (0.0, -h - t / 2, h + t, t / 2, z),
        (h + t / 2, 0.0, t / 2, h + t, z),
        (-h - t / 2, 0.0, t / 2, h + t, z),
    ]


def _wall_with_doors(cfg, axis: int, at: float, lo: float, hi: float, doors: list[float]):
    """Wall segments along ``axis`` (0: runs along x) at coordinate ``at`` from lo to hi,
    with gaps of ``door_width`` centred on ``doors``."""
    t, z, w = cfg.wall_thickness, cfg.inner_wall_height, cfg.door_width
    cuts = [lo]
    for d in sorted(doors):
        cuts += [d - w / 2, d + w / 2]
    cuts.append(hi)
    segs = []
    for a, b in zip(cuts[::2], cuts[1::2]):
        if b - a > 1e-6:
            c, half = (a + b) / 2, (b - a) / 2
            segs.append((c, at, half, t / 2, z) if axis == 0 else (at, c, t / 2, half, z))
    return segs


def _pick_doors(cfg, rng, lo: float, hi: float, n: int) -> list[float]:
    """Centres of up to ``n`` non-overlapping doors in ``[lo, hi]``, each kept with
    probability ``1 - door_dropout``, at least one kept."""
    w, margin = cfg.door_width, cfg.wall_thickness + 0.05
    span = (lo + w / 2 + margin, hi - w / 2 - margin)
    if span[1] <= span[0]:
        return [(lo + hi) / 2]
    cands: list[float] = []
    for _ in range(20 * n):
        if len(cands) == n:
            break
        c = float(rng.uniform(*span))
        if all(abs(c - o) > 1.5 * w for o in cands):
            cands.append(c)
    kept = [c for c in cands if rng.random() >= cfg.door_dropout]
    return kept or [cands[int(rng.integers(len(cands)))]]


def _quadrant_walls(cfg, rng) -> list[tuple[float, ...]]:
    h, r = cfg.floor_size / 2, cfg.room_size
    lo = h - r
    walls = []
    # Sample both doors, then close each at random; keep at least one open.
    pos = [_pick_doors(dataclasses.replace(cfg, door_dropout=0.0), rng, lo, h, 1)[0] for _ in range(2)]
    open_ = [rng.random() >= cfg.door_dropout for _ in range(2)]
    if not any(open_):
        open_[int(rng.integers(2))] = True
    walls += _wall_with_doors(cfg, 1, lo, lo - cfg.wall_thickness / 2, h, [pos[0]] if open_[0] else [])
    walls += _wall_with_doors(cfg, 0, lo, lo - cfg.wall_thickness / 2, h, [pos[1]] if open_[1] else [])
    return walls


def _room_walls(cfg, rng) -> list[tuple[float, ...]]:
    h, m = cfg.floor_size / 2, cfg.min_room_size
    rooms = [(-h, -h, h, h)]
    target = int(rng.integers(cfg.n_rooms[0], cfg.n_rooms[1] + 1))
    walls = []
    while len(rooms) < target:
        # Split the largest room that can still be split along some axis.
        order = sorted(range(len(rooms)), key=lambda i: -(rooms[i][2] - rooms[i][0]) * (rooms[i][3] - rooms[i][1]))
        for i in order:
            x0, y0, x1, y1 = rooms[i]
            axes = [a for a, size in ((0, x1 - x0), (1, y1 - y0)) if size >= 2 * m]
            if axes:
                break
        else:
            break
        axis = axes[int(rng.integers(len(axes)))]
        x0, y0, x1, y1 = rooms.pop(i)
        if axis == 0:  # vertical cut at x = c, the wall runs along y
            c = float(rng.uniform(x0 + m, x1 - m))
            rooms += [(x0, y0, c, y1), (c, y0, x1, y1)]
            n_doors = 2 if y1 - y0 >= 6.0 else 1
            walls += _wall_with_doors(cfg, 1, c, y0, y1, _pick_doors(cfg, rng, y0, y1, n_doors))
        else:
            c = float(rng.uniform(y0 + m, y1 - m))
            rooms += [(x0, y0, x1, c), (x0, c, x1, y1)]
            n_doors = 2 if x1 - x0 >= 6.0 else 1
            walls += _wall_with_doors(cfg, 0, c, x0, x1, _pick_doors(cfg, rng, x0, x1, n_doors))
    return walls


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
        free[np.ix_(bx, by)] = False
    return free, xs


def is_connected(free: np.ndarray) -> bool:
    """True when all ``free`` cells form one 4-connected component."""
    if not free.any():
        return False
    if _label is not None:  # scipy's C labelling when available, else a NumPy flood fill
        return _label(free)[1] == 1
    reach = np.zeros_like(free)
    reach[np.unravel_index(int(np.argmax(free)), free.shape)] = True
    total = int(free.sum())
    count = 1
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


def _wall_gap(walls: np.ndarray, x: float, y: float) -> float:
    """Distance from a point to the nearest wall box (0 inside)."""
    dx = np.maximum(np.abs(x - walls[:, 0]) - walls[:, 2], 0.0)
    dy = np.maximum(np.abs(y - walls[:, 1]) - walls[:, 3], 0.0)
    return float(np.min(np.hypot(dx, dy)))


def footprint_radius(size_xy: tuple[float, float]) -> float:
    """Radius of the circle around a rectangle of full sizes ``size_xy``."""
    return 0.5 * float(np.hypot(*size_xy))


def _place(cfg, rng, walls, radii: list[float]) -> np.ndarray | None:
    """Non-overlapping poses ``[len(radii), 3]`` on the free floor, or None."""
    h = cfg.floor_size / 2
    placed: list[tuple[float, float, float]] = []
    for r in radii:
        for _ in range(200):
            x, y = rng.uniform(-h + r + 0.05, h - r - 0.05, size=2)
            if _wall_gap(walls, x, y) <= r + 0.05:
                continue
            if any(np.hypot(x - px, y - py) <= r + pr + 0.05 for px, py, pr in placed):
                continue
            placed.append((float(x), float(y), r))
            break
        else:
            return None
    yaws = rng.uniform(-np.pi, np.pi, size=len(radii))
    return np.array([[x, y, a] for (x, y, _), a in zip(placed, yaws)]).reshape(-1, 3)


def _count(rng, rng_range) -> int:
    return int(rng.integers(rng_range[0], rng_range[1] + 1))


def generate_layout(cfg: HideAndSeekConfig, rng: np.random.Generator) -> Layout:
    """A random valid layout of ``cfg.variant``, deterministic given ``rng``'s state.

    Raises:
      RuntimeError: no valid layout after ``cfg.max_layout_tries`` attempts (the
        floor is too small for the requested entities).
    """
    n_h, n_s = _count(rng, cfg.n_hiders), _count(rng, cfg.n_seekers)
    n_b, n_r = _count(rng, cfg.n_boxes), _count(rng, cfg.n_ramps)
    n_long = min(_count(rng, cfg.n_elongated), n_b)
    cube = (cfg.box_size,) * 3
    sizes = np.array([cfg.elongated_size] * n_long + [cube] * (n_b - n_long), np.float64).reshape(-1, 3)
    radii = (
        [cfg.agent_radius] * (n_h + n_s)
        + [footprint_radius(s[:2]) for s in sizes]
        + [footprint_radius(cfg.ramp_size[:2])] * n_r
    )
    for _ in range(cfg.max_layout_tries):
        inner = _quadrant_walls(cfg, rng) if cfg.variant == "quadrant" else _room_walls(cfg, rng)
        walls = np.array(outer_walls(cfg) + inner, np.float64)
        free, _ = free_grid(cfg, walls, cfg.agent_radius)
        if not is_connected(free):
            continue
        poses = _place(cfg, rng, walls, radii)
        if poses is None:
            continue
        a, b = n_h + n_s, n_h + n_s + n_b
        return Layout(walls, poses[:n_h], poses[n_h:a], poses[a:b], sizes, poses[b:])
    raise RuntimeError(f"no valid {cfg.variant} layout in {cfg.max_layout_tries} tries")
