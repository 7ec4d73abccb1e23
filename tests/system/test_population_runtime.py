"""Population-based training in the runtime: the population manager
(jaxsrl/workers/population/manager.py) driving trainers through their public methods,
the trainer's request_replace, the --population config, resume, and a short real PBT
run of 2 members on CartPole through actor processes.

Fake trainers are threads that serve ``run_between_updates`` requests between
"updates" of a real jitted PPO ``learn``, so copies are checked on real learner
states (parameters, Adam state, observation-normaliser statistics) and compilations
are counted with the jitted function's ``_cache_size()``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from agents import ppo
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.launcher import train
from jaxsrl.launch.population import MemberMetrics
from jaxsrl.parallel import devices
from jaxsrl.population.pbt import PBT, PBTConfig, with_hyper
from jaxsrl.population.search_space import parse_search_space
from jaxsrl.streams import wire
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.learner.requests import RequestQueue, check_same_layout
from jaxsrl.core.agent import EnvSpec
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart, TrainerWorker
from jaxsrl.workers.population.fitness import FitnessTracker
from jaxsrl.workers.population.manager import PopulationManager
from jaxsrl.workers.population.store import PopulationStore

SPEC = EnvSpec(gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32), gymnasium.spaces.Discrete(2))
B, T = 4, 6
SPACE = parse_search_space({"learning_rate": {"min": 1e-5, "max": 1e-2, "log": True},
                            "ent_coef": {"min": 0.0, "max": 0.05}}, ppo.HYPERPARAMETERS)
WAIT_S = 120  # generous bound on every wait for an event


def _traj(seed=0):
    rng = np.random.default_rng(seed)
    terminated = np.zeros((B, T), bool)
    terminated[0, 2] = True
    return Trajectory(rng.normal(size=(B, T + 1, 3)).astype(np.float32),
                      rng.integers(0, 2, (B, T)).astype(np.int32),
                      rng.normal(size=(B, T)).astype(np.float32), terminated,
                      np.zeros((B, T), bool), rng.normal(size=(B, T, 3)).astype(np.float32),
                      (rng.normal(size=(B, T)) * 0.1 - 0.7).astype(np.float32),
                      np.zeros((B, T), np.int32))


@pytest.fixture(scope="module")
def agent():
    """PPO with observation normalisation (statistics in ``params``), jitted over the
    local mesh as the launcher does; a batch on the devices; a state factory."""
    mesh = devices.local_mesh()
    fns = ppo.make(ppo.PPOConfig(hidden_sizes=(8,), num_minibatches=2, num_epochs=1,
                                 normalize_observations=True), SPEC, num_updates=1000)
    learn = devices.jit_learn(fns.learn, mesh)
    batch = devices.put_batch(_traj(), mesh)

    def state(seed, lr):
        s = devices.put_replicated(fns.init(jax.random.PRNGKey(seed)), mesh)
        s, _ = learn(s, batch, jax.random.PRNGKey(seed))  # Adam moments, normaliser stats
        return with_hyper(s, {"learning_rate": lr, "ent_coef": 0.01})

    return learn, batch, state


class FakeTrainer:
    """A trainer as the manager sees it: a thread that serves requests between updates
    (a real ``learn`` on a fixed batch while ``learning`` is set)."""

    def __init__(self, name, state, learn, batch):
        self.name, self.state, self.version = name, state, 0
        self.learn, self.batch = learn, batch
        self.stop, self.checkpoint_requested = threading.Event(), threading.Event()
        self.learning = threading.Event()
        self.requests = RequestQueue(name)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        key = jax.random.PRNGKey(1)
        while not self.stop.is_set():
            self.requests.serve()
            if self.learning.is_set():
                self.state, _ = self.learn(self.state, self.batch, key)
                self.version += 1
            else:
                time.sleep(0.002)
        self.requests.close()

    def run_between_updates(self, fn):
        return self.requests.submit(fn, self)

    def request_replace(self, state):
        def swap(t):
            check_same_layout(t.state, state, t.name)
            t.state, t.version = state, t.version + 1
            return t.version
        return self.run_between_updates(swap)

    def close(self):
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def fakes(agent):
    learn, batch, state = agent
    made = {"a": FakeTrainer("a", state(0, 1e-3), learn, batch),
            "b": FakeTrainer("b", state(1, 1e-5), learn, batch)}
    yield made
    for t in made.values():
        t.close()


def _hyper(trainers):
    return {m: {k: float(t.state.hyper[k]) for k in SPACE} for m, t in trainers.items()}


def _manager(trainers, tracker, metrics, store=None, seed=0, **ready):
    return PopulationManager("population", trainers, PBT(SPACE, PBTConfig(fraction=0.5)), tracker,
                             _hyper(trainers), metrics, store=store, seed=seed,
                             **(ready or {"ready_versions": 1}))


def _leaves(state):
    return jax.tree_util.tree_flatten_with_path(state)[0]


def test_exploit_copies_the_whole_state_and_explore_changes_only_declared_names(fakes, tmp_path):
    a, b = fakes["a"], fakes["b"]
    source_before = jax.tree.map(np.asarray, a.state)
    assert not np.allclose(*(np.asarray(jax.tree.leaves(s.state.params)[0]) for s in (a, b)))
    tracker, metrics = FitnessTracker(["a", "b"]), MetricsAccumulator()
    tracker.add_episode("a", 100.0)
    tracker.add_episode("b", 10.0)
    store = PopulationStore(str(tmp_path))
    [event] = _manager(fakes, tracker, metrics, store).step()
    assert (event.member, event.source) == ("b", "a")
    assert set(event.after) == set(SPACE) and event.before == pytest.approx(
        {"learning_rate": 1e-5, "ent_coef": 0.01})
    for name, how in event.how.items():  # explore: x0.8 / x1.2 of the source's, or resampled
        src = float(np.float32({"learning_rate": 1e-3, "ent_coef": 0.01}[name]))
        if how == "resample":
            assert SPACE[name].contains(event.after[name])
        else:
            assert event.after[name] == pytest.approx(SPACE[name].clip(src * float(how[1:])))

    assert b.version == 1 and a.version == 0
    for (path, x), (_, y), (_, z) in zip(_leaves(b.state), _leaves(a.state), _leaves(source_before)):
        key = jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.asarray(y), z)  # the source is unchanged
        if key.startswith(".hyper") and any(n in key for n in SPACE):
            name = next(n for n in SPACE if n in key)
            assert np.asarray(x) == np.float32(event.after[name]), key
        else:  # params (network and normaliser statistics), Adam state, counters, hyper
            np.testing.assert_array_equal(np.asarray(x), z, err_msg=key)
        assert np.asarray(x).dtype == z.dtype and np.shape(x) == np.shape(z)
        if isinstance(x, jax.Array):
            assert x.sharding == y.sharding and x.committed == y.committed, key
            assert x.unsafe_buffer_pointer() != y.unsafe_buffer_pointer(), key  # no shared buffer
    stats = np.asarray(b.state.params["obs_stats"].mean)
    assert np.any(stats != 0)  # normaliser statistics were among the copied leaves

    [record] = store.events()
    assert record["member"] == "b" and record["source"] == "a" and record["version"] == 1
    assert record["before"] == event.before and record["after"] == event.after
    lineage, state = store.load()
    assert [e["source"] for e in lineage["events"]["b"]] == ["a"] and state["round"] == 1
    assert b.checkpoint_requested.is_set() and not a.checkpoint_requested.is_set()
    assert metrics.counter("pbt/exploits") == 1


def test_rounds_while_learning_never_recompile_learn(agent, fakes):
    learn = agent[0]
    learn(fakes["a"].state, agent[1], jax.random.PRNGKey(0))
    compiled = learn._cache_size()
    tracker, metrics = FitnessTracker(["a", "b"]), MetricsAccumulator()
    manager = _manager(fakes, tracker, metrics, ready_versions=2)
    for t in fakes.values():
        t.learning.set()
    thread = manager.start_thread()
    deadline = time.monotonic() + WAIT_S
    while metrics.counter("pbt/exploits") < 3:  # b keeps copying a
        assert manager.error is None and time.monotonic() < deadline, manager.error
        tracker.add_episode("a", 100.0)
        tracker.add_episode("b", 1.0)
        time.sleep(0.01)
    versions = {m: t.version for m, t in fakes.items()}
    deadline = time.monotonic() + WAIT_S
    while not all(t.version > versions[m] + 2 for m, t in fakes.items()):  # learning goes on
        assert time.monotonic() < deadline
        time.sleep(0.01)
    manager.stop.set()
    thread.join(WAIT_S)
    assert manager.error is None and learn._cache_size() == compiled  # no recompilation
    assert float(fakes["b"].state.hyper["learning_rate"]) != np.float32(1e-5)


def test_ready_interval_in_env_steps_or_versions():
    class Versioned:
        version = 0

    trainers = {"a": Versioned(), "b": Versioned()}
    tracker = FitnessTracker(["a", "b"])
    hyper = {m: {"learning_rate": 1e-3, "ent_coef": 0.0} for m in trainers}
    by_steps = PopulationManager("p", trainers, PBT(SPACE), tracker, hyper, MetricsAccumulator(),
                                 ready_env_steps=100)
    tracker.add_env_steps("a", 150)
    assert not by_steps.is_ready()  # b has not trained 100 frames yet
    tracker.add_env_steps("b", 100)
    assert by_steps.is_ready()
    by_versions = PopulationManager("p", trainers, PBT(SPACE), tracker, hyper,
                                    MetricsAccumulator(), ready_versions=3)
    trainers["a"].version = trainers["b"].version = 2
    assert not by_versions.is_ready()
    trainers["b"].version = trainers["a"].version = 3
    assert by_versions.is_ready()
    with pytest.raises(ValueError, match="exactly one"):
        PopulationManager("p", trainers, PBT(SPACE), tracker, hyper, MetricsAccumulator())


def test_fitness_is_the_mean_return_since_the_last_round():
    tracker = FitnessTracker(["a"])
    metrics = MetricsAccumulator()
    view = MemberMetrics(metrics, "a", tracker)
    view.add_episode({"return": 10.0, "length": 10})
    view.add_episode({"return": 20.0, "length": 20})
    view.add_episode({"return": 99.0}, suffix="/team")  # a team copy: not counted twice
    view.add_env_steps(64)
    assert tracker.take() == {"a": (15.0, 2)} and tracker.env_steps("a") == 64
    assert math.isnan(tracker.take()["a"][0])
    record = metrics.snapshot(1.0)
    assert record["population/return/a"] == 15.0 and record["env_steps"] == 64


class _Now:
    """A trainer that serves requests at once in the caller's thread."""

    def __init__(self, state):
        self.state, self.version = state, 0

    def run_between_updates(self, fn):
        from concurrent.futures import Future
        future = Future()
        future.set_result(fn(self))
        return future

    def request_replace(self, state):
        def swap(t):
            t.state, t.version = state, t.version + 1
            return t.version
        return self.run_between_updates(swap)


