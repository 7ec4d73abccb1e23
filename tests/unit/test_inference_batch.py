"""The inference server's batch machinery: keys drawn in blocks are the keys of one
``split`` per call; requests' rows land where the batch buffer says."""

import jax
import numpy as np
import pytest

from jaxsrl.streams.wire import ArraySpec
from jaxsrl.workers.inference.batch import BatchBuffer, KeyStream


@pytest.mark.parametrize("block", [1, 3, 256])
def test_key_stream_is_the_sequence_of_eager_splits(block):
    rng = jax.random.PRNGKey(7)
    stream = KeyStream(rng, block=block)
    assert np.array_equal(stream.peek(), stream.peek())  # peeking takes nothing
    for _ in range(10):
        rng, key = jax.random.split(rng)  # what the server did before, once per act call
        got = stream.next()
        assert isinstance(got, np.ndarray) and got.dtype == np.uint32
        np.testing.assert_array_equal(got, np.asarray(key))


def test_key_stream_hands_out_typed_keys_as_device_arrays():
    rng = jax.random.key(3)
    stream = KeyStream(rng, block=2)
    for _ in range(3):
        rng, key = jax.random.split(rng)
        got = stream.next()
        assert jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key)
        np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(key))


def test_batch_buffer_writes_requests_one_after_another():
    schema = {"obs": ArraySpec("float32", (None, 2)), "carry/0": ArraySpec("int32", (None,))}
    buf = BatchBuffer(schema, [8, 16])
    assert [buf.bucket(n) for n in (1, 8, 9, 16)] == [8, 8, 16, 16]
    with pytest.raises(ValueError, match="17 rows exceed the largest bucket 16"):
        buf.bucket(17)
    reqs = [{"obs": np.full((n, 2), i, np.float32), "carry/0": np.full(n, -i, np.int32)}
            for i, n in enumerate([3, 1, 5], start=1)]
    starts = [buf.add(r, len(r["obs"])) for r in reqs]
    assert starts == [0, 3, 4] and buf.rows == 9
    view = buf.view(buf.bucket(buf.rows))
    assert view["obs"].shape == (16, 2) and np.shares_memory(view["obs"], buf.arrays["obs"])
    np.testing.assert_array_equal(view["obs"][:9, 0], [1, 1, 1, 2, 3, 3, 3, 3, 3])
    np.testing.assert_array_equal(view["carry/0"][:9], [-1, -1, -1, -2, -3, -3, -3, -3, -3])
    with pytest.raises(ValueError, match="8 more rows do not fit after 9 of 16"):
        buf.add({"obs": np.zeros((8, 2), np.float32), "carry/0": np.zeros(8, np.int32)}, 8)
    buf.clear()
    assert buf.add(reqs[1], 1) == 0 and buf.rows == 1


def test_batch_buffer_copies_received_frames_as_numpy_would():
    """Arrays viewing whole received frames are copied as bytes; anything else (another
    dtype over the same bytes, a view of a view, a strided view) is assigned by NumPy."""
    schema = {"obs": ArraySpec("float32", (None, 2, 2)), "a": ArraySpec("int32", (None,))}
    buf, ref = BatchBuffer(schema, [8]), {k: np.zeros((8, *s.shape[1:]), s.dtype)
                                           for k, s in schema.items()}
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((3, 2, 2)).astype(np.float32)
    frames = {"obs": obs.tobytes(), "a": np.array([5, 6, 7], np.int32).tobytes()}
    cases = [
        {"obs": np.ndarray((3, 2, 2), np.float32, frames["obs"]),
         "a": np.ndarray((3,), np.int32, frames["a"])},  # as SchemaDecoder makes them
        {"obs": np.ndarray((3, 2, 2), np.int32, frames["obs"]),  # other dtype: values convert
         "a": np.ndarray((3,), np.float32, frames["a"])},
        {"obs": np.ndarray((3, 4), np.float32, frames["obs"]).reshape(3, 2, 2),  # base: an array
         "a": np.ndarray((3,), np.int32, frames["a"][::-1][::-1])},
        {"obs": np.ndarray((3, 2, 2), np.float32, frames["obs"]).copy(),
         "a": np.ndarray((3,), np.int32, frames["a"], offset=8, strides=(-4,))},  # reversed
    ]
    for arrays in cases:
        start = buf.add(arrays, 3)
        for k in schema:
            ref[k][start:start + 3] = arrays[k]
            np.testing.assert_array_equal(buf.arrays[k][:start + 3], ref[k][:start + 3])
        if buf.rows + 3 > 8:
            buf.clear()


def test_batch_buffer_add_frames_writes_what_numpy_assignment_would():
    """``add_frames`` (a remembered verdict's ``(frame index, name, bytes)``, frames in any
    order) against NumPy assignment of the arrays the frames hold."""
    schema = {"obs": ArraySpec("float32", (None, 2, 2)), "a": ArraySpec("int8", (None,))}
    buf, ref = BatchBuffer(schema, [4, 8]), {k: np.zeros((8, *s.shape[1:]), s.dtype)
                                              for k, s in schema.items()}
    rng = np.random.default_rng(1)
    for n in (3, 1, 4):
        obs = rng.standard_normal((n, 2, 2)).astype(np.float32)
        a = rng.integers(-100, 100, n).astype(np.int8)
        frames = [b"identity", b"header", a.tobytes(), obs.tobytes()]  # "a" comes first here
        start = buf.add_frames(frames, ((3, "obs", obs.nbytes), (2, "a", a.nbytes)), n)
        ref["obs"][start:start + n], ref["a"][start:start + n] = obs, a
        assert buf.rows == start + n
    for k in schema:
        np.testing.assert_array_equal(buf.arrays[k], ref[k])
    with pytest.raises(ValueError, match="1 more rows do not fit after 8 of 8"):
        buf.add_frames([b"", b"", b"\0", b"\0" * 16], ((3, "obs", 16), (2, "a", 1)), 1)
