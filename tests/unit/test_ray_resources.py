"""--actor_resources / --learner_resources: parsing, config checks, Ray options."""

import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.ray_resources import parse_resources


def test_parse_resources():
    assert parse_resources("", "actor_resources") == {}
    assert parse_resources("actor_node=1", "actor_resources") == {"actor_node": 1.0}
    assert parse_resources(" a=1 , node:b=0.5,", "x") == {"a": 1.0, "node:b": 0.5}


@pytest.mark.parametrize("text, match", [
    ("actor_node", r"actor_resources='actor_node': 'actor_node' must be NAME=AMOUNT"),
    ("=1", r"'=1' must be NAME=AMOUNT"),
    ("a=1,a=2", r"'a' is given twice"),
    ("CPU=2", r"'CPU' is a built-in Ray resource"),
    ("a=0", r"the amount of 'a' must be a number > 0, got '0'"),
    ("a=-1", r"got '-1'"),
    ("a=nan", r"got 'nan'"),
    ("a=lots", r"got 'lots'"),
])
def test_parse_resources_rejects(text, match):
    with pytest.raises(ValueError, match=match):
        parse_resources(text, "actor_resources")


def test_config_fields():
    cfg = load_config(["--launcher=ray", "--actor_resources=actor_node=1",
                       "--learner_resources=learner_node=1"])
    assert (cfg.actor_resources, cfg.learner_resources) == ("actor_node=1", "learner_node=1")
    assert load_config([]).actor_resources == ""
    with pytest.raises(ValueError, match="--actor_resources=actor_node=1 needs --launcher=ray"):
        load_config(["--actor_resources=actor_node=1"])
    with pytest.raises(ValueError, match="learner_resources='x': 'x' must be NAME=AMOUNT"):
        load_config(["--launcher=ray", "--learner_resources=x"])


def test_spawner_and_accelerator_options():
    pytest.importorskip("ray")
    from jaxsrl.launch.ray_spawner import ACTOR_MODULE, LEARNER_MODULE, resource_option, spawner_for

    cfg = load_config(["--launcher=ray", "--actor_resources=actor_node=1", "--actor_cpus=0.5",
                       "--learner_resources=learner_node=1"])
    spawn = spawner_for(cfg)
    assert spawn.options_for(["python", "-m", ACTOR_MODULE, "{}"]) == {
        "num_cpus": 0.5, "scheduling_strategy": "SPREAD", "resources": {"actor_node": 1.0}}
    assert spawn.options_for(["python", "-m", LEARNER_MODULE, "{}"])["resources"] == {
        "learner_node": 1.0}
    assert "resources" not in spawner_for(load_config(["--launcher=ray"])).options_for(
        ["python", "-m", ACTOR_MODULE, "{}"])
    assert resource_option("", "x") == {}