def _rounds(manager, tracker, fitness_rounds):
    out = []
    for fitness in fitness_rounds:
        for m, f in fitness.items():
            tracker.add_episode(m, f)
        out.append([e.to_dict() for e in manager.step()])
    return out


def test_resume_restores_lineage_round_counter_and_random_state(agent, tmp_path):
    state = agent[2]
    members = ["m0", "m1", "m2", "m3"]
    rng = np.random.default_rng(3)
    fitness = [{m: float(rng.normal()) for m in members} for _ in range(6)]

    def build():
        trainers = {m: _Now(state(i, [1e-5, 1e-4, 1e-3, 1e-2][i])) for i, m in enumerate(members)}
        tracker = FitnessTracker(members)
        return _manager(trainers, tracker, MetricsAccumulator(), PopulationStore(str(tmp_path)),
                        seed=5), tracker

    first, tracker = build()
    _rounds(first, tracker, fitness[:3])
    resumed, tracker2 = build()
    resumed.load(*PopulationStore(str(tmp_path)).load())
    assert resumed.lineage.state_dict() == first.lineage.state_dict()
    assert resumed.round == first.round == 3
    assert resumed.rng.bit_generator.state == first.rng.bit_generator.state
    resumed.hyper = {m: dict(h) for m, h in first.hyper.items()}  # the restored learners'
    assert _rounds(resumed, tracker2, fitness[3:]) == _rounds(first, tracker, fitness[3:])
    with pytest.raises(ValueError, match="members"):
        other = _manager({m: _Now(state(0, 1e-3)) for m in ["x", "y"]}, FitnessTracker(["x", "y"]),
                         MetricsAccumulator())
        other.load(*PopulationStore(str(tmp_path)).load())


