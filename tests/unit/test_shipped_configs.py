"""The config files and dependencies the README points users at."""

import os
import tomllib

from jaxsrl.experiment.config import load_config
from jaxsrl.envs import env_teams

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_hide_and_seek_teams_config_gives_each_team_its_own_policy():
    path = os.path.join(REPO, "configs", "hide_and_seek_teams.toml")
    for env in ("hide_and_seek", "hide_and_seek_full"):
        cfg = load_config([f"--env={env}", f"--config={path}"])
        flow = cfg.get_dataflow()
        assert sorted(t.policy for t in flow.trainers) == ["hider", "seeker"]
        assert sorted(p.policy for p in flow.policy_workers) == ["hider", "seeker"]
        assert set(flow.actors[0].teams) == set(env_teams(env))  # every team is bound
        assert cfg.ppo.network == "entity_lstm"  # layered over configs/<env>.toml


def test_tensorboard_is_installed_with_the_package():
    # README: `tensorboard --logdir runs` after `pip install -e .`
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert any(d.split(">")[0].split("=")[0].strip() == "tensorboard" for d in deps), deps


def test_hide_and_seek_selfplay_config_adds_opponent_pools_to_the_teams_config():
    teams = os.path.join(REPO, "configs", "hide_and_seek_teams.toml")
    pools = os.path.join(REPO, "configs", "hide_and_seek_selfplay.toml")
    cfg = load_config(["--env=hide_and_seek", f"--config={teams}", f"--config={pools}"])
    assert cfg.opponents.enabled and cfg.opponents.pool_config().p_latest == 0.8
