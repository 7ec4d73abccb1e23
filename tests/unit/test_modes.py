"""The tables of ``jaxsrl/experiment/modes.py``. Refused mode pairs, walked row by row:
each row is reachable (no earlier row shadows it) and refuses its pair in one line
naming both flags and its reason; pairs the table does not hold pass ``validate``; the
table holds exactly the pairs listed here (a row dropped or added is a failure).
Fields by placement (issue 41): every RunConfig field is in ``modes.FIELDS`` (a new
field must be classified), and on each placement a field that does not apply there is
refused by ``validate`` in one line naming it, while one that applies is not."""

import dataclasses
import itertools

import pytest

from jaxsrl.experiment import modes
from jaxsrl.experiment.config import RunConfig, load_config
from jaxsrl.experiment.population import PBTSettings
from jaxsrl.experiment.selfplay import OpponentSettings


def _graph(actor: dict | None = None, server: dict | None = None, trainers: int = 1) -> dict:
    policies = [f"p{i}" for i in range(trainers)]
    return {"actors": [{"name": f"a{i}", "count": 2, "inference_stream": f"inf{i}",
                        "sample_stream": f"smp{i}", **(actor or {})} for i in range(trainers)],
            "policy_workers": [{"name": f"s{i}", "inference_stream": f"inf{i}", "policy": p,
                                **(server or {})} for i, p in enumerate(policies)],
            "trainers": [{"name": f"t{i}", "sample_stream": f"smp{i}", "policy": p}
                         for i, p in enumerate(policies)]}


PREFIX = ["ip", "netns", "exec", "h1"]
#: mode -> the run fields that turn it on.
ON = {
    "launcher=local": {"launcher": "local"}, "launcher=serial": {"launcher": "serial"},
    "launcher=ray": {"launcher": "ray"}, "not launcher=ray": {"launcher": "local"},
    "inference=thread": {"inference": "thread"}, "inference=process": {"inference": "process"},
    "inference=inline": {"inference": "inline"}, "not inference=process": {"inference": "thread"},
    "learner processes": {"num_learner_processes": 2},
    "coordinator address": {"coordinator_address": "127.0.0.1:6123"},
    "curve": {"curve": True}, "off-policy agent": None, "periodic evaluation": {"eval_every": 5},
    "population": {"population": 2}, "opponents": {"opponents": OpponentSettings(snapshot_every=4)},
    "dataflow table": {"dataflow": _graph()}, "several trainers": {"dataflow": _graph(trainers=2)},
    "inference servers": {"inference_servers": 2},
    "server count": {"dataflow": _graph(server={"count": 2})},
    "inference deadline": {"inference_deadline_ms": 2.0},
    "server launch_prefix": {"dataflow": _graph(server={"launch_prefix": PREFIX})},
    "actor launch_prefix": {"dataflow": _graph(actor={"launch_prefix": PREFIX})},
    "ray address": {"ray_address": "auto"}, "actor resources": {"actor_resources": "x=1"},
    "learner resources": {"learner_resources": "x=1"},
}
#: Every refused pair: a row dropped from (or added to) the table fails here.
EXPECTED = {
    ("inference=process", "launcher=serial"), ("learner processes", "launcher=serial"),
    ("coordinator address", "launcher=serial"), ("curve", "launcher=serial"),
    ("periodic evaluation", "launcher=serial"), ("actor launch_prefix", "launcher=serial"),
    ("ray address", "not launcher=ray"), ("actor resources", "not launcher=ray"),
    ("learner resources", "not launcher=ray"), ("server launch_prefix", "not inference=process"),
    ("inference servers", "dataflow table"), ("opponents", "inference=inline"),
    ("inference servers", "inference=inline"), ("inference deadline", "inference=inline"),
    ("server count", "inference=inline"), ("learner processes", "several trainers"),
    ("curve", "learner processes"), ("off-policy agent", "learner processes"),
    ("population", "dataflow table"),
    ("population", "learner processes"), ("opponents", "inference=process"),
    ("opponents", "population"), ("opponents", "learner processes"),
}


@pytest.fixture(scope="module")
def base():
    return load_config(["--env=CartPole-v1"])


@pytest.fixture(scope="module")
def dqn():
    return load_config(["--env=CartPole-v1", "--agent=dqn"])


def _with(base, *names):
    fields: dict = {}
    for name in names:
        if ON[name] is None:  # the agent's own: the base config is the agent's
            continue
        assert not set(fields) & set(ON[name]), names
        fields.update(ON[name])
    return dataclasses.replace(base, **fields)


def test_the_table_holds_exactly_the_expected_pairs_over_known_modes():
    assert {(r.first, r.second) for r in modes.REFUSED} == EXPECTED
    assert set(ON) == set(modes.MODES)


@pytest.mark.parametrize("row", modes.REFUSED, ids=lambda r: f"{r.first}|{r.second}")
def test_each_refused_pair_is_refused_with_its_reason(base, dqn, row):
    cfg = _with(dqn if "off-policy agent" in (row.first, row.second) else base, row.first, row.second)
    assert row.applies(cfg, cfg.flow)
    assert modes.refusal(cfg, cfg.flow) is row  # reachable: no earlier row shadows it
    with pytest.raises(ValueError) as info:
        cfg.validate()
    message = str(info.value)
    assert message == row.message(cfg) and "\n" not in message
    assert message.endswith(row.why)
    first, second = modes.MODES[row.first].flag(cfg), modes.MODES[row.second].flag(cfg)
    assert message.startswith(f"{first} {row.verb} {second}: ")


#: Modes that any CartPole run can combine (no files, teams or Ray cluster needed).
PLAIN = ["launcher=local", "launcher=serial", "launcher=ray", "inference=thread",
         "inference=process", "inference=inline", "learner processes", "periodic evaluation",
         "population", "inference servers", "inference deadline", "dataflow table"]


