"""Full-game rooms as mae:modules/walls.py makes them, over many seeded resets."""

import collections

import numpy as np
from scipy.ndimage import label

from jaxsrl.envs.hide_and_seek import generate_layout, make_config
from jaxsrl.envs.hide_and_seek.rooms import random_rooms

GRID, MIN_CELLS, DOOR = 30, 6, 2  # the full game's grid, min_room_size, door_size


def _plans(n):
    rng = np.random.default_rng(0)
    for _ in range(n):
        rooms = int(rng.integers(1, 5))
        yield rooms, random_rooms(rooms, GRID, MIN_CELLS, DOOR, rng)


def _raster(plan, doors_open: bool) -> np.ndarray:
    """``[GRID, GRID]`` bool, True on wall cells (border included), indexed [x, y]."""
    g = np.zeros((GRID, GRID), bool)
    g[[0, -1], :] = g[:, [0, -1]] = True
    for w in plan:
        cells = np.zeros(GRID, bool)
        cells[w.a:w.b + 1] = True
        if doors_open and w.door is not None:
            cells[w.door:w.door + DOOR] = False
        if w.vertical:
            g[w.at, cells] = True
        else:
            g[cells, w.at] = True
    return g


def test_room_counts_one_to_four_walls_split_the_floor_and_doors_join_it():
    counts = collections.Counter()
    for rooms, plan in _plans(800):
        assert plan is not None and len(plan) == rooms - 1
        counts[rooms] += 1
        closed = label(~_raster(plan, doors_open=False))[1]  # 4-connected free regions
        assert closed == rooms  # each wall runs wall to wall and splits one room in two
        assert label(~_raster(plan, doors_open=True))[1] == 1  # the doors connect them all
    assert set(counts) == {1, 2, 3, 4} and min(counts.values()) > 150


def test_one_two_cell_door_per_inner_wall_away_from_joints():
    for _, plan in _plans(800):
        walls = _raster(plan, doors_open=False)
        for w in plan:
            assert w.door is not None  # one door each, no dropout
            assert w.a < w.door and w.door + DOOR - 1 < w.b
            for c in range(w.door, w.door + DOOR):  # no wall joins the wall at a door cell
                side = [(w.at - 1, c), (w.at + 1, c)] if w.vertical else [(c, w.at - 1), (c, w.at + 1)]
                assert not any(walls[p] for p in side)


def test_parallel_walls_are_more_than_six_cells_apart():
    seen = []
    for _, plan in _plans(800):
        lines = [(w.vertical, w.at, w.a, w.b) for w in plan]
        lines += [(v, at, 0, GRID - 1) for v in (True, False) for at in (0, GRID - 1)]
        for i, (v1, at1, a1, b1) in enumerate(lines):
            for v2, at2, a2, b2 in lines[i + 1:]:
                if v1 == v2 and min(b1, b2) > max(a1, a2):  # side by side
                    seen.append(abs(at1 - at2))
    assert min(seen) > MIN_CELLS  # > 1.2 m: the released test is "> min_dist_between"


def _inner_runs(lay, cfg):
    """Inner walls of a layout from its geometry: collinear 0.5 m segments joined across
    door gaps. Returns (walls, gaps between consecutive collinear segments)."""
    inner = lay.walls[lay.walls[:, 4] == cfg.inner_wall_height]
    x_lines = {round(cx, 6) for cx, _, hx, hy, _ in inner if hy - hx > 1e-9}
    lines = collections.defaultdict(list)
    for cx, cy, hx, hy, _ in inner:
        # a 2-cell piece before a door is a 0.1 m square stub (as released): it lies on
        # a vertical line if one runs through its x
        square = abs(hx - hy) < 1e-9
        vertical = (hx < hy and not square) or (square and round(cx, 6) in x_lines)
        lines[(vertical, round(cx if vertical else cy, 6))].append(
            (cy - hy, cy + hy) if vertical else (cx - hx, cx + hx))
    walls, gaps = 0, []
    for spans in lines.values():
        spans.sort()
        walls += 1
        for (_, hi), (lo, _) in zip(spans, spans[1:]):
            gaps.append(lo - hi)
            walls += lo - hi < 0.3  # a 0.1 m gap: another wall past a joining wall
    return walls, np.array(gaps)


def test_full_layouts_have_one_to_four_rooms_and_0_7_m_doors():
    cfg = make_config("full")
    rooms, gaps = collections.Counter(), []
    for seed in range(300):
        n_walls, g = _inner_runs(generate_layout(cfg, np.random.default_rng(seed)), cfg)
        rooms[n_walls + 1] += 1
        gaps.append(g)
    gaps = np.concatenate(gaps)
    assert set(rooms) == {1, 2, 3, 4}, rooms
    # between segments: a 0.7 m door (3 cells + a thickness), or 0.1 m across a joining wall
    assert np.all((np.abs(gaps - 0.7) < 1e-6) | (np.abs(gaps - 0.1) < 1e-6)), np.unique(gaps.round(3))
    assert (np.abs(gaps - 0.7) < 1e-6).sum() > 200
