"""Device actors (issue 30): the device rollout against the CPU path's Trajectory layout
and against Gymnasium CartPole-v1's transitions, and the fused rollout-and-learn step
against a rollout followed by ``learn``.

They run on ``tests/jax_cartpole.py`` (``--env=jax:jax_cartpole:make``, a user's own
JAX-native env, pure JAX), so they run where no extra is installed (CI); those
parametrized over :data:`CARTPOLES` also run on ``gymnax:CartPole-v1``, and the gymnax
ones skip without gymnax."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any, Callable, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import make_actor_env, make_env
from jaxsrl.envs.jax_native import is_jax_native, registry
from jaxsrl.streams.segment import segment_schema, to_trajectory
from fake_devices import fake_devices_env

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(TESTS)
N, T, MAX_STEPS = 8, 8, 5  # truncations inside every segment
CARTPOLE = "jax:jax_cartpole:make"  # tests/jax_cartpole.py
#: The same CartPole-v1 through both adapters: ours (no extra) and gymnax's (skips without).
CARTPOLES = [CARTPOLE, "gymnax:CartPole-v1"]


def _gymnax():
    return pytest.importorskip("gymnax")


def _cartpole(env_id=CARTPOLE, max_steps=MAX_STEPS):
    """CartPole-v1 of ``env_id`` with a time limit of ``max_steps``."""
    if env_id.startswith("gymnax:"):
        _gymnax()
        return registry.make(env_id, {"max_steps_in_episode": max_steps})
    return registry.make(env_id, {"max_episode_steps": max_steps})


class _Setup(NamedTuple):
    """An agent on ``N`` environments, and its jitted functions (compiled once per module:
    the tests share them, which keeps the suite short)."""

    env: Any
    fns: Any
    state: Any
    carry: Any  # the rollout's first carry (RecurrentCarry for a recurrent agent)
    rollout: Callable
    run: Callable  # jax.jit(rollout)
    learn: Callable  # jax.jit(fns.learn)


def _setup(env_id=CARTPOLE, recurrent=False) -> _Setup:
    """PPO (or ``tests/recurrent_box_agent.py``) on CartPole-v1 of ``env_id``."""
    return _build(env_id, recurrent)  # one cache key however the arguments are spelled


@functools.lru_cache(maxsize=None)
def _build(env_id, recurrent) -> _Setup:
    from jaxsrl.workers.device.rollout import initial_rollout_carry, make_rollout
    env = _cartpole(env_id)
    if recurrent:
        from recurrent_box_agent import AGENT as agent
    else:
        agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    carry = initial_rollout_carry(env, jax.random.PRNGKey(1), N, fns.initial_carry)
    rollout = make_rollout(env, fns.act, T, fns.initial_carry)
    return _Setup(env, fns, state, carry, rollout, jax.jit(rollout), jax.jit(fns.learn))


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_jax_native_ids_are_not_built_as_gymnasium_envs(env_id):
    # gymnax:CartPole-v1 reads like module:EnvId; it must not become Gymnasium's CartPole.
    assert is_jax_native(env_id) and not is_jax_native("CartPole-v1")
    for build in (lambda: make_env(env_id), lambda: make_actor_env(env_id, 2, 0)):
        with pytest.raises(ValueError, match="JAX-native"):
            build()


def test_missing_gymnax_is_a_one_line_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnax", None)  # import gymnax -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'jaxsrl\[gymnax\]'") as info:
        registry.make("gymnax:CartPole-v1")
    assert "\n" not in str(info.value)


def test_unknown_gymnax_id_and_kwarg_are_named():
    _gymnax()
    with pytest.raises(ValueError, match="NoSuchEnv-v0"):
        registry.make("gymnax:NoSuchEnv-v0")
    with pytest.raises(ValueError, match="max_step"):
        registry.make("gymnax:CartPole-v1", {"max_step": 3})


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_spaces_match_gymnasium_cartpole(env_id):
    if env_id.startswith("gymnax:"):
        _gymnax()
    obs, act = registry.spaces(env_id)
    ref = gymnasium.make("CartPole-v1")
    assert obs.shape == ref.observation_space.shape and obs.dtype == ref.observation_space.dtype
    assert isinstance(act, gymnasium.spaces.Discrete) and act.n == ref.action_space.n


def _layout(tree):
    return jax.tree.map(lambda x: (tuple(x.shape), np.dtype(x.dtype)), tree)


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_trajectory_layout_equals_the_cpu_paths(env_id):
    s = _setup(env_id)
    _, traj, _ = s.run(s.state.params, s.carry, jax.random.PRNGKey(2), 3)
    # The CPU path: the trainer's Trajectory of N segments of Gymnasium CartPole-v1.
    ref_env = gymnasium.make("CartPole-v1")
    schema = segment_schema(ref_env.observation_space, ref_env.action_space, T)
    cpu = to_trajectory({k: np.zeros((N,) + s.shape[1:], s.dtype) for k, s in schema.items()},
                        ref_env.observation_space)
    assert jax.tree.structure(traj) == jax.tree.structure(cpu)
    assert _layout(traj) == _layout(cpu)
    assert traj.carry is None and traj.valid is None


def _gymnasium_steps(obs, actions):
    """Gymnasium CartPole-v1 (the independent reference) from each observation
    ``[M, 4]`` with each action ``[M]``: ``(next_obs [M, 4], reward [M], terminated [M])``."""
    ref = gymnasium.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    out = []
    for o, a in zip(np.asarray(obs, np.float64), np.asarray(actions)):
        ref.state, ref.steps_beyond_terminated = o.copy(), None
        nxt, reward, terminated, _, _ = ref.step(int(a))
        out.append((nxt, reward, terminated))
    nxt, reward, terminated = zip(*out)
    return np.stack(nxt), np.array(reward, np.float32), np.array(terminated)


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_rollout_steps_are_the_environments_transitions(env_id):
    """Every step of the trajectory, replayed through Gymnasium's CartPole-v1:
    obs[t + 1] follows obs[t] and action[t] unless the episode ended; a truncated
    episode's final_obs does, and a new episode starts; terminated as Gymnasium reports
    it, truncation exactly at the time limit."""
    s = _setup(env_id)
    _, traj, stats = s.run(s.state.params, s.carry, jax.random.PRNGKey(2), 3)
    obs, final = np.asarray(traj.obs), np.asarray(traj.final_obs)
    term, trunc = np.asarray(traj.terminated), np.asarray(traj.truncated)
    nxt, reward, terminal = _gymnasium_steps(obs[:, :T].reshape(-1, 4),
                                             np.asarray(traj.action).reshape(-1))
    nxt = nxt.reshape(N, T, 4)
    done = term | trunc
    assert trunc.any() and not (term & trunc).any()
    np.testing.assert_allclose(obs[:, 1:][~done], nxt[~done], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final[trunc], nxt[trunc], rtol=1e-5, atol=1e-6)
    assert not final[~trunc].any()
    assert (np.abs(obs[:, 1:][done]) <= 0.05).all()  # a fresh episode (reset range)
    np.testing.assert_array_equal(term, terminal.reshape(N, T))
    np.testing.assert_array_equal(traj.reward, reward.reshape(N, T))
    # Truncation exactly MAX_STEPS steps after the last episode end of each row.
    for b in range(N):
        start = 0
        for t in range(T):
            length = t + 1 - start
            assert trunc[b, t] == (not term[b, t] and length == MAX_STEPS), (b, t)
            if done[b, t]:
                start = t + 1
    assert int(stats.count) == int(done.sum())
    assert float(stats.return_sum) == float(stats.length_sum)  # CartPole: reward 1 a step
    assert (np.asarray(traj.policy_version) == 3).all()


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=1e-5, atol=1e-6)


FUSED_RNG, FUSED_VERSION = jax.random.PRNGKey(5), jnp.int32(2)


@functools.lru_cache(maxsize=None)
def _separate(recurrent):
    """The reference of the fused step: the rollout, then learn on its trajectory, as
    separate programs."""
    s = _setup(recurrent=recurrent)
    rng2, k_rollout, k_learn = jax.random.split(FUSED_RNG, 3)
    carry2, traj, stats = s.run(s.state.params, s.carry, k_rollout, FUSED_VERSION)
    state2, metrics = s.learn(s.state, traj, k_learn)
    return state2, carry2, rng2, metrics, stats


def _fused_vs_separate(fused_fn, recurrent=False):
    s = _setup(recurrent=recurrent)
    fused = jax.jit(fused_fn(s.rollout, s.fns.learn))(s.state, s.carry, FUSED_RNG, FUSED_VERSION)
    return fused, _separate(bool(recurrent))


def test_fused_step_equals_rollout_then_learn():
    from jaxsrl.workers.device.fused import make_fused_step
    fused, separate = _fused_vs_separate(make_fused_step)
    _assert_same(fused, separate)
    assert int(fused[0].update_step) == 1


@pytest.mark.slow  # another compile of the fused step (~15 s of CPU)
def test_the_equality_catches_a_wrong_bootstrap_of_truncated_episodes():
    """The comparison above is sensitive: a fused step that learns as if truncated
    episodes had terminated (no bootstrap from ``final_obs``) is told apart."""

    def mutant(rollout, learn):
        def step(state, env_carry, rng, version):
            rng, k_rollout, k_learn = jax.random.split(rng, 3)
            env_carry, traj, stats = rollout(state.params, env_carry, k_rollout, version)
            traj = traj._replace(terminated=traj.terminated | traj.truncated,
                                 truncated=jnp.zeros_like(traj.truncated))
            state, metrics = learn(state, traj, k_learn)
            return state, env_carry, rng, metrics, stats
        return step

    fused, separate = _fused_vs_separate(mutant)
    with pytest.raises(AssertionError):
        _assert_same(fused[0], separate[0])


TWO_DEVICES = r"""
import jax, jax.numpy as jnp, numpy as np
from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import registry
from jaxsrl.parallel import devices
from jaxsrl.workers.device.fused import jit_fused_step, make_fused_step, put_env_carry
from jaxsrl.workers.device.rollout import make_rollout

