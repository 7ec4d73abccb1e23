"""Actor processes import no JAX: a real ``python -m jaxsrl.workers.actor`` process,
run until it has stepped its environments and sent a segment, loads no ``jax``,
``jaxlib``, ``flax`` or ``optax`` module.

The import-linter contract (``tests/unit/test_layers.py``) checks the import statements;
this checks the running process, imports made by name at run time (gymnasium's
environment registry, ``module:NAME`` references) included. ``-X importtime`` makes
the interpreter itself report every module it loads, for the whole life of the process.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import zmq

from jaxsrl.streams import wire

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JAX_PACKAGES = {"jax", "jaxlib", "flax", "optax", "chex", "orbax"}
WAIT_MS = 120_000  # generous: the actor starts a fresh interpreter and builds its envs


def _loaded_modules(importtime_stderr: str) -> set:
    """Module names from ``-X importtime`` lines: ``import time: self | cumulative | name``."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


def test_a_running_actor_loads_no_jax_module():
    ctx = zmq.Context.instance()
    router, samples = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PULL)
    inference = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    sample = f"tcp://127.0.0.1:{samples.bind_to_random_port('tcp://127.0.0.1')}"
    spec = {"actor_id": 0, "run_id": 1, "env": "CartPole-v1", "env_kwargs": {},
            "envs_per_group": 2, "ring_size": 1, "segment_length": 4, "seed": 0,
            "streams": [{"policy": "p", "team": None, "inference_address": inference,
                         "sample_address": sample}],
            "carry_spec": [], "timeout_s": 60.0}
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "jaxsrl.workers.actor", json.dumps(spec)],
        env=dict(os.environ, PYTHONPATH=ROOT), stderr=subprocess.PIPE, text=True)
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(samples, zmq.POLLIN)
    try:
        segment = None
        while segment is None:  # answer act requests with zeros until a segment arrives
            ready = dict(poller.poll(WAIT_MS))
            assert ready, "the actor sent nothing"
            if samples in ready:
                segment = wire.decode(samples.recv_multipart())
            if router in ready:
                identity, *body = router.recv_multipart()
                msg = wire.decode(body)
                if msg.kind == "act":
                    n = len(msg.arrays["obs"])
                    router.send_multipart([identity] + wire.encode(
                        "action", {"action": np.zeros(n, np.int64), "logp": np.zeros(n, np.float32)},
                        {"group": msg.meta["group"], "version": 0}))
        assert segment.kind == "segment" and segment.arrays["action"].shape == (2, 4)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=WAIT_MS / 1000)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        router.close(0)
        samples.close(0)
    assert proc.returncode == 0, stderr[-3000:]
    loaded = _loaded_modules(stderr)
    assert "jaxsrl.workers.actor.worker" in loaded and "gymnasium" in loaded
    assert "jaxsrl.envs.gym_vector" in loaded  # the env was built in this process
    jax_modules = sorted(m for m in loaded if m.split(".")[0] in JAX_PACKAGES)
    assert not jax_modules, f"the actor loaded {jax_modules[:10]}"
