"""Compiled (Numba) loops of the hide-and-seek step: the per-step array work of the
observation builder, the controls, the rewards and the episode tally, grab and lock, the
guard's velocity check, one call each instead of dozens of small NumPy operations. Vision's (rays and the arithmetic around them) is in
``raycast.py``.

At 4-6 agents and 3-10 objects every NumPy call here handles a few dozen numbers and
costs its fixed ~1 us of dispatch; these loops do the same arithmetic, in the same order
and precision (float64, cast to float32 on the store, as the NumPy code did), in one
call. ``tests/unit/test_hide_and_seek_reference.py`` pins their results to the
behaviour recorded before any of issue 19's speed work.

A compiled function that calls another must live in the same file: Numba's disk cache
is invalidated only by changes to the caller's own file, so a cached caller would keep an
edited callee's old code. Compiled on first use and cached on disk (``cache=True``: ``__pycache__`` beside this
file, or ``NUMBA_CACHE_DIR``). ``NUMBA_DISABLE_JIT=1`` runs them as plain Python.
"""

from __future__ import annotations

import math

import numba

try:  # the dispatcher's own key of a value's type (C, about 0.1 us)
    from numba._dispatcher import compute_fingerprint as fingerprint
except ImportError:  # a Numba without it: the type itself (about 8 us an argument)
    fingerprint = numba.typeof

jit = numba.njit(cache=True, nogil=True, fastmath=False, boundscheck=False)
"""The decorator of every compiled loop of the game (also ``raycast.py``)."""


def bind(fn, *args):
    """``fn`` (a ``jit`` function) compiled for the types of ``args``, as a callable that
    skips Numba's per-call dispatch (reading every argument's type, about 60 ns an array,
    to pick the compiled version): for call sites that pass the same objects, or objects
    made by the same code, at every call. The compiled code does not check its arguments:
    every call must pass arrays of exactly these dtypes, dimensions, layouts and
    alignment (scalars of these kinds), else it reads memory wrongly. ``fn`` itself where
    Numba does not compile (``NUMBA_DISABLE_JIT=1``).

    Kept per ``fn`` and the arguments' type fingerprints (Numba's own cache key, about
    0.1 µs an argument), so binding again for new objects of the same types is cheap.
    """
    compile_ = getattr(fn, "compile", None)
    types = type_key(*args)
    if compile_ is None or types is None:
        return fn
    key = (fn, *types)
    bound = _BOUND.get(key)
    if bound is None:
        bound = _BOUND[key] = compile_(tuple(numba.typeof(a) for a in args))
    return bound


def type_key(*args) -> tuple | None:
    """Numba's type fingerprints of ``args`` (dtype, dimensions, layout, writability), or
    None where one is an array of non-native byte order, which the fingerprint does not
    tell from native (Numba's dispatcher refuses such arrays; ``bind`` leaves them to it)."""
    for a in args:
        dtype = getattr(a, "dtype", None)
        if dtype is not None and not dtype.isnative:
            return None
    return tuple(map(fingerprint, args))


_BOUND: dict = {}
"""``bind``'s compiled overloads by (function, argument type fingerprints)."""


jit_inline = numba.njit(cache=True, nogil=True, fastmath=False, boundscheck=False, inline="always")
"""``jit`` for small helpers called inside compiled loops: Numba inlines them into each caller
(in its IR, before LLVM), which saves the call but compiles them once per call site
(``docs/hide_and_seek.md``, "Issue 32, fifth part", has the costs)."""


@jit
def _row8(dst, src_q, src_v, rest_z):
    """``dst[:8]`` = x, y, z - rest_z, yaw, vx, vy, vz, wz."""
    dst[0], dst[1], dst[2], dst[3] = src_q[0], src_q[1], src_q[2] - rest_z, src_q[3]
    dst[4], dst[5], dst[6], dst[7] = src_v[0], src_v[1], src_v[2], src_v[3]