assert len(jax.devices()) == 2, jax.devices()
env = registry.make("jax:jax_cartpole:make", {"max_episode_steps": 5})
agent = get_agent("ppo")
fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
step = make_fused_step(make_rollout(env, fns.act, 8), fns.learn)
state, carry = fns.init(jax.random.PRNGKey(0)), env.reset(jax.random.PRNGKey(1), 8)
args = (jax.random.PRNGKey(5), jnp.int32(0))
one = jax.jit(step, device=jax.devices()[0])(state, carry, *args)
mesh = devices.local_mesh()
carry2 = put_env_carry(carry, mesh)
assert len(carry2.obs.addressable_shards) == 2
two = jit_fused_step(step, mesh)(devices.put_replicated(state, mesh), carry2, *args)
assert two[1].obs.sharding.shard_shape(two[1].obs.shape) == (4, 4)  # envs stay split
for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=1e-5, atol=1e-5)
print("TWO_DEVICES_MATCH_OK")
"""


@pytest.mark.slow  # a JAX process of its own, two compiles (~40 s of CPU)
def test_fused_step_sharded_over_two_devices_matches_one_device():
    """Environments split over 2 (fake CPU) devices, learner state replicated: the same
    result as on one device. The device count is fixed when JAX starts: a subprocess."""
    proc = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=fake_devices_env(2, TESTS),
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert "TWO_DEVICES_MATCH_OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_trajectory_type_is_the_agents():
    s = _setup()
    _, traj, _ = s.run(s.state.params, s.carry, jax.random.PRNGKey(2), 0)
    assert isinstance(traj, Trajectory)


def test_a_terminal_step_at_the_time_limit_is_terminated_not_truncated():
    """gymnax reports both flags there; the CPU path (GymVectorEnv) reports
    ``truncated and not terminated``: no bootstrap from a terminal state."""
    _gymnax()
    from gymnax.environments.classic_control.cartpole import EnvState
    from jaxsrl.envs.jax_native.autoreset import EnvCarry
    env = _cartpole("gymnax:CartPole-v1")
    one = lambda v, dt=jnp.float32: jnp.full((2,), v, dt)
    # Row 0: the pole falls on the last allowed step; row 1: upright at the time limit.
    state = EnvState(x=one(0.0), x_dot=one(0.0), theta=jnp.array([0.2, 0.0]),
                     theta_dot=jnp.array([2.0, 0.0]), time=one(MAX_STEPS - 1, jnp.int32))
    carry = EnvCarry(state, jnp.zeros((2, 4)), one(0.0), one(MAX_STEPS - 1, jnp.int32))
    _, out = env.step(carry, jnp.array([1, 1], jnp.int32), jax.random.PRNGKey(0))
    np.testing.assert_array_equal(out.terminated, [True, False])
    np.testing.assert_array_equal(out.truncated, [False, True])
    assert not np.asarray(out.final_obs[0]).any() and np.asarray(out.final_obs[1]).any()
    np.testing.assert_array_equal(out.episode_length, [MAX_STEPS, MAX_STEPS])


def test_put_env_carry_gives_every_leaf_its_own_buffer():
    """A reset that hands one array out as several leaves (Brax's envs share one zeros
    array for reward, done and metrics) must not reach the donating fused step as one
    buffer twice ("Attempt to donate the same buffer twice", seen on brax:halfcheetah)."""
    from jaxsrl.parallel import devices
    from jaxsrl.workers.device.fused import put_env_carry
    z = jnp.zeros(4)
    carry = put_env_carry((z, z, {"a": z}), devices.local_mesh())
    ptrs = {x.addressable_shards[0].data.unsafe_buffer_pointer() for x in jax.tree.leaves(carry)}
    assert len(ptrs) == 3


# Recurrent agents: the agent's carry rides through the scan, reset where episodes end.

def test_recurrent_trajectory_layout_equals_the_cpu_paths():
    """The CPU path's Trajectory of a recurrent agent: segments with ``carry/i`` arrays
    (the agent's CarryCodec), no ``valid`` (single-agent env)."""
    from jaxsrl.streams.carry import CarryCodec
    s = _setup(recurrent=True)
    _, traj, _ = s.run(s.state.params, s.carry, jax.random.PRNGKey(2), 3)
    ref_env = gymnasium.make("CartPole-v1")
    codec = CarryCodec(s.fns.initial_carry)
    schema = segment_schema(ref_env.observation_space, ref_env.action_space, T, carry=codec)
    cpu = to_trajectory({k: np.zeros((N,) + s.shape[1:], s.dtype) for k, s in schema.items()},
                        ref_env.observation_space, carry=codec)
    assert cpu.carry is not None and traj.carry is not None
    assert jax.tree.structure(traj) == jax.tree.structure(cpu)
    assert _layout(traj) == _layout(cpu)
    assert traj.valid is None and cpu.valid is None


RNGS = (jax.random.PRNGKey(7), jax.random.PRNGKey(8))


@functools.lru_cache(maxsize=None)
def _jitted_step_fns():
    s = _setup(recurrent=True)
    return jax.jit(s.fns.act), jax.jit(s.env.step)


@functools.lru_cache(maxsize=None)
def _reference_segments(reset):
    """The recurrent rollouts of :data:`RNGS` (one per segment), one step and one row at
    a time in Python as the CPU actors do: act, step, then zero the carry of every row
    whose episode ended. Returns per segment (first carry, actions) and the last carry."""
    s = _setup(recurrent=True)
    act, env_step = _jitted_step_fns()
    initial = np.asarray(s.fns.initial_carry(1))[0]
    env_c, agent_c = s.carry.env, np.array(s.carry.agent)
    segments = []
    for rng in RNGS:
        first, actions = agent_c.copy(), []
        for key in jax.random.split(rng, T):
            k_act, k_env = jax.random.split(key)
            action, new, _ = act(s.state.params, env_c.obs, jnp.asarray(agent_c), k_act)
            env_c, out = env_step(env_c, action, k_env)
            agent_c = np.array(new)
            for b in range(N):
                if reset and (bool(out.terminated[b]) or bool(out.truncated[b])):
                    agent_c[b] = initial
            actions.append(np.asarray(action))
        segments.append((first, np.stack(actions, 1)))
    return segments, agent_c


@functools.lru_cache(maxsize=None)
def _device_segments():
    s = _setup(recurrent=True)
    out, carry = [], s.carry
    for rng in RNGS:
        carry, traj, _ = s.run(s.state.params, carry, rng, 0)
        out.append(traj)
    return out, carry


def test_recurrent_carry_is_reset_at_episode_ends_as_a_step_by_step_loop_does():
    """Two consecutive segments (MAX_STEPS=5 < T: episodes end inside and across them):
    each segment's first carry, the actions (they depend on the carry) and the carry
    handed on equal a per-step, per-row Python loop that resets as the CPU actors do."""
    ref, ref_last = _reference_segments(True)
    trajs, last = _device_segments()
    assert (np.asarray(trajs[0].truncated) | np.asarray(trajs[0].terminated)).any()
    for (first, actions), traj in zip(ref, trajs):
        np.testing.assert_allclose(np.asarray(traj.carry), first, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(np.asarray(traj.action), actions)
    np.testing.assert_allclose(np.asarray(last.agent), ref_last, rtol=1e-6, atol=1e-7)
    # The second segment starts where the first ended, reset rows included.
    np.testing.assert_allclose(np.asarray(trajs[1].carry), ref[1][0], rtol=1e-6, atol=1e-7)


def test_the_reference_loop_tells_a_missing_reset_apart():
    """The comparison above is sensitive: without the reset the carries differ."""
    _, no_reset_last = _reference_segments(False)
    _, last = _device_segments()
    assert not np.allclose(np.asarray(last.agent), no_reset_last, rtol=1e-6, atol=1e-7)


@pytest.mark.slow  # the recurrent agent's fused step, rollout and learn (~30 s of CPU)
def test_recurrent_fused_step_equals_rollout_then_learn():
    from jaxsrl.workers.device.fused import make_fused_step
    from jaxsrl.workers.device.rollout import RecurrentCarry
    fused, separate = _fused_vs_separate(make_fused_step, recurrent=True)
    assert isinstance(fused[1], RecurrentCarry)
    assert jax.tree.structure(fused[:5]) == jax.tree.structure(separate)  # then health
    _assert_same(fused, separate)
    assert int(fused[0].update_step) == 1


@pytest.mark.slow  # as above
def test_the_recurrent_equality_catches_a_wrong_first_carry():
    """A fused step that learns from the carry the rollout ended with, not the one each
    segment started from, is told apart."""

    def mutant(rollout, learn):
        def step(state, env_carry, rng, version):
            rng, k_rollout, k_learn = jax.random.split(rng, 3)
            env_carry, traj, stats = rollout(state.params, env_carry, k_rollout, version)
            state, metrics = learn(state, traj._replace(carry=env_carry.agent), k_learn)
            return state, env_carry, rng, metrics, stats
        return step

    fused, separate = _fused_vs_separate(mutant, recurrent=True)
    with pytest.raises(AssertionError):
        _assert_same(fused[0], separate[0])


class _StopBeforeTheLoop(Exception):
    pass


@pytest.mark.parametrize("population, expected", [
    (0, "so its 8 envs step on the device next to the policy inside"),
    (3, "so its 3 members x 8 envs = 24 envs step on the device next to the members' policies "
        "inside")])
def test_the_first_log_line_states_the_envs_per_member_and_the_runs_total(
        tmp_path, monkeypatch, caplog, population, expected):
    """The run_start line of the launcher on device actors, the run itself stopped when
    it is built (nothing is compiled)."""
    import logging  # noqa: PLC0415
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch import launcher, wiring  # noqa: PLC0415

    def stop(*args, **kwargs):
        raise _StopBeforeTheLoop

    monkeypatch.setattr(wiring, "new_run", stop)
    logdir = str(tmp_path / "run")
    cfg = load_config([f"--env={CARTPOLE}", f"--population={population}", "--batch_segments=8",
                       "--segment_length=4", f"--logdir={logdir}"])
    with caplog.at_level(logging.INFO), pytest.raises(_StopBeforeTheLoop):
        launcher.train(cfg)
    (line,) = [r.getMessage() for r in caplog.records if "starts in" in r.getMessage()]
    assert expected in line, line
