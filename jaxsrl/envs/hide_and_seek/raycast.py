"""Compiled (Numba) ray casts of hide-and-seek's vision and lidar: MuJoCo's ``mj_ray`` for
the geom types of this game (spheres, boxes, meshes), with culling suited to its rays.

The intersection functions follow MuJoCo's ``engine_ray.c`` (``ray_quad``,
``ray_sphere``, ``ray_box``, ``ray_triangle``, ``mj_rayMesh``) operation for operation, so
that a ray meets the same geom at the same distance as ``mujoco.mj_multiRay``, bit for
bit (``tests/unit/test_hide_and_seek_kernels.py`` compares the two on random poses).
One known difference, in the compiled cast's favour: a ray that lies in the plane of a
mesh face (a lidar ray from an eye at z = 0, in the plane of a ramp's base) can graze
two triangles, and MuJoCo's mesh BVH then sometimes skips the nearer one; the compiled
cast tests every triangle.

Also here, so that vision's compiled loops and the casts they call share one file (see
``kernels.py`` on Numba's disk cache): the ray directions and cone test before the casts
(``line_of_sight``), what the hits mean (``seen_and_lidar``), and the three in one call
(``sense``).
"""

from __future__ import annotations

import math

import numpy as np

from jaxsrl.envs.hide_and_seek.kernels import jit, jit_inline  # the decorators only (see kernels.py on the disk cache)

SPHERE, BOX, MESH = 2, 6, 7  # mjtGeom
_MINVAL = 1e-15  # mjMINVAL


@jit_inline
def _ray_quad(a, b, c):
    """Smallest non-negative root of a x^2 + 2 b x + c = 0, -1 if none."""
    det = b * b - a * c
    if det < _MINVAL:
        return -1.0
    det = math.sqrt(det)
    x0, x1 = (-b - det) / a, (-b + det) / a
    if x0 >= 0:
        return x0
    if x1 >= 0:
        return x1
    return -1.0


@jit_inline
def _ray_sphere(cx, cy, cz, r2, px, py, pz, vx, vy, vz):
    dx, dy, dz = px - cx, py - cy, pz - cz
    a = vx * vx + vy * vy + vz * vz
    b = vx * dx + vy * dy + vz * dz
    c = dx * dx + dy * dy + dz * dz - r2
    return _ray_quad(a, b, c)


@jit_inline
def _ray_box(xpos, xmat, size, g, px, py, pz, vx, vy, vz):
    """MuJoCo's ray_box: distance along the ray to box geom ``g`` (half sizes
    ``size[g]``, pose ``xpos[g]``, ``xmat[g]`` row-major world-from-local), -1 if none."""
    s0, s1, s2 = size[g, 0], size[g, 1], size[g, 2]
    cx, cy, cz = xpos[g, 0], xpos[g, 1], xpos[g, 2]
    if _ray_sphere(cx, cy, cz, s0 * s0 + s1 * s1 + s2 * s2, px, py, pz, vx, vy, vz) < 0:
        return -1.0
    lp0, lp1, lp2, lv0, lv1, lv2 = _ray_map(xmat, g, px - cx, py - cy, pz - cz, vx, vy, vz)
    x = -1.0
    x = _box_axis(x, lp0, lv0, s0, lp1, lv1, s1, lp2, lv2, s2)
    x = _box_axis(x, lp1, lv1, s1, lp0, lv0, s0, lp2, lv2, s2)
    return _box_axis(x, lp2, lv2, s2, lp0, lv0, s0, lp1, lv1, s1)


@jit_inline
def _box_axis(x, lp, lv, sz, lpa, lva, sa, lpb, lvb, sb):
    """The two faces of a box normal to one axis (``lp, lv, sz``), the other two axes'
    coordinates ``a``, ``b`` in MuJoCo's face order; the smaller of ``x`` and a hit."""
    if abs(lv) > _MINVAL:
        for side in (-1.0, 1.0):
            sol = (side * sz - lp) / lv
            if sol >= 0:
                p0 = lpa + sol * lva
                p1 = lpb + sol * lvb
                if abs(p0) <= sa and abs(p1) <= sb and (x < 0 or sol < x):
                    x = sol
    return x


