"""Observations packed for the wire: boolean columns as bits, the rest in one float32 array.

An environment may declare which columns of its float32 observation leaves only ever hold
``0.0`` or ``1.0`` (visibility masks, present slots, team flags, lock flags, padding):
``wire_bits`` ``{key: None (every column) or (last-axis column, ...)}`` (hide-and-seek:
:func:`jaxsrl.envs.hide_and_seek.observations.wire_bits`). An actor of such an env sends
its observations as two arrays instead of one per leaf:

* ``<prefix>#f`` ``[..., F]`` float32: every other value of every leaf, in the leaves'
  wire order (:func:`jaxsrl.streams.spaces.space_leaves`), each leaf flattened row-major;
* ``<prefix>#b`` ``[..., ceil(B / 8)]`` uint8: the ``B`` boolean values, as
  ``np.packbits`` (big-endian bit order) of their ``!= 0``;

with the layout in the message's meta (:data:`META`, a string, :attr:`ObsPacker.layout`).
The encoder checks every boolean value is exactly ``0.0`` or ``1.0`` (bit patterns, so
``-0.0`` is refused too); the receiver rebuilds the float32 leaves bit for bit
(:meth:`ObsPacker.decode`) before anything else sees them. ``prefix`` is ``obs`` (request
and segment observations) or ``final_obs`` (a segment's final observations). Other
environments declare nothing and send their leaves as before. No JAX here.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable, Mapping

import numpy as np

from jaxsrl.streams.wire import WireError

#: meta key of the layout string of a message whose observations are packed.
META = "obs_pack"
_ONE = np.float32(1.0).view(np.uint32)


def packed_names(prefix: str = "obs") -> tuple[str, str]:
    """Wire names ``(floats, bits)`` of the packed observations under ``prefix``."""
    return f"{prefix}#f", f"{prefix}#b"


def is_packed(name: str) -> bool:
    """Whether wire name ``name`` is a packed-observation array."""
    return name.endswith(("#f", "#b"))


def packed_row_bytes(sizes: "Iterable[int]") -> int:
    """Most bytes of one row of a packed ``<prefix>#f`` frame, whatever the layout: the
    observation leaves' values per row (``sizes``, one count a leaf) all sent as float32.
    A receiver's per-frame cap must admit it: packing joins the leaves into one frame,
    larger than any single leaf's."""
    return 4 * sum(int(n) for n in sizes)


