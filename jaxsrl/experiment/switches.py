"""Boolean flags written with a value: ``--x=false`` -> ``--no_x``, ``--x=true`` -> ``--x``.

tyro turns a boolean field ``x`` into the pair ``--x`` / ``--no_x`` (for an agent's field,
``--ppo.anneal_lr`` / ``--ppo.no_anneal_lr``) and refuses ``--x=false``. :func:`normalize`
rewrites the value forms (``--x=VALUE`` and ``--x VALUE``) into the pair before tyro reads
them, so both spellings work wherever a config is parsed
(:func:`jaxsrl.experiment.config.load_config`: the command lines, sweeps, seeds, bench).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Sequence

#: Accepted values of a switch (compared lower-case).
WORDS = {"true": True, "false": False, "1": True, "0": False}


def switch_names(cls: type, prefix: str = "") -> set[str]:
    """Dotted names of the boolean fields of dataclass ``cls`` and of its dataclass-valued
    fields (``{"resume", "ppo.anneal_lr", ...}``)."""
    names = set()
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if typing.get_origin(hint) is typing.Annotated:
            hint = typing.get_args(hint)[0]
        if hint is bool:
            names.add(prefix + field.name)
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            names |= switch_names(hint, f"{prefix}{field.name}.")
    return names


def normalize(args: Sequence[str], switches: set[str]) -> list[str]:
    """``args`` with every ``--x=VALUE`` / ``--x VALUE`` of a switch ``x`` (or of its
    ``--no_x``) written as ``--x`` or ``--no_x``; other arguments unchanged.

    Args:
      args: command-line arguments.
      switches: dotted names of the boolean fields (:func:`switch_names`).

    Raises:
      ValueError: a switch given a value other than true/false/1/0, naming the flag and
        how to write it.
    """
    flags: dict[str, tuple[str, str, bool]] = {}
    for name in switches:
        head, dot, leaf = name.rpartition(".")
        yes, no = f"--{name}", f"--{head}{dot}no_{leaf}"
        flags[yes] = (yes, no, True)
        flags[no] = (yes, no, False)
    out: list[str] = []
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        flag, eq, value = arg.partition("=")
        if flag not in flags:
            out.append(arg)
            continue
        if not eq:
            if i < len(args) and args[i].lower() in WORDS:
                value = args[i]  # --x false
                i += 1
            else:
                out.append(arg)
                continue
        yes, no, sense = flags[flag]
        if value.lower() not in WORDS:
            raise ValueError(f"{arg}: {yes} is a switch; write {yes} or {no} "
                             f"(or {yes}=true / {yes}=false)")
        out.append(yes if WORDS[value.lower()] == sense else no)
    return out