@jit
def build_observations(qpos, qvel, rest_z, seen, others, team, locked, which_locked, held,
                       n_boxes, size_cols, lock_ramp, extra, time_frac, prep, lidar, rows,
                       self_obs, agents, agents_mask, boxes, boxes_mask, ramps, ramps_mask, lidar_out):
    """Fill every per-step column of agent ``i``'s observation in row ``rows[i]`` of the
    output arrays (``observations.py`` has the layout; the constant columns, written once
    per episode, are left alone).

    Args:
      qpos, qvel: ``[M, 4]`` float64 (x, y, z, yaw) and velocities of the movable bodies
        (agents, boxes, ramps). rest_z: ``[M]`` height at rest (m), subtracted from z.
      seen: ``[A, A - 1 + O]`` bool (``Vision`` columns). others: ``[A, A - 1]`` int.
      team: ``[A]`` int; locked: ``[O]`` bool; which_locked: ``[O]`` int; held: ``[A]`` int.
      n_boxes: boxes among the ``O`` objects; size_cols: 3 if boxes carry their size, else 0;
      lock_ramp: ramps have lock columns; extra: the ``extra_obs`` columns;
      time_frac: env steps taken / horizon; prep: the ``prep_obs`` value.
      lidar: ``[A, L]`` float32 ranges (m), copied to ``lidar_out``.
      rows: ``[A]`` int, the output row of each agent.
      self_obs ... lidar_out: the float32 ``[R, ...]`` arrays of every key, written in place.
    """
    a = rows.shape[0]
    m = qpos.shape[0]
    o = m - a
    any_locked = False
    for j in range(o):
        any_locked = any_locked or locked[j]
    for i in range(a):
        r = rows[i]
        _row8(self_obs[r], qpos[i], qvel[i], rest_z[i])
        self_obs[r, 9] = prep
        if extra:
            self_obs[r, 10], self_obs[r, 11] = math.sin(qpos[i, 3]), math.cos(qpos[i, 3])
            self_obs[r, 12] = time_frac
            self_obs[r, 13] = 1.0 if held[i] >= 0 else 0.0
        for j in range(lidar.shape[1]):
            lidar_out[r, j] = lidar[i, j]
        xi, yi = qpos[i, 0], qpos[i, 1]
        for c in range(a - 1):
            j = others[i, c]
            _row8(agents[r, c], qpos[j], qvel[j], rest_z[j])
            agents[r, c, 9] = prep
            if extra:
                agents[r, c, 10], agents[r, c, 11] = qpos[j, 0] - xi, qpos[j, 1] - yi
                agents[r, c, 12], agents[r, c, 13] = math.sin(qpos[j, 3]), math.cos(qpos[j, 3])
            agents_mask[r, c] = 1.0 if seen[i, c] else 0.0
        for j in range(o):
            is_box = j < n_boxes
            rows_j, mask = (boxes, boxes_mask) if is_box else (ramps, ramps_mask)
            s = j if is_box else j - n_boxes
            b = a + j
            row = rows_j[r, s]
            row[0], row[1], row[2] = qpos[b, 0], qpos[b, 1], qpos[b, 2] - rest_z[b]
            row[3], row[4] = math.cos(qpos[b, 3]), math.sin(qpos[b, 3])
            row[5], row[6], row[7], row[8] = qvel[b, 0], qvel[b, 1], qvel[b, 2], qvel[b, 3]
            c = 9 + size_cols
            if is_box or lock_ramp:
                lk = any_locked and locked[j]
                row[c] = 1.0 if lk and which_locked[j] == i else 0.0
                row[c + 1] = 1.0 if lk and team[which_locked[j]] == team[i] else 0.0
                row[c + 2] = 1.0 if lk else 0.0
                c += 3
            if extra:
                row[c], row[c + 1] = qpos[b, 0] - xi, qpos[b, 1] - yi
                mine = held[i] == j
                holders = 0
                for h in range(a):
                    if held[h] == j:
                        holders += 1
                row[c + 2] = 1.0 if mine else 0.0
                row[c + 3] = 1.0 if holders - (1 if mine else 0) > 0 else 0.0
            mask[r, s] = 1.0 if seen[i, a - 1 + j] else 0.0


@jit
def controls(acts, rows, n_bins, bin_scale, action_max, n_hiders, in_prep, ctrl, grab, lock):
    """The motor controls and the grab and lock buttons of one step's actions.

    Args:
      acts: ``[R, 5]`` int action bins (force x, force y, torque z, grab, lock); agent
        ``i``'s are row ``rows[i]`` (rows: ``[A]`` int).
      n_bins: bins per motor; bin ``k`` (clipped to ``0 .. n_bins - 1``) gives
        ``k * bin_scale - action_max``. n_hiders: agents ``n_hiders:`` are seekers, frozen
        (zero controls, no grab, no lock) while ``in_prep``.
      ctrl: ``[A, 3]`` float64 out (a view of ``data.ctrl``); grab, lock: ``[A]`` bool out.
    """
    for i in range(rows.shape[0]):
        r = rows[i]
        frozen = in_prep and i >= n_hiders
        for j in range(3):
            b = min(max(acts[r, j], 0), n_bins - 1)
            ctrl[i, j] = 0.0 if frozen else b * bin_scale - action_max
        grab[i] = acts[r, 3] > 0 and not frozen
        lock[i] = acts[r, 4] > 0 and not frozen


