"""The table of refused mode pairs (``jaxsrl/experiment/modes.py``), walked row by row:
each row is reachable (no earlier row shadows it) and refuses its pair in one line
naming both flags and its reason; pairs the table does not hold pass ``validate``; the
table holds exactly the pairs listed here (a row dropped or added is a failure)."""

import dataclasses
import itertools

import pytest

from jaxsrl.experiment import modes
from jaxsrl.experiment.config import load_config
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
    "inference given": {"inference": "thread"},
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
    "device actors": {"env": "gymnax:CartPole-v1"}, "save replay": {"save_replay": True},
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
    ("device actors", "launcher=ray"), ("device actors", "learner processes"),
    ("device actors", "dataflow table"),
    ("device actors", "inference given"),
    ("device actors", "opponents"), ("device actors", "save replay"),
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
        assert {hit.first, hit.second} <= set(pair) | {"not launcher=ray", "not inference=process",
                                                      "inference given"}
        return
    cfg.validate()  # no ValueError


def test_validate_runs_once_per_config_object(base, monkeypatch):
    calls = []
    monkeypatch.setattr(modes, "check", lambda cfg, flow: calls.append(cfg))
    cfg = dataclasses.replace(base, num_actors=3)
    cfg.validate()
    cfg.validate()
    assert len(calls) == 1 and cfg.flow is cfg.get_dataflow()  # the dataflow parsed once
