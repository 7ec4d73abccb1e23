"""Actor worker: a CPU process that steps a ring of environment groups.

It imports no JAX. Each of its ``ring_size`` groups holds ``envs_per_group``
environments; while one group waits for actions from the inference server, the
others step (SRL's environment ring). Each group's rows are cut into segments of
``T`` steps plus one bootstrap observation, tagged with the policy version of each
action, and pushed on the sample stream.

Messages (see ``docs/architecture.md``):
  -> inference: ``act``    meta {actor, run, group}; arrays obs...
  <- inference: ``action`` meta {group, version}; arrays action [n, ...], logp [n]
  -> samples:   ``segment`` meta {actor, run, group, env_steps, episodes, timing};
                arrays obs... [n, T+1, ...], action, reward, terminated, truncated,
                final_obs..., logp, version (each [n, T, ...]).

Run as ``python -m jaxsrl.workers.actor '<json spec>'`` (the launcher does this).
Exit codes: 0 stopped by SIGTERM/SIGINT; 3 the inference server did not answer in
``timeout_s``; 1 any other error (traceback on stderr).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import zmq

from jaxsrl import wire
from jaxsrl.envs import make_actor_env
from jaxsrl.envs.spaces import action_leaf

log = logging.getLogger("jaxsrl.actor")

EXIT_SERVER_TIMEOUT = 3


class SegmentBuffer:
    """Preallocated ``[rows, T(+1), ...]`` buffers for one group's current segment."""

    def __init__(self, first_obs: dict, rows: int, T: int, action_dtype: str, action_shape: tuple):
        self.T, self.t = T, 0
        self.obs = {k: np.zeros((rows, T + 1) + v.shape[1:], v.dtype) for k, v in first_obs.items()}
        self.final_obs = {k: np.zeros((rows, T) + v.shape[1:], v.dtype) for k, v in first_obs.items()}
        self.action = np.zeros((rows, T) + action_shape, action_dtype)
        self.reward = np.zeros((rows, T), np.float32)
        self.terminated = np.zeros((rows, T), bool)
        self.truncated = np.zeros((rows, T), bool)
        self.logp = np.zeros((rows, T), np.float32)
        self.version = np.zeros((rows, T), np.int32)
        self.episodes: list = []
        self.start(first_obs)

    def start(self, obs: dict) -> None:
        self.t = 0
        self.episodes = []
        for k, v in obs.items():
            self.obs[k][:, 0] = v

    def record(self, action, logp, version: int, step) -> bool:
        """Store one step; returns True when the segment is full."""
        t = self.t
        self.action[:, t] = action
        self.logp[:, t] = logp
        self.version[:, t] = version
        self.reward[:, t] = step.reward
        self.terminated[:, t] = step.terminated
        self.truncated[:, t] = step.truncated
        for k, v in step.obs.items():
            self.obs[k][:, t + 1] = v
        if step.truncated.any():
            for k, v in step.final_obs.items():
                self.final_obs[k][:, t] = v
        else:
            for v in self.final_obs.values():
                v[:, t] = 0
        self.episodes.extend(step.episodes)
        self.t += 1
        return self.t == self.T

    def arrays(self) -> dict:
        out = {k: v for k, v in self.obs.items()}
        out.update({"final_" + k: v for k, v in self.final_obs.items()})
        out.update(action=self.action, reward=self.reward, terminated=self.terminated,
                   truncated=self.truncated, logp=self.logp, version=self.version)
        return out