# ---------------------------------------------------------------- the real trainer

def _fake_learn(state, traj, rng):
    del traj, rng
    return state._replace(update_step=state.update_step + 1), {}


def test_trainer_request_replace_publishes_a_version_and_drops_old_actions():
    from agents.state import LearnerState
    mesh = devices.local_mesh()
    state = devices.put_replicated(LearnerState({"w": jnp.zeros(3)}, (), jnp.int32(0),
                                                {"learning_rate": jnp.float32(1e-3)}), mesh)
    metrics, store = MetricsAccumulator(), ParameterStore()
    obs, actions = gymnasium.spaces.Box(-1, 1, (3,), np.float32), gymnasium.spaces.Discrete(2)
    worker = TrainerWorker("t", "p", devices.jit_learn(_fake_learn, mesh),
                           lambda b: devices.put_batch(b, mesh),
                           TrainerStart(state, jax.random.PRNGKey(0), 0), EnvSpec(obs, actions),
                           TrainerSettings(4, 2, max_rows=8), store, metrics)
    thread = worker.start_thread(wait_ready=True)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(worker.address)

    def send(version):
        arrays = {"obs": np.zeros((2, 5, 3), np.float32), "final_obs": np.zeros((2, 4, 3), np.float32),
                  "action": np.zeros((2, 4), np.int32), "reward": np.ones((2, 4), np.float32),
                  "terminated": np.zeros((2, 4), bool), "truncated": np.zeros((2, 4), bool),
                  "logp": np.full((2, 4), -0.69, np.float32),
                  "version": np.full((2, 4), version, np.int32)}
        sock.send_multipart(wire.encode("segment", arrays, {"actor": 0, "run": 1, "group": 0,
                                                            "env_steps": 8, "episodes": []}))

    def wait(pred):
        deadline = time.monotonic() + WAIT_S
        while not pred():
            assert worker.error is None and time.monotonic() < deadline, worker.error
            time.sleep(0.01)

    try:
        assert worker.serving.wait(WAIT_S)
        send(0)
        wait(lambda: worker.version == 1)
        new = with_hyper(jax.tree.map(lambda x: x + 1, worker.state), {"learning_rate": 5e-3})
        assert worker.request_replace(new).result(WAIT_S) == 2
        assert store.get("p").version == 2
        np.testing.assert_array_equal(np.asarray(store.get("p").params["w"]), np.ones(3))
        assert float(worker.state.hyper["learning_rate"]) == np.float32(5e-3)
        send(1)  # acted by the replaced parameters: dropped
        wait(lambda: metrics.counter("replaced_segments_dropped") == 1)
        send(2)
        wait(lambda: worker.version == 3)
        bad = worker.state._replace(update_step=jnp.float32(0))
        with pytest.raises(ValueError, match="update_step"):
            worker.request_replace(bad).result(WAIT_S)
        assert worker.state.update_step.dtype == jnp.int32  # kept
    finally:
        worker.stop.set()
        thread.join(WAIT_S)
        sock.close()
    with pytest.raises(RuntimeError, match="stopped"):
        worker.snapshot().result(1)


