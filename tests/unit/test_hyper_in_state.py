"""Hyperparameters in the learner state (``state.hyper``): a new value takes effect at the
next ``learn`` and never recompiles it (population-based training perturbs them).

Compilations are counted with ``_cache_size()`` of the jitted ``learn`` (one entry per
traced signature). "Takes effect" is checked against an independent reference: the same
agent *built* with those values in its config, from the same initial parameters.
"""

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import HYPERPARAMETERS, impala, ppo
from agents.optim import clipped_adam, clipped_adam_lr_arg
from agents.state import LearnerState
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import env_spaces
from jaxsrl.population.pbt import Event, apply

SPEC = EnvSpec(gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32), gymnasium.spaces.Discrete(2))
B, T = 4, 6
NEW = {"learning_rate": 7e-3, "ent_coef": 0.05, "vf_coef": 0.8, "clip_eps": 0.1,
       "gamma": 0.9, "gae_lambda": 0.8}  # every value differs from both agents' defaults


def _traj(seed=0, obs_dim=3):
    rng = np.random.default_rng(seed)
    terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
    terminated[0, 2] = truncated[1, 3] = True
    return Trajectory(rng.normal(size=(B, T + 1, obs_dim)).astype(np.float32),
                      rng.integers(0, 2, (B, T)).astype(np.int32),
                      rng.normal(size=(B, T)).astype(np.float32), terminated, truncated,
                      rng.normal(size=(B, T, obs_dim)).astype(np.float32),
                      (rng.normal(size=(B, T)) * 0.1 - 0.7).astype(np.float32),
                      np.zeros((B, T), np.int32))


def _with_hyper(state, values):
    return state._replace(hyper={**state.hyper, **{k: jnp.asarray(v, jnp.float32)
                                                   for k, v in values.items()}})


def _assert_trees_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y),
                                                         rtol=1e-5, atol=1e-7), a, b)


