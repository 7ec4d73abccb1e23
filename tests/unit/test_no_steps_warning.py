"""The control loop says when a run trains nothing: no env step counted 300 s into the
run is a warning and a ``no_env_steps`` event, repeated at doubling times (CI once ran a
quick start that logged ``steps 0`` for 90 minutes without a word)."""

import logging
import types

from jaxsrl.launch.control import NO_STEPS_WARN_S, ControlLoop


def _loop(clock, metrics):
    loop = ControlLoop.__new__(ControlLoop)
    loop.run = types.SimpleNamespace(clock=lambda: clock[0], metrics=metrics, logdir="/tmp/run")
    loop.no_steps_warn_at = NO_STEPS_WARN_S
    return loop


def test_warned_at_300_s_then_at_doubling_times_while_nothing_trains(caplog):
    clock, metrics = [0.0], types.SimpleNamespace(env_steps=0)
    loop = _loop(clock, metrics)
    warned = []
    with caplog.at_level(logging.WARNING, logger="jaxsrl"):
        for t in range(0, 1300, 5):
            clock[0] = float(t)
            before = len(caplog.records)
            loop._warn_no_steps()
            if len(caplog.records) > before:
                warned.append(t)
    assert warned == [300, 600, 1200]
    assert "no env step has reached the learner in 300 s" in caplog.records[0].getMessage()
    assert "/tmp/run/errors" in caplog.records[0].getMessage()


def test_silent_once_steps_are_counted(caplog):
    clock, metrics = [0.0], types.SimpleNamespace(env_steps=0)
    loop = _loop(clock, metrics)
    metrics.env_steps = 20
    with caplog.at_level(logging.WARNING, logger="jaxsrl"):
        for t in (299.0, 300.0, 5000.0):
            clock[0] = t
            loop._warn_no_steps()
    assert not caplog.records
