"""The layers of a run config below the flags: TOML files and ``--env_kwargs.KEY`` flags.

:func:`jaxsrl.experiment.config.load_config` applies, in order, ``configs/<env>.toml`` and
``configs/<agent>/<env>.toml`` (or, with ``--resume``, the run's ``config.json``), each
``--config`` file, then the flags. Each
layer sets only the keys it names: run fields, the agent's ``[<agent>]`` table (field by
field), tables of other dataclass-valued run fields such as ``[pbt]`` (field by field),
``[env_kwargs]`` (merged key by key), ``[dataflow]`` (replaces the graph), and the tables
of the config's sections (``[inference]``, ``[actors]``, ...:
:data:`jaxsrl.experiment.sections.SECTIONS`), whose keys are the section's flat fields
(``[actors] num_actors = 4`` is ``num_actors = 4``; ``[inference] mode`` is ``inference``).
The inference mode and its older keys (``remote_inference``, ``inline_inference``) are
resolved per layer by :func:`jaxsrl.experiment.modes.resolve_inference`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Sequence
from jaxsrl.core.paths import CONFIG_DIR
from jaxsrl.experiment import modes, sections


ENV_KWARGS_FLAG = "--env_kwargs."


def config_file_for(env: str) -> str:
    """``configs/<env>.toml`` (``/`` and ``:`` in the id become ``_``)."""
    return os.path.join(CONFIG_DIR, env.replace("/", "_").replace(":", "_") + ".toml")


def agent_config_file_for(env: str, agent: str) -> str:
    """``configs/<agent>/<env>.toml``: run fields and hyperparameters of one agent on one
    environment, layered over ``configs/<env>.toml`` (e.g. off-policy agents' actor
    layouts, which differ from the on-policy ones the env file sets)."""
    name = env.replace("/", "_").replace(":", "_") + ".toml"
    return os.path.join(CONFIG_DIR, agent.replace("/", "_").replace(":", "_"), name)


def apply_file(cfg: Any, path: str) -> Any:
    """``cfg`` with the TOML file at ``path`` layered over it.

    Raises:
      ValueError: the file is not valid TOML, or names an unknown key.
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    return apply_table(cfg, data, path)


def apply_table(cfg: Any, data: dict, path: str) -> Any:
    """``cfg`` with the keys of ``data`` (one parsed TOML file or ``config.json``) set.

    Raises:
      ValueError: a key that is neither a run field nor a table; a key of the agent's
        table that its config dataclass lacks, or of a section's table that the section
        lacks; a key set both at the top and in its section's table; contradicting
        inference keys (``path`` names the file).
    """
    agent_name = cfg.agent_field or cfg.agent
    data = _flatten_sections(cfg, data, path)
    data, inference = modes.inference_of_table(cfg.inference, data, path)
    run_fields = {f.name for f in dataclasses.fields(cfg)} - {agent_name, "agent", "env"}
    updates: dict[str, Any] = {}
    for key, value in data.items():
        if key == agent_name and isinstance(value, dict):
            sub = getattr(cfg, agent_name)
            names = {f.name for f in dataclasses.fields(sub)}
            bad = sorted(set(value) - names)
            if bad:
                raise ValueError(f"{path}: unknown [{agent_name}] keys {bad}; valid: {sorted(names)}")
            value = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
            updates[agent_name] = dataclasses.replace(sub, **value)
        elif key == "env_kwargs" and isinstance(value, dict):
            updates[key] = {**(cfg.env_kwargs or {}), **value}
        elif key in run_fields and isinstance(value, dict) \
                and dataclasses.is_dataclass(getattr(cfg, key)):
            updates[key] = _replace_fields(getattr(cfg, key), value, f"{path}: [{key}]")
        elif key in run_fields:
            updates[key] = value
        elif isinstance(value, dict):
            continue  # another agent's table: ignored when running this agent
        else:
            raise ValueError(f"{path}: unknown config key {key!r}")
    if inference is not None:
        updates["inference"] = inference
    return dataclasses.replace(cfg, **updates)


def _flatten_sections(cfg: Any, data: dict, path: str) -> dict:
    """``data`` with each section table (``[inference]``, ``[actors]``, ...) that is not
    also a dataclass-valued field (``[pbt]``, ``[opponents]``) or the agent's table
    replaced by its keys at the top level.

    Raises:
      ValueError: a key the section lacks, or one also set at the top level.
    """
    agent_name = cfg.agent_field or cfg.agent
    out: dict = {}
    tables: list[tuple[str, dict]] = []
    for key, value in data.items():
        if (key in sections.BY_NAME and isinstance(value, dict) and key != agent_name
                and not dataclasses.is_dataclass(getattr(cfg, key, None))):
            tables.append((key, value))
        else:
            out[key] = value
    for name, table in tables:
        renames = sections.TABLE_KEYS.get(name, {})
        valid = set(sections.BY_NAME[name].fields) | set(renames)
        valid |= set(modes.ALIAS_KEYS) if name == "inference" else set()
        valid -= set(renames.values())  # written under its table name ([inference] mode)
        bad = sorted(set(table) - valid)
        if bad:
            raise ValueError(f"{path}: unknown [{name}] keys {bad}; valid: {sorted(valid)}")
        for key, value in table.items():
            key = renames.get(key, key)
            if key in out:
                raise ValueError(f"{path}: {key} is set both at the top level and in [{name}] "
                                 "(keep one)")
            out[key] = value
    return out


def _replace_fields(sub: Any, value: dict, where: str) -> Any:
    """The dataclass ``sub`` with the fields of table ``value`` set, field by field
    (lists become tuples where the field's value is a tuple).

    Raises:
      ValueError: a key that is not a field of ``sub``, naming ``where``.
    """
    names = {f.name for f in dataclasses.fields(sub)}
    bad = sorted(set(value) - names)
    if bad:
        raise ValueError(f"{where}: unknown keys {bad}; valid: {sorted(names)}")
    value = {k: tuple(v) if isinstance(v, list) and isinstance(getattr(sub, k), tuple) else v
             for k, v in value.items()}
    return dataclasses.replace(sub, **value)


def split_env_kwargs_flags(args: Sequence[str]) -> tuple[list[str], dict]:
    """Take ``--env_kwargs.KEY=VALUE`` (or ``--env_kwargs.KEY VALUE``) out of ``args``.

    A value is read as a TOML value (``50``, ``0.5``, ``true``, ``[1, 2]``, ``"x"``); one
    that is not (a bare word such as ``full``) is the string itself.

    Returns:
      The other arguments, and the keyword arguments in the order given (a key given
      twice: the last one wins).

    Raises:
      ValueError: a flag without a key, a key that is not an identifier, or no value.
    """
    rest: list[str] = []
    kwargs: dict[str, Any] = {}
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--env_kwargs" or arg.startswith("--env_kwargs="):
            raise ValueError(f"{arg!r}: give environment arguments one by one, "
                             "--env_kwargs.KEY=VALUE")
        if not arg.startswith(ENV_KWARGS_FLAG):
            rest.append(arg)
            continue
        key, sep, raw = arg[len(ENV_KWARGS_FLAG):].partition("=")
        if not sep:
            if i >= len(args):
                raise ValueError(f"{arg}: needs a value (--env_kwargs.{key}=VALUE)")
            raw = args[i]
            i += 1
        if not key.isidentifier():
            raise ValueError(f"{arg!r}: {key!r} is not a keyword argument name")
        kwargs[key] = _toml_value(raw)
    return rest, kwargs


def _toml_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
