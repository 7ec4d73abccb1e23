"""Schemas of the status messages (jaxsrl/streams/status.py): what the senders send today
decodes unchanged; a malformed status is refused with a one-line reason naming the field."""

import math
import types

import numpy as np
import pytest

from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.inline_params import InlineParameters
from jaxsrl.streams import wire
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.status import BUFFER_STATUS, INLINE_STATUS, SERVER_STATUS

# As jaxsrl/workers/inference/server.py's InferenceServer.status() builds it.
SERVER = {"server": "policy[0]", "run": 123, "pid": 4242, "address": "tcp://127.0.0.1:5555",
          "serving": True, "version": 7, "heartbeat_age_s": 0.012,
          "means": {"inference/batch_rows": 3.5, "inference/requests": 2.0},
          "counters": {"dropped_requests": 1, "param_dropped/mismatch": 0}, "seen": [0, 3]}
# As jaxsrl/workers/buffer/server.py's BufferServer.status() builds it.
BUFFER = {"buffer": "replay[1]", "run": 9, "pid": 17, "sample_address": "tcp://127.0.0.1:6000",
          "request_address": "tcp://127.0.0.1:6001", "serving": False, "heartbeat_age_s": 1.5,
          "pending": 0, "insert_allowed": True, "env_steps": 4096,
          "episodes": [{"return": 21.0, "length": 21, "team": "hiders"},
                       {"return": -1.0, "length": 4}],
          "means": {"replay/size": 512.0, "staleness_mean": float("nan"), "actor/env_s": 0.1},
          "counters": {"dropped_segments": 2}, "seen": list(range(1000))}
# As jaxsrl/workers/inline/client.py's InlineClient.ping builds it (dropped: a Counter per policy).
INLINE = {"actor": 3, "run": 77, "versions": {"default": -1, "opponent": 12},
          "dropped": {"default": {"malformed": 1}, "opponent": {}}}


def roundtrip(schema, meta):
    return schema.decode(wire.encode(schema.kind, {}, meta))


@pytest.mark.parametrize("schema, meta", [(SERVER_STATUS, SERVER), (BUFFER_STATUS, BUFFER),
                                          (INLINE_STATUS, INLINE)])
def test_what_the_senders_send_decodes_unchanged(schema, meta):
    got = roundtrip(schema, meta)
    assert set(got) == set(meta)
    for k, v in meta.items():
        assert got[k] == v or (k == "means" and math.isnan(got[k]["staleness_mean"]))
    assert schema.decode(schema.encode(meta)).keys() == meta.keys()
    assert roundtrip(schema, meta | {"extra": [1, 2]})["extra"] == [1, 2]  # other keys: ignored


def test_numpy_floats_of_a_sender_encode():
    """A sender's means may be NumPy float64 (a float subclass msgpack packs as float)."""
    meta = SERVER | {"means": {"inference/batch_rows": np.float64(2.5)},
                     "heartbeat_age_s": np.float64(0.1)}
    assert roundtrip(SERVER_STATUS, meta)["means"] == {"inference/batch_rows": 2.5}


