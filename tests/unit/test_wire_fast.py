"""The servers' fast codecs against the reference ones: ``SliceEncoder`` gives
``encode``'s frames byte for byte, ``SchemaDecoder`` gives ``decode`` + ``check_rows``'s
verdict (result or error message) for every message, the first time and every later time."""

import re

import msgpack
import numpy as np
import pytest

from jaxsrl.streams import wire

SCHEMA = {"obs": wire.ArraySpec("float32", (None, 3)), "carry/0": wire.ArraySpec("int8", (None,))}


def _reference(frames):
    """What ``decode`` then ``check_rows`` say: ``("ok", kind, meta, arrays, rows)``,
    ``("rows", kind, meta, arrays, error)`` or ``("bad", error)``."""
    try:
        msg = wire.decode(frames, max_bytes=4096)
    except wire.WireError as exc:
        return ("bad", str(exc))
    try:
        return ("ok", msg.kind, msg.meta, msg.arrays, wire.check_rows(msg.arrays, SCHEMA, "obs"))
    except wire.WireError as exc:
        return ("rows", msg.kind, msg.meta, msg.arrays, str(exc))


def _fast(decoder, frames):
    try:
        got = decoder.decode(frames)
    except wire.WireError as exc:
        return ("bad", str(exc))
    m = got.message
    if got.rows is None:
        with pytest.raises(wire.WireError, match="^" + re.escape(got.error) + "$"):
            got.require_rows()
        return ("rows", m.kind, m.meta, m.arrays, got.error)
    return ("ok", m.kind, m.meta, m.arrays, got.require_rows())


def _same(a, b):
    assert a[0] == b[0], (a, b)
    if a[0] == "bad":
        assert a == b
    else:
        assert a[1:3] == b[1:3] and a[3].keys() == b[3].keys() and a[4] == b[4], (a, b)
        for k in a[3]:
            assert a[3][k].dtype == b[3][k].dtype and a[3][k].shape == b[3][k].shape
            np.testing.assert_array_equal(a[3][k], b[3][k])


def _header(arrays, meta=None, **extra):
    return msgpack.packb({"v": 1, "kind": "act", "meta": meta or {"actor": 1}, "arrays": arrays,
                          **extra})


def _messages():
    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    carry = np.array([1, -2], np.int8)
    good = [bytes(f) for f in wire.encode("act", {"obs": obs, "carry/0": carry}, {"actor": 1})]
    yield good
    yield [good[0], good[1][:-4], good[2]]  # a short frame: the header is known by now
    yield [good[0], good[1]]  # a frame missing
    yield [good[0], good[1], good[2], b""]  # a frame too many
    yield [bytes(f) for f in wire.encode("act", {"obs": obs[:1], "carry/0": carry[:1]},
                                         {"actor": 1, "group": 3})]
    yield [bytes(f) for f in wire.encode("act", {"obs": obs.astype(np.float64), "carry/0": carry})]
    yield [bytes(f) for f in wire.encode("act", {"obs": obs, "carry/0": carry[:1]})]  # rows differ
    yield [bytes(f) for f in wire.encode("act", {"obs": obs})]  # an array missing
    yield [bytes(f) for f in wire.encode("ping", {}, {"actor": 1})]
    # Python's True == 1 and 2.0 == 2: such shapes are refused however often they come
    yield [_header([["obs", "float32", [2, 3]], ["carry/0", "int8", [True * 2]]]), good[1], good[2]]
    yield [_header([["obs", "float32", [2.0, 3]], ["carry/0", "int8", [2]]]), good[1], good[2]]
    yield [_header([["obs", "float32", [2, 3]], ["carry/0", "int8", [2]]], v=2), good[1], good[2]]
    yield [_header([["obs", "float32", [300, 3]], ["carry/0", "int8", [300]]]),
           b"\0" * 3600, b"\0" * 300]  # over max_bytes
    yield [b"\xc1 not msgpack", good[1]]
    yield [_header([["obs", "float32", [2, 3]], ["carry/0", "int8", [2]]],
                   meta={"actor": 1, "games": [[1, 2, 0.5]]}), good[1], good[2]]  # not remembered
    yield []


def test_schema_decoder_agrees_with_decode_and_check_rows_every_time():
    decoder = wire.SchemaDecoder(SCHEMA, max_bytes=4096, what="obs", max_known=3)
    messages = list(_messages())
    for _ in range(3):  # first sight, then remembered headers (and forgotten: max_known=3)
        for frames in messages:
            _same(_reference(frames), _fast(decoder, frames))


def test_schema_decoder_meta_is_a_fresh_dict_each_time():
    decoder = wire.SchemaDecoder(SCHEMA)
    arrays = {"obs": np.zeros((1, 3), np.float32), "carry/0": np.zeros(1, np.int8)}
    frames = [bytes(f) for f in wire.encode("act", arrays, {"a": 1})]
    for _ in range(2):  # the first sight, then the remembered header
        decoder.decode(frames).message.meta["a"] = 99
    assert decoder.decode(frames).message.meta == {"a": 1}
    games = [bytes(f) for f in wire.encode("act", arrays, {"a": 1, "games": [[1, 2, 0.5]]})]
    for _ in range(2):  # a meta holding lists is decoded afresh every time
        decoder.decode(games).message.meta["games"][0].append("x")
    assert decoder.decode(games).message.meta["games"] == [[1, 2, 0.5]]


@pytest.mark.parametrize("dtype", sorted(wire.ALLOWED_DTYPES))
@pytest.mark.parametrize("max_cached", [2, 64])
def test_slice_encoder_gives_encodes_frames_byte_for_byte(dtype, max_cached):
    rng = np.random.default_rng(0)
    out = {"action": (rng.standard_normal((7, 2)) * 50).astype(dtype),
           "logp": rng.standard_normal(7).astype(np.float32),
           "carry/0": np.zeros((7, 0), np.float32),  # no bytes at all
           "carry/1": np.asfortranarray(rng.standard_normal((7, 3, 2))).astype(np.float16)}
    enc = wire.SliceEncoder("action", max_cached=max_cached)
    enc.reset(out)
    for start, n, group, version in [(0, 7, 0, 3), (2, 3, 1, 3), (2, 3, 1, 3), (1, 2, 0, 3),
                                     (6, 1, 0, 4), (0, 0, 2, 4)]:
        meta = {"group": group, "version": version}
        got = [bytes(f) for f in enc.frames(start, n, meta, (group, version))]
        want = [bytes(f) for f in wire.encode("action", {k: v[start:start + n] for k, v in out.items()},
                                              meta)]
        assert got == want
        assert [bytes(f) for f in enc.frames(start, n, meta)] == want  # default key: meta's items
    enc.reset({"action": out["action"][:, 0]})  # another layout: headers are rebuilt
    assert [bytes(f) for f in enc.frames(1, 2, {"group": 1, "version": 3}, (1, 3))] == [
        bytes(f) for f in wire.encode("action", {"action": out["action"][1:3, 0]},
                                      {"group": 1, "version": 3})]


def test_slice_encoder_refuses_what_encode_refuses():
    enc = wire.SliceEncoder("action")
    with pytest.raises(wire.WireError, match="'x'.*object"):
        enc.reset({"x": np.array([object()])})
    with pytest.raises(wire.WireError, match="'y' has no rows"):
        enc.reset({"y": np.float32(1.0)})
