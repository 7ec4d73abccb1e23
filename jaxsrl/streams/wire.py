"""Wire format of every jaxsrl stream: a small msgpack header plus raw array buffers.

A message is a list of ZeroMQ frames::

    frame 0: msgpack header {"v": 1, "kind": str, "meta": {...},
                             "arrays": [[name, dtype, shape], ...]}
    frame i: the raw C-ordered bytes of array i - 1

Decoding never unpickles anything: headers are msgpack (plain data only) and arrays
are read with ``np.frombuffer`` straight over the received buffers (zero-copy, so
decoded arrays are read-only). Every field is validated before use; a bad message
raises :class:`WireError` naming what is wrong, so a server can drop it and go on.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Sequence

import msgpack
import numpy as np

WIRE_VERSION = 1
#: dtypes allowed on the wire (no object, no void, no datetime).
ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64",
     "float16", "float32", "float64"]
)
#: default upper bound on one message's total array bytes (256 MiB).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: largest accepted header frame.
MAX_HEADER_BYTES = 64 * 1024
_MAX_ARRAYS = 256
_MAX_NDIM = 8
#: longest message kind or array name.
_MAX_NAME = 256
#: the allowed dtypes, looked up once (``np.dtype(name)`` parses its argument every call).
_DTYPES = {name: np.dtype(name) for name in ALLOWED_DTYPES}
_ITEMSIZE = {name: d.itemsize for name, d in _DTYPES.items()}
_NAME_OF = {d: name for name, d in _DTYPES.items()}


class WireError(ValueError):
    """A message that is malformed or does not match its expected schema."""


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, on one line (for error messages about
    values a peer chose: a 64 KiB header must not become a 64 KiB log line)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a repr that fails: say so rather than raise)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


class Message(NamedTuple):
    """A decoded message.

    Attributes:
      kind: message kind, e.g. ``"act"`` or ``"segment"``.
      meta: small plain-data dict (ints, floats, strings, lists) from the header.
      arrays: name -> read-only ``np.ndarray`` viewing the received buffers.
    """

    kind: str
    meta: dict
    arrays: dict


def encode(kind: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None = None
           ) -> list:
    """Encode a message into ZeroMQ frames.

    Args:
      kind: message kind.
      arrays: name -> array; any dtype in :data:`ALLOWED_DTYPES`, any shape.
      meta: plain-data dict (msgpack-serialisable), e.g. ids and versions.

    Returns:
      ``[header_bytes, buffer, ...]`` ready for ``socket.send_multipart``.

    Raises:
      WireError: an array has a dtype that is not allowed on the wire.
    """
    specs = []
    frames = [None]
    for name, value in arrays.items():
        arr = np.asarray(value)
        if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-d into 1-d)
            arr = arr.copy(order="C")
        dtype = _NAME_OF.get(arr.dtype) or arr.dtype.name  # (``.name`` is slow: actors encode often)
        if dtype not in ALLOWED_DTYPES:
            raise WireError(f"array {name!r} has dtype {arr.dtype} which is not allowed on the wire")
        specs.append([name, dtype, list(arr.shape)])
        frames.append(memoryview(arr).cast("B") if arr.size else b"")
    frames[0] = pack_header(kind, specs, meta)
    return frames


def pack_header(kind: str, specs: list, meta: Mapping[str, Any] | None = None) -> bytes:
    """Frame 0 of a message (:func:`encode` uses it): ``specs`` is ``[[name, dtype name,
    shape list], ...]`` of the array frames that follow."""
    return msgpack.packb(
        {"v": WIRE_VERSION, "kind": kind, "meta": dict(meta or {}), "arrays": specs},
        use_bin_type=True)


class SliceEncoder:
    """Messages of one ``kind`` whose arrays are row slices of the same arrays, encoded as
    :func:`encode` would encode the slices (the same frames, byte for byte) at a fraction of
    its cost: the arrays are checked and copied to ``bytes`` once (:meth:`reset`), each
    slice's frames are slices of those bytes, and headers are cached by (rows, meta). A
    server answering many requests from one batch of outputs uses it.

    Args:
      kind: the messages' kind (e.g. ``"action"``).
      max_cached: headers kept at most (the cache is emptied when it is full).
    """

    def __init__(self, kind: str, max_cached: int = 4096):
        self.kind, self._max_cached = kind, max_cached
        self._headers: dict = {}
        self._layout: tuple | None = None
        self._rows: list = []

    def reset(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Take the arrays (name -> ``[rows, ...]``) whose slices the next messages carry.

        Raises:
          WireError: an array is 0-d or has a dtype that is not allowed on the wire.
        """
        layout, raw = [], []
        for name, value in arrays.items():
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            if arr.ndim == 0:
                raise WireError(f"array {name!r} has no rows to slice")
            dtype = _NAME_OF.get(arr.dtype) or arr.dtype.name  # (``.name`` is slow)
            if dtype not in ALLOWED_DTYPES:
                raise WireError(f"array {name!r} has dtype {arr.dtype} which is not allowed on the wire")
            layout.append((name, dtype, arr.shape[1:]))
            # C-ordered bytes, and the bytes of one row (0: none at all, e.g. a [rows, 0] array)
            raw.append((arr.tobytes(), arr.itemsize * math.prod(arr.shape[1:])))
        layout = tuple(layout)
        if layout != self._layout:
            self._headers.clear()
            self._layout = layout
        self._rows = raw

    def frames(self, start: int, n: int, meta: Mapping[str, Any], key=None) -> list:
        """The frames of the message carrying rows ``start:start + n`` of every array (no
        identity frame), with ``meta`` (plain data). Its header is cached under ``(n,
        key)``: ``key`` (hashable) must identify ``meta`` (default: ``meta``'s items; not
        cached if they are not hashable)."""
        try:
            key = (n, tuple(meta.items()) if key is None else key)
            header = self._headers.get(key)
        except TypeError:  # an unhashable meta value: not cached
            key, header = None, None
        if header is None:
            header = pack_header(self.kind, [[name, dtype, [n, *shape]]
                                             for name, dtype, shape in self._layout], meta)
            if key is not None:
                if len(self._headers) >= self._max_cached:
                    self._headers.clear()
                self._headers[key] = header
        out = [header]
        for raw, row_bytes in self._rows:
            out.append(raw[start * row_bytes:(start + n) * row_bytes])
        return out


