"""One trial of ``scripts/checkpoint_kills.py`` (slow): the learner SIGKILLed while Orbax
writes a checkpoint; ``--resume`` continues from the newest complete checkpoint, never
from the partial one (docs/reliability.md has the 20-trial figures)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_kill_during_a_checkpoint_write_then_resume(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "checkpoint_kills.py"),
                          "--trials=1", f"--root={tmp_path}"], capture_output=True, text=True,
                         timeout=900, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "trials=1 resumed_ok=1 killed_during_write=1" in out.stdout, out.stdout
