"""The world body's bounding volume hierarchy, built as MuJoCo's compiler builds it.

MuJoCo's midphase collision walks a per-body tree of axis-aligned boxes (``bvh_aabb``,
``bvh_child``, ``bvh_nodeid``, ``bvh_depth``; ``body_bvhadr``/``body_bvhnum``) that the
compiler builds once (``mjCBody::ComputeBVH`` and ``mjCBoundingVolumeHierarchy::MakeBVH``,
``src/user/user_objects.cc``; checked against MuJoCo 4.0.0). ``SceneCache`` moves the walls of the world
body at every reset, so it needs this tree for the floor and the walls a layout uses:
``world_bvh`` rebuilds it with the same arithmetic (no model compiled).

The compiler's algorithm, for the geoms of one body with ``contype`` or ``conaffinity``
set (the others are left out), numbered pre-order, left child first:

- a node's box is the min/max over the 8 corners of its geoms' boxes
  (``geom_aabb`` centre +- half size, plus ``geom_pos``), a flat side (extent
  < ``MJ_EPS``) widened by ``MJ_EPS`` on both ends; stored as centre and half size;
- a node with one geom is a leaf (``nodeid`` = the geom id, children -1); otherwise the
  split axis is the longest edge (y over x, then z over the winner, only when longer by
  at least ``MJ_EPS``), and ``std::nth_element`` puts the ``n // 2`` smallest geoms
  along it in the left child, the rest in the right; "smaller" is the position along
  the axis when two differ by more than ``MJ_EPS``, else the lower geom index. When no
  chain of positions closer than ``MJ_EPS`` spans more than ``MJ_EPS`` that order is
  total, so the two sets (and the whole tree) are the same whatever order
  ``nth_element`` leaves them in.

Handled here: the world body (its frame is the world's: the compiler's ``ipos`` = 0 and
``iquat`` = 1 0 0 0 make its rotations copies) with every geom unrotated (``geom_quat`` =
1 0 0 0), as the hide-and-seek scene has them; a rotated geom, or an order that is not
total, is refused (``None``) and the caller compiles. ``tests/unit/test_hide_and_seek_bvh.py`` checks the result bit for
bit against compiled models.
"""

from __future__ import annotations

import numpy as np

from jaxsrl.envs.hide_and_seek.kernels import jit

MJ_EPS = 1e-14
"""``mjEPS`` of MuJoCo's compiler (``src/user/user_util.h``)."""
_DBL_MAX = 1.7976931348623157e308  # std::numeric_limits<double>::max()


@jit
def _order_keys(pos, rows):
    """``[n, 3]`` int64 rank of each element (``pos[rows[i]]``, index ``i``) along each axis
    in the compiler's comparator order, or an empty array when that order is not total (a
    chain of positions closer than ``MJ_EPS`` spans more than ``MJ_EPS``). Plain loops: n
    is a few dozen."""
    n = rows.shape[0]
    rank = np.empty((n, 3), np.int64)
    order = np.empty(n, np.int64)
    cluster = np.empty(n, np.int64)
    for axis in range(3):
        for k in range(n):  # insertion sort of the positions
            j = k
            while j > 0 and pos[rows[order[j - 1]], axis] > pos[rows[k], axis]:
                order[j] = order[j - 1]
                j -= 1
            order[j] = k
        c, start = 0, pos[rows[order[0]], axis]
        for k in range(n):  # runs of gaps <= MJ_EPS, each spanning at most MJ_EPS
            v = pos[rows[order[k]], axis]
            if k > 0 and v - pos[rows[order[k - 1]], axis] > MJ_EPS:
                c += 1
                start = v
            elif v - start > MJ_EPS:
                return np.empty((0, 3), np.int64)
            cluster[order[k]] = c
        for i in range(n):  # rank in the order (run, index)
            r = 0
            for j in range(n):
                if cluster[j] < cluster[i] or (cluster[j] == cluster[i] and j < i):
                    r += 1
            rank[i, axis] = r
    return rank


