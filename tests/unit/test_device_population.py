"""Populations on device actors (issue 30): the members' fused step vmapped over their
stacked learner states against each member's own fused step, and a PBT round of the
CPU path's population manager applied to the stacked states."""

from __future__ import annotations

import threading
import time
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent, ppo
from jaxsrl.core.agent import EnvSpec
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.envs.jax_native import registry
from jaxsrl.parallel import devices
from jaxsrl.population.pbt import PBT, with_hyper
from jaxsrl.population.search_space import parse_search_space
from jaxsrl.workers.device.population import make_population_step, member, set_member, stack
from jaxsrl.workers.population.fitness import FitnessTracker
from jaxsrl.workers.population.manager import PopulationManager
from jaxsrl.workers.population.store import PopulationStore

N, T, M = 8, 8, 3
LRS = (1e-4, 1e-3, 1e-2)


def _agent():
    pytest.importorskip("gymnax")
    env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": 5})
    agent = get_agent("ppo")
    cfg = agent.config_cls(hidden_sizes=(8,), num_epochs=1, num_minibatches=1)
    return env, agent.make(cfg, EnvSpec(env.observation_space, env.action_space), 10)


@pytest.fixture(scope="module")
def members():
    """Three members (own parameters, environments, keys, versions and learning
    rates), the vmapped step's results and each member's own fused step's."""
    from jaxsrl.workers.device.fused import make_fused_step
    from jaxsrl.workers.device.rollout import make_rollout
    env, fns = _agent()
    step = make_fused_step(make_rollout(env, fns.act, T), fns.learn)
    args = [(with_hyper(fns.init(jax.random.PRNGKey(i)), {"learning_rate": LRS[i]}),
             env.reset(jax.random.PRNGKey(10 + i), N), jax.random.PRNGKey(20 + i), jnp.int32(i))
            for i in range(M)]
    own = jax.jit(step)
    alone = [own(*a) for a in args]
    together = jax.jit(make_population_step(step))
    return args, alone, together


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=1e-5, atol=1e-6)


def _stacked(args):
    return [stack([a[k] for a in args]) for k in range(4)]


# The two tests below compile the fused step twice (one member's, the vmapped one):
# about 35 s of CPU on the 2-core machine, so they are slow tests (-m slow).
@pytest.mark.slow
def test_the_vmapped_step_equals_each_members_own_fused_step(members):
    args, alone, together = members
    out = together(*_stacked(args))
    for i in range(M):
        _assert_same(member(out, i), alone[i])
    assert any(not np.allclose(x[0], x[2]) for x in jax.tree.leaves(out[0].params))  # members differ


@pytest.mark.slow
@pytest.mark.parametrize("mutation", ["shared keys", "swapped hyperparameters"])
def test_the_equality_catches_shared_keys_and_swapped_hyperparameters(members, mutation):
    """Members handed one key, or each other's learning rates, are told apart."""
    args, alone, together = members
    state, carry, rng, version = _stacked(args)
    if mutation == "shared keys":
        rng = jnp.stack([args[0][2]] * M)
    else:
        state = state._replace(hyper={**state.hyper,
                                      "learning_rate": state.hyper["learning_rate"][::-1]})
    out = together(state, carry, rng, version)
    with pytest.raises(AssertionError):
        _assert_same(member(out, 2), alone[2])


def test_set_member_refuses_another_structure():
    tree = {"a": jnp.zeros((2, 3))}
    with pytest.raises(ValueError, match="does not fit"):
        set_member(tree, 0, {"b": jnp.zeros(3)})


def test_a_pbt_round_copies_the_chosen_member_exactly_as_the_cpu_rules_decide(tmp_path):
    """The CPU path's PopulationManager on the stacked states through MemberHandle: the
    events are PBT.decide's on the same fitness, hyperparameters and seed; the bottom
    member's slice becomes the source's (every leaf) with the perturbed learning rate,
    its version goes up by one and a checkpoint is asked; other members are unchanged."""
    from jaxsrl.workers.device.population_trainer import MemberHandle
    from jaxsrl.workers.learner.requests import RequestQueue
    spec = EnvSpec(gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32), gymnasium.spaces.Discrete(2))
    fns = ppo.make(ppo.PPOConfig(hidden_sizes=(8,)), spec, num_updates=10)
    names = [f"member{i}" for i in range(4)]
    lrs = [1e-4, 3e-4, 1e-3, 3e-3]
    mesh = devices.local_mesh()
    states = jax.jit(jax.vmap(fns.init))(jax.random.split(jax.random.PRNGKey(0), 4))
    states = states._replace(hyper={**states.hyper, "learning_rate": jnp.asarray(lrs, jnp.float32)})
    # The population learner as its members see it; its thread serves their requests.
    loop = types.SimpleNamespace(state=devices.put_replicated(states, mesh),
                                 versions=np.array([3, 4, 5, 6]), mesh=mesh,
                                 _requests=RequestQueue("population"), stop=threading.Event())
    serving = threading.Thread(target=lambda: [loop._requests.serve() or time.sleep(0.001)
                                               for _ in iter(lambda: loop.stop.is_set(), True)],
                               daemon=True)
    serving.start()
    handles = {m: MemberHandle(loop, i, m, MetricsAccumulator(), None)
               for i, m in enumerate(names)}
    fitness = {"member0": 40.0, "member1": 10.0, "member2": 30.0, "member3": 20.0}
    tracker = FitnessTracker(names)
    for m, f in fitness.items():
        tracker.add_episodes(m, 2, 2 * f)
    space = parse_search_space({"learning_rate": {"min": 1e-5, "max": 1e-2, "log": True}},
                               ppo.HYPERPARAMETERS)
    hyper = {m: {"learning_rate": lr} for m, lr in zip(names, lrs)}
    manager = PopulationManager("population", handles, PBT(space), tracker, hyper,
                                MetricsAccumulator(), ready_versions=1,
                                store=PopulationStore(str(tmp_path)), seed=3)
    before = jax.device_get(loop.state)
    expected = PBT(space).decide(fitness, hyper, np.random.default_rng(3))
    events = manager.step()
    loop.stop.set()
    serving.join(timeout=60)
    assert events == expected and len(events) == 1
    event = events[0]
    assert (event.member, event.source) == ("member1", "member0")
    after = jax.device_get(loop.state)
    i, j = names.index(event.member), names.index(event.source)
    row = lambda tree, k: jax.tree.map(lambda x: x[k], tree)  # noqa: E731  (NumPy slices)
    copied, source = row(after, i), row(before, j)
    np.testing.assert_array_equal(np.asarray(copied.hyper["learning_rate"]),
                                  np.float32(event.after["learning_rate"]))
    for x, y in zip(jax.tree.leaves(copied._replace(hyper=None)),
                    jax.tree.leaves(source._replace(hyper=None)), strict=True):
        np.testing.assert_array_equal(x, y)
    for k in set(range(4)) - {i}:
        for x, y in zip(jax.tree.leaves(row(after, k)), jax.tree.leaves(row(before, k))):
            np.testing.assert_array_equal(x, y)
    assert loop.versions.tolist() == [3, 5, 5, 6]
    assert handles[event.member].checkpoint_requested.is_set()
    assert [e["member"] for e in PopulationStore(str(tmp_path)).events()] == ["member1"]