TALLY_STEPS, TALLY_POST_PREP, TALLY_SEEN, TALLY_TEAM_RETURN, TALLY_OUT, TALLY = 0, 1, 2, 3, 4, 5
"""Entries of the episode tally that ``rewards`` adds to; each agent's holding steps follow."""


@jit
def rewards(qpos, seen, sign, n_hiders, in_prep, half_bounds, penalize_objects, penalty, rows, rew, held, tally):
    """One step's rewards (the rules in ``env.py``), and the step added to the episode's
    tally (``stats.EpisodeStats``).

    Args:
      qpos: ``[M, 4]`` float64 (x, y, z, yaw) of the movable bodies, agents first.
      seen: ``[A, A - 1 + O]`` bool (``Vision``): a seeker's first ``n_hiders`` columns are the hiders.
      sign: ``[A]`` +1 for hiders, -1 for seekers. half_bounds: half the bounds square (m).
      penalize_objects: every agent gets ``-penalty`` while an object is outside.
      rows: ``[A]`` int; rew: ``[R]`` float out, agent ``i``'s reward in ``rew[rows[i]]``.
      held: ``[A]`` int object each agent holds (-1: none).
      tally: ``[TALLY + A]`` float64, added to: steps, post-preparation steps, those in which
        a seeker saw a hider, the hiders' team reward (0 in the preparation phase), agents
        outside the bounds, then each agent's steps holding an object (``TALLY_*`` indices).
    """
    a = rows.shape[0]
    any_seen = False
    for i in range(n_hiders, a):
        for c in range(n_hiders):
            any_seen = any_seen or seen[i, c]
    team_r = 0.0 if in_prep else (-1.0 if any_seen else 1.0)
    objects_out = False
    if penalize_objects:
        for b in range(a, qpos.shape[0]):
            objects_out = objects_out or abs(qpos[b, 0]) > half_bounds or abs(qpos[b, 1]) > half_bounds
    n_out = 0
    for i in range(a):
        out = abs(qpos[i, 0]) > half_bounds or abs(qpos[i, 1]) > half_bounds
        n_out += 1 if out else 0
        r = sign[i] * team_r
        if not in_prep and (out or objects_out):  # penalties replace the reward, none in prep
            r = -penalty
        rew[rows[i]] = r
        if held[i] >= 0:
            tally[TALLY + i] += 1.0
    tally[TALLY_STEPS] += 1.0
    if not in_prep:
        tally[TALLY_POST_PREP] += 1.0
        if any_seen:
            tally[TALLY_SEEN] += 1.0
    tally[TALLY_TEAM_RETURN] += team_r
    tally[TALLY_OUT] += n_out


@jit
def cuboid_distances(xpos, xmat, agent_body, obj_body, centre_dz, half, dist):
    """Distance from each agent's centre to the surface of each object's cuboid (0 inside).

    Args:
      xpos: ``[nbody, 3]``, xmat: ``[nbody, 9]`` float64 (``data``; row-major, world from local).
      agent_body: ``[A]``, obj_body: ``[O]`` int body ids. centre_dz: ``[O]`` height (m) of the
      cuboid's centre above the body origin. half: ``[O, 3]`` half sizes (m).
      dist: ``[A, O]`` float64 out (m).
    """
    for o in range(obj_body.shape[0]):
        b = obj_body[o]
        cx, cy, cz = xpos[b, 0], xpos[b, 1], xpos[b, 2] + centre_dz[o]
        for i in range(agent_body.shape[0]):
            e = agent_body[i]
            r0, r1, r2 = xpos[e, 0] - cx, xpos[e, 1] - cy, xpos[e, 2] - cz
            s = 0.0
            for j in range(3):  # local = rot^T rel, outside the cuboid along axis j
                loc = r0 * xmat[b, j] + r1 * xmat[b, 3 + j] + r2 * xmat[b, 6 + j]
                g = max(abs(loc) - half[o, j], 0.0)
                s += g * g
            dist[i, o] = math.sqrt(s)


@jit
def lock_changes(usable, lockable, lock, team, which_locked, locked, to_unlock, to_lock):
    """The held team lock's decision per object (``manipulation.py``, Lock).

    Args:
      usable: ``[A, O]`` bool in reach and seen; lockable: ``[O]`` bool; lock: ``[A]`` bool
        pressed; team: ``[A]`` int; which_locked: ``[O]`` int last locker; locked: ``[O]`` bool.
      to_unlock, to_lock: ``[O]`` bool out: a decider (in reach, seeing it, of the last
        locker's team) does not press lock; someone usable presses and no decider objects.

    Returns:
      How many objects change state (unlock while locked, or lock while unlocked).
    """
    changes = 0
    for o in range(usable.shape[1]):
        unlock, desired = False, False
        if lockable[o]:
            owner = team[which_locked[o]]
            for i in range(usable.shape[0]):
                if usable[i, o]:
                    if lock[i]:
                        desired = True
                    elif team[i] == owner:
                        unlock = True
        to_unlock[o] = unlock
        to_lock[o] = desired and not unlock
        if (unlock and locked[o]) or (to_lock[o] and not locked[o]):
            changes += 1
    return changes