class Actor:
    """The actor's event loop (see module docstring). ``spec`` is the launcher's dict."""

    def __init__(self, spec: dict, context: zmq.Context | None = None):
        self.spec = spec
        self.actor_id, self.run_id = int(spec["actor_id"]), int(spec["run_id"])
        self.T = int(spec["segment_length"])
        self.timeout_ms = int(1000 * float(spec.get("timeout_s", 30.0)))
        self.ctx = context or zmq.Context.instance()
        self.inference = self.ctx.socket(zmq.DEALER)
        self.inference.setsockopt(zmq.LINGER, 0)
        self.inference.connect(spec["inference_address"])
        self.samples = self.ctx.socket(zmq.PUSH)
        self.samples.setsockopt(zmq.LINGER, 1000)
        self.samples.setsockopt(zmq.SNDHWM, int(spec.get("sample_hwm", 2)))
        self.samples.connect(spec["sample_address"])
        n = int(spec["envs_per_group"])
        self.groups = []
        for g in range(int(spec["ring_size"])):
            seed = int(spec["seed"]) + 10_000 * self.actor_id + n * g
            self.groups.append(make_actor_env(spec["env"], n, seed, spec.get("env_kwargs")))
        self.action_dtype, self.action_shape = action_leaf(self.groups[0].action_space)
        self.timing = {"env_s": 0.0, "wait_s": 0.0}

    def _request(self, g: int, obs: dict) -> None:
        meta = {"actor": self.actor_id, "run": self.run_id, "group": g}
        self.inference.send_multipart(wire.encode("act", obs, meta), copy=False)

    def _receive(self) -> wire.Message:
        t0 = time.perf_counter()
        if not self.inference.poll(self.timeout_ms):
            raise TimeoutError(f"inference server at {self.spec['inference_address']} did not "
                               f"answer within {self.timeout_ms / 1000:.1f} s")
        msg = wire.decode(self.inference.recv_multipart())
        self.timing["wait_s"] += time.perf_counter() - t0
        return msg

    def run(self, max_segments: int | None = None) -> None:
        """Loop until stopped (or ``max_segments`` segments were sent, for tests)."""
        buffers = []
        for g, env in enumerate(self.groups):
            obs = env.reset()
            buffers.append(SegmentBuffer(obs, env.num_rows, self.T, self.action_dtype, self.action_shape))
            self._request(g, obs)
        sent = 0
        while max_segments is None or sent < max_segments:
            msg = self._receive()
            g = msg.meta.get("group")
            if msg.kind != "action" or not isinstance(g, int) or not 0 <= g < len(self.groups):
                log.warning("dropping unexpected reply kind=%r group=%r", msg.kind, g)
                continue
            t0 = time.perf_counter()
            step = self.groups[g].step(msg.arrays["action"])
            self.timing["env_s"] += time.perf_counter() - t0
            self._request(g, step.obs)
            buf = buffers[g]
            if buf.record(msg.arrays["action"], msg.arrays["logp"], int(msg.meta["version"]), step):
                self._send_segment(g, buf)
                buf.start(step.obs)
                sent += 1

    def _send_segment(self, g: int, buf: SegmentBuffer) -> None:
        meta = {"actor": self.actor_id, "run": self.run_id, "group": g,
                "env_steps": self._env_steps(g, buf.T),
                "episodes": buf.episodes, "timing": dict(self.timing)}
        self.timing = {"env_s": 0.0, "wait_s": 0.0}
        self.samples.send_multipart(wire.encode("segment", buf.arrays(), meta))

    def _env_steps(self, g: int, T: int) -> int:
        # Environment frames in this segment: one per env per step (not per agent).
        return int(getattr(self.groups[g], "num_envs", self.groups[g].num_rows)) * T

    def close(self) -> None:
        for env in self.groups:
            env.close()
        self.inference.close()
        self.samples.close()


def _raise_exit(signum, frame):  # noqa: ARG001
    raise SystemExit(0)


def _die_with_parent(parent_pid) -> None:
    """Ask Linux to SIGKILL this process when the launcher dies (no orphans)."""
    if parent_pid is None:
        return
    try:
        import ctypes  # noqa: PLC0415
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() != int(parent_pid):  # the parent died before prctl took effect
        raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec: dict[str, Any] = json.loads(argv[0])
    logging.basicConfig(level=logging.INFO, format=f"[actor {spec['actor_id']}] %(message)s")
    _die_with_parent(spec.get("parent_pid"))
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGINT, _raise_exit)
    actor = Actor(spec)
    try:
        actor.run()
    except TimeoutError as exc:
        log.error("%s; exiting", exc)
        return EXIT_SERVER_TIMEOUT
    finally:
        actor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
