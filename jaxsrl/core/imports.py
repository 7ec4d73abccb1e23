"""``module:attribute`` references to user code (agents, environment factories).

``--agent=my_package.my_module:MY_AGENT`` and ``--env=my_module:make_game`` name an
object in an importable module: on ``PYTHONPATH``, installed, or in the current
directory (``scripts/train.py`` puts it on ``sys.path``, as ``python -m`` does; child
processes start in the same directory with ``python -m``, which does the same).

The module may also be a Python file, ``--agent=path/to/vpg.py:AGENT`` (relative to
the current directory, or absolute): it is loaded on its own under a name derived
from its absolute path, so it cannot clash with an installed package. That is the way
out when a folder of yours shares its name with a top-level package already imported
(``agents``, jaxsrl's own built-in agents): ``--agent=agents.vpg:AGENT`` then fails
with an error that says so.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from typing import Any


def shadowed_agents_package(path: list[str] | None = None) -> str | None:
    """Why jaxsrl's own ``agents`` package would not be the one imported from ``path``
    (default ``sys.path``, ``""`` read as the current directory), or ``None``.

    A user's folder ``agents/`` with an ``__init__.py`` in the current directory is a
    regular package; ``python -m`` (how child processes start) puts the current directory
    first on ``sys.path``, so it would replace jaxsrl's built-in agents there and every
    worker would fail to import ``agents.AGENTS``. Nothing is imported to find this out.

    Returns:
      a one-line message naming the shadowing folder and the way out, or ``None``.
    """
    import importlib.machinery  # noqa: PLC0415

    entries = [p or os.getcwd() for p in (sys.path if path is None else path)]
    spec = importlib.machinery.PathFinder.find_spec("agents", entries)
    if spec is None or spec.origin is None:  # not found, or a namespace: ours still wins
        return None
    found = os.path.realpath(os.path.dirname(spec.origin))
    ours = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(__file__)))), "agents")
    if found == os.path.realpath(ours):
        return None
    return (f"the folder {found} (a package: it has __init__.py) shadows jaxsrl's own "
            "'agents' package in processes started from this directory: rename it (e.g. "
            "my_agents, then --agent=my_agents.vpg:AGENT) or delete its __init__.py and use "
            "--agent=agents/vpg.py:AGENT")


def is_reference(name: str) -> bool:
    """Whether ``name`` has the ``module:attribute`` form."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr)


def is_file(module: str) -> bool:
    """Whether the module part of a reference names a Python file (``dir/name.py``)."""
    return module.endswith(".py")


def import_module(module: str, what: str) -> Any:
    """Import ``module`` (a dotted name, or a ``.py`` file: :func:`import_file`);
    ``ValueError`` naming it (and ``what`` needed it) if that fails.

    Raises:
      ValueError: the module (or something it imports) cannot be imported; or
        ``module`` names a file of a folder of the current directory (``./agents/vpg.py``)
        whose name a package imported from elsewhere holds (jaxsrl's ``agents``): the
        error names the clash, whether the import failed or found that package's
        module of the same name instead.
    """
    if is_file(module):
        return import_file(module, what)
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        shadowed = _shadowed_folder(module, what)
        if shadowed:
            raise ValueError(f"{what}: {shadowed}") from None
        raise ValueError(f"{what}: cannot import module {module!r} ({exc}); is it on PYTHONPATH "
                         "or in the current directory?") from None
    shadowed = _shadowed_folder(module, what)
    if shadowed:  # e.g. ./agents/ppo.py: jaxsrl's agents.ppo was imported, not yours
        raise ValueError(f"{what}: {shadowed}")
    return imported


def _shadowed_folder(module: str, what: str) -> str | None:
    """Why ``module`` (``top.rest``) is not found although ``./top/rest.py`` exists: the
    package ``top`` was imported from elsewhere; ``None`` if that is not the case.
    ``what`` (``--agent=top.rest:NAME``) gives the flag and name of the suggestion."""
    top, _, rest = module.partition(".")
    package = sys.modules.get(top)
    folder = os.path.join(os.getcwd(), top)
    if not rest or package is None or not os.path.isdir(folder):
        return None
    path = os.path.join(folder, *rest.split("."))
    if not (os.path.isfile(path + ".py") or os.path.isdir(path)):
        return None
    locations = [os.path.realpath(p) for p in getattr(package, "__path__", [])]
    if os.path.realpath(folder) in locations:
        return None  # the folder is (part of) the imported package: another failure
    owner = (f"jaxsrl's own {top} package" if _is_jaxsrl(locations)
             else f"a package imported from {', '.join(locations) or 'elsewhere'}")
    if os.path.isfile(path + ".py"):
        flag, eq, reference = what.partition("=")
        name = reference.rpartition(":")[2] if eq and ":" in reference else "NAME"
        way_out = f"use {flag if eq else '--agent'}={top}/{'/'.join(rest.split('.'))}.py:{name}"
    else:
        way_out = "use --agent=path/to/file.py:AGENT"
    return f"{top!r} is {owner}; your folder ./{top} is shadowed: rename it or {way_out}"


def _is_jaxsrl(locations: list) -> bool:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    return any(os.path.dirname(p) == root for p in locations)


def import_file(path: str, what: str) -> Any:
    """Load the Python file ``path`` as a module of its own (once per absolute path).

    Its name, ``jaxsrl_file_<stem>_<hash of the absolute path>``, is registered in
    ``sys.modules`` (dataclasses and pickling look modules up there) and clashes with
    no package. The file's own folder is not put on ``sys.path``.

    Raises:
      ValueError: no such file, or loading it fails with an ``ImportError``.
    """
    full = os.path.realpath(path)
    if not os.path.isfile(full):
        raise ValueError(f"{what}: no such file {path!r} (relative to {os.getcwd()})")
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(full))[0])
    name = f"jaxsrl_file_{stem}_{hashlib.sha1(full.encode()).hexdigest()[:10]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[name]
        raise ValueError(f"{what}: cannot load {path!r} ({exc})") from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def import_object(reference: str, what: str) -> Any:
    """The object ``module:attribute`` names (``attribute`` may be dotted: ``A.b``).

    Args:
      reference: ``"package.module:NAME"`` or ``"path/to/file.py:NAME"``.
      what: for error messages, e.g. ``"--agent"``.

    Raises:
      ValueError: not of the ``module:attribute`` form, the module cannot be imported,
        or it has no such attribute.
    """
    if not is_reference(reference):
        raise ValueError(f"{what}={reference!r} is not of the form package.module:NAME")
    module_name, _, attr = reference.partition(":")
    obj = import_module(module_name, f"{what}={reference}")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what}={reference}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
