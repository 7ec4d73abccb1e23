"""A user's package named ``agents`` in the working directory would replace jaxsrl's
built-in agents in every worker process (started there with ``python -m``): the command
line refuses to start, naming the folder and the way out."""

import os
import subprocess
import sys

from jaxsrl.core.imports import shadowed_agents_package

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _user_agents(tmp_path, with_init: bool):
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "vpg.py").write_text("AGENT = None\n")
    if with_init:
        (folder / "__init__.py").write_text("")
    return folder


def test_a_user_package_named_agents_is_named(tmp_path):
    folder = _user_agents(tmp_path, with_init=True)
    why = shadowed_agents_package([str(tmp_path), REPO])
    assert why is not None and str(folder.resolve()) in why and "rename it" in why


def test_jaxsrls_own_agents_and_a_namespace_folder_are_not(tmp_path):
    assert shadowed_agents_package([REPO]) is None
    _user_agents(tmp_path, with_init=False)  # no __init__.py: the file form works there
    assert shadowed_agents_package([str(tmp_path), REPO]) is None


def test_train_refuses_to_start_in_a_folder_holding_a_package_named_agents(tmp_path):
    _user_agents(tmp_path, with_init=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = REPO  # this checkout, not the folder's agents
    proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "train.py"),
                           "--env=CartPole-v1", "--total_env_steps=100",
                           f"--logdir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "shadows jaxsrl's own 'agents' package" in last and "agents/vpg.py:AGENT" in last
    assert not (tmp_path / "run").exists()  # nothing started, nothing written