@pytest.mark.parametrize("pair", [p for p in itertools.combinations(PLAIN, 2)
                                  if not set(ON[p[0]]) & set(ON[p[1]])])
def test_a_pair_the_table_does_not_hold_passes_validate(base, pair):
    cfg = _with(base, *pair)
    hit = modes.refusal(cfg, cfg.flow)
    if hit is not None:
        assert {hit.first, hit.second} <= set(pair) | {"not launcher=ray", "not inference=process"}
        return
    cfg.validate()  # no ValueError


def test_validate_runs_once_per_config_object(base, monkeypatch):
    calls = []
    monkeypatch.setattr(modes, "check", lambda cfg, flow: calls.append(cfg))
    cfg = dataclasses.replace(base, num_actors=3)
    cfg.validate()
    cfg.validate()
    assert len(calls) == 1 and cfg.flow is cfg.get_dataflow()  # the dataflow parsed once


# -- fields by placement --------------------------------------------------------------

#: A valid value other than the dataclass default, for every run field but ``agent``
#: and ``env`` (which choose the agent and the placement): a new field fails
#: ``test_every_run_field_is_classified_by_placement`` until it is here and in the table.
NON_DEFAULT = {
    "total_env_steps": 1000, "num_actors": 4, "envs_per_actor": 16, "ring_size": 4,
    "segment_length": 16, "batch_segments": 32, "max_staleness": 2,
    "inference_deadline_ms": 2.0, "inference_servers": 2, "inference": "thread",
    "param_publish_interval_s": 1.0, "inference_failover_s": 2.0, "max_server_restarts": 1,
    "seed": 1, "logdir": "runs/x", "resume": True, "overwrite": True, "log_interval_s": 1.0,
    "checkpoint_interval_s": 10.0, "keep_checkpoints": 2, "save_replay": True,
    "target_return": 100.0, "host": "0.0.0.0", "curve": True, "actor_timeout_s": 10.0,
    "actor_heartbeat_timeout_s": 0.0, "eval_every": 5, "eval_episodes": 2,
    "max_actor_restarts": 1, "on_nonfinite": "raise", "compilation_cache_dir": "",
    "num_learner_processes": 2, "coordinator_address": "127.0.0.1:6123",
    "spawn_learner_processes": False, "launcher": "ray", "ray_address": "auto",
    "actor_cpus": 2.0, "learner_cpus": 2.0, "learner_gpus": 1.0, "actor_resources": "x=1",
    "learner_resources": "x=1", "clip_actions": False, "env_kwargs": {"max_episode_steps": 100},
    "dataflow": _graph(), "population": 2, "pbt": PBTSettings(ready_env_steps=1000),
    "opponents": OpponentSettings(snapshot_every=4),
}
#: The fields device actors refuse (a row of the table dropped or added fails here).
DEVICE_REFUSED = {
    "num_actors", "envs_per_actor", "ring_size", "max_staleness", "inference_deadline_ms",
    "inference_servers", "inference", "param_publish_interval_s", "inference_failover_s",
    "max_server_restarts", "save_replay", "host", "curve", "actor_timeout_s",
    "actor_heartbeat_timeout_s", "max_actor_restarts", "num_learner_processes",
    "coordinator_address", "spawn_learner_processes", "launcher", "ray_address", "actor_cpus",
    "learner_cpus", "learner_gpus", "actor_resources", "learner_resources", "dataflow",
    "opponents",
}
#: The flag a refusal names for a field (its first changed key, for a dataclass).
NAMED = {"dataflow": "a [dataflow] table", "opponents": "--opponents.snapshot_every=4",
         "resume": "--resume", "overwrite": "--overwrite", "save_replay": "--save_replay",
         "curve": "--curve", "clip_actions": "--no_clip_actions",
         "spawn_learner_processes": "--no_spawn_learner_processes"}


@pytest.fixture(scope="module")
def on_placement():
    return {"cpu": load_config(["--env=CartPole-v1"]),
            "device": load_config(["--env=jax:tests.jax_cartpole:make"])}


def test_every_run_field_is_classified_by_placement():
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(modes.FIELDS_BY_NAME) == names, "classify the new field in modes.FIELDS"
    assert len(modes.FIELDS) == len(names)  # each once
    assert set(NON_DEFAULT) == names - {"agent", "env"}
    assert {f.name for f in modes.FIELDS if f.device} == DEVICE_REFUSED
    assert not [f.name for f in modes.FIELDS if f.cpu]  # CPU actors take every field


@pytest.mark.parametrize("where", modes.PLACEMENTS)
@pytest.mark.parametrize("name", sorted(NON_DEFAULT))
def test_a_field_is_refused_exactly_where_it_does_not_apply(on_placement, where, name):
    base = on_placement[where]
    assert modes.placement(base) == where
    cfg = dataclasses.replace(base, **{name: NON_DEFAULT[name]})
    why = modes.FIELDS_BY_NAME[name].why_not(where)
    message = modes.placement_refusal(cfg)
    if why is None:
        assert message is None
        return
    flag = NAMED.get(name, f"--{name}={NON_DEFAULT[name]}")
    with pytest.raises(ValueError) as info:
        cfg.validate()  # before anything is written: load_config and train call it first
    assert str(info.value) == message and "\n" not in message
    assert message.startswith(f"{flag} does not apply to device actors (--env={base.env}): ")
    assert why in message


def test_a_device_run_with_every_default_and_the_allowed_launchers_passes(on_placement):
    for launcher in ("local", "serial"):
        dataclasses.replace(on_placement["device"], launcher=launcher).validate()
