"""Learning-rate horizons: planned per policy (jaxsrl.launch.launcher.planned_updates), and how
a resumed run with a larger --total_env_steps continues its schedule."""

from __future__ import annotations

import gymnasium
import jax
import numpy as np

from agents import impala
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.dataflow import ActorGroup, Dataflow, PolicyWorkerSpec, TrainerSpec
from jaxsrl.launch.launcher import planned_updates

TEAMS = ["hider", "hider", "seeker"]  # agents of one environment


def _two_team_flow(groups=((2, 0),)) -> Dataflow:
    actors = tuple(ActorGroup(f"actors{i}", count=count, envs_per_actor=envs,
                              teams={"hider": ["inf_h", "smp_h"], "seeker": ["inf_s", "smp_s"]})
                   for i, (count, envs) in enumerate(groups))
    return Dataflow(actors, (PolicyWorkerSpec("pol_h", "inf_h", "hider"),
                             PolicyWorkerSpec("pol_s", "inf_s", "seeker")),
                    (TrainerSpec("train_h", "smp_h", "hider"), TrainerSpec("train_s", "smp_s", "seeker")))


def _cfg(total=1280):
    return load_config(["--env=CartPole-v1", "--batch_segments=8", "--segment_length=16",
                        f"--total_env_steps={total}", "--envs_per_actor=4"])


def test_each_policy_plans_its_own_number_of_updates():
    """128 row-steps per update. Hiders have 2 rows per env frame: 1280 frames give 2560
    hider row-steps = 20 updates; the seeker's 1280 row-steps = 10 updates. Catches one
    horizon shared by all policies (the old 'fewest rows' plan gave both 10, so the
    hiders' LR reached 0 halfway through the run)."""
    flow = _two_team_flow()
    flow.validate()
    assert planned_updates(_cfg(), flow, TEAMS) == {"train_h": 20, "train_s": 10}


def test_one_policy_for_every_agent_plans_with_all_rows():
    flow = Dataflow((ActorGroup("actors", count=2, inference_stream="inf", sample_stream="smp"),),
                    (PolicyWorkerSpec("pol", "inf", "default"),),
                    (TrainerSpec("train", "smp", "default"),))
    assert planned_updates(_cfg(), flow, TEAMS) == {"train": 30}  # 3 rows per frame
    assert planned_updates(_cfg(), flow, [None]) == {"train": 10}  # single-agent


def test_rows_are_averaged_over_actor_groups_by_their_environments():
    """Group 0 (1 actor x 4 envs) serves both teams; group 1 (1 actor x 12 envs) too, so
    the mean stays 2 hider rows per frame; the plan must not depend on which group
    comes first."""
    flow = _two_team_flow(groups=((1, 4), (1, 12)))
    assert planned_updates(_cfg(), flow, TEAMS) == {"train_h": 20, "train_s": 10}


def test_resume_with_a_larger_total_continues_on_the_recomputed_horizon():
    """The documented resume rule: the horizon comes from the new total, the restored
    optimiser count carries on along it. After 3 of 4 planned updates the run is resumed
    with twice the total (8 updates): the step sizes are those of the 8-update schedule
    at steps 3*M onwards, and the anneal ends at 0 exactly after update 8 (a further
    update leaves the parameters unchanged, so Adam's own count agrees)."""
    spec = EnvSpec(gymnasium.spaces.Box(-1, 1, (3,), np.float32), gymnasium.spaces.Discrete(2))
    lr0, M = 1e-2, 2
    cfg = impala.IMPALAConfig(hidden_sizes=(8,), num_minibatches=M, learning_rate=lr0)
    rng = np.random.default_rng(0)
    B, T = 4, 3
    traj = Trajectory(rng.normal(size=(B, T + 1, 3)).astype(np.float32),
                      rng.integers(0, 2, (B, T)).astype(np.int32),
                      rng.normal(size=(B, T)).astype(np.float32), np.zeros((B, T), bool),
                      np.zeros((B, T), bool), np.zeros((B, T, 3), np.float32),
                      np.full((B, T), -0.69, np.float32), np.zeros((B, T), np.int32))
    first = impala.make(cfg, spec, num_updates=4)
    learn = jax.jit(first.learn)
    state = first.init(jax.random.PRNGKey(0))
    for i in range(3):
        state, _ = learn(state, traj, jax.random.PRNGKey(i))
    resumed = jax.jit(impala.make(cfg, spec, num_updates=8).learn)  # --total_env_steps doubled
    horizon = 8 * M
    for u in range(3, 8):
        state, metrics = resumed(state, traj, jax.random.PRNGKey(u))
        want = lr0 * np.mean([1 - (u * M + k) / horizon for k in range(M)])
        np.testing.assert_allclose(float(metrics["learning_rate"]), want, rtol=1e-5)
    after, metrics = resumed(state, traj, jax.random.PRNGKey(9))
    assert abs(float(metrics["learning_rate"])) < 1e-6 * lr0
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-7), after.params,
                 state.params)