@jit_inline
def _ray_map(xmat, g, d0, d1, d2, vx, vy, vz):
    """MuJoCo's ray_map: the offset ``d`` from the geom's centre and the direction ``v`` in
    geom ``g``'s frame (``xmat[g]``: ``[9]`` row-major)."""
    m0, m1, m2, m3, m4 = xmat[g, 0], xmat[g, 1], xmat[g, 2], xmat[g, 3], xmat[g, 4]
    m5, m6, m7, m8 = xmat[g, 5], xmat[g, 6], xmat[g, 7], xmat[g, 8]
    return (m0 * d0 + m3 * d1 + m6 * d2, m1 * d0 + m4 * d1 + m7 * d2, m2 * d0 + m5 * d1 + m8 * d2,
            m0 * vx + m3 * vy + m6 * vz, m1 * vx + m4 * vy + m7 * vz, m2 * vx + m5 * vy + m8 * vz)


@jit
def _normalized(x, y, z):
    """MuJoCo's mju_normalize3 (``(1, 0, 0)`` below mjMINVAL)."""
    n = math.sqrt(x * x + y * y + z * z)
    if n < _MINVAL:
        return 1.0, 0.0, 0.0
    return x / n, y / n, z / n


@jit_inline
def _ray_triangle(vert, i0, i1, i2, lp0, lp1, lp2, lv0, lv1, lv2, b00, b01, b02, b10, b11, b12):
    """MuJoCo's ray_triangle for the triangle of rows ``i0, i1, i2`` of ``vert`` (geom
    frame), the ray ``lp + x lv`` in that frame, ``b0``, ``b1`` the basis of its normal plane."""
    x0, y0, z0 = vert[i0, 0] - lp0, vert[i0, 1] - lp1, vert[i0, 2] - lp2
    x1, y1, z1 = vert[i1, 0] - lp0, vert[i1, 1] - lp1, vert[i1, 2] - lp2
    x2, y2, z2 = vert[i2, 0] - lp0, vert[i2, 1] - lp1, vert[i2, 2] - lp2
    p00, p01 = b00 * x0 + b01 * y0 + b02 * z0, b10 * x0 + b11 * y0 + b12 * z0
    p10, p11 = b00 * x1 + b01 * y1 + b02 * z1, b10 * x1 + b11 * y1 + b12 * z1
    p20, p21 = b00 * x2 + b01 * y2 + b02 * z2, b10 * x2 + b11 * y2 + b12 * z2
    if ((p00 > 0 and p10 > 0 and p20 > 0) or (p00 < 0 and p10 < 0 and p20 < 0)
            or (p01 > 0 and p11 > 0 and p21 > 0) or (p01 < 0 and p11 < 0 and p21 < 0)):
        return -1.0
    a0, a1, a2, a3 = p00 - p20, p10 - p20, p01 - p21, p11 - p21
    r0, r1 = -p20, -p21
    det = a0 * a3 - a1 * a2
    if abs(det) < _MINVAL:
        return -1.0
    t0 = (a3 * r0 - a1 * r1) / det
    t1 = (-a2 * r0 + a0 * r1) / det
    if t0 < 0 or t1 < 0 or t0 + t1 > 1:
        return -1.0
    v2x, v2y, v2z = vert[i2, 0], vert[i2, 1], vert[i2, 2]
    e00, e01, e02 = vert[i0, 0] - v2x, vert[i0, 1] - v2y, vert[i0, 2] - v2z
    e10, e11, e12 = vert[i1, 0] - v2x, vert[i1, 1] - v2y, vert[i1, 2] - v2z
    e20, e21, e22 = lp0 - v2x, lp1 - v2y, lp2 - v2z
    n0 = e01 * e12 - e02 * e11
    n1 = e02 * e10 - e00 * e12
    n2 = e00 * e11 - e01 * e10
    denom = lv0 * n0 + lv1 * n1 + lv2 * n2
    if abs(denom) < _MINVAL:
        return -1.0
    return -(e20 * n0 + e21 * n1 + e22 * n2) / denom