def _assert_trees_differ(a, b):
    assert not all(np.allclose(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("module,config", [
    (ppo, ppo.PPOConfig(hidden_sizes=(8,), num_minibatches=2, num_epochs=2)),
    (ppo, ppo.PPOConfig(hidden_sizes=(8,), num_minibatches=2, anneal_lr=False,
                        normalize_observations=True, normalize_values=True)),
    (impala, impala.IMPALAConfig(hidden_sizes=(8,), num_minibatches=2)),
], ids=["ppo", "ppo_normalised_constant_lr", "impala"])
def test_changing_state_hyper_takes_effect_without_recompiling(module, config):
    names = module.HYPERPARAMETERS
    fns = module.make(config, SPEC, num_updates=5)
    learn = jax.jit(fns.learn)
    state = fns.init(jax.random.PRNGKey(0))
    assert set(state.hyper) == set(names)
    assert all(v.shape == () and v.dtype == jnp.float32 and not v.weak_type
               for v in state.hyper.values())
    old, _ = learn(state, _traj(), jax.random.PRNGKey(1))
    assert learn._cache_size() == 1

    changed = _with_hyper(state, {k: NEW[k] for k in names})
    new, metrics = learn(changed, _traj(), jax.random.PRNGKey(1))
    assert learn._cache_size() == 1  # no recompilation
    assert float(new.hyper["learning_rate"]) == np.float32(NEW["learning_rate"])  # carried over
    _assert_trees_differ(old.params, new.params)

    # Reference: the agent built with the new values, from the same initial parameters.
    ref_fns = module.make(type(config)(**{**config.__dict__, **{k: NEW[k] for k in names}}),
                          SPEC, num_updates=5)
    ref, ref_metrics = jax.jit(ref_fns.learn)(ref_fns.init(jax.random.PRNGKey(0)), _traj(),
                                              jax.random.PRNGKey(1))
    _assert_trees_close(new, ref)
    _assert_trees_close(metrics, ref_metrics)


def test_a_pbt_exploit_keeps_the_jit_signature():
    """``pbt.apply`` (copy + perturb, placed like the originals) gives a state that the
    same compiled ``learn`` accepts, at the perturbed learning rate."""
    fns = ppo.make(ppo.PPOConfig(hidden_sizes=(8,), num_minibatches=2, anneal_lr=False), SPEC, 5)
    learn = jax.jit(fns.learn)
    states = {"a": fns.init(jax.random.PRNGKey(0)), "b": fns.init(jax.random.PRNGKey(1))}
    states["b"], _ = learn(states["b"], _traj(), jax.random.PRNGKey(2))
    before = {k: float(v) for k, v in states["a"].hyper.items()}
    after = {**{k: float(v) for k, v in states["b"].hyper.items()}, "learning_rate": 1.2e-3}
    states = apply(Event("a", "b", before, after, {"learning_rate": "*1.2"}, 0.0, 1.0), states)
    _, metrics = learn(states["a"], _traj(), jax.random.PRNGKey(3))
    assert learn._cache_size() == 1
    np.testing.assert_allclose(metrics["learning_rate"], 1.2e-3, rtol=1e-6)


@functools.cache
def _entity_spec():
    return EnvSpec(*env_spaces("hide_and_seek"))


def _entity_traj(fns, seed=0):
    rng = np.random.default_rng(seed)
    space = _entity_spec().observation_space.spaces
    obs = lambda lead: {k: rng.random(lead + s.shape).astype(np.float32)  # noqa: E731
                        for k, s in space.items()}
    b, t = 2, 4
    return Trajectory(obs((b, t + 1)), rng.integers(0, 2, (b, t) + _entity_spec().action_space.shape
                                                    ).astype(np.int32),
                      rng.normal(size=(b, t)).astype(np.float32), np.zeros((b, t), bool),
                      np.zeros((b, t), bool), obs((b, t)), np.full((b, t), -3.0, np.float32),
                      np.zeros((b, t), np.int32), carry=fns.initial_carry(b))


def test_recurrent_ppo_reads_hyper_from_the_state():
    """Entity-LSTM PPO: one compilation; learning rate 0 leaves the network unchanged,
    and gamma moves the advantages, both set in the state only."""
    cfg = ppo.PPOConfig(network="entity_lstm", hidden_sizes=(8,), attention_heads=2,
                        num_epochs=1, num_minibatches=1, anneal_lr=False)
    fns = ppo.make(cfg, _entity_spec(), num_updates=5)
    learn = jax.jit(fns.learn)
    state = fns.init(jax.random.PRNGKey(0))
    assert set(state.hyper) == set(ppo.HYPERPARAMETERS)
    traj = _entity_traj(fns)
    moved, m1 = learn(state, traj, jax.random.PRNGKey(1))
    frozen, m2 = learn(_with_hyper(state, {"learning_rate": 0.0, "gamma": 0.5}), traj,
                       jax.random.PRNGKey(1))
    assert learn._cache_size() == 1
    _assert_trees_differ(state.params["net"], moved.params["net"])
    jax.tree.map(np.testing.assert_array_equal, state.params["net"], frozen.params["net"])
    assert float(m2["learning_rate"]) == 0.0
    assert not np.isclose(m1["advantage_mean"], m2["advantage_mean"])


@pytest.mark.parametrize("anneal", [True, False])
def test_lr_as_an_argument_is_bit_for_bit_the_configured_schedule(anneal):
    """With ``lr`` equal to the configured step size, ``clipped_adam_lr_arg`` reproduces
    ``clipped_adam`` exactly (same state structure, identical float32 updates) over a
    whole anneal, past its end."""
    lr0, total = 3e-3, 5
    ref, ref_sched = clipped_adam(lr0, anneal, total, 0.5)
    new, mult = clipped_adam_lr_arg(anneal, total, 0.5)
    params = {"w": jnp.arange(6.0).reshape(2, 3) / 7, "b": jnp.ones(3)}
    s_ref, s_new = ref.init(params), new.init(params)
    assert jax.tree.structure(s_ref) == jax.tree.structure(s_new)
    lr = jnp.asarray(lr0, jnp.float32)
    for step in range(total + 2):
        grads = jax.tree.map(lambda x: jnp.sin(x * (step + 1)) * 3.0, params)
        u_ref, s_ref = ref.update(grads, s_ref, params)
        u_new, s_new = new.update(grads, s_new, params, learning_rate=lr)
        jax.tree.map(np.testing.assert_array_equal, u_ref, u_new)
        assert np.float32(lr * mult(step)) == np.float32(ref_sched(step))


def test_learn_names_missing_hyperparameters():
    fns = ppo.make(ppo.PPOConfig(hidden_sizes=(8,), num_minibatches=2), SPEC, 5)
    state = fns.init(jax.random.PRNGKey(0))
    legacy = LearnerState(state.params, state.opt_state, state.update_step)  # hyper=None
    with pytest.raises(ValueError, match=r"state.hyper lacks \['learning_rate'"):
        fns.learn(legacy, _traj(), jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match=r"lacks \['gamma'\]"):
        fns.learn(state._replace(hyper={k: v for k, v in state.hyper.items() if k != "gamma"}),
                  _traj(), jax.random.PRNGKey(1))


def test_declared_hyperparameters_are_config_fields():
    assert HYPERPARAMETERS == {"ppo": ppo.HYPERPARAMETERS, "impala": impala.HYPERPARAMETERS}
    for module, cfg in ((ppo, ppo.PPOConfig()), (impala, impala.IMPALAConfig())):
        assert all(isinstance(getattr(cfg, n), float) for n in module.HYPERPARAMETERS)
