"""Property-based fuzzing of every decoder of untrusted input (Hypothesis strategies and
the properties), shared by ``tests/unit/test_fuzz_decoders.py`` (a short profile in the
default suite, a long one under ``-m slow``) and ``scripts/fuzz_decoders.py`` (the
counts of ``docs/reliability.md``).

Each entry of :data:`DECODERS` is a decoder, the strategy of its hostile inputs and its
property: the decoder raises only its own documented error (or, for a receiver that
never raises, nothing), and what it accepts has the documented types (so removing the
validation of one field makes the property fail). Strategies are structured, not only
random bytes: valid messages of the decoder with one field made ill-typed, huge,
negative, nested or missing; truncated and extra frames; valid headers with wrong
buffer sizes; flipped bytes; raw bytes; deep msgpack nesting.
"""

from __future__ import annotations

import collections
import json
import math
import os
import tempfile
from typing import Any, Callable, NamedTuple

import gymnasium
import msgpack
import numpy as np
from hypothesis import strategies as st

from jaxsrl.streams import wire

# -- values ---------------------------------------------------------------------------
INT64 = st.integers(-2**63, 2**64 - 1)  # what msgpack can carry
SCALARS = st.one_of(st.none(), st.booleans(), INT64, st.integers(-3, 3),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.binary(max_size=12))
PLAIN = st.recursive(SCALARS, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=6), c, max_size=4)),
    max_leaves=10)
HUGE = st.one_of(st.integers(2**31, 2**64 - 1), st.integers(-2**63, -1), st.just(2**63 - 1),
                 st.just(float("nan")), st.just(float("inf")), st.just(-0.0),
                 st.text(min_size=300, max_size=2000), st.binary(min_size=300, max_size=2000),
                 st.lists(st.integers(0, 9), min_size=300, max_size=600))
NESTED = st.integers(1, 40).map(lambda d: _nest([0], d))
CONTAINERS = st.one_of(st.lists(PLAIN, max_size=3), st.dictionaries(st.text(max_size=6), PLAIN,
                                                                    max_size=3))
#: one ill value: a list or map, huge / negative / non-finite, nested, or any scalar
ILL = st.one_of(CONTAINERS, HUGE, NESTED, SCALARS)


def _nest(x: Any, depth: int) -> Any:
    for i in range(depth):
        x = [x] if i % 2 else {"k": x}
    return x


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


# -- messages ---------------------------------------------------------------------------
MODES = ("valid", "meta_value", "meta_value", "meta_value", "meta_missing", "meta_extra",
         "field", "field", "field_missing", "spec_field", "spec_field", "spec_field", "spec_shape",
         "spec_other", "spec_container", "spec_container", "buffer", "frames", "prefix", "flip",
         "bytes", "deep", "not_a_map")
# (repeated entries: drawn more often; a header field made ill is the main class)