@jit
def _ray_mesh(xpos, xmat, size, g, vert, face, f_lo, f_n, v_lo, px, py, pz, vx, vy, vz):
    """MuJoCo's mj_rayMesh for mesh geom ``g`` (its bounding box, then every triangle; the
    BVH of MuJoCo only prunes): faces ``f_lo .. f_lo + f_n`` of ``face``, their vertex
    indices counted from row ``v_lo`` of ``vert``."""
    if _ray_box(xpos, xmat, size, g, px, py, pz, vx, vy, vz) < 0:
        return -1.0
    lp0, lp1, lp2, lv0, lv1, lv2 = _ray_map(xmat, g, px - xpos[g, 0], py - xpos[g, 1], pz - xpos[g, 2], vx, vy, vz)
    b0x, b0y, b0z = 1.0, 1.0, 1.0
    a0, a1, a2 = abs(lv0), abs(lv1), abs(lv2)
    if a0 >= a1 and a0 >= a2:
        b0x = 0.0
    elif a1 >= a2:
        b0y = 0.0
    else:
        b0z = 0.0
    k = -(lv0 * b0x + lv1 * b0y + lv2 * b0z) / (lv0 * lv0 + lv1 * lv1 + lv2 * lv2)
    b1x, b1y, b1z = _normalized(b0x + k * lv0, b0y + k * lv1, b0z + k * lv2)
    b0x, b0y, b0z = _normalized(b1y * lv2 - b1z * lv1, b1z * lv0 - b1x * lv2, b1x * lv1 - b1y * lv0)
    x = -1.0
    for f in range(f_lo, f_lo + f_n):
        sol = _ray_triangle(vert, v_lo + face[f, 0], v_lo + face[f, 1], v_lo + face[f, 2],
                            lp0, lp1, lp2, lv0, lv1, lv2, b0x, b0y, b0z, b1x, b1y, b1z)
        if sol >= 0 and (x < 0 or sol < x):
            x = sol
    return x


@jit_inline
def _box_extent(xmat, size, g):
    """Half extents (m) along world x, y, z of box geom ``g``'s world-aligned bounding
    box, widened by rounding margins (1e-6 relative, 1e-9 m)."""
    s0, s1, s2 = size[g, 0], size[g, 1], size[g, 2]
    ex = abs(xmat[g, 0]) * s0 + abs(xmat[g, 1]) * s1 + abs(xmat[g, 2]) * s2
    ey = abs(xmat[g, 3]) * s0 + abs(xmat[g, 4]) * s1 + abs(xmat[g, 5]) * s2
    ez = abs(xmat[g, 6]) * s0 + abs(xmat[g, 7]) * s1 + abs(xmat[g, 8]) * s2
    return ex * 1.000001 + 1e-9, ey * 1.000001 + 1e-9, ez * 1.000001 + 1e-9


_ATAN = (0.9998660, -0.3302995, 0.1801410, -0.0851330, 0.0208351)
"""Coefficients of x, x^3, ..., x^9 of Abramowitz & Stegun's 4.4.47 for atan x, |x| <= 1."""
ATAN_ERR = 2e-5
"""Bound (rad) on ``|_atan2(y, x) - atan2(y, x)|`` (mod 2 pi). The book states 1e-5 for its
7-digit coefficients; they reach 1.15e-5 (at x = 0.396, a grid of 2e6 points), hence 2e-5
(``tests/unit/test_hide_and_seek_kernels.py`` checks it)."""
ANGLE_TOL = 2.0 * ATAN_ERR + 1e-12
"""Widening (rad) of a lidar window on each side: two ``_atan2`` errors (a sphere's centre
and half angle), plus float rounding of angles of order 1 (about 1e-15)."""