def _buffer(frame) -> memoryview:
    buf = getattr(frame, "buffer", frame)  # zmq.Frame (copy=False) or bytes
    return memoryview(buf)


def _header(frames: Sequence) -> tuple[str, dict, list]:
    """``(kind, meta, array specs)`` of a message's header, checked up to the frame count."""
    if not frames:
        raise WireError("empty message")
    header_buf = _buffer(frames[0])
    if len(header_buf) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(header_buf)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(header_buf, raw=False, strict_map_key=True,
                                 max_array_len=4096, max_map_len=1024)
    except Exception as exc:  # msgpack raises several exception types
        raise WireError(f"header is not valid msgpack: {exc}") from None
    if not isinstance(header, dict):
        raise WireError(f"header must be a map, got {type(header).__name__}")
    version = header.get("v")
    if type(version) is not int or version != WIRE_VERSION:  # noqa: E721  (not True, not 1.0)
        raise WireError(f"wire version {short(version)} != {WIRE_VERSION}")
    kind, meta, specs = header.get("kind"), header.get("meta", {}), header.get("arrays")
    if not isinstance(kind, str) or len(kind) > _MAX_NAME:
        raise WireError(f"message kind must be a string of at most {_MAX_NAME} characters, "
                        f"got {short(kind)}")
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise WireError(f"meta must be a map with string keys, got {short(meta)}")
    if not isinstance(specs, list) or len(specs) > _MAX_ARRAYS:
        raise WireError(f"arrays must be a list of at most {_MAX_ARRAYS} entries, got "
                        f"{short(specs)}")
    if len(specs) != len(frames) - 1:
        raise WireError(f"header declares {len(specs)} arrays but {len(frames) - 1} buffers came")
    return kind, meta, specs


