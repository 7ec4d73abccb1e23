"""Actor faults: killed, hung and failing-environment actors; training goes on."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading

import psutil
import pytest

from jaxsrl.config import load_config
from jaxsrl.launcher import ComponentDied, train
from test_faults_helpers import (FLAKY_ENV, actor_children, actor_spec, flaky_env_path,  # noqa: F401
                              records, small_args, wait_for)


def _inject(logdir: str, sig: int, out: dict) -> threading.Thread:
    """In the background: once training is under way, send ``sig`` to one actor, wait
    for its replacement and for the learner to move on, then SIGTERM this process
    (which ends ``train`` cleanly). ``out`` gets learner versions and both specs."""

    def version():
        return max([r["policy_version"] for r in records(logdir)] or [0])

    def go():
        try:
            wait_for(lambda: version() >= 2, 60, "training to start")
            victim = actor_children()[0]
            out["spec"] = actor_spec(victim)
            out["version"] = version()
            os.kill(victim.pid, sig)

            def replacement():
                return [p for p in actor_children() if p.pid != victim.pid
                        and actor_spec(p)["actor_id"] == out["spec"]["actor_id"]]
            out["new_spec"] = actor_spec(wait_for(replacement, 60, "the restarted actor")[0])
            out["version_at_restart"] = version()
            wait_for(lambda: version() >= out["version_at_restart"] + 5, 60, "more updates")
        except BaseException as exc:  # reported by the test
            out["error"] = exc
        os.kill(os.getpid(), signal.SIGTERM)  # train() stops cleanly

    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th


@pytest.mark.parametrize("sig, extra", [
    (signal.SIGKILL, []),
    # SIGSTOP: the process lives but sends nothing -> the heartbeat check kills it.
    (signal.SIGSTOP, ["--actor_heartbeat_timeout_s=2"]),
], ids=["SIGKILL", "SIGSTOP-hang"])
def test_killed_or_hung_actor_is_restarted_and_training_goes_on(tmp_path, sig, extra, caplog):
    caplog.set_level(logging.INFO, logger="jaxsrl")
    logdir = str(tmp_path / "run")
    cfg = load_config(small_args(logdir, "--total_env_steps=100000000", *extra))
    out: dict = {}
    th = _inject(logdir, sig, out)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    th.join(10)
    assert "error" not in out, out.get("error")
    last = records(logdir)[-1]
    assert last["actor_restarts"] >= 1
    if sig == signal.SIGSTOP:
        assert last["actor_hangs"] >= 1
        assert "hung; killing it" in caplog.text
        # The other actor kept the learner busy while this one hung.
        assert out["version_at_restart"] > out["version"]
    else:
        assert "killed by SIGKILL; restarting it with a new run id" in caplog.text
    assert out["new_spec"]["run_id"] != out["spec"]["run_id"]  # the servers drop the old run
    assert last["policy_version"] >= out["version_at_restart"] + 5  # learning went on
    assert actor_children() == []


def test_environment_error_restarts_the_actor_with_the_traceback(tmp_path, flaky_env_path, caplog,
                                                                 capfd):
    caplog.set_level(logging.INFO, logger="jaxsrl")
    logdir = str(tmp_path / "run")
    cfg = load_config(small_args(logdir, "--total_env_steps=4000"))
    cfg = dataclasses.replace(cfg, env=FLAKY_ENV, env_kwargs={
        "fail_in": "step", "fail_after": 40, "once_file": str(tmp_path / "failed")})
    record = train(cfg)
    assert record["actor_restarts"] == 1
    assert record["env_steps"] >= 4000
    assert "environment step raised RuntimeError: injected step failure" in caplog.text
    err = capfd.readouterr().err
    assert "Traceback (most recent call last)" in err and "injected step failure" in err
    assert actor_children() == []


def test_environment_that_keeps_failing_stops_the_run_with_its_error(tmp_path, flaky_env_path):
    logdir = str(tmp_path / "run")
    cfg = load_config(small_args(logdir, "--total_env_steps=4000", "--max_actor_restarts=2"))
    cfg = dataclasses.replace(cfg, env=FLAKY_ENV, env_kwargs={"fail_in": "reset"})
    with pytest.raises(ComponentDied, match=r"environment keeps failing.*max_actor_restarts=2.*"
                                            r"injected reset failure"):
        train(cfg)
    assert psutil.Process().children(recursive=True) == []