@jit
def _build(first, rows, pos, aabb, rank, out_aabb, out_child, out_nodeid, out_depth):
    """Fill the ``2n - 1`` node rows (pre-order, left first) for the ``n`` elements
    ``rows`` (geom ids ``first + rows``)."""
    n = rows.shape[0]
    perm = np.arange(n)
    # stack of (start, end, level, parent, side)
    stack = np.empty((2 * n, 5), np.int64)
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3], stack[0, 4] = 0, n, 0, -1, 0
    top = 1
    nbvh = 0
    amm = np.empty(6)
    vert = np.empty(3)
    while top > 0:
        top -= 1
        s, e, lev, parent, side = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3], stack[top, 4]
        for i in range(3):
            amm[i] = _DBL_MAX
            amm[i + 3] = -_DBL_MAX
        for k in range(s, e):
            j = rows[perm[k]]
            lo0, lo1, lo2 = aabb[j, 0] - aabb[j, 3], aabb[j, 1] - aabb[j, 4], aabb[j, 2] - aabb[j, 5]
            hi0, hi1, hi2 = aabb[j, 0] + aabb[j, 3], aabb[j, 1] + aabb[j, 4], aabb[j, 2] + aabb[j, 5]
            for v in range(8):
                vert[0] = hi0 if v & 1 else lo0
                vert[1] = hi1 if v & 2 else lo1
                vert[2] = hi2 if v & 4 else lo2
                # mjuu_rotVecQuat by the unit quaternion: a copy, +0 for a zero vector
                if vert[0] == 0 and vert[1] == 0 and vert[2] == 0:
                    vert[0] = vert[1] = vert[2] = 0.0
                for i in range(3):
                    vert[i] += pos[j, i] - 0.0  # - body_ipos
                if vert[0] == 0 and vert[1] == 0 and vert[2] == 0:
                    vert[0] = vert[1] = vert[2] = 0.0
                for i in range(3):  # std::min / std::max: the first of equals kept
                    if vert[i] < amm[i]:
                        amm[i] = vert[i]
                    if amm[i + 3] < vert[i]:
                        amm[i + 3] = vert[i]
        for i in range(3):
            if abs(amm[i] - amm[i + 3]) < MJ_EPS:
                amm[i] -= MJ_EPS
                amm[i + 3] += MJ_EPS
        index = nbvh
        nbvh += 1
        if parent >= 0:
            out_child[parent, side] = index
        out_child[index, 0] = out_child[index, 1] = -1
        out_nodeid[index] = -1
        out_depth[index] = lev
        for i in range(3):
            out_aabb[index, i] = (amm[i + 3] + amm[i]) / 2
            out_aabb[index, i + 3] = (amm[i + 3] - amm[i]) / 2
        if e - s == 1:
            out_nodeid[index] = first + rows[perm[s]]
            continue
        e0, e1, e2 = amm[3] - amm[0], amm[4] - amm[1], amm[5] - amm[2]
        axis = 0
        if e1 >= e0 + MJ_EPS:
            axis = 1
        if e2 >= (e1 if axis == 1 else e0) + MJ_EPS:
            axis = 2
        # the n // 2 first in the comparator's order go left
        for k in range(s + 1, e):  # insertion sort by rank
            j, x = k, perm[k]
            while j > s and rank[perm[j - 1], axis] > rank[x, axis]:
                perm[j] = perm[j - 1]
                j -= 1
            perm[j] = x
        m = (e - s) // 2
        # right pushed first: the left subtree is numbered first
        stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3], stack[top, 4] = s + m, e, lev + 1, index, 1
        top += 1
        stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3], stack[top, 4] = s, s + m, lev + 1, index, 0
        top += 1
    return nbvh


@jit
def _world_bvh(first, contype, conaffinity, pos, quat, aabb):
    g = contype.shape[0]
    rows = np.empty(g, np.int64)
    n = 0
    ok = True
    for j in range(g):
        if contype[j] != 0 or conaffinity[j] != 0:
            rows[n] = j
            n += 1
            ok = ok and quat[j, 0] == 1.0 and quat[j, 1] == 0.0 and quat[j, 2] == 0.0 and quat[j, 3] == 0.0
    k = max(2 * n - 1, 0)
    out_aabb, out_child = np.empty((k, 6)), np.empty((k, 2), np.int32)
    out_nodeid, out_depth = np.empty(k, np.int32), np.empty(k, np.int32)
    if n == 0 or not ok:
        return False, out_aabb, out_child, out_nodeid, out_depth
    rank = _order_keys(pos, rows[:n])
    if rank.shape[0] == 0:
        return False, out_aabb, out_child, out_nodeid, out_depth
    _build(first, rows[:n], pos, aabb, rank, out_aabb, out_child, out_nodeid, out_depth)
    return True, out_aabb, out_child, out_nodeid, out_depth


def world_bvh(first: int, contype: np.ndarray, conaffinity: np.ndarray, pos: np.ndarray, quat: np.ndarray,
              aabb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The BVH MuJoCo's compiler builds for the world body's geoms (about 3 µs for ten).

    Args:
      first: the geom id of the body's first geom (``body_geomadr``); its ``G`` geoms have
        ids ``first .. first + G - 1``, in the body's order (the compiler's tie-break).
      contype, conaffinity: ``[G]`` int; geoms with both 0 are left out.
      pos: ``[G, 3]`` float64 ``geom_pos``; quat: ``[G, 4]`` float64 ``geom_quat``;
      aabb: ``[G, 6]`` float64 ``geom_aabb`` (centre, half size, in the geom's frame).

    Returns:
      ``(bvh_aabb [K, 6] float64, bvh_child [K, 2] int32, bvh_nodeid [K] int32,
      bvh_depth [K] int32)`` with ``K = 2 * used - 1``, the rows the body's
      ``body_bvhadr`` points at; ``None`` when the geoms are outside what is handled
      (a rotated geom, no geom in contact, or an order that is not total: module
      docstring): compile instead.
    """
    ok, *out = _world_bvh(int(first), contype, conaffinity, pos, quat, aabb)
    return tuple(out) if ok else None