class ObsPacker:
    """Packs and unpacks the leaves of one observation space (module docstring).

    Args:
      leaves: ``{wire name: (dtype name, per-row shape)}`` of the space
        (:func:`~jaxsrl.streams.spaces.space_leaves`, names under ``obs``).
      bits: ``{leaf key (wire name without "obs/", or "obs" for a Box): None or columns}``.

    Attributes:
      layout: the layout string the messages carry (:data:`META`).
      floats, nbits: values per row sent as float32, and as bits.

    Raises:
      ValueError: a key that is not a float32 leaf, or a column out of range.
    """

    def __init__(self, leaves: Mapping[str, tuple], bits: Mapping[str, Any]):
        self.names = list(leaves)
        self.shapes = {k: tuple(s) for k, (_, s) in leaves.items()}
        self.sizes = {k: math.prod(self.shapes[k]) for k in self.names}
        sizes = list(self.sizes.values())
        self.offsets = np.cumsum([0] + sizes)
        self.size = int(self.offsets[-1])
        keys = {self._key(k): k for k in self.names}
        flags = np.zeros(self.size, bool)
        parts = []
        for key in sorted(bits):
            name = keys.get(key)
            if name is None or leaves[name][0] != "float32":
                raise ValueError(f"wire_bits names {key!r}, not a float32 observation leaf")
            shape, cols = self.shapes[name], bits[key]
            if cols is not None and not len(cols):
                continue
            last = shape[-1] if shape else 1
            block = np.zeros((math.prod(shape[:-1]) if shape else 1, last), bool)
            if cols is None:
                block[:] = True
                parts.append(f"{key}:*")
            else:
                cols = sorted({int(c) for c in cols})
                if cols and not 0 <= cols[0] <= cols[-1] < last:
                    raise ValueError(f"wire_bits {key!r}: columns {cols} outside 0..{last - 1}")
                block[:, cols] = True
                parts.append(f"{key}:" + ",".join(map(str, cols)))
            i = self.names.index(name)
            flags[self.offsets[i]:self.offsets[i + 1]] = block.reshape(-1)
        self.layout = ";".join(parts)
        self.bit_index = np.flatnonzero(flags)
        self.float_index = np.flatnonzero(~flags)
        self.floats, self.nbits = len(self.float_index), len(self.bit_index)
        self.nbytes = -(-self.nbits // 8)

    @staticmethod
    def _key(name: str) -> str:
        return name[4:] if name.startswith("obs/") else name

    @classmethod
    def from_layout(cls, leaves: Mapping[str, tuple], layout: str) -> "ObsPacker":
        """The packer of a received ``layout`` string for the space of ``leaves``.

        Raises:
          WireError: the layout is not a string, malformed, or names unknown leaves or columns.
        """
        if not isinstance(layout, str):  # (before the cache: a list or map is not hashable)
            raise WireError(f"meta {META!r} must be a layout string, got {type(layout).__name__}")
        return _from_layout(tuple((k, d, tuple(s)) for k, (d, s) in leaves.items()), layout)

    def encode(self, obs: Mapping[str, np.ndarray], prefix: str = "obs") -> dict:
        """``{prefix#f: [..., F] float32, prefix#b: [..., nbytes] uint8}`` of ``obs``
        (wire name under ``obs`` -> ``[*lead, *shape]`` float32, the same ``lead`` each).

        Raises:
          ValueError: a boolean column holds a value other than ``0.0`` or ``1.0``.
        """
        first = obs[self.names[0]]
        lead = first.shape[:first.ndim - len(self.shapes[self.names[0]])]
        flat = np.concatenate([np.asarray(obs[k]).reshape(lead + (self.sizes[k],))
                               for k in self.names], axis=-1)
        fnames = packed_names(prefix)
        raw = flat.take(self.bit_index, axis=-1).view(np.uint32)
        nonzero = raw != 0
        if np.count_nonzero(nonzero) != np.count_nonzero(raw == _ONE):  # every nonzero is 1.0
            raise ValueError("an observation column declared boolean (wire_bits) holds a value "
                             "other than 0.0 or 1.0")
        return {fnames[0]: flat.take(self.float_index, axis=-1),
                fnames[1]: np.packbits(nonzero, axis=-1)}

    def decode(self, packed: Mapping[str, np.ndarray], prefix: str = "obs") -> dict:
        """The float32 leaves (wire names under ``obs``, or ``final_obs`` for that
        ``prefix``) of a packed pair, ``[*lead, *shape]`` each, bit for bit the encoded ones.

        Raises:
          WireError: an array is missing or of the wrong dtype or trailing size, or the
            two disagree on their leading shape.
        """
        fname, bname = packed_names(prefix)
        if fname not in packed or bname not in packed:
            raise WireError(f"packed observations need {fname!r} and {bname!r}")
        f, b = packed[fname], packed[bname]
        if f.dtype != np.float32 or b.dtype != np.uint8:
            raise WireError(f"{fname!r} must be float32 and {bname!r} uint8, got {f.dtype}, {b.dtype}")
        if f.ndim < 1 or b.ndim != f.ndim or f.shape[:-1] != b.shape[:-1]:
            raise WireError(f"{fname!r} {f.shape} and {bname!r} {b.shape} disagree")
        if f.shape[-1] != self.floats or b.shape[-1] != self.nbytes:
            raise WireError(f"packed observations of {f.shape[-1]} floats and {b.shape[-1]} bytes; "
                            f"the layout has {self.floats} and {self.nbytes}")
        lead = f.shape[:-1]
        flat = np.empty(lead + (self.size,), np.float32)
        flat[..., self.float_index] = f
        flat[..., self.bit_index] = np.unpackbits(b, axis=-1, count=self.nbits)
        out = {}
        for i, name in enumerate(self.names):
            wire_name = name if prefix == "obs" else prefix + name[3:]
            out[wire_name] = flat[..., self.offsets[i]:self.offsets[i + 1]].reshape(
                lead + self.shapes[name])
        return out

    def decode_into(self, dst: Mapping[str, np.ndarray], f: np.ndarray, b: np.ndarray) -> None:
        """:meth:`decode` of ``[n, F]`` and ``[n, nbytes]`` written into ``dst`` (leaf wire
        name -> ``[n, *shape]`` float32 views, e.g. a batch buffer's rows).

        Raises:
          WireError: as :meth:`decode`.
        """
        for name, value in self.decode({"obs#f": f, "obs#b": b}).items():
            dst[name][...] = value


@functools.lru_cache(maxsize=64)
def _from_layout(leaves: tuple, layout: Any) -> ObsPacker:
    if not isinstance(layout, str) or len(layout) > 4096:
        raise WireError(f"meta {META!r} must be a layout string, got {type(layout).__name__}")
    bits: dict = {}
    try:
        for part in filter(None, layout.split(";")):
            key, _, cols = part.partition(":")
            if key in bits or not cols:
                raise ValueError(part)
            bits[key] = None if cols == "*" else tuple(int(c) for c in cols.split(","))
        packer = ObsPacker({k: (d, s) for k, d, s in leaves}, bits)
    except ValueError as exc:
        raise WireError(f"bad {META} layout {layout[:200]!r}: {exc}") from None
    if packer.layout != layout:  # one spelling per layout: the header caches stay exact
        raise WireError(f"{META} layout {layout[:200]!r} is not in canonical form ({packer.layout!r})")
    return packer


def unpack(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any], leaves: Mapping[str, tuple]
           ) -> dict:
    """A message's arrays with packed observations (``obs#f``/``obs#b``, and
    ``final_obs#f``/``final_obs#b`` if present) replaced by their float32 leaves; arrays
    of a message without :data:`META` are returned as they are (a new dict).

    Raises:
      WireError: a bad layout, or packed arrays missing or not matching it, or packed
        arrays in a message without a layout.
    """
    layout = meta.get(META)
    if layout is None:
        if any(is_packed(k) for k in arrays):
            raise WireError(f"packed observations without the {META!r} meta")
        return dict(arrays)
    packer = ObsPacker.from_layout(leaves, layout)
    out = {k: v for k, v in arrays.items() if not is_packed(k)}
    for prefix in ("obs", "final_obs"):
        if any(k.startswith(prefix + "#") for k in arrays):
            out.update(packer.decode(arrays, prefix))
    extra = [k for k in arrays if is_packed(k) and not k.startswith(("obs#", "final_obs#"))]
    if extra:
        raise WireError(f"unknown packed arrays {extra}")
    return out


def pack_arrays(arrays: Mapping[str, np.ndarray], packer: ObsPacker) -> dict:
    """A message's arrays (a request's or a segment's, leaves under ``obs`` and, if present,
    ``final_obs``) with the observation leaves replaced by their packed pairs
    (:meth:`ObsPacker.encode`); other arrays are passed through (not copied).

    Raises:
      ValueError: as :meth:`ObsPacker.encode`.
    """
    finals = {"final_" + k: k for k in packer.names}
    out = {k: v for k, v in arrays.items() if k not in packer.shapes and k not in finals}
    out.update(packer.encode({k: arrays[k] for k in packer.names}, "obs"))
    if any(k in arrays for k in finals):
        out.update(packer.encode({name: arrays[k] for k, name in finals.items()}, "final_obs"))
    return out
