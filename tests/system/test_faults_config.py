"""Configuration errors fail before any process starts, with one line naming the bad value."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from jaxsrl.experiment.config import load_config
from test_faults_helpers import REPO_ROOT


@pytest.mark.parametrize("flags, match", [
    (["--ppo.num_minibatches=3"], r"ppo.num_minibatches=3 must be a positive divisor of "
                                  r"batch_segments\*segment_length=64\*32=2048"),
    (["--batch_segments=3", "--segment_length=5", "--ppo.num_minibatches=2"],
     r"num_minibatches=2 must be a positive divisor .*=15"),
    (["--ppo.num_minibatches=0"], "num_minibatches=0 must be a positive divisor"),
    (["--num_actors=0"], "num_actors=0 must be positive"),
    (["--batch_segments=0"], "batch_segments=0 must be positive"),
    (["--segment_length=-1"], "segment_length=-1 must be positive"),
    (["--total_env_steps=-5"], "total_env_steps=-5 must be positive"),
    (["--checkpoint_interval_s=0"], "checkpoint_interval_s=0.0 must be > 0"),
    (["--actor_timeout_s=-1"], "actor_timeout_s=-1.0 must be > 0"),
    (["--actor_heartbeat_timeout_s=-1"], "actor_heartbeat_timeout_s=-1.0 must be >= 0"),
    (["--inference_deadline_ms=-2"], "inference_deadline_ms=-2.0 must be >= 0"),
    (["--max_actor_restarts=-1"], "max_actor_restarts=-1 must be >= 0"),
    (["--host="], "host='' must name an interface"),
    (["--total_env_steps=1000000000000"], "plans 7,812,500,000 optimiser steps; learning-rate "
                                          "schedules count in int32"),
])
def test_impossible_values_are_named(flags, match):
    with pytest.raises(ValueError, match=match):
        load_config(flags)


def test_bad_choice_of_on_nonfinite_exits():
    with pytest.raises(SystemExit):
        load_config(["--on_nonfinite=ignore"])


def test_bad_values_in_a_toml_file_are_named(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('on_nonfinite = "ignore"\n')
    with pytest.raises(ValueError, match="on_nonfinite='ignore' must be 'drop' or 'raise'"):
        load_config([f"--config={toml}"])
    toml.write_text("ring_size = 2\n[dataflow]\nactors = [{name = 'a', count = 0, inference_stream = 'i', "
                    "sample_stream = 's'}]\npolicy_workers = [{name = 'p', inference_stream = 'i', "
                    "policy = 'd'}]\ntrainers = [{name = 't', sample_stream = 's', policy = 'd'}]\n")
    with pytest.raises(ValueError, match="actor group 'a' has count=0; need >= 1"):
        load_config([f"--config={toml}"])
    toml.write_text(toml.read_text().replace("count = 0", "count = 1, envs_per_actor = 3"))
    with pytest.raises(ValueError, match="actor group 'a': envs_per_actor=3 must be a positive "
                                         "multiple of ring_size=2"):
        load_config([f"--config={toml}"])


def test_unknown_agent_and_environment_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown agent 'nosuchagent'; valid agents: \[.*'dqn'.*'ppo'.*\]"):
        load_config(["--agent=nosuchagent"])
    with pytest.raises(ValueError, match=r"unknown environment 'Nope-v0'.*hide_and_seek"):
        load_config(["--env=Nope-v0"])


def test_train_py_prints_one_line_and_starts_nothing(tmp_path):
    flag, message = "--ppo.num_minibatches=3", "ppo.num_minibatches=3 must be a positive divisor"
    logdir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), flag,
                             f"--logdir={logdir}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    children = set()
    while proc.poll() is None:  # no actor process is ever started
        try:
            children |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            break
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py: error: ") and message in lines[0], err
    assert not children and not logdir.exists()


def test_unsupported_space_and_resume_without_checkpoint_fail_in_one_line(tmp_path):
    """train.py prints one line and exits 2, and writes nothing, for errors found in train()."""
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for args, needle in [(["--env=FrozenLake-v1"], "unsupported observation space Discrete(16)"),
                         (["--resume"], "--resume: no checkpoint under")]:
        logdir = tmp_path / args[0].strip("-").replace("=", "_")
        proc = subprocess.run([sys.executable, os.path.join(repo, "scripts", "train.py"), *args,
                               f"--logdir={logdir}"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert not logdir.exists()