@st.composite
def hostile(draw, valid: list[list[bytes]], prefix: int = 0, meta_keys: tuple = ()) -> list:
    """A message built from one of the ``valid`` frame lists (``prefix`` leading frames
    before the wire message: a topic or a routing identity)."""
    frames = [bytes(f) for f in draw(st.sampled_from(valid))]
    head, body = frames[:prefix], frames[prefix:]
    header = msgpack.unpackb(body[0], raw=False)
    mode = draw(st.sampled_from(MODES))
    meta = header.setdefault("meta", {})
    if mode == "meta_value":
        key = draw(st.sampled_from(sorted(meta) + list(meta_keys) or ["x"]))
        meta[key] = draw(ILL)
    elif mode == "meta_missing" and meta:
        del meta[draw(st.sampled_from(sorted(meta)))]
    elif mode == "meta_extra":
        meta.update(draw(st.dictionaries(st.text(max_size=8), ILL, min_size=1, max_size=3)))
    elif mode == "field":
        header[draw(st.sampled_from(["v", "kind", "meta", "arrays"]))] = draw(ILL)
    elif mode == "field_missing":
        del header[draw(st.sampled_from(sorted(header)))]
    elif mode.startswith("spec_") and header.get("arrays"):
        spec = draw(st.sampled_from(header["arrays"]))
        if mode == "spec_container":  # issue 42's class: a list or map where a string goes
            spec[draw(st.integers(0, 2))] = draw(CONTAINERS)
        elif mode == "spec_field":  # name, dtype or shape ill-typed, or the spec itself
            i = draw(st.integers(0, 3))
            if i == 3:
                header["arrays"][header["arrays"].index(spec)] = draw(ILL)
            else:
                spec[i] = draw(ILL)
        elif mode == "spec_shape":  # one dimension huge, negative, float, bool, nested
            if spec[2]:
                spec[2][draw(st.integers(0, len(spec[2]) - 1))] = draw(st.one_of(
                    st.integers(-2**63, 2**64 - 1), st.booleans(), st.floats(), ILL))
            else:
                spec[2] = draw(st.lists(st.integers(0, 2**41), max_size=9))
        else:  # a valid header whose buffer sizes or schema are wrong
            spec[1] = draw(st.sampled_from(sorted(wire.ALLOWED_DTYPES)))
            spec[2] = draw(st.lists(st.integers(0, 5), max_size=4))
    if mode not in ("deep", "not_a_map"):
        body[0] = _pack(header)
    if mode == "buffer" and len(body) > 1:
        i = draw(st.integers(1, len(body) - 1))
        cut = draw(st.integers(0, len(body[i]) + 64))
        body[i] = body[i][:cut] if cut <= len(body[i]) else body[i] + bytes(cut - len(body[i]))
    elif mode == "frames":
        if draw(st.booleans()):
            body = body[:draw(st.integers(0, len(body)))]
        else:
            body = body + draw(st.lists(st.binary(max_size=64), min_size=1, max_size=3))
    elif mode == "prefix":
        head = draw(st.lists(st.binary(max_size=16), max_size=2))
    elif mode == "flip":
        h = bytearray(body[0])
        for _ in range(draw(st.integers(1, 8))):
            h[draw(st.integers(0, len(h) - 1))] = draw(st.integers(0, 255))
        body[0] = bytes(h)
    elif mode == "bytes":
        body = draw(st.lists(st.binary(max_size=200), min_size=1, max_size=3))
    elif mode == "deep":  # msgpack nested past any stack: [[[[...]]]]
        body[0] = b"\x91" * draw(st.integers(100, 5_000)) + b"\x00"
    elif mode == "not_a_map":
        body[0] = _pack(draw(ILL))
    return head + body


class Decoder(NamedTuple):
    """One fuzzed decoder: ``make()`` returns ``(strategy, check)``; ``check(case)``
    returns ``"accepted"`` or ``"refused"`` and raises ``AssertionError`` when the decoder
    raised anything other than its documented error or accepted what breaks its
    contract. ``raises``: the documented error, as written in the table."""

    raises: str
    make: Callable[[], tuple]


def refused(fn: Callable[[], Any], errors: tuple, what: str) -> tuple[bool, Any]:
    """``(True, None)`` if ``fn()`` raised one of ``errors``, ``(False, result)`` if it
    returned; AssertionError naming the exception otherwise."""
    try:
        return False, fn()
    except errors:
        return True, None
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc


def _check_message(msg: wire.Message) -> None:
    assert isinstance(msg.kind, str) and isinstance(msg.meta, dict)
    assert all(isinstance(k, str) for k in msg.meta)
    for name, arr in msg.arrays.items():
        assert isinstance(name, str) and arr.dtype.name in wire.ALLOWED_DTYPES


# -- the wire and its schemas -----------------------------------------------------------
def _generic_valid() -> list:
    rng = np.random.default_rng(0)
    return [wire.encode("act", {"obs": rng.normal(size=(3, 4)).astype(np.float32),
                                "mask": np.ones(3, bool)}, {"actor": 0, "run": 1, "group": 0}),
            wire.encode("segment", {"x": np.arange(6, dtype=np.int64).reshape(2, 3)},
                        {"env_steps": 4, "episodes": [{"return": 1.0}]}),
            wire.encode("ping", {}, {"actor": 0, "run": 1})]


def make_wire():
    def check(frames):
        bad, msg = refused(lambda: wire.decode(frames, max_bytes=1 << 20), (wire.WireError,),
                           "wire.decode")
        if bad:
            return "refused"
        _check_message(msg)
        return "accepted"
    return hostile(_generic_valid(), meta_keys=("actor", "run", "group")), check


REQUEST_SCHEMA = {"obs": wire.ArraySpec("float32", (None, 4)), "mask": wire.ArraySpec("bool", (None,))}


