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
import functools
import os
import tomllib
import types
import typing
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
      ValueError: the file is not valid TOML (or not UTF-8, or nested too deeply), names
        an unknown key, or gives a value of another type than its field's (only this
        error, whatever the file holds: ``tests/fuzz_decoders.py``).
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({_one_line(exc)})") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8
        raise ValueError(f"{path}: not valid TOML (not UTF-8: {exc.reason} at byte "
                         f"{exc.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid TOML (nested too deeply)") from None
    return apply_table(cfg, data, path)


def _one_line(value: Any, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _shown(value: Any) -> str:
    return _one_line(repr(value), 80)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001  (an annotation this module cannot resolve: unchecked)
        return {}


def _mismatch(value: Any, hint: Any) -> str | None:
    """What ``value`` (from TOML or JSON) should be to fit the annotation ``hint``, or
    ``None`` if it fits (types this check does not know are accepted as they are)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return None
    if origin in (typing.Union, types.UnionType):
        wrong = [_mismatch(value, a) for a in args]
        return None if None in wrong else " or ".join(w for w in wrong if w)
    if hint is type(None):
        return None if value is None else "null"
    if origin is typing.Literal:  # the type only: RunConfig.validate names a wrong choice
        return None if any(type(value) is type(a) for a in args) else \
            "one of " + ", ".join(repr(a) for a in args)
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if hint is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if hint is str:
        return None if isinstance(value, str) else "a string"
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return "a list"
        if origin is tuple and args and args[-1] is Ellipsis:
            args = (args[0],) * len(value)
        elif origin is tuple and args and len(args) != len(value):
            return f"a list of {len(args)} items"
        for i, (item, a) in enumerate(zip(value, args or ())):
            wrong = _mismatch(item, a)
            if wrong:
                return f"a list whose items fit (item {i}={_shown(item)} is not {wrong})"
        return None
    if origin in (dict, typing.Mapping) or hint in (dict, typing.Mapping) or \
            (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
        return None if isinstance(value, dict) else "a table"
    return None


def check_value(owner: Any, key: str, value: Any, where: str) -> None:
    """Check that ``value`` fits the annotation of field ``key`` of the dataclass
    ``owner`` (a config), so an ill-typed TOML or ``config.json`` value stops the run
    here rather than as a ``TypeError`` deep inside.

    Raises:
      ValueError: it does not, in one line naming ``where``, the key and the value.
    """
    hint = _hints(type(owner)).get(key)
    if hint is None:
        return
    wrong = _mismatch(value, hint)
    if wrong:
        raise ValueError(f"{where}: {key}={_shown(value)} is not {wrong}")


def apply_table(cfg: Any, data: dict, path: str) -> Any:
    """``cfg`` with the keys of ``data`` (one parsed TOML file or ``config.json``) set.

    Raises:
      ValueError: a key that is neither a run field nor a table; a key of the agent's
        table that its config dataclass lacks, or of a section's table that the section
        lacks; a key set both at the top and in its section's table; contradicting
        inference keys; a value of another type than its field's (:func:`check_value`;
        ``path`` names the file).
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
            for k, v in value.items():
                check_value(sub, k, v, f"{path}: [{agent_name}]")
            value = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
            updates[agent_name] = dataclasses.replace(sub, **value)
        elif key == "env_kwargs" and isinstance(value, dict):
            updates[key] = {**(cfg.env_kwargs or {}), **value}
        elif key in run_fields and isinstance(value, dict) \
                and dataclasses.is_dataclass(getattr(cfg, key)):
            updates[key] = _replace_fields(getattr(cfg, key), value, f"{path}: [{key}]")
        elif key in run_fields:
            check_value(cfg, key, value, path)
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
    for k, v in value.items():
        check_value(sub, k, v, where)
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