# ---------------------------------------------------------------- config

def _cfg(tmp_path, text, *flags):
    path = tmp_path / "pbt.toml"
    path.write_text(text)
    return load_config([f"--config={path}", *flags])


SPACE_TOML = "[pbt.search_space]\nlearning_rate = {min = 1e-5, max = 1e-2, log = true}\n"


def test_population_config_builds_one_stream_set_per_member(tmp_path):
    cfg = _cfg(tmp_path, "population = 3\nnum_actors = 4\n[pbt]\nready_env_steps = 500\n"
               + SPACE_TOML + "[pbt.initial]\nlearning_rate = [1e-5, 1e-4, 1e-3]\n",
               "--pbt.fraction=0.5")
    flow = cfg.get_dataflow()
    assert flow.policies() == ["member0", "member1", "member2"]
    assert [a.count for a in flow.actors] == [2, 1, 1]  # 4 actors in all, one or more each
    assert {p.policy for p in flow.policy_workers} == set(flow.policies())
    assert cfg.pbt.fraction == 0.5 and cfg.pbt.ready_env_steps == 500
    from jaxsrl.experiment.population import initial_hyper
    assert initial_hyper(cfg) == {"member0": {"learning_rate": 1e-5},
                                  "member1": {"learning_rate": 1e-4},
                                  "member2": {"learning_rate": 1e-3}}
    drawn = initial_hyper(_cfg(tmp_path, "population = 8\n[pbt]\nready_versions = 5\n" + SPACE_TOML))
    assert len({h["learning_rate"] for h in drawn.values()}) == 8
    assert all(1e-5 <= h["learning_rate"] <= 1e-2 for h in drawn.values())