def make_schema_decoder():
    dec = wire.SchemaDecoder(REQUEST_SCHEMA, max_bytes=1 << 20, what="observation", max_known=64)

    def check(frames):
        first = refused(lambda: dec.decode(frames), (wire.WireError,), "SchemaDecoder.decode")
        again = refused(lambda: dec.decode(frames), (wire.WireError,), "SchemaDecoder.decode")
        assert first[0] == again[0], "a repeated header got another verdict"
        if first[0]:
            return "refused"
        checked = first[1]
        _check_message(checked.message)
        assert (checked.rows, checked.error) == (again[1].rows, again[1].error)
        ok, rows = refused(checked.require_rows, (wire.WireError,), "Checked.require_rows")
        if ok:
            return "refused"
        for name, spec in REQUEST_SCHEMA.items():
            arr = checked.message.arrays[name]
            assert arr.dtype.name == spec.dtype and arr.shape[0] == rows and arr.ndim == len(spec.shape)
        return "accepted"
    return hostile(_generic_valid()), check


# -- status messages ---------------------------------------------------------------------
def _status_valid(schema) -> list:
    from jaxsrl.streams import status as s
    common = {"run": 3, "pid": 7, "serving": True, "heartbeat_age_s": 0.5,
              "means": {"m": 1.0}, "counters": {"c": 2}, "seen": [0, 1]}
    metas = {s.SERVER_STATUS.kind: {"server": "a", **common, "address": "tcp://x:1", "version": 4},
             s.BUFFER_STATUS.kind: {"buffer": "b", **common, "sample_address": "tcp://x:2",
                                    "request_address": "tcp://x:3", "pending": 0,
                                    "insert_allowed": True, "env_steps": 10,
                                    "episodes": [{"return": 1.0, "team": "t"}]},
             s.INLINE_STATUS.kind: {"actor": 0, "run": 1, "versions": {"p": 2},
                                    "dropped": {"p": {"checksum": 1}}}}
    # and the same meta with an array (refused: statuses carry none), a base whose array
    # specs the strategy makes ill-typed
    return [schema.encode(metas[schema.kind]),
            wire.encode(schema.kind, {"x": np.zeros(2, np.int8)}, metas[schema.kind])]


def make_status(kind: str):
    from jaxsrl.streams import status as s
    schema = {x.kind: x for x in (s.SERVER_STATUS, s.BUFFER_STATUS, s.INLINE_STATUS)}[kind]

    def check(frames):
        bad, meta = refused(lambda: schema.decode(frames), (wire.WireError,), f"{kind} decode")
        if bad:
            return "refused"
        for key, spec in schema.fields.items():  # independent of check(): the documented types
            assert _documented(spec.what, meta[key]), f"{kind}: accepted {key}={meta[key]!r}"
        return "accepted"
    return hostile(_status_valid(schema)), check


def _is_int(v):
    return type(v) is int  # noqa: E721


def _documented(what: str, v: Any) -> bool:
    """The types of jaxsrl/streams/status.py's table, written out again."""
    num = lambda x: type(x) in (int, float)  # noqa: E731
    return {
        "an integer": lambda: _is_int(v), "true or false": lambda: type(v) is bool,
        "a string": lambda: type(v) is str, "a finite number": lambda: num(v) and math.isfinite(v),
        "a map of a string to a number": lambda: type(v) is dict and all(
            type(k) is str and num(x) for k, x in v.items()),
        "a map of a string to an integer": lambda: type(v) is dict and all(
            type(k) is str and _is_int(x) for k, x in v.items()),
        "a map of a string to a map of a string to an integer": lambda: type(v) is dict and all(
            type(k) is str and type(x) is dict and all(type(a) is str and _is_int(b)
                                                       for a, b in x.items())
            for k, x in v.items()),
        "a list of an integer": lambda: type(v) is list and all(_is_int(x) for x in v),
    }.get(what, lambda: type(v) is list and all(  # episodes
        type(e) is dict and all(type(k) is str and (type(x) is str if k == "team" else
                                                     num(x) and math.isfinite(x))
                                for k, x in e.items()) for e in v))()


