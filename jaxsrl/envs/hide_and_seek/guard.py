"""One env step of MuJoCo physics, guarded against the constraint solver's rare failures.

In jammed contact clusters (several agents pushing into each other and into boxes at full
force) MuJoCo's Newton solver can run out of iterations and return a wild solution: bodies
shoot off at hundreds of m/s, or MuJoCo flags a bad acceleration and resets the whole
simulation. With random actions this happened in about 4 of 100 full-game episodes. The released game, on MuJoCo 2.0, raised an exception there and marked
the episode for discard (``DiscardMujocoExceptionEpisodes``, mae:wrappers/util.py:61-95).

``GuardedStep.step`` saves the integration state, runs the substeps, and checks that no
velocity exceeds ``limit`` (m/s or rad/s; the fastest legitimate motion, an agent at top
speed or a body falling off a 4 m wall, is about 20) and that MuJoCo did not reset the
simulation after a bad state (its auto-reset sets the time back to 0). On failure it restores the state and runs the same substeps again with MuJoCo's
conjugate-gradient solver, which minimises the same convex problem (the dynamics are the
same; only the algorithm differs) and got through the failures we saw (the retry without
warm start did not). If that fails too, the state is restored once more and ``step``
returns False: the caller ends the episode and marks it for discard, as released.
"""

from __future__ import annotations

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek import kernels

_SPEC = int(mujoco.mjtState.mjSTATE_INTEGRATION)  # an int: the binding converts an enum member on every call
_CG = int(mujoco.mjtSolver.mjSOL_CG)


class GuardedStep:
    """``nstep`` substeps of ``mj_step`` with a retry on the CG solver (see module doc).

    Attributes:
      retries: steps that needed the retry this episode.
    """

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, limit: float):
        if not limit > 0:
            raise ValueError(f"blowup_speed must be > 0, got {limit!r}")
        self._m, self._d, self._limit = model, data, float(limit)
        self._state = np.empty(mujoco.mj_stateSize(model, _SPEC))
        self._qvel = data.qvel  # a view of the data's velocities
        self._dt = model.opt.timestep
        self._below = kernels.bind(kernels.speeds_below, self._qvel, self._limit)  # always these two
        self.retries = 0

    def _run(self, nstep: int) -> bool:
        d = self._d
        end = d.time + nstep * self._dt
        mujoco.mj_step(self._m, d, nstep)  # positional: the binding is slower with keywords
        # NaN fails the comparison; an auto-reset (bad qpos/qvel/qacc) restarts the clock
        return self._below(self._qvel, self._limit) and abs(d.time - end) < 1e-6

    def step(self, nstep: int) -> bool:
        """Advance ``nstep`` substeps; False if the physics failed twice (state restored)."""
        m, d = self._m, self._d
        mujoco.mj_getState(m, d, self._state, _SPEC)
        if self._run(nstep):
            return True
        self.retries += 1
        mujoco.mj_setState(m, d, self._state, _SPEC)
        solver = m.opt.solver
        m.opt.solver = _CG
        try:
            ok = self._run(nstep)
        finally:
            m.opt.solver = solver
        if not ok:
            mujoco.mj_setState(m, d, self._state, _SPEC)
        return ok
