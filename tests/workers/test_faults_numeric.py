"""Numerical faults at the learner boundary: NaN/Inf in segments, non-finite updates."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import zmq

from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import ComponentDied, train
from jaxsrl.workers.learner.trainer import NonFiniteError
from test_faults_helpers import (FLAKY_ENV, T, Servers, actor_children, client,  # noqa: F401
                                 flaky_env_path, segment, segment_arrays, small_args,
                                 wait_counter, wait_for)


@pytest.fixture
def servers():
    s = Servers()
    yield s
    s.close()


def _bad(**changes):
    arrays = segment_arrays(2)
    for name, (index, value) in changes.items():
        arrays[name] = arrays[name].copy()
        arrays[name][index] = value
    return segment(arrays=arrays)


@pytest.mark.parametrize("changes, name", [
    ({"reward": ((0, 1), np.nan)}, "reward"),
    ({"reward": ((1, 0), -np.inf)}, "reward"),
    ({"obs": ((0, T, 2), np.inf)}, "obs"),
    ({"final_obs": ((1, 0, 0), np.nan)}, "final_obs"),
    ({"logp": ((0, 0), np.nan)}, "logp"),
])
def test_nonfinite_segment_is_dropped_and_counted(servers, changes, name):
    sock = client(servers.trainer.address, zmq.PUSH)
    sock.send_multipart(_bad(**changes))
    wait_counter(servers, "nonfinite_segments_dropped", 1)
    drop = servers.trainer.drops.recent()[-1]
    assert f"holds NaN or Inf in ['{name}']" in drop.reason and not drop.stale
    assert servers.metrics.env_steps == 0  # nothing of the segment was counted
    for _ in range(2):  # a valid batch is still learned from
        sock.send_multipart(segment(rows=2))
    wait_for(lambda: servers.store.get("p").version == 1, 20, "an update")
    assert servers.trainer.pending_rows == 0
    sock.close()


def test_nonfinite_segment_stops_the_trainer_with_raise():
    s = Servers(on_nonfinite="raise")
    try:
        sock = client(s.trainer.address, zmq.PUSH)
        sock.send_multipart(_bad(reward=((0, 0), np.nan)))
        wait_for(lambda: s.trainer.error is not None, 20, "the trainer to stop")
        assert isinstance(s.trainer.error, NonFiniteError)
        assert "holds NaN or Inf in ['reward']" in str(s.trainer.error)
        sock.close()
    finally:
        s.close()


def test_nonfinite_update_is_skipped_and_not_published(servers):
    sock = client(servers.trainer.address, zmq.PUSH)
    huge = segment_arrays(2)
    huge["reward"] = np.full((2, T), 3e38, np.float32)  # finite, but the mean overflows to Inf
    for _ in range(2):
        sock.send_multipart(segment(arrays=huge))
    wait_counter(servers, "nonfinite_updates_skipped", 1)
    assert servers.trainer.version == 0 and servers.store.get("p").version == 0
    assert float(servers.trainer.state.params) == 1.0  # the previous state was kept
    for _ in range(2):
        sock.send_multipart(segment(rows=2))
    wait_for(lambda: servers.store.get("p").version == 1, 20, "an update")
    assert np.isfinite(float(servers.store.get("p").params))
    sock.close()


def test_nan_rewards_in_a_run_with_raise_stop_it_naming_the_trainer(tmp_path, flaky_env_path):
    cfg = load_config(small_args(str(tmp_path / "run"), "--total_env_steps=100000000",
                                 "--on_nonfinite=raise"))
    cfg = dataclasses.replace(cfg, env=FLAKY_ENV, env_kwargs={"fail_in": "", "nan_reward_after": 100})
    with pytest.raises(ComponentDied, match=r"trainer died: NonFiniteError.*NaN or Inf in \['reward'\]"):
        train(cfg)
    assert actor_children() == []