def make_inline_status_receiver():
    """The launcher's receive path of the inline status port (``on_status``): never raises;
    a refused message is counted as ``dropped_status``."""
    import logging
    from jaxsrl.experiment.metrics import MetricsAccumulator
    from jaxsrl.launch.inline_params import InlineParameters
    from jaxsrl.streams import status as s
    from jaxsrl.streams.admission import ActorTable
    table = ActorTable()
    table.register(0, 1)
    metrics = MetricsAccumulator()
    receiver = InlineParameters(None, ["p"], None, metrics, table, None, "127.0.0.1")
    receiver._drop_log._log = logging.getLogger("fuzz.quiet")
    logging.getLogger("fuzz.quiet").propagate = False

    def check(frames):
        before = metrics.counter(s.DROPPED_STATUS)
        try:
            receiver.on_status(frames)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"on_status raised {type(exc).__name__}: {exc}") from exc
        dropped = metrics.counter(s.DROPPED_STATUS) - before
        ok = refused(lambda: s.INLINE_STATUS.decode(frames), (wire.WireError,), "decode")[0]
        assert dropped == int(ok), "a refused status must be counted once, an accepted one not"
        return "refused" if dropped else "accepted"
    return hostile(_status_valid(s.INLINE_STATUS)), check


# -- segments -------------------------------------------------------------------------------
T = 4


def _segment_setup():
    from jaxsrl.experiment.metrics import MetricsAccumulator
    from jaxsrl.streams.admission import ActorTable
    from jaxsrl.streams.segment import pack_final_obs, segment_schema
    from jaxsrl.streams.segment_gate import SegmentGate
    schema = segment_schema(gymnasium.spaces.Box(-1, 1, (3,), np.float32),
                            gymnasium.spaces.Discrete(2), T)
    table = ActorTable()
    table.register(0, 1)
    metrics = MetricsAccumulator()
    gate = SegmentGate(schema, T, 8, table, metrics, name="fuzz")
    gate.version = 5
    import logging
    gate.drops._log = logging.getLogger("fuzz.quiet")
    logging.getLogger("fuzz.quiet").propagate = False
    valid = []
    for rows, truncate in ((2, False), (3, True)):
        arrays = {k: np.zeros((rows,) + tuple(s.shape[1:]), s.dtype) for k, s in schema.items()}
        if truncate:
            arrays["truncated"][0, 1] = True
        meta = {"actor": 0, "run": 1, "group": 0, "env_steps": rows * T,
                "episodes": [{"return": 1.0, "length": 3}], "timing": {"env_s": 0.1, "wait_s": 0.1},
                "failovers": 0}
        valid.append(wire.encode("segment", pack_final_obs(arrays), meta))
    return schema, gate, metrics, valid


def make_segment_gate():
    schema, gate, metrics, valid = _segment_setup()

    def check(frames):
        bad, msg = refused(lambda: gate.validate(frames), (wire.WireError,), "SegmentGate.validate")
        before = metrics.counter("dropped_segments") + metrics.counter("stale_run_segments_dropped")
        try:
            admitted = gate.admit(frames)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"SegmentGate.admit raised {type(exc).__name__}: {exc}") from exc
        after = metrics.counter("dropped_segments") + metrics.counter("stale_run_segments_dropped")
        assert (admitted is None) == bad and after - before == int(bad)
        if bad:
            return "refused"
        rows = {msg.arrays[k].shape[0] for k in schema}
        assert len(rows) == 1 and 1 <= rows.pop() <= 8
        for k, spec in schema.items():
            assert msg.arrays[k].dtype.name == spec.dtype and msg.arrays[k].shape[1:] == spec.shape[1:]
        n = msg.arrays["reward"].shape[0]
        steps = msg.meta.get("env_steps", 0)
        assert _is_int(steps) and 0 <= steps <= n * T
        assert msg.meta["actor"] == 0 and msg.meta["run"] == 1
        assert 0 <= msg.arrays["version"].min() and msg.arrays["version"].max() <= gate.version
        return "accepted"
    return hostile(valid, meta_keys=("actor", "run", "env_steps")), check


