"""Evaluation of a JAX-native run is bounded and interruptible (issue 41): on an env
whose episodes never end (``tests/jax_endless.py``: no terminal state, no time limit)
``scripts/evaluate.py`` finishes, cutting every episode at
``jaxsrl.workers.device.evaluate.DEFAULT_MAX_STEPS`` and reporting them truncated; and
Ctrl-C stops an evaluation of 10**9 steps (its compiled calls are chunks of
``CHUNK_STEPS``). Both run the evaluation in a child process with a time limit, so a
regression (an unbounded loop, one long compiled call) fails instead of hanging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import jax
import pytest

from agents import AGENTS
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import registry
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config, to_dict
from jaxsrl.workers.device.evaluate import DEFAULT_MAX_STEPS

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(TESTS)
ENDLESS = "jax:tests.jax_endless:make"
CHILD_ENV = dict(os.environ, JAXSRL_PROGRESS="0", PYTHONPATH=REPO_ROOT)
#: Generous: the child imports JAX and compiles one chunk (seconds on an idle machine).
LIMIT_S = 240


@pytest.fixture(scope="module")
def endless_run(tmp_path_factory):
    """A run folder of PPO on the endless env as a trainer saves it (``config.json``,
    ``checkpoints/default/1`` with ``{"agent", "rng"}``), written directly."""
    logdir = tmp_path_factory.mktemp("endless") / "run"
    cfg = load_config([f"--env={ENDLESS}", f"--logdir={logdir}", "--ppo.hidden_sizes", "8"])
    os.makedirs(logdir)
    (logdir / "config.json").write_text(json.dumps(to_dict(cfg)))
    env = registry.make(ENDLESS)
    fns = AGENTS["ppo"].make(cfg.ppo, EnvSpec(env.observation_space, env.action_space), 1)
    ckpt = Checkpointer(str(logdir / "checkpoints" / "default"))
    ckpt.save(1, {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(0)},
              {"policy_version": 1})
    ckpt.close()
    return str(logdir)


def test_evaluate_py_on_an_endless_env_ends_and_reports_cut_episodes(endless_run, tmp_path):
    out = str(tmp_path / "eval.json")
    done = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "evaluate.py"),
                           "--logdir", endless_run, "--episodes", "2", "--json", out],
                          cwd=REPO_ROOT, env=CHILD_ENV, capture_output=True, text=True,
                          timeout=LIMIT_S)
    assert done.returncode == 0, done.stderr
    with open(out) as f:
        saved = json.load(f)
    assert saved["summary"]["truncated"] == 2 and saved["summary"]["cut"] == 2
    assert [e["length"] for e in saved["episodes"]] == [DEFAULT_MAX_STEPS] * 2
    assert all(e["truncated"] and e["cut"] for e in saved["episodes"])
    assert saved["summary"]["return_mean"] == float(DEFAULT_MAX_STEPS)  # reward 1 per step
    assert "truncated: 2 of 2 episodes" in done.stdout


CHILD = """
import functools, sys
import jax
from jaxsrl.tools import device_evaluation, evaluation
from jaxsrl.workers.device.evaluate import _jitted, make_evaluation
run = evaluation.load_run(logdir=sys.argv[1])
env = device_evaluation.make_env(run.config)
act = functools.partial(run.fns.act, deterministic=True)
ev = make_evaluation(env, act, 2, run.fns.initial_carry, max_steps=10**9)
params, key = run.policies["default"].params, jax.random.PRNGKey(0)
# Compile and run one chunk first; run_chunks' first call says so (then it is put back),
# so the signal below arrives while run_chunks runs its compiled calls.
jitted = _jitted(ev)
jax.block_until_ready(jitted["chunk"](params, jitted["start"](key)))
finished = jitted["finished"]
def announced(c):
    jitted["finished"] = finished
    print("evaluating", flush=True)
    return finished(c)
jitted["finished"] = announced
ev.run_chunks(params, key)
print("finished", flush=True)
"""


def test_ctrl_c_stops_a_long_evaluation_between_two_compiled_calls(endless_run):
    """10**9 steps of 2 episodes: the first chunk is one call of ``CHUNK_STEPS`` steps
    (it would be all 10**9 if the loop were one compiled call, and never return), then
    SIGINT during ``run_chunks``: a ``KeyboardInterrupt`` ends the child."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, endless_run], cwd=REPO_ROOT,
                             env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    first: list = []
    reader = threading.Thread(target=lambda: first.append(child.stdout.readline()), daemon=True)
    try:
        reader.start()
        reader.join(LIMIT_S)
        assert first and first[0].strip() == "evaluating", "the first chunk did not return"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=LIMIT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode != 0 and "finished" not in out
    assert "KeyboardInterrupt" in err, err[-2000:]
