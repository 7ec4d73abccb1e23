"""jaxsrl.core.interrupts: inside ``interrupt_flag`` a stop signal only sets the flag
(no exception where it lands), ``check`` raises it between calls, and the handlers
that were there before come back."""

from __future__ import annotations

import os
import signal

import pytest

from jaxsrl.core import interrupts


@pytest.fixture
def stop_handlers():
    previous = interrupts.install_stop_handlers()
    yield
    interrupts.restore(previous)
    interrupts.install_stop_handlers()  # clears the flag for the tests that follow
    interrupts.restore(previous)


def test_a_signal_inside_the_block_is_only_flagged_then_raised_by_check(stop_handlers):
    before = {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS}
    with interrupts.interrupt_flag():
        os.kill(os.getpid(), signal.SIGINT)  # delivered before os.kill returns (main thread)
        assert interrupts.requested()
        with pytest.raises(KeyboardInterrupt, match="stop signal"):
            interrupts.check()
    assert {sig: signal.getsignal(sig) for sig in interrupts.SIGNALS} == before
    with pytest.raises(KeyboardInterrupt):  # a signal that came earlier is not forgotten
        with interrupts.interrupt_flag():
            pass


def test_outside_the_block_the_run_handlers_raise_and_flag(stop_handlers):
    assert not interrupts.requested()
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        os.kill(os.getpid(), signal.SIGTERM)
    assert interrupts.requested()