# -- replay -------------------------------------------------------------------------------
def make_replay_batch():
    import jax
    from jaxsrl.streams import replay_wire
    spec = {"obs": jax.ShapeDtypeStruct((3,), np.float32), "action": jax.ShapeDtypeStruct((), np.int32)}
    B = 4
    items = {"obs": np.zeros((B, 3), np.float32), "action": np.zeros(B, np.int32)}
    valid = [replay_wire.encode_batch(items, np.ones(B), np.arange(B), {"req": 1, "run": 2, "shard": 0})]

    def check(frames):
        bad, out = refused(lambda: replay_wire.decode_batch(frames, spec, B, max_bytes=1 << 20),
                           (wire.WireError,), "decode_batch")
        if bad:
            return "refused"
        msg, tree = out
        assert _is_int(msg.meta["req"]) and _is_int(msg.meta["run"])
        assert tree["obs"].shape == (B, 3) and tree["obs"].dtype == np.float32
        assert tree["action"].shape == (B,) and msg.arrays["ids"].dtype == np.int32
        return "accepted"
    return hostile(valid, meta_keys=("req", "run")), check


def make_priorities():
    from jaxsrl.streams import replay_wire
    valid = [wire.encode(replay_wire.PRIORITIES, {"ids": np.arange(3, dtype=np.int32),
                                                  "priorities": np.ones(3, np.float32)},
                         {"run": 1, "version": 2})]

    def check(frames):
        def go():
            return replay_wire.check_priorities(wire.decode(frames, max_bytes=1 << 16), 8)
        bad, out = refused(go, (wire.WireError,), "check_priorities")
        if bad:
            return "refused"
        ids, prios = out
        assert ids.dtype == np.int32 and prios.dtype == np.float32 and len(ids) == len(prios) <= 8
        return "accepted"
    return hostile(valid), check


# -- parameters ---------------------------------------------------------------------------
def make_param_subscriber():
    """``ParamSubscriber.handle`` never raises; a version it takes is the template's."""
    import logging
    from jaxsrl.streams.param_subscriber import ParamSubscriber, log as sub_log
    from jaxsrl.streams.param_wire import encode_chunks
    from jaxsrl.streams.params import ParameterStore
    template = {"w": np.zeros((3, 4), np.float32), "b": np.zeros(4, np.float32)}
    params = {"w": np.ones((3, 4), np.float32), "b": np.full(4, 2.0, np.float32)}
    valid = encode_chunks("p", 1, params, chunk_bytes=20) + encode_chunks("p", 2, params)
    sub_log.disabled = True

    def check(frames):
        sub = ParamSubscriber("inproc://unused", "p", template, ParameterStore(), put=lambda x: x)
        sub._drop_log._log = logging.getLogger("fuzz.quiet")
        try:
            took = sub.handle(frames)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"ParamSubscriber.handle raised {type(exc).__name__}: {exc}") from exc
        assert took in (True, False)
        if not took:
            assert sum(sub.dropped.values()) >= 1 or sub._pending, "a message neither taken nor counted"
            return "refused"
        assert sub.version >= 1
        return "accepted"
    return hostile(valid, prefix=1, meta_keys=("version", "chunk", "chunks", "nbytes", "crc32",
                                               "leaves", "chunk_bytes", "stream")), check


# -- opponents ------------------------------------------------------------------------------
def make_opponents():
    """``opponents.resolve`` on any ``opponent`` array a request may carry (int32 after
    the schema check): what serves each row is latest or a snapshot of the pool."""
    from hypothesis.extra import numpy as hnp
    from jaxsrl.streams import opponents as opp
    views = [opp.EMPTY, opp.PoolView((3, 7, 20), (None, None, None), np.array([0.2, 0.5, 1.0]))]
    strategy = st.tuples(st.sampled_from(views), hnp.arrays(np.int32, st.integers(0, 16),
                                                            elements=st.integers(-2**31, 2**31 - 1)))

    def check(case):
        view, requested = case
        served, reset = opp.resolve(requested, view)
        assert served.shape == requested.shape and reset.shape == requested.shape
        assert set(served.tolist()) <= set(view.versions) | {opp.LATEST}
        return "accepted"
    return strategy, check


# -- run-folder files and configs -----------------------------------------------------------
def _json_text():
    """Text of a JSON file: a structured one (the real file's keys with ill values, or a
    valid-looking object), raw text, non-UTF-8 bytes or deep nesting."""
    obj = st.dictionaries(st.sampled_from(["agent", "env", "jaxsrl", "total_env_steps", "seed",
                                           "logdir", "policy_version", "env_steps", "wall_time_s",
                                           "event", "num_actors", "ppo", "inference"]),
                          st.one_of(PLAIN, HUGE, NESTED), max_size=6)
    return st.one_of(
        obj.map(lambda d: json.dumps(d, default=repr).encode()),
        PLAIN.map(lambda v: json.dumps(v, default=repr).encode()),
        st.binary(max_size=200),
        st.integers(1, 20_000).map(lambda d: b"[" * d + b"]" * d),
        st.lists(obj.map(lambda d: json.dumps(d, default=repr)), max_size=4).map(lambda xs: "\n".join(xs).encode()))