@jit_inline
def _atan2(y, x):
    """``atan2(y, x)`` (rad, in ``[-pi, pi]``) within ``ATAN_ERR``: octant reduction and
    Abramowitz & Stegun's 4.4.47 polynomial, about a fifth of libm's cost. ``(0, 0)`` gives 0."""
    ax, ay = abs(x), abs(y)
    if ax >= ay:
        if ax == 0.0:
            return 0.0
        z = ay / ax
    else:
        z = ax / ay
    z2 = z * z
    r = z * (_ATAN[0] + z2 * (_ATAN[1] + z2 * (_ATAN[2] + z2 * (_ATAN[3] + z2 * _ATAN[4]))))
    if ay > ax:
        r = 0.5 * math.pi - r
    if x < 0.0:
        r = math.pi - r
    return -r if y < 0.0 else r


@jit_inline
def _ray_range(lo_angle, hi_angle, step, n_lidar):
    """Lidar rays ``a .. b`` (mod ``n_lidar``; ``a`` in ``0 .. n_lidar - 1``; ``b = a - 1``: none)
    whose angles ``k step`` lie in ``[lo_angle, hi_angle]`` (rad) widened by ``ANGLE_TOL``."""
    a = int(math.ceil((lo_angle - ANGLE_TOL) / step))
    b = int(math.floor((hi_angle + ANGLE_TOL) / step))
    if b - a >= n_lidar or n_lidar <= 0:  # every ray (none without lidar)
        return 0, n_lidar - 1
    shift = (a // n_lidar) * n_lidar  # shift by whole turns
    return a - shift, max(b, a - 1) - shift


@jit_inline
def _bounds(geom_xpos, geom_xmat, geom_size, geom_type, geom_rbound, g, px, py, pz, step, n_lidar):
    """Geom ``g``'s bounds seen from the origin ``p``: ``(near, a, b)``, the distance (m) from
    ``p`` to them (a lower bound of any hit; below 0 inside) and the lidar rays ``a .. b``
    (``_ray_range``) that can meet them. The bounds: the world-aligned bounding box of a
    box, widened by ``_box_extent``'s margins; the bounding sphere (``geom_rbound``,
    1e-6 relative and 1e-9 m wider) otherwise. Lidar rays are horizontal, so a ray that
    meets the bounds lies within their angular extent seen from ``p`` in the x-y plane
    (a box's: between its two silhouette corners, two ``_atan2`` calls; each is within
    ``ATAN_ERR`` of the true angle, and ``ANGLE_TOL`` covers two such errors); every ray
    when ``p`` lies inside that extent's footprint."""
    dx, dy, dz = geom_xpos[g, 0] - px, geom_xpos[g, 1] - py, geom_xpos[g, 2] - pz
    if geom_type[g] == BOX:  # its world-aligned bounding box: tighter than the sphere
        ex, ey, ez = _box_extent(geom_xmat, geom_size, g)
        ox, oy = max(abs(dx) - ex, 0.0), max(abs(dy) - ey, 0.0)
        oz = max(abs(dz) - ez, 0.0)
        near = math.sqrt(ox * ox + oy * oy + oz * oz)
        if ox <= 0.0 and oy <= 0.0:  # the origin above or below it: every lidar ray
            return near, 0, n_lidar - 1
        # the box's silhouette corners seen from p (outside its footprint): the ends of the
        # near face when p faces a side, else the two corners beside the nearest one
        if ox <= 0.0:  # p within the box's x extent: facing a y face
            sy = -1.0 if dy > 0.0 else 1.0
            x0, y0, x1, y1 = dx - ex, dy + sy * ey, dx + ex, dy + sy * ey
        elif oy <= 0.0:  # facing an x face
            sx = -1.0 if dx > 0.0 else 1.0
            x0, y0, x1, y1 = dx + sx * ex, dy - ey, dx + sx * ex, dy + ey
        else:  # in a corner region
            sx = -1.0 if dx > 0.0 else 1.0
            sy = -1.0 if dy > 0.0 else 1.0
            x0, y0, x1, y1 = dx - sx * ex, dy + sy * ey, dx + sx * ex, dy - sy * ey
        lo, hi = _atan2(y0, x0), _atan2(y1, x1)
        if x0 * y1 - y0 * x1 < 0.0:  # counter-clockwise from lo to hi (the extent spans less than pi)
            lo, hi = hi, lo
        if hi < lo:  # across the -x axis
            hi += 2.0 * math.pi
        a, b = _ray_range(lo, hi, step, n_lidar)
        return near, a, b
    d = math.sqrt(dx * dx + dy * dy)
    rb = geom_rbound[g] * 1.000001 + 1e-9  # rounding: a little wider than the sphere
    near = math.sqrt(d * d + dz * dz) - rb
    if d <= rb:  # the origin inside the bounding circle: every lidar ray
        return near, 0, n_lidar - 1
    centre, half = _atan2(dy, dx), _atan2(rb, math.sqrt(d * d - rb * rb))  # half = asin(rb / d)
    a, b = _ray_range(centre - half, centre + half, step, n_lidar)
    return near, a, b


@jit
def cast_rays(geom_xpos, geom_xmat, geom_size, geom_type, geom_body, geom_mesh, geom_rbound, geoms,
              mesh_vert, mesh_face, mesh_vertadr, mesh_faceadr, mesh_facenum, eyes, eye_body, vec, los_dist,
              ids, hit):
    """The first geom each ray meets and its distance, as ``mujoco.mj_multiRay`` finds them
    (the same geom at the same distance, bit for bit), for what vision needs of them.

    Each origin casts ``K`` line-of-sight rays, ray ``c`` towards a target at ``los_dist[i, c]``
    (m), then ``L = R - K`` horizontal lidar rays, ray ``k`` at 2 pi k / L rad from +x.
    A lidar ray gets the first geom it meets. A line-of-sight ray only needs to know
    whether something meets it before its target's centre: it gets the first geom it meets
    among those whose bounds start before ``los_dist``, -1 if none; geoms beyond cannot
    change what ``seen_and_lidar`` makes of it. A negative ``los_dist`` (a target outside
    the vision cone, which no hit can make seen) skips the ray: id -1, distance -1. A geom's bounds are its world-aligned
    bounding box for a box (walls and boxes), its bounding sphere (``geom_rbound``)
    otherwise. Geoms are tried nearest bounds first, and a ray stops at the first whose
    bounds start beyond its best hit; a lidar ray tries only the geoms whose bounds' angular
    extent, seen from the origin, holds its angle (``_bounds``: each geom's window of rays,
    widened by ``ANGLE_TOL``; the geoms of each ray listed once per origin, nearest first).
    Ties go to the lower geom id, as in MuJoCo's loop.

    Args:
      geom_xpos: ``[ngeom, 3]``, geom_xmat: ``[ngeom, 9]`` float64 (``data``).
      geom_size: ``[ngeom, 3]``, geom_type: ``[ngeom]`` (sphere, box or mesh),
        geom_body, geom_mesh, geom_rbound: ``[ngeom]`` body, mesh id (``geom_dataid``)
        and bounding-sphere radius (m) (``model``).
      geoms: ``[G]`` ids of the geoms a ray may meet (group and visibility filters applied).
      mesh_vert: ``[nv, 3]`` float64; mesh_face: ``[nf, 3]`` int; mesh_vertadr,
        mesh_faceadr, mesh_facenum: ``[nmesh]`` (``model``).
      eyes: ``[A, 3]`` float64 ray origins (m); eye_body: ``[A]`` body whose geoms the rays
        of each origin ignore.
      vec: ``[A, R, 3]`` float64 unit directions; los_dist: ``[A, K]`` float64 (m).
      ids: ``[A, R]`` int32 out: geom met, -1 for none; hit: ``[A, R]`` float64 out: its
        distance (m), -1 for none.

    A geom type other than sphere, box or mesh is taken for a mesh: ``Vision`` checks
    that a scene has no other type among ``geoms``.
    """
    n_rays = vec.shape[1]
    n_los = los_dist.shape[1]
    n_lidar = n_rays - n_los
    step = 2.0 * math.pi / n_lidar if n_lidar > 0 else 1.0
    n_geoms = geoms.shape[0]
    lo = np.empty(n_geoms, np.int64)  # lidar rays lo..hi (mod L) can meet geom n; hi < lo: none
    hi = np.empty(n_geoms, np.int64)
    near = np.empty(n_geoms)  # distance (m) from the origin to geom n's bounds (a lower bound of any hit)
    order = np.empty(n_geoms, np.int64)  # geoms by near, the origin's own body left out
    cand = np.empty((max(n_lidar, 0), n_geoms), np.int64)  # cand[k, :count[k]]: order's geoms lidar ray k can meet
    count = np.empty(max(n_lidar, 0), np.int64)
    for i in range(eyes.shape[0]):
        px, py, pz = eyes[i, 0], eyes[i, 1], eyes[i, 2]
        own = eye_body[i]
        m = 0
        for n in range(n_geoms):
            g = geoms[n]
            if geom_body[g] == own:
                continue
            near[n], a, b = _bounds(geom_xpos, geom_xmat, geom_size, geom_type, geom_rbound, g, px, py, pz,
                                    step, n_lidar)
            lo[n], hi[n] = a, b
            j = m  # insertion sort by near
            while j > 0 and near[order[j - 1]] > near[n]:
                order[j] = order[j - 1]
                j -= 1
            order[j] = n
            m += 1
        count[:] = 0
        for q in range(m):  # each lidar ray's candidates, in order
            n = order[q]
            for k in range(lo[n], hi[n] + 1):
                k = k - n_lidar if k >= n_lidar else k
                cand[k, count[k]] = n
                count[k] += 1
        for r in range(n_rays):
            vx, vy, vz = vec[i, r, 0], vec[i, r, 1], vec[i, r, 2]
            lidar = r >= n_los
            k = r - n_los
            limit = np.inf if lidar else los_dist[i, r]
            best, gid = -1.0, -1
            if limit < 0.0:  # not cast (see above)
                ids[i, r] = -1
                hit[i, r] = -1.0
                continue
            tried, n_tried = (cand[k], count[k]) if lidar else (order, m)
            for q in range(n_tried):
                n = tried[q]
                if near[n] > limit or (best >= 0 and near[n] > best):
                    break
                g = geoms[n]
                t = geom_type[g]
                if t == SPHERE:
                    sz = geom_size[g, 0]
                    x = _ray_sphere(geom_xpos[g, 0], geom_xpos[g, 1], geom_xpos[g, 2], sz * sz,
                                    px, py, pz, vx, vy, vz)
                elif t == BOX:
                    x = _ray_box(geom_xpos, geom_xmat, geom_size, g, px, py, pz, vx, vy, vz)
                else:
                    mid = geom_mesh[g]
                    x = _ray_mesh(geom_xpos, geom_xmat, geom_size, g, mesh_vert, mesh_face, mesh_faceadr[mid],
                                  mesh_facenum[mid], mesh_vertadr[mid], px, py, pz, vx, vy, vz)
                if x >= 0 and (best < 0 or x < best or (x == best and g < gid)):
                    best, gid = x, g
            ids[i, r] = gid
            hit[i, r] = best


@jit
def line_of_sight(xpos, geom_xpos, qpos, eye_body, tgt_geom, facing, cos_half, vec, dist, in_cone):
    """Line-of-sight ray directions from each agent's centre to each of its targets.

    Args:
      xpos: ``[nbody, 3]`` float64 body positions (m), ``data.xpos``.
      geom_xpos: ``[ngeom, 3]`` float64 geom centres (m), ``data.geom_xpos``.
      qpos: ``[nq]`` float64; agent ``i``'s yaw (rad) is ``qpos[4 i + 3]``.
      eye_body: ``[A]`` int body id of each agent.
      tgt_geom: ``[A, K]`` int geom id of each observer's targets.
      facing: offset (rad) of the front from the yaw; cos_half: cos of half the cone angle.
      vec: ``[A, K', 3]`` float64 (``K' >= K``) out: unit direction of each ray (columns ``:K``).
      dist: ``[A, K]`` float64 out: centre-to-centre distance (m).
      in_cone: ``[A, K]`` bool out: the target's centre is inside the cone, in the x-y plane.
    """
    a, k = tgt_geom.shape
    for i in range(a):
        e = eye_body[i]
        ex, ey, ez = xpos[e, 0], xpos[e, 1], xpos[e, 2]
        yaw = qpos[4 * i + 3] + facing
        cy, sy = math.cos(yaw), math.sin(yaw)
        for c in range(k):
            g = tgt_geom[i, c]
            vx, vy, vz = geom_xpos[g, 0] - ex, geom_xpos[g, 1] - ey, geom_xpos[g, 2] - ez
            planar2 = vx * vx + vy * vy
            d = math.sqrt(planar2 + vz * vz)
            dot = vx * cy + vy * sy
            in_cone[i, c] = dot >= cos_half * math.sqrt(planar2) - 1e-9
            dist[i, c] = d
            vec[i, c, 0], vec[i, c, 1], vec[i, c, 2] = vx / d, vy / d, vz / d


@jit
def seen_and_lidar(ids, hit, dist, in_cone, geom_body, tgt_body, lidar_range, seen, lidar):
    """What each agent sees, and its lidar ranges, from one bundle of ray hits per agent.

    Args:
      ids: ``[A, K + L]`` int32 geom hit by each ray (-1: none); hit: ``[A, K + L]``
        float64 distance (m) to it. Columns ``:K`` are the line-of-sight rays, ``K:`` lidar.
      dist, in_cone: ``[A, K]`` from :func:`line_of_sight`.
      geom_body: ``[ngeom]`` int body of each geom; tgt_body: ``[A, K]`` body of each target.
      lidar_range: the range (m) reported where a lidar ray hits nothing.
      seen: ``[A, K]`` bool out: the first hit lies beyond the target's centre, belongs to
        the target's body, or there is none; and the target is in the cone.
      lidar: ``[A, L]`` float32 out: distance to the first hit (not capped), else ``lidar_range``.
    """
    a, k = dist.shape
    n_lidar = lidar.shape[1]
    for i in range(a):
        for c in range(k):
            g = ids[i, c]
            vis = g < 0 or hit[i, c] >= dist[i, c] - 1e-6 or geom_body[g] == tgt_body[i, c]
            seen[i, c] = vis and in_cone[i, c]
        for j in range(n_lidar):
            lidar[i, j] = hit[i, k + j] if ids[i, k + j] >= 0 else lidar_range


@jit
def sense(xpos, geom_xpos, geom_xmat, qpos, eye_ids, tgt_geom, facing, cos_half, geom_size, geom_type, geom_body,
           geom_mesh, geom_rbound, ray_geoms, mesh_vert, mesh_face, mesh_vertadr, mesh_faceadr, mesh_facenum,
           tgt_body, lidar_range, vec, dist, in_cone, limit, eyes, ids, hit, seen, lidar):
    """``line_of_sight``, ``cast_rays`` and ``seen_and_lidar`` in one compiled call (their
    arguments; ``eyes``: ``[A, 3]`` scratch for the agents' centres, ``limit``: ``[A, K]``
    scratch for the line-of-sight rays' ``los_dist``: the target's distance in the cone, -1
    outside it, where ``seen`` is False whatever the ray meets, so the ray is not cast)."""
    for i in range(eye_ids.shape[0]):
        for c in range(3):
            eyes[i, c] = xpos[eye_ids[i], c]
    line_of_sight(xpos, geom_xpos, qpos, eye_ids, tgt_geom, facing, cos_half, vec, dist, in_cone)
    for i in range(dist.shape[0]):
        for c in range(dist.shape[1]):
            limit[i, c] = dist[i, c] if in_cone[i, c] else -1.0
    cast_rays(geom_xpos, geom_xmat, geom_size, geom_type, geom_body, geom_mesh, geom_rbound, ray_geoms,
                      mesh_vert, mesh_face, mesh_vertadr, mesh_faceadr, mesh_facenum, eyes, eye_ids, vec, limit,
                      ids, hit)
    seen_and_lidar(ids, hit, dist, in_cone, geom_body, tgt_body, lidar_range, seen, lidar)
