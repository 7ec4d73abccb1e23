"""Short end-to-end runs through real actor processes, ZeroMQ streams and threads."""

import json
import os

import psutil
import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train

# The inference server (these tests drive and break it); --inference=auto would pick
# inline on a CPU-only machine (tests/system/test_inline_inference.py covers that).
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16",
         "--inference=server"]


def _records(logdir):
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _no_children():
    return psutil.Process().children(recursive=True) == []


def test_cartpole_through_real_actor_processes(tmp_path):
    logdir = str(tmp_path / "run")
    cfg = load_config(SMALL + ["--total_env_steps=4000", f"--logdir={logdir}"])
    record = train(cfg)
    assert record["env_steps"] >= 4000  # samples flowed from the actor processes
    assert record["policy_version"] >= 2  # the learner updated and published parameters
    records = _records(logdir)
    assert any("episode_return_mean" in r for r in records)
    intervals = [r for r in records if not r.get("final")]
    assert {"fps", "wall_time_s"} <= set(intervals[-1])
    # Learner metrics are in every interval that holds an update (under load the last,
    # short one may hold none).
    updated = [r for r in intervals if "loss/total" in r]
    assert updated and {"staleness_mean", "fps"} <= set(updated[-1])
    closing = records[-1]  # written after the learner stopped: matches the final checkpoint
    assert closing["final"] and closing["policy_version"] == record["policy_version"]
    assert closing["env_steps"] == record["env_steps"] >= intervals[-1]["env_steps"]
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))
    assert _no_children()  # every actor process exited

    # --resume continues from the final checkpoint: counters carry on. The budget is a
    # lower bound (a loaded machine overshoots it by the segments in flight when the run
    # stops), so the resumed run's budget is set from the steps actually reached.
    more = record["env_steps"] + 2000
    cfg2 = load_config(SMALL + [f"--total_env_steps={more}", f"--logdir={logdir}", "--resume"])
    record2 = train(cfg2)
    assert record2["policy_version"] > record["policy_version"]
    assert record2["env_steps"] >= more
    assert _no_children()


TWO_POLICIES = """
[dataflow]
actors = [
  {name = "left", count = 1, inference_stream = "inf_a", sample_stream = "smp_a"},
  {name = "right", count = 1, inference_stream = "inf_b", sample_stream = "smp_b"},
]
policy_workers = [
  {name = "server_a", inference_stream = "inf_a", policy = "a"},
  {name = "server_b", inference_stream = "inf_b", policy = "b"},
]
trainers = [
  {name = "learner_a", sample_stream = "smp_a", policy = "a"},
  {name = "learner_b", sample_stream = "smp_b", policy = "b"},
]
"""

TWO_SERVERS_ONE_LEARNER = """
[dataflow]
actors = [
  {name = "left", count = 1, inference_stream = "inf_1", sample_stream = "samples"},
  {name = "right", count = 2, inference_stream = "inf_2", sample_stream = "samples", envs_per_actor = 4},
]
policy_workers = [
  {name = "server_1", inference_stream = "inf_1", policy = "shared"},
  {name = "server_2", inference_stream = "inf_2", policy = "shared"},
]
trainers = [{name = "learner", sample_stream = "samples", policy = "shared"}]
"""


@pytest.mark.parametrize("graph, policies", [(TWO_POLICIES, ["a", "b"]),
                                             (TWO_SERVERS_ONE_LEARNER, ["shared"])])
def test_non_trivial_dataflow_graphs_run(tmp_path, graph, policies):
    toml = tmp_path / "graph.toml"
    toml.write_text(graph)
    logdir = str(tmp_path / "run")
    # 40k frames: every learner's first update (a cold compile included) lands well before
    # the budget, which counts frames, not updates (10k raced one learner's cold compile
    # once the actors got faster: its partner's actor used the whole budget).
    cfg = load_config(SMALL + [f"--config={toml}", "--total_env_steps=40000", f"--logdir={logdir}"])
    record = train(cfg)
    assert record["env_steps"] >= 40000
    for policy in policies:  # every learner of the graph updated and checkpointed
        assert os.listdir(os.path.join(logdir, "checkpoints", policy))
    if len(policies) > 1:
        assert all(record[f"policy_version/{p}"] >= 1 for p in policies)
    assert _no_children()