@pytest.mark.parametrize("schema, meta, change, reason", [
    (SERVER_STATUS, SERVER, {"run": True}, "server_status: 'run' is not an integer: True"),
    (SERVER_STATUS, SERVER, {"serving": 1}, "server_status: 'serving' is not true or false: 1"),
    (SERVER_STATUS, SERVER, {"heartbeat_age_s": float("inf")},
     "server_status: 'heartbeat_age_s' is not a finite number: inf"),
    (SERVER_STATUS, SERVER, {"heartbeat_age_s": "0.1"},
     "server_status: 'heartbeat_age_s' is not a finite number: '0.1'"),
    (SERVER_STATUS, SERVER, {"address": None}, "server_status: 'address' is not a string: None"),
    (SERVER_STATUS, SERVER, {"counters": {"dropped_requests": 1.0}},
     "server_status: 'counters' is not a map of a string to an integer: {'dropped_requests': 1.0}"),
    (SERVER_STATUS, SERVER, {"means": {"inference/x": "1"}},
     "server_status: 'means' is not a map of a string to a number: {'inference/x': '1'}"),
    (SERVER_STATUS, SERVER, {"seen": [1, "2"]},
     "server_status: 'seen' is not a list of an integer: [1, '2']"),
    (BUFFER_STATUS, BUFFER, {"episodes": [{"return": float("nan")}]},
     "buffer_status: 'episodes' is not a list of an episode record ({name: finite number}, "
     "'team': string): [{'return': nan}]"),
    (BUFFER_STATUS, BUFFER, {"episodes": [{"return": 1.0, "team": 2}]},
     "buffer_status: 'episodes' is not a list of an episode record ({name: finite number}, "
     "'team': string): [{'return': 1.0, 'team': 2}]"),
    (BUFFER_STATUS, BUFFER, {"insert_allowed": None},
     "buffer_status: 'insert_allowed' is not true or false: None"),
    (INLINE_STATUS, INLINE, {"versions": {"default": 1.5}},
     "inline_status: 'versions' is not a map of a string to an integer: {'default': 1.5}"),
    (INLINE_STATUS, INLINE, {"dropped": {"default": 3}},
     "inline_status: 'dropped' is not a map of a string to a map of a string to an integer: "
     "{'default': 3}"),
])
def test_a_field_of_the_wrong_type_is_refused_naming_it(schema, meta, change, reason):
    with pytest.raises(wire.WireError) as info:
        roundtrip(schema, meta | change)
    assert str(info.value) == reason
    with pytest.raises(wire.WireError):
        schema.encode(meta | change)  # a sender's bug shows where it is made


@pytest.mark.parametrize("schema, meta", [(SERVER_STATUS, SERVER), (BUFFER_STATUS, BUFFER),
                                          (INLINE_STATUS, INLINE)])
def test_every_field_is_required(schema, meta):
    for key in meta:
        with pytest.raises(wire.WireError, match=rf"^{schema.kind}: no '{key}'$"):
            roundtrip(schema, {k: v for k, v in meta.items() if k != key})


def test_another_kind_arrays_or_garbage_are_refused():
    with pytest.raises(wire.WireError, match="expected a 'server_status', got kind 'buffer_status'"):
        SERVER_STATUS.decode(wire.encode("buffer_status", {}, SERVER))
    with pytest.raises(wire.WireError, match=r"server_status: unexpected arrays \['x'\]"):
        SERVER_STATUS.decode(wire.encode("server_status", {"x": np.zeros(0, np.int32)}, SERVER))
    with pytest.raises(wire.WireError, match="not valid msgpack"):
        SERVER_STATUS.decode([b"\xc1"])


def inline_params():
    metrics = MetricsAccumulator()
    metrics.set_version("default", 10)
    table = ActorTable()
    table.register(3, 77)
    cfg = types.SimpleNamespace(param_publish_interval_s=0.0)
    return InlineParameters(cfg, ["default"], None, metrics, table, None, "127.0.0.1"), metrics, table


def test_inline_status_marks_the_actor_seen_and_counts_its_drops():
    params, metrics, table = inline_params()
    registered = table.last_seen(3)
    params.on_status(INLINE_STATUS.encode(INLINE | {"versions": {"default": 8}}))
    params.on_status(INLINE_STATUS.encode(INLINE | {"dropped": {"default": {"malformed": 4}}}))
    assert table.last_seen(3) > registered
    assert metrics.counter("param_dropped/malformed") == 4
    assert metrics.snapshot(1.0)["param_lag/inline"] == 2


def test_malformed_inline_status_is_dropped_and_counted_never_raised(caplog):
    params, metrics, table = inline_params()
    registered = table.last_seen(3)
    params.on_status(wire.encode("inline_status", {}, INLINE | {"versions": [8]}))
    params.on_status([b"\xc1"])
    params.on_status(wire.encode("inline_status", {}, INLINE | {"actor": 4}))  # unknown: ignored
    assert metrics.counter("dropped_status") == 2 and table.last_seen(3) == registered
    assert "inline parameters: dropped a malformed status: inline_status: 'versions' is not a " \
           "map of a string to an integer: [8]" in caplog.text
