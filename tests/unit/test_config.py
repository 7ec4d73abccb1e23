"""Configuration: resolution order and clear errors before any process starts."""

import dataclasses

import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.dataflow import Dataflow, default_dataflow


def test_defaults_toml_and_flags_resolve_in_order(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("num_actors = 3\nsegment_length = 16\n[ppo]\nlearning_rate = 0.01\n")
    cfg = load_config(["--env=CartPole-v1", f"--config={toml}", "--num_actors=5",
                       "--ppo.num_epochs=7"])
    assert cfg.num_actors == 5  # flag beats file
    assert cfg.segment_length == 16  # file beats default
    assert cfg.ppo.learning_rate == 0.01 and cfg.ppo.num_epochs == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_actors = 1


def test_unknown_agent_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown agent 'nosuchagent'.*'ppo'"):
        load_config(["--agent=nosuchagent"])


def test_unknown_environment_is_named():
    with pytest.raises(ValueError, match="unknown environment 'NoSuchEnv-v0'"):
        load_config(["--env=NoSuchEnv-v0"])


@pytest.mark.parametrize("flag, match", [
    ("--num_actors=0", "num_actors=0 must be positive"),
    ("--total_env_steps=-5", "total_env_steps=-5 must be positive"),
    ("--envs_per_actor=7", "envs_per_actor=7 must be divisible by ring_size=2"),
])
def test_impossible_sizes_fail_with_the_value(flag, match):
    with pytest.raises(ValueError, match=match):
        load_config([flag])


def test_unknown_override_flag_exits():
    with pytest.raises(SystemExit):
        load_config(["--no_such_option=3"])


def test_unknown_toml_key_is_named(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("num_actorz = 3\n")
    with pytest.raises(ValueError, match="unknown config key 'num_actorz'"):
        load_config([f"--config={toml}"])
    toml.write_text("[ppo]\nlearning_rat = 3\n")
    with pytest.raises(ValueError, match="unknown \\[ppo\\] keys \\['learning_rat'\\]"):
        load_config([f"--config={toml}"])


def test_derived_values():
    cfg = load_config(["--total_env_steps=10000", "--batch_segments=8", "--segment_length=16"])
    assert cfg.steps_per_update() == 128
    assert cfg.num_updates() == 79  # ceil(10000 / 128)
    assert cfg.num_updates(rows_per_env=4) == 313  # 4 agents share each env frame


def test_default_dataflow_is_valid():
    default_dataflow(2).validate()


@pytest.mark.parametrize("data, match", [
    ({"actors": [{"name": "a", "count": 1, "inference_stream": "i", "sample_stream": "s"}],
      "policy_workers": [{"name": "p", "inference_stream": "x", "policy": "d"}],
      "trainers": [{"name": "t", "sample_stream": "s", "policy": "d"}]},
     "no policy worker serves inference stream 'i'"),
    ({"actors": [{"name": "a", "count": 1, "inference_stream": "i", "sample_stream": "s"}],
      "policy_workers": [{"name": "p", "inference_stream": "i", "policy": "other"}],
      "trainers": [{"name": "t", "sample_stream": "s", "policy": "d"}]},
     "serves policy 'other', which no trainer learns"),
    ({"actors": [{"name": "a", "count": 1, "inference_stream": "i", "sample_stream": "s"}],
      "policy_workers": [{"name": "a", "inference_stream": "i", "policy": "d"}],
      "trainers": [{"name": "t", "sample_stream": "s", "policy": "d"}]},
     "repeated: \\['a'\\]"),
    ({"actorz": []}, "unknown dataflow keys \\['actorz'\\]"),
    ({"actors": [{"name": "a", "cnt": 1}]}, "bad ActorGroup"),
])
def test_broken_dataflows_are_rejected(data, match):
    with pytest.raises(ValueError, match=match):
        Dataflow.from_dict(data).validate()


@pytest.mark.parametrize("flag, match", [
    ("--ppo.learning_rate=-1", "ppo.learning_rate=-1.0 is out of range"),
    ("--ppo.gamma=1.5", "ppo.gamma=1.5 is out of range"),
    ("--ppo.network=cnn", "ppo.network='cnn'"),
])
def test_agent_hyperparameters_are_range_checked(flag, match):
    with pytest.raises(ValueError, match=match):
        load_config([flag])


def test_resume_takes_the_runs_own_config_then_the_flags_given_now(tmp_path):
    import json

    from jaxsrl.experiment.config import to_dict
    logdir = str(tmp_path / "run")
    first = load_config(["--env=HalfCheetah-v5", "--remote_inference", "--inference_servers=2",
                         "--ppo.learning_rate=0.001", f"--logdir={logdir}"])
    (tmp_path / "run").mkdir()
    saved = to_dict(first) | {"logdir": logdir, "a_key_of_another_version": 1}
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    again = load_config([f"--logdir={logdir}", "--resume", "--total_env_steps=2000000"])
    assert again.env == "HalfCheetah-v5" and again.resume  # not the default CartPole-v1
    assert again.remote_inference and again.inference_servers == 2
    assert again.ppo.learning_rate == 0.001 and again.ppo.hidden_sizes == first.ppo.hidden_sizes
    assert again.total_env_steps == 2_000_000  # a flag given now wins
    with pytest.raises(ValueError, match="--env=CartPole-v1 but the run .*HalfCheetah-v5"):
        load_config(["--env=CartPole-v1", f"--logdir={logdir}", "--resume"])
    fresh = load_config([f"--logdir={logdir}"])  # without --resume the file is not read
    assert fresh.env == "CartPole-v1"