@pytest.mark.parametrize("text,flags,match", [
    ("population = 1\n", (), "population=1"),
    ("population = 2\n[pbt]\nready_versions = 3\nready_env_steps = 9\n" + SPACE_TOML, (),
     "at most one of pbt.ready_env_steps.*configs/pbt_cartpole.toml"),
    ("population = 2\n[pbt]\nready_versions = 3\n[pbt.search_space]\nfoo = {min = 0, max = 1}\n",
     (), "'foo' is not a hyperparameter"),
    ("population = 2\n[pbt]\nready_versions = 3\n[pbt.search_space]\n"
     "gamma = {min = 1, max = 0.9}\n", (), "min=1.0 must be below"),
    ("population = 2\n[pbt]\nready_versions = 3\n" + SPACE_TOML
     + "[pbt.initial]\nlearning_rate = [1e-3]\n", (), "must list 2 values"),
    ("population = 2\n[pbt]\nready_versions = 3\n" + SPACE_TOML
     + "[pbt.initial]\nlearning_rate = [1e-3, 1.0]\n", (), "1.0 is not a number in"),
    ("population = 2\n[pbt]\nready_versions = 3\n" + SPACE_TOML, ("--pbt.fraction=0.7",),
     "pbt.fraction=0.7"),
    ("[pbt]\nready_versions = 3\n" + SPACE_TOML, (), "population=0"),
    ("population = 2\n[pbt]\nready_versions = 3\nbogus = 1\n" + SPACE_TOML, (), "unknown keys"),
    ("population = 2\n[pbt]\nready_versions = 3\n" + SPACE_TOML + "[dataflow]\nactors = []\n", (),
     "drop the \\[dataflow\\] table"),
])
def test_population_config_errors_are_one_line(tmp_path, text, flags, match):
    with pytest.raises(ValueError, match=match) as info:
        _cfg(tmp_path, text, *flags)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- a real run

POP_TOML = """
population = 2
[pbt]
ready_env_steps = 3000
[pbt.search_space]
learning_rate = {min = 1e-5, max = 1e-2, log = true}
[pbt.initial]
learning_rate = [1e-5, 3e-3]
"""
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


