"""Ray custom resources of ``--actor_resources`` / ``--learner_resources``.

A flag value is ``NAME=AMOUNT[,NAME=AMOUNT...]``, e.g. ``actor_node=1``: each actor
process (or the accelerator process) then asks Ray for that much of each custom
resource, so it runs only on nodes started with it (``ray start
--resources='{"actor_node": 4}'``). See ``docs/cluster.md``, "Which node runs what".
"""

from __future__ import annotations

import math
import re

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")
# Ray's own resources have flags (or are Ray's business); custom ones only here.
_RESERVED = ("CPU", "GPU", "memory", "object_store_memory")


def parse_resources(text: str, flag: str) -> dict[str, float]:
    """``"a=1,b=0.5"`` -> ``{"a": 1.0, "b": 0.5}``; ``""`` -> ``{}``.

    Args:
      text: the flag's value: comma-separated ``NAME=AMOUNT`` pairs (spaces allowed).
      flag: the flag's name, for the error message (e.g. ``"actor_resources"``).

    Returns:
      Resource name -> amount (a float > 0), in the order given.

    Raises:
      ValueError: a pair is not ``NAME=AMOUNT``, a name is repeated or is one of Ray's
        built-in resources (``CPU``, ``GPU``, ``memory``, ``object_store_memory``), or
        an amount is not a finite number > 0; the message names the bad value.
    """
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, amount = (s.strip() for s in part.partition("="))
        if not sep or not _NAME.fullmatch(name):
            raise ValueError(f"{flag}={text!r}: {part!r} must be NAME=AMOUNT (e.g. actor_node=1)")
        if name in _RESERVED:
            raise ValueError(f"{flag}={text!r}: {name!r} is a built-in Ray resource; use "
                             "--actor_cpus/--learner_cpus/--learner_gpus for CPUs and GPUs")
        if name in out:
            raise ValueError(f"{flag}={text!r}: {name!r} is given twice")
        try:
            value = float(amount)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag}={text!r}: the amount of {name!r} must be a number > 0, "
                             f"got {amount!r}")
        out[name] = value
    return out