def decode(frames: Sequence, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    """Decode and structurally validate a message.

    Args:
      frames: the frames of one message (``bytes`` or ``zmq.Frame``).
      max_bytes: largest total array payload accepted.

    Returns:
      The :class:`Message`; arrays are zero-copy read-only views.

    Raises:
      WireError: bad header (not msgpack, wrong version, wrong types), frame count
        mismatch, unknown dtype, bad shape, byte count mismatch or oversize payload.
    """
    kind, meta, specs = _header(frames)
    arrays, total = {}, 0
    for spec, frame in zip(specs, frames[1:]):
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)
                and len(spec[0]) <= _MAX_NAME):
            raise WireError(f"bad array spec {short(spec)}: expected [name (a string of at most "
                            f"{_MAX_NAME} characters), dtype, shape]")
        name, dtype, shape = spec
        if type(dtype) is not str or dtype not in ALLOWED_DTYPES:  # noqa: E721  (a list or map is unhashable)
            raise WireError(f"array {short(name)}: dtype {short(dtype)} is not allowed")
        if (not isinstance(shape, list) or len(shape) > _MAX_NDIM
                or not all(type(d) is int and 0 <= d < 2**40 for d in shape)):  # noqa: E721
            raise WireError(f"array {short(name)}: bad shape {short(shape)}")
        if name in arrays:
            raise WireError(f"array {name!r} appears twice")
        # Exact (Python int) size: a numpy product could overflow and wrap to a small number.
        nbytes = math.prod(shape) * _ITEMSIZE[dtype]
        total += nbytes
        if total > max_bytes:
            raise WireError(f"payload exceeds {max_bytes} bytes (array {name!r} declares {shape})")
        buf = _buffer(frame)
        if len(buf) != nbytes:
            raise WireError(f"array {name!r}: {len(buf)} bytes received, {nbytes} declared "
                            f"by dtype {dtype} and shape {shape}")
        arrays[name] = np.frombuffer(buf, dtype=_DTYPES[dtype]).reshape(shape)
    return Message(kind, meta, arrays)


class Checked(NamedTuple):
    """A message decoded by :class:`SchemaDecoder`, with the outcome of its schema check.

    Attributes:
      message: the :class:`Message`.
      rows: the rows every array shares (:func:`check_rows`), or ``None`` if the arrays do
        not match the schema (then ``error`` says why).
      error: :func:`check_rows`'s error message, or ``None``.
    """

    message: Message
    rows: int | None
    error: str | None

    def require_rows(self) -> int:
        """``rows``.

        Raises:
          WireError: the arrays do not match the schema (``error``).
        """
        if self.rows is None:
            raise WireError(self.error)
        return self.rows


