"""Hostile messages at every port of live runs (issue 42): each run receives, at every TCP
port its process tree listens on, one message of every class of
``tests/hostile_ports.py`` (the issue's dtype-list packet first; from PUSH and DEALER
sockets, then raw bytes). It must finish its step budget with exit code 0, count what
it dropped (``dropped_*`` in metrics.jsonl) and log a warning naming the port.

The default suite runs the default CPU run (inline inference: the inline status port,
the trainer's sample port, the parameter publisher); ``-m slow`` runs the other
receivers: inference servers in a thread and in processes, buffer processes, Ray.
"""

from __future__ import annotations

import re

import pytest

import hostile_ports as hp

RUN = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=4", "--segment_length=16",
       "--batch_segments=8", "--ppo.hidden_sizes", "16", "16", "--ppo.num_minibatches=2",
       "--ppo.num_epochs=1", "--log_interval_s=0.3"]
N = len(hp.MESSAGES)


def _check(out: hp.Outcome, counters: dict[str, int]) -> None:
    tail = out.log[-3000:]
    assert out.code == 0, f"the run did not finish (exit {out.code}):\n{tail}"
    assert "died" not in out.log, tail
    got = hp.dropped(out.last)
    for name, at_least in counters.items():
        assert got.get(name, 0) >= at_least, (name, got, tail)
    named = set(re.findall(r"dropped a malformed \w+ at tcp://127\.0\.0\.1:(\d+)", out.log))
    assert named and {int(p) for p in named} <= out.ports, (named, out.ports)
    print(f"ports attacked {sorted(out.ports)}, warnings naming {sorted(named)}, exit {out.code}, "
          f"env steps {out.last.get('env_steps')}, {got}")  # (the figures of docs/reliability.md)


def test_default_cpu_run_survives_every_message_class_at_every_port(tmp_path):
    out = hp.attack_run(RUN + ["--total_env_steps=12000"], str(tmp_path / "run"))
    # the inline status port and the trainer's sample port each take every message once
    _check(out, {"dropped_status": N, "dropped_segments": N})
    assert out.last.get("env_steps", 0) >= 12000
    assert re.search(r"inline parameters: dropped a malformed status at tcp://127\.0\.0\.1:\d+: "
                     r"array 'obs': dtype \[\[1\]\] is not allowed", out.log), out.log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("mode,extra,counters,ready", [
    ("thread", ["--inference=thread"], {"dropped_requests": N, "dropped_segments": N}, ""),
    ("process", ["--inference=process"], {"dropped_status": N, "dropped_segments": N},
     "serving"),
    ("buffer process", ["--agent=dqn", "--config=configs/dqn/CartPole-v1-buffer-process.toml"],
     {"dropped_status": N, "dropped_requests": N, "dropped_buffer_messages": N,
      "dropped_segments": N}, "buffer processes serving"),
])
def test_runs_survive_every_message_class_at_every_port(tmp_path, mode, extra, counters, ready):
    args = (RUN if "--agent=dqn" not in extra else RUN[:4] + ["--log_interval_s=0.3"]) + extra
    out = hp.attack_run(args + ["--total_env_steps=30000"], str(tmp_path / "run"), rounds=3,
                        ready_line=ready)
    _check(out, counters)


@pytest.mark.slow
def test_ray_run_survives_every_message_class_at_every_port(tmp_path):
    pytest.importorskip("ray")
    out = hp.attack_run(RUN + ["--launcher=ray", "--total_env_steps=12000"], str(tmp_path / "run"))
    _check(out, {"dropped_segments": N})
