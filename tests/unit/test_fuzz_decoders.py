"""Every decoder of untrusted input, fuzzed with Hypothesis (``tests/fuzz_decoders.py``):
each raises only its own documented error, and what it accepts has the documented types.

The default suite runs a short, derandomized profile (the same cases every run, no
example database: independent of load and of earlier runs); ``-m slow`` runs the long
one (``JAXSRL_FUZZ_EXAMPLES`` cases per decoder, default 5,000);
``scripts/fuzz_decoders.py`` runs it with counts (``docs/reliability.md``).
"""

from __future__ import annotations

import os

import msgpack
import pytest

import fuzz_decoders
from jaxsrl.streams import wire

SHORT = {"wire.decode": 200, "wire.SchemaDecoder": 200}  # the rest: 100 each
LONG = int(os.environ.get("JAXSRL_FUZZ_EXAMPLES", "5000"))


@pytest.mark.parametrize("name", list(fuzz_decoders.DECODERS))
def test_decoder_raises_only_its_own_error(name):
    stats = fuzz_decoders.run(name, SHORT.get(name, 100))
    assert sum(stats.values()) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", list(fuzz_decoders.DECODERS))
def test_decoder_raises_only_its_own_error_long(name):
    stats = fuzz_decoders.run(name, LONG, seed=1)
    assert sum(stats.values()) >= LONG // 2


def test_the_issue_packet_is_a_wire_error():
    """The packet of issue 42 (a list as dtype) and its map twin: WireError naming it."""
    for dtype in ([[1]], {"a": 1}):
        frames = [msgpack.packb({"v": 1, "kind": "inline_status", "meta": {},
                                 "arrays": [["obs", dtype, [1]]]}), b"\0" * 4]
        with pytest.raises(wire.WireError, match="dtype .* is not allowed"):
            wire.decode(frames)
