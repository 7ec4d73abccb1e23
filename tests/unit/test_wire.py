"""Wire format: round trips of every dtype and shape; malformed messages rejected."""

import msgpack
import numpy as np
import pytest

from jaxsrl.streams import wire

DTYPES = sorted(wire.ALLOWED_DTYPES)
SHAPES = [(), (0,), (3,), (2, 5), (4, 1, 3), (2, 0, 7)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_every_dtype_and_shape(dtype, shape):
    rng = np.random.default_rng(0)
    value = (rng.standard_normal(shape) * 100).astype(dtype)
    frames = wire.encode("k", {"x": value, "y": np.arange(3, dtype=np.int32)}, {"id": 7})
    msg = wire.decode([bytes(f) for f in frames])
    assert msg.kind == "k" and msg.meta == {"id": 7}
    assert msg.arrays["x"].dtype == value.dtype and msg.arrays["x"].shape == shape
    np.testing.assert_array_equal(msg.arrays["x"], value)
    np.testing.assert_array_equal(msg.arrays["y"], np.arange(3))


def test_decode_is_zero_copy_and_read_only():
    frames = [bytes(f) for f in wire.encode("k", {"x": np.arange(1000, dtype=np.float32)})]
    arr = wire.decode(frames).arrays["x"]
    assert not arr.flags.writeable
    assert not arr.flags.owndata  # a view over the received buffer


def test_non_contiguous_input_is_encoded_by_value():
    value = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]
    msg = wire.decode([bytes(f) for f in wire.encode("k", {"x": value})])
    np.testing.assert_array_equal(msg.arrays["x"], value)


def test_object_dtype_is_refused_on_encode():
    with pytest.raises(wire.WireError, match="'x'.*object"):
        wire.encode("k", {"x": np.array([object()])})


def _header(**overrides):
    header = {"v": 1, "kind": "k", "meta": {}, "arrays": [["x", "float32", [2]]]}
    header.update(overrides)
    return msgpack.packb(header)


GOOD_BUF = np.zeros(2, np.float32).tobytes()


@pytest.mark.parametrize("frames, match", [
    ([], "empty"),
    ([b"\xc1\xff\x00garbage"], "not valid msgpack"),
    ([msgpack.packb([1, 2])], "must be a map"),
    ([_header(v=99), GOOD_BUF], "wire version"),
    ([_header(kind=5), GOOD_BUF], "kind must be a string"),
    ([_header(), GOOD_BUF, GOOD_BUF], "declares 1 arrays but 2"),
    ([_header()], "declares 1 arrays but 0"),
    ([_header(arrays=[["x", "object", [2]]]), GOOD_BUF], "dtype 'object' is not allowed"),
    ([_header(arrays=[["x", "float32", [-2]]]), GOOD_BUF], "bad shape"),
    ([_header(arrays=[["x", "float32", "abc"]]), GOOD_BUF], "bad shape"),
    ([_header(arrays=[["x", "float32", [3]]]), GOOD_BUF], "8 bytes received, 12 declared"),
    ([_header(), GOOD_BUF[:5]], "5 bytes received"),
    ([_header(arrays=[["x", "float64", [2**39]]]), GOOD_BUF], "payload exceeds"),
    ([_header(arrays=[["x", "float32", [2]], ["x", "float32", [2]]]), GOOD_BUF, GOOD_BUF], "twice"),
    ([_header(arrays=[[1, 2]]), GOOD_BUF], "bad array spec"),
])
def test_malformed_messages_are_rejected_with_a_reason(frames, match):
    with pytest.raises(wire.WireError, match=match):
        wire.decode(frames)


def test_random_bytes_never_crash_the_decoder():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        frames = [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 4)))]
        try:
            wire.decode(frames)
        except wire.WireError:
            pass


def test_check_arrays_schema():
    spec = {"obs": wire.ArraySpec("float32", (None, 4)), "a": wire.ArraySpec("int32", (None,))}
    good = {"obs": np.zeros((3, 4), np.float32), "a": np.zeros(3, np.int32)}
    assert wire.check_arrays(good, spec) == {"obs.0": 3, "a.0": 3}
    with pytest.raises(wire.WireError, match="missing arrays \\['a'\\]"):
        wire.check_arrays({"obs": good["obs"]}, spec)
    with pytest.raises(wire.WireError, match="unknown arrays \\['z'\\]"):
        wire.check_arrays({**good, "z": good["a"]}, spec)
    with pytest.raises(wire.WireError, match="'obs': dtype float64, expected float32"):
        wire.check_arrays({**good, "obs": np.zeros((3, 4))}, spec)
    with pytest.raises(wire.WireError, match="'obs': shape \\(3, 5\\)"):
        wire.check_arrays({**good, "obs": np.zeros((3, 5), np.float32)}, spec)