def _file_case(check_path):
    folder = tempfile.mkdtemp(prefix="jaxsrl-fuzz-")

    def check(data: bytes):
        return check_path(folder, data)
    return check


def make_config_json():
    """``RunDir.read_config`` then the ``--resume`` layering of what it read
    (``apply_table`` and ``validate``): ``ValueError`` only (``FileNotFoundError`` never:
    the file is there)."""
    from jaxsrl.experiment.config import load_config
    from jaxsrl.experiment.config_layers import apply_table
    from jaxsrl.experiment.run_dir import RunDir, is_run_config
    base = load_config(["--env=CartPole-v1"])
    fields = set(base.__dataclass_fields__) - {"agent", "env", "logdir", "resume", "overwrite"}

    def check_path(folder, data):
        run = RunDir(folder)
        with open(run.config_path, "wb") as f:
            f.write(data)
        assert is_run_config(run.config_path) in (True, False)

        def go():
            saved = run.read_config()
            cfg = apply_table(base, {k: v for k, v in saved.items() if k in fields}, run.config_path)
            cfg.validate()
        return "refused" if refused(go, (ValueError,), "config.json")[0] else "accepted"
    return st.one_of(_json_text(), _config_record()), _file_case(check_path)


def _config_record():
    """A real config.json's keys, one of them given an ill value."""
    from jaxsrl.experiment.config import load_config, to_dict
    record = to_dict(load_config(["--env=CartPole-v1"]))
    keys = sorted(record)
    return st.tuples(st.sampled_from(keys), ILL).map(
        lambda kv: json.dumps({**record, kv[0]: kv[1]}, default=repr).encode())


def make_events():
    from jaxsrl.experiment.events import read_events

    def check_path(folder, data):
        path = os.path.join(folder, "run_events.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        try:
            records = read_events(path) + read_events(path, "resumed")
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"read_events raised {type(exc).__name__}: {exc}") from exc
        assert all(isinstance(r, dict) for r in records)
        return "accepted" if records else "refused"
    return _json_text(), _file_case(check_path)


def make_metrics_file():
    from jaxsrl.experiment.run_dir import RunDir

    def check_path(folder, data):
        run = RunDir(folder)
        with open(run.metrics_path, "wb") as f:
            f.write(data)
        try:
            records = run.read_metrics() + run.read_metrics(final=False)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"read_metrics raised {type(exc).__name__}: {exc}") from exc
        assert all(isinstance(r, dict) for r in records)
        return "accepted" if records else "refused"
    return _json_text(), _file_case(check_path)


def make_checkpoint_meta():
    """A checkpoint's ``meta/metadata``: :func:`check_meta` (the restore's check) raises
    only ``ValueError``; :func:`has_run_checkpoint` (the run-folder test) only answers."""
    from jaxsrl.experiment.checkpoint import check_meta
    from jaxsrl.experiment.run_dir import has_run_checkpoint
    real = {"policy_version": 3, "env_steps": 512, "wall_time_s": 1.5}
    structured = st.tuples(st.sampled_from(sorted(real) + ["other"]), st.one_of(ILL, st.none())).map(
        lambda kv: json.dumps({**real, kv[0]: kv[1]}, default=repr).encode())

    def check_path(folder, data):
        meta_dir = os.path.join(folder, "checkpoints", "default", "3", "meta")
        os.makedirs(meta_dir, exist_ok=True)
        with open(os.path.join(meta_dir, "metadata"), "wb") as f:
            f.write(data)
        assert has_run_checkpoint(os.path.join(folder, "checkpoints")) in (True, False)
        try:
            meta = json.loads(data)
        except (ValueError, RecursionError):
            return "refused"  # Orbax's JSON reader refuses it first
        bad, out = refused(lambda: check_meta(meta, 3), (ValueError,), "check_meta")
        if bad:
            return "refused"
        assert _is_int(out["policy_version"]) and out["policy_version"] >= 0
        assert _is_int(out.get("env_steps", 0)) and out.get("env_steps", 0) >= 0
        wall = out.get("wall_time_s", 0.0)
        assert type(wall) in (int, float) and math.isfinite(wall) and wall >= 0
        return "accepted"
    return st.one_of(structured, _json_text()), _file_case(check_path)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(repr(v))


