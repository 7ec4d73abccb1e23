"""A full disk during a checkpoint write (issue 42): the save (or the wait for it) raises
``CheckpointWriteError`` in one line naming the step, the folder and the newest complete
checkpoint; the checkpoints written before stay intact and restorable. On a real 1 MiB
tmpfs where this process may mount one (root), else skipped; the ENOSPC variant (an
``OSError`` from Orbax's save) runs everywhere."""

from __future__ import annotations

import errno
import os
import subprocess

import numpy as np
import pytest

from jaxsrl.experiment import checkpoint as ck


def _tree(n: int) -> dict:
    return {"w": np.random.default_rng(n).normal(size=n).astype(np.float32)}  # (incompressible)


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.call(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                                             str(mount)], stderr=subprocess.DEVNULL) != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield str(mount)
    subprocess.call(["umount", "-l", str(mount)])


def _one_line_error(exc: ck.CheckpointWriteError, step: int, newest: int) -> None:
    text = str(exc)
    assert "\n" not in text and len(text) < 600, text
    assert f"checkpoint {step} could not be written" in text and f"newest complete: {newest}" in text


def test_a_full_tmpfs_fails_the_write_in_one_line_and_keeps_earlier_checkpoints(tiny_disk):
    c = ck.Checkpointer(os.path.join(tiny_disk, "checkpoints", "default"))
    c.save(0, _tree(1000), {"policy_version": 0, "env_steps": 0})
    c.save(1, _tree(1000), {"policy_version": 1, "env_steps": 64})
    with pytest.raises(ck.CheckpointWriteError) as info:
        c.save(2, _tree(2_000_000), {"policy_version": 2, "env_steps": 128})  # 8 MB > 1 MiB
        c.close()
    _one_line_error(info.value, 2, 1)
    fresh = ck.Checkpointer(os.path.join(tiny_disk, "checkpoints", "default"))
    state, meta = fresh.restore(_tree(1000))
    assert meta["policy_version"] == 1 and np.array_equal(np.asarray(state["w"]), _tree(1000)["w"])


def test_enospc_from_the_save_is_one_line_naming_the_newest_complete_checkpoint(tmp_path, monkeypatch):
    c = ck.Checkpointer(str(tmp_path / "ck"))
    c.save(0, _tree(10), {"policy_version": 0, "env_steps": 0})
    c.close()
    c = ck.Checkpointer(str(tmp_path / "ck"))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(c.manager, "save", full)
    c._writing = 1
    with pytest.raises(ck.CheckpointWriteError) as info:
        c.save(1, _tree(10), {"policy_version": 1, "env_steps": 8})
    _one_line_error(info.value, 1, 0)
    assert "No space left on device" in str(info.value)
