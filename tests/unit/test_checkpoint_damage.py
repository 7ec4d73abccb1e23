"""What a failed checkpoint restore means (``jaxsrl/experiment/checkpoint.py``): a failure
a second try gets past is transient (nothing set aside), a checkpoint of another
structure is a changed config (refused, nothing renamed), running out of memory says
nothing about the files; only a checkpoint that fails twice is set aside as unreadable."""

import os
import shutil

import numpy as np
import pytest

from jaxsrl.experiment import events
from jaxsrl.experiment.checkpoint import Checkpointer, StructureMismatch


def _tree(value: float, n: int = 8) -> dict:
    return {"w": np.full(n, value, np.float32), "step": np.array(value, np.int32)}


def _saved(directory: str, sizes: dict) -> None:
    """Checkpoints ``{step: length of w}``."""
    ckpt = Checkpointer(directory)
    for step, n in sizes.items():
        ckpt.save(step, _tree(step, n), {"policy_version": step})
    ckpt.close()


def _listing(directory: str) -> list:
    return sorted(os.listdir(directory))


def test_a_failure_that_a_second_try_gets_past_sets_nothing_aside(tmp_path, monkeypatch):
    directory = str(tmp_path / "ckpt")
    _saved(directory, {1: 8, 2: 8})
    ckpt = Checkpointer(directory)
    real, calls = ckpt._restore, []

    def flaky(like, step):
        calls.append(step)
        if len(calls) == 1:
            raise OSError("injected: transient read error")
        return real(like, step)

    monkeypatch.setattr(ckpt, "_restore", flaky)
    before = _listing(directory)
    with events.recording(str(tmp_path / "events.jsonl")):
        state, meta = ckpt.restore(_tree(0), set_aside_unreadable=True)
    ckpt.close()
    assert meta["policy_version"] == 2 and float(state["w"][0]) == 2.0  # the newest, retried
    assert calls == [2, 2]
    assert _listing(directory) == before  # no "2.unreadable"
    (retry,) = events.read_events(str(tmp_path / "events.jsonl"), "checkpoint_retry")
    assert retry["step"] == 2 and "transient read error" in retry["error"]
    assert events.read_events(str(tmp_path / "events.jsonl"), "checkpoint_unreadable") == []


def test_a_checkpoint_of_another_structure_is_refused_not_set_aside(tmp_path):
    """The newest checkpoint holds ``w`` of 16 values, the state asked for 8: a changed
    config. The restore stops naming the difference; the older checkpoint (which would
    fit) is not silently used and nothing is renamed."""
    directory = str(tmp_path / "ckpt")
    _saved(directory, {1: 8, 2: 16})
    before = _listing(directory)
    ckpt = Checkpointer(directory)
    with pytest.raises(StructureMismatch, match=r"checkpoint 2 .* w: \(16,\) float32 -> \(8,\) float32"):
        ckpt.restore(_tree(0, 8), set_aside_unreadable=True)
    ckpt.close()
    assert _listing(directory) == before


def test_running_out_of_memory_is_not_damage(tmp_path, monkeypatch):
    """Out of memory restoring the newest: the restore stops with the error, rather than
    setting the newest aside and silently continuing from an older one."""
    directory = str(tmp_path / "ckpt")
    _saved(directory, {1: 8, 2: 8})
    ckpt = Checkpointer(directory)

    real = ckpt._restore

    def oom(like, step):  # the newest does not fit in memory; the older one would
        if step == 2:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes")
        return real(like, step)

    monkeypatch.setattr(ckpt, "_restore", oom)
    before = _listing(directory)
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
        ckpt.restore(_tree(0), set_aside_unreadable=True)
    ckpt.close()
    assert _listing(directory) == before


def test_a_checkpoint_that_fails_twice_is_set_aside(tmp_path):
    directory = str(tmp_path / "ckpt")
    _saved(directory, {1: 8, 2: 8})
    shutil.rmtree(os.path.join(directory, "2", "state"))  # damaged after it was finalised
    with events.recording(str(tmp_path / "events.jsonl")):
        state, meta = Checkpointer(directory).restore(_tree(0), set_aside_unreadable=True)
    assert meta["policy_version"] == 1 and float(state["w"][0]) == 1.0
    assert "2.unreadable" in _listing(directory)
    assert [e["step"] for e in events.read_events(str(tmp_path / "events.jsonl"),
                                                  "checkpoint_retry")] == [2]