TOML_SCALARS = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(),
                         st.text(max_size=12))
TOML_VALUES = st.recursive(TOML_SCALARS, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=6), c, max_size=3)), max_leaves=8)


def make_toml():
    """A ``--config`` TOML file layered over the defaults, then ``validate``: ``ValueError``
    only (``apply_file`` and ``RunConfig.validate``)."""
    from jaxsrl.experiment.config import load_config
    from jaxsrl.experiment.config_layers import apply_file
    from jaxsrl.experiment import sections
    base = load_config(["--env=CartPole-v1"])
    top = sorted(set(base.__dataclass_fields__) - {"agent", "env", "ppo"})
    agent_keys = sorted(base.ppo.__dataclass_fields__)
    tables = sorted(sections.BY_NAME)
    line = st.one_of(
        st.tuples(st.sampled_from(top), TOML_VALUES).map(lambda kv: f"{kv[0]} = {_toml_value(kv[1])}\n"),
        st.tuples(st.sampled_from(agent_keys), TOML_VALUES).map(
            lambda kv: f"[ppo]\n{kv[0]} = {_toml_value(kv[1])}\n"),
        st.tuples(st.sampled_from(tables), st.sampled_from(top + ["mode", "x"]), TOML_VALUES).map(
            lambda t: f"[{t[0]}]\n{t[1]} = {_toml_value(t[2])}\n"))
    text = st.one_of(st.lists(line, min_size=1, max_size=3).map(lambda xs: "".join(xs).encode()),
                     st.binary(max_size=120), st.text(max_size=120).map(str.encode),
                     st.integers(1, 5_000).map(lambda d: (b"x = " + b"[" * d + b"]" * d)))

    def check_path(folder, data):
        path = os.path.join(folder, "c.toml")
        with open(path, "wb") as f:
            f.write(data)

        def go():
            apply_file(base, path).validate()
        return "refused" if refused(go, (ValueError,), "TOML config")[0] else "accepted"
    return text, _file_case(check_path)


DECODERS: dict[str, Decoder] = {
    "wire.decode": Decoder("WireError", make_wire),
    "wire.SchemaDecoder": Decoder("WireError", make_schema_decoder),
    "status: server_status": Decoder("WireError", lambda: make_status("server_status")),
    "status: buffer_status": Decoder("WireError", lambda: make_status("buffer_status")),
    "status: inline_status": Decoder("WireError", lambda: make_status("inline_status")),
    "inline status port (on_status)": Decoder("never raises; dropped_status",
                                              make_inline_status_receiver),
    "segment gate": Decoder("WireError (admit: never raises; dropped_segments)", make_segment_gate),
    "replay batch": Decoder("WireError", make_replay_batch),
    "replay priorities": Decoder("WireError", make_priorities),
    "parameter chunks": Decoder("never raises; dropped[reason]", make_param_subscriber),
    "opponent array": Decoder("never raises", make_opponents),
    "config.json": Decoder("ValueError", make_config_json),
    "run_events.jsonl": Decoder("never raises", make_events),
    "metrics.jsonl": Decoder("never raises", make_metrics_file),
    "checkpoint metadata": Decoder("ValueError", make_checkpoint_meta),
    "TOML config": Decoder("ValueError", make_toml),
}

#: outcome counts of the cases run in this process: {decoder: Counter(accepted=, refused=)}
STATS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def run(name: str, max_examples: int, seed: int | None = 0) -> collections.Counter:
    """Run decoder ``name``'s property on ``max_examples`` generated cases (derandomized
    when ``seed`` is given: the same cases every time); returns its outcome counts."""
    from hypothesis import HealthCheck, given, settings, seed as hseed
    import logging
    strategy, check = DECODERS[name].make()
    stats = STATS[name]
    quiet = logging.getLogger("jaxsrl")  # thousands of drop lines: not this test's subject
    level = quiet.level

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=seed == 0,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(strategy)
    def prop(case):
        stats[check(case)] += 1

    if seed:
        prop = hseed(seed)(prop)
    quiet.setLevel(logging.CRITICAL)
    try:
        prop()
    finally:
        quiet.setLevel(level)
    return stats
