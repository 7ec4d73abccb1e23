"""The physics guard (guard.py): a failed step is redone on the CG solver, and a step that
fails twice ends the episode marked ``discard_episode`` with the state restored."""

import mujoco
import numpy as np
import pytest

import jaxsrl.envs.hide_and_seek.guard as guard_mod
from jaxsrl.envs.hide_and_seek import Layout, make_env, outer_walls
from jaxsrl.envs.hide_and_seek.guard import GuardedStep

PUSH_X = [10, 5, 5, 0, 0]


def _env(**kw):
    env = make_env("quadrant", n_hiders=(1, 2), n_seekers=(1, 2), prep_fraction=0.0, **kw)
    layout = Layout(outer_walls(env.config), [(-1.0, 0.0, 0.0)], [(-2.5, -2.5, 0.0)], [], [], [])
    env.reset(options={"layout": layout})
    return env


def test_a_newton_failure_is_redone_on_cg(monkeypatch):
    env = _env()
    real = mujoco.mj_step
    solvers = []

    def flaky_step(m, d, nstep=1):  # Newton "diverges", CG does not
        solvers.append(int(m.opt.solver))
        real(m, d, nstep=nstep)
        if m.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON:
            d.qvel[0] = 1e4

    monkeypatch.setattr(guard_mod.mujoco, "mj_step", flaky_step)
    guard = GuardedStep(env.model, env.data, env.config.blowup_speed)
    q0 = env.data.qpos.copy()
    assert guard.step(15)
    assert solvers == [int(mujoco.mjtSolver.mjSOL_NEWTON), int(mujoco.mjtSolver.mjSOL_CG)]
    assert guard.retries == 1 and env.model.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    assert np.abs(env.data.qvel).max() < 20 and not np.array_equal(env.data.qpos, q0)  # a normal step


def test_a_step_that_fails_twice_ends_the_episode_for_discard():
    env = _env(blowup_speed=1e-3)  # any motion counts as a failure
    q0 = env.data.qpos.copy()
    obs, rew, term, trunc, info = env.step({"hider_0": PUSH_X})
    assert all(trunc.values()) and not any(term.values()) and env.agents == []
    assert all(i["discard_episode"] for i in info.values())
    assert not any("episode_stats" in i for i in info.values())
    assert set(rew.values()) == {0.0}
    np.testing.assert_array_equal(env.data.qpos, q0)  # restored, not the failed state


def test_normal_steps_are_not_marked():
    env = _env()
    _, _, _, trunc, info = env.step({"hider_0": PUSH_X})
    assert not any(trunc.values()) and not any(i["discard_episode"] for i in info.values())
    with pytest.raises(ValueError, match="blowup_speed"):
        GuardedStep(env.model, env.data, 0.0)


def test_a_mujoco_auto_reset_counts_as_a_failure(monkeypatch):
    env = _env()
    real = mujoco.mj_step

    def resetting_step(m, d, nstep=1):  # what MuJoCo does on a bad acceleration
        real(m, d, nstep=nstep)
        if m.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON:
            mujoco.mj_resetData(m, d)

    monkeypatch.setattr(guard_mod.mujoco, "mj_step", resetting_step)
    guard = GuardedStep(env.model, env.data, env.config.blowup_speed)
    t0 = env.data.time
    assert guard.step(15) and guard.retries == 1
    assert env.data.time == pytest.approx(t0 + 15 * 0.005)
