"""Periodic evaluation (--eval_every): scheduling, and a real evaluation process."""

import time

from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train
from jaxsrl.launch.periodic_eval import PeriodicEvaluator

SMALL = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


def test_schedule_waits_for_checkpoint_and_one_process_at_a_time(tmp_path):
    ev = PeriodicEvaluator(str(tmp_path), every=10, episodes=1)
    assert not ev.due(9) and ev.due(10)
    ev.requested(12)
    assert not ev.due(30)  # one request at a time
    assert ev.poll(saved_version=11) is None and ev.proc is None  # checkpoint not there yet
    assert not PeriodicEvaluator(str(tmp_path), every=0, episodes=1).due(10**6)  # off


def test_evaluation_process_logs_eval_metrics(tmp_path):
    logdir = str(tmp_path / "run")
    record = train(load_config(SMALL + ["--total_env_steps=3000", f"--logdir={logdir}"]))
    version = record["policy_version"]
    ev = PeriodicEvaluator(logdir, every=5, episodes=2)
    ev.requested(version)
    assert ev.poll(saved_version=version) is None and ev.proc is not None  # started
    deadline = time.time() + 300
    result = None
    while result is None and time.time() < deadline:
        time.sleep(0.2)
        result = ev.poll(None)
    assert result is not None and "eval/failures" not in result, result
    assert result["eval/policy_version"] == version
    assert 1 <= result["eval/return_mean"] <= 500 and result["eval/episodes"] == 2
    assert ev.next_version == version + 5