@jit
def grab_targets(usable, grab, dist, target):
    """Each agent's grab target: the closest usable object while it presses grab (the
    first of equals), else -1. usable: ``[A, O]`` bool; grab: ``[A]`` bool; dist:
    ``[A, O]`` float64 (m); target: ``[A]`` int out."""
    for i in range(usable.shape[0]):
        best, best_d = -1, math.inf
        if grab[i]:
            for o in range(usable.shape[1]):
                if usable[i, o] and dist[i, o] < best_d:
                    best, best_d = o, dist[i, o]
        target[i] = best


@jit
def manipulate(grab, lock, seen, centre_dist, near_radius, reach, xpos, xmat, agent_body, obj_body, centre_dz, half,
               lockable, team, which_locked, locked, held, dist, usable, to_unlock, to_lock, target):
    """The decisions of ``Manipulation.apply`` (its docstring has the rules): which locks
    and which grabs change this step; the caller edits the model only where they do.

    Args:
      grab, lock: ``[A]`` bool buttons. seen: ``[A, A - 1 + O]`` bool (``Vision``; the objects
        are the last ``O`` columns); centre_dist: ``[A, A - 1 + O]`` float64 (m), columns
        as ``seen``; near_radius: ``[O]`` (m); reach: grab reach (m).
      xpos ... half: as :func:`cuboid_distances`. lockable: ``[O]`` bool; team: ``[A]`` int;
        which_locked: ``[O]`` int; locked: ``[O]`` bool; held: ``[A]`` int (-1: none).
      dist: ``[A, O]`` float64 out (written only when some seen object is near);
      usable: ``[A, O]`` bool out; to_unlock, to_lock: ``[O]`` bool out (see
      :func:`lock_changes`); target: ``[A]`` int out: each agent's object after this step.

    Returns:
      ``(lock_changes, grab_changes)``: some lock changes state (then ``to_unlock``,
      ``to_lock`` and ``usable`` hold the decision); some agent's ``target`` differs from ``held``.
    """
    a, o = usable.shape
    if o == 0:
        return False, False
    pressing_lock = pressing_grab = locked_any = holding = False
    for i in range(a):
        pressing_lock = pressing_lock or lock[i]
        pressing_grab = pressing_grab or grab[i]
        holding = holding or held[i] >= 0
    for j in range(o):
        locked_any = locked_any or locked[j]
    if not (pressing_lock or locked_any or pressing_grab or holding):
        return False, False  # nothing to decide: no lock or grab pressed, none held
    off = seen.shape[1] - o
    near = False
    for i in range(a):
        for j in range(o):
            near = near or (seen[i, off + j] and centre_dist[i, off + j] <= near_radius[j])
    any_usable = False
    if near:
        cuboid_distances(xpos, xmat, agent_body, obj_body, centre_dz, half, dist)
        for i in range(a):
            for j in range(o):
                u = seen[i, off + j] and dist[i, j] <= reach
                usable[i, j] = u
                any_usable = any_usable or u
    lock_change = False
    if any_usable:
        if pressing_lock or locked_any:
            lock_change = lock_changes(usable, lockable, lock, team, which_locked, locked, to_unlock, to_lock) > 0
        if pressing_grab or holding:
            grab_targets(usable, grab, dist, target)
        else:
            for i in range(a):
                target[i] = held[i]
    else:  # nothing in reach and view: every holder lets go; locks stay as they are
        for i in range(a):
            target[i] = -1
    grab_change = False
    for i in range(a):
        grab_change = grab_change or target[i] != held[i]
    return lock_change, grab_change


@jit
def rows_valid(rows, n):
    """Every ``rows[i]`` in ``0 .. n - 1`` and no two alike (``step_rows``' check: its loops
    index without bounds checks, and two agents on one row would overwrite each other).
    rows: ``[k]`` int."""
    for i in range(rows.shape[0]):
        if rows[i] < 0 or rows[i] >= n:
            return False
        for j in range(i):
            if rows[j] == rows[i]:
                return False
    return True


@jit
def speeds_below(qvel, limit):
    """Every ``|qvel|`` below ``limit`` (False on NaN). qvel: ``[nv]`` float64."""
    for k in range(qvel.shape[0]):
        if not abs(qvel[k]) < limit:
            return False
    return True