def test_pbt_run_of_two_members_on_cartpole_exploits_and_resumes(tmp_path):
    """2 members through real actor processes: at least one exploit happens (the two
    members' mean returns differ), the event reaches events.jsonl and the lineage, the
    checkpoints hold each member's hyperparameters, and --resume continues the lineage
    and the round counter."""
    path = tmp_path / "pbt.toml"
    path.write_text(POP_TOML)
    logdir = str(tmp_path / "run")
    # 48k steps: a member whose learner compiles slowly (cold cache) must still reach
    # ready_env_steps before the other member's actors use up the budget.
    record = train(load_config(SMALL + [f"--config={path}", "--total_env_steps=48000",
                                        f"--logdir={logdir}"]))
    assert record["pbt/exploits"] >= 1
    store = PopulationStore(logdir)
    events = store.events()
    assert len(events) == record["pbt/exploits"]
    assert {events[0]["member"], events[0]["source"]} == {"member0", "member1"}
    lineage, state = store.load()
    assert sum(len(v) for v in lineage["events"].values()) == len(events)
    assert lineage["initial"] == {"member0": {"learning_rate": 1e-5},
                                  "member1": {"learning_rate": 3e-3}}
    for policy in ("member0", "member1"):
        assert os.listdir(os.path.join(logdir, "checkpoints", policy))
    records = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl"))]
    assert any("population/learning_rate/member0" in r for r in records)
    assert any("population/return/member1" in r for r in records)

    more = record["env_steps"] + 8000
    record2 = train(load_config(SMALL + [f"--total_env_steps={more}", f"--logdir={logdir}",
                                         "--resume"]))
    lineage2, state2 = store.load()
    assert state2["round"] >= state["round"]
    for member, history in lineage["events"].items():  # the old lineage is kept, extended
        assert lineage2["events"][member][:len(history)] == history
    assert record2["env_steps"] >= more


def test_trainers_checkpointing_at_once_leave_every_checkpoint_readable(tmp_path):
    """Population members are asked for checkpoints together; Orbax 0.12 corrupts
    saves that two threads start at once (even of different folders) unless
    ``Checkpointer.save`` serialises them."""
    from jaxsrl.experiment.checkpoint import Checkpointer
    checkpointers = [Checkpointer(str(tmp_path / f"m{i}")) for i in range(3)]
    state = {"w": jnp.ones((32, 32)), "b": jnp.arange(3.0)}
    for step in (1, 2):
        barrier = threading.Barrier(len(checkpointers))

        def save(c):
            barrier.wait()
            c.save(step, state, {"policy_version": step})

        threads = [threading.Thread(target=save, args=(c,)) for c in checkpointers]
        for th in threads:
            th.start()
        for th in threads:
            th.join(WAIT_S)
    for c in checkpointers:
        c.close()
        assert sorted(os.listdir(c.directory)) == ["1", "2"]  # finalised, no tmp folder
        restored, meta = Checkpointer(c.directory).restore(state)
        np.testing.assert_array_equal(np.asarray(restored["b"]), np.arange(3.0))
        assert meta["policy_version"] == 2


def test_plot_draws_member_returns_and_hyperparameter_trajectories(tmp_path):
    from jaxsrl.tools import plotting
    logdir = tmp_path / "pbt"
    (logdir / "population").mkdir(parents=True)
    with open(logdir / "metrics.jsonl", "w") as f:
        for i in range(1, 6):
            f.write(json.dumps({"env_steps": 1000 * i, "wall_time_s": float(i),
                                "episode_return_mean": 20.0 * i,
                                "population/return/member0": 10.0 * i,
                                "population/return/member1": 30.0 * i,
                                "population/fitness/member0": 10.0 * i,
                                "population/learning_rate/member0": 1e-5 if i < 3 else 1e-3,
                                "population/learning_rate/member1": 1e-3}) + "\n")
    (logdir / "population" / "events.jsonl").write_text(json.dumps(
        {"round": 1, "env_steps": 2500, "member": "member0", "source": "member1",
         "before": {"learning_rate": 1e-5}, "after": {"learning_rate": 1e-3}}) + "\n")
    runs = plotting.load_runs([str(logdir)])
    assert plotting.population_quantities(runs) == {"return": ["member0", "member1"],
                                                    "learning_rate": ["member0", "member1"]}
    assert plotting.population_events(str(logdir))[0]["member"] == "member0"
    paths = plotting.plot_runs([str(logdir)], str(tmp_path / "curves.png"), episode_stats=False)
    assert paths == [str(tmp_path / "curves.png"), str(tmp_path / "curves_population.png")]
    assert all(os.path.getsize(p) > 1000 for p in paths)


def test_evaluation_maps_a_population_run_to_its_first_member():
    from jaxsrl.tools.evaluation import team_policies
    assert team_policies({"population": 3, "num_actors": 2}) == {None: "member0"}
