"""MuJoCo's compile warnings are shown once per process (jaxsrl/envs/mujoco_warnings.py).

Each check runs in a fresh interpreter: the warning handler is per process, and other
tests of this session may have built MuJoCo envs already.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jaxsrl.core.paths import REPO_ROOT

pytest.importorskip("mujoco")


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_halfcheetah_warns_about_settotalmass_once_per_process(tmp_path):
    # Gymnasium's half_cheetah.xml sets settotalmass: MuJoCo 4 warns on every compile.
    out = _python(
        "from jaxsrl.envs import make_actor_env, make_env, env_info\n"
        "env_info('HalfCheetah-v5')\n"
        "make_actor_env('HalfCheetah-v5', 3, 0).close()\n"
        "make_actor_env('HalfCheetah-v5', 2, 3).close()\n"
        "make_env('HalfCheetah-v5').close()\n", tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert text.count("settotalmass") == 1, text[-3000:]  # 7 envs built, one warning
    assert "MuJoCo: compiler attribute 'settotalmass' is deprecated" in out.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # MuJoCo's default handler wrote it


def test_envs_without_mujoco_do_not_import_it(tmp_path):
    out = _python(
        "import sys\n"
        "from jaxsrl.envs import make_actor_env, env_info\n"
        "env_info('CartPole-v1'); make_actor_env('CartPole-v1', 2, 0).close()\n"
        "assert 'mujoco' not in sys.modules, 'CartPole imported mujoco'\n", tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