class SchemaDecoder:
    """:func:`decode`, then :func:`check_rows` against one schema, for a server that
    decodes many messages whose headers repeat (an actor's requests differ only in their
    array bytes: the same kind, meta ids and array specs, hence the same header bytes).

    A header seen for the first time is checked in full, by :func:`decode` and
    :func:`check_rows` themselves; the outcome (kind, meta, array layout, rows or the
    schema's error) is remembered under the header's bytes (the ``max_known`` latest
    distinct headers whose meta holds only scalars). A message with a remembered header only
    has its frame count and frame sizes checked, in the order :func:`decode` checks
    them: the same bytes give the same verdict, so every message gets exactly the errors
    the two functions would raise, at a fraction of their cost.

    Args:
      expected: ``{name: ArraySpec}`` (as :func:`check_rows`), or ``None``: no schema
        (only :func:`decode`'s checks; ``rows`` and ``error`` are ``None``).
      max_bytes: largest total array payload (as :func:`decode`).
      what: the arrays' name in errors (as :func:`check_rows`).
      max_known: distinct headers remembered (all are forgotten when that many are).
    """

    def __init__(self, expected: Mapping[str, ArraySpec] | None, max_bytes: int = DEFAULT_MAX_BYTES,
                 what: str = "message", max_known: int = 4096):
        self.expected = None if expected is None else dict(expected)
        self.max_bytes, self.what = max_bytes, what
        self._max_known = max_known
        self._known: dict = {}  # header bytes -> (kind, meta, [(name, dtype, shape, nbytes)], rows, error)

    def decode(self, frames: Sequence) -> Checked:
        """Decode and check one message (``meta`` is a fresh dict each time).

        Raises:
          WireError: as :func:`decode` (the schema's verdict is in the result).
        """
        if not frames:
            raise WireError("empty message")
        head = frames[0]
        key = head if type(head) is bytes else bytes(_buffer(head))  # noqa: E721
        entry = self._known.get(key)
        if entry is None:
            return self._first(key, frames)
        kind, meta, layout, rows, error = entry
        if len(layout) != len(frames) - 1:
            raise WireError(f"header declares {len(layout)} arrays but {len(frames) - 1} "
                            "buffers came")
        arrays = {}
        for (name, dtype, shape, nbytes), frame in zip(layout, frames[1:]):
            buf = frame if type(frame) is bytes else _buffer(frame)  # noqa: E721
            if len(buf) != nbytes:
                raise WireError(f"array {name!r}: {len(buf)} bytes received, {nbytes} declared "
                                f"by dtype {dtype.name} and shape {list(shape)}")
            arrays[name] = np.ndarray(shape, dtype, buf)  # = frombuffer + reshape, in one call
        return Checked(Message(kind, dict(meta), arrays), rows, error)

    def _first(self, key: bytes, frames: Sequence) -> Checked:
        msg = decode(frames, self.max_bytes)  # the full check; raises what it raises
        rows = error = None
        if self.expected is not None:
            try:
                rows = check_rows(msg.arrays, self.expected, self.what)
            except WireError as exc:
                error = str(exc)
        if all(v is None or type(v) in (int, float, str, bool) for v in msg.meta.values()):
            if len(self._known) >= self._max_known:
                self._known.clear()
            layout = [(name, a.dtype, a.shape, a.nbytes) for name, a in msg.arrays.items()]
            self._known[key] = (msg.kind, dict(msg.meta), layout, rows, error)
        return Checked(msg, rows, error)


class ArraySpec(NamedTuple):
    """Expected dtype and shape of one array; ``None`` in ``shape`` matches any size."""

    dtype: str
    shape: tuple


def check_arrays(arrays: Mapping[str, np.ndarray], expected: Mapping[str, ArraySpec],
                 allow_extra: bool = False) -> dict:
    """Check a message's arrays against a schema.

    Returns:
      ``{name: size}`` for every ``None`` dimension, keyed ``"name.dim"`` (for callers
      that need consistent batch sizes across arrays).

    Raises:
      WireError: a missing or unknown array, or a wrong dtype or shape.
    """
    missing = [k for k in expected if k not in arrays]
    if missing:
        raise WireError(f"missing arrays {missing}")
    if not allow_extra:
        unknown = [k for k in arrays if k not in expected]
        if unknown:
            raise WireError(f"unknown arrays {unknown}")
    free = {}
    for name, spec in expected.items():
        arr = arrays[name]
        # (the dtype comparison first: ``.name`` is slow; the same name may have another byte order)
        if arr.dtype != _DTYPES.get(spec.dtype) and arr.dtype.name != spec.dtype:
            raise WireError(f"array {name!r}: dtype {arr.dtype.name}, expected {spec.dtype}")
        if len(arr.shape) != len(spec.shape) or any(
                e is not None and e != d for e, d in zip(spec.shape, arr.shape)):
            raise WireError(f"array {name!r}: shape {tuple(arr.shape)}, expected {spec.shape}")
        for i, (e, d) in enumerate(zip(spec.shape, arr.shape)):
            if e is None:
                free[f"{name}.{i}"] = d
    return free


def check_rows(arrays: Mapping[str, np.ndarray], expected: Mapping[str, ArraySpec],
               what: str = "message") -> int:
    """:func:`check_arrays`, then the one leading size (rows) that every array shares.

    Raises:
      WireError: as :func:`check_arrays`, or the arrays disagree on the number of rows.
    """
    free = check_arrays(arrays, expected)
    rows = {size for name, size in free.items() if name.endswith(".0")}
    if len(rows) != 1:
        raise WireError(f"{what} arrays disagree on the number of rows: {free}")
    return rows.pop()
