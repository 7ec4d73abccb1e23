"""``module:attribute`` references to user code (agents, environment factories).

``--agent=my_package.my_module:MY_AGENT`` and ``--env=my_module:make_game`` name an
object in an importable module: on ``PYTHONPATH``, installed, or in the current
directory (``scripts/train.py`` puts it on ``sys.path``, as ``python -m`` does; child
processes start in the same directory with ``python -m``, which does the same).
"""

from __future__ import annotations

import importlib
from typing import Any


def is_reference(name: str) -> bool:
    """Whether ``name`` has the ``module:attribute`` form."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr)


def import_module(module: str, what: str) -> Any:
    """Import ``module``; ``ValueError`` naming it (and ``what`` needed it) if that fails.

    Raises:
      ValueError: the module (or something it imports) cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"{what}: cannot import module {module!r} ({exc}); is it on PYTHONPATH "
                         "or in the current directory?") from None


def import_object(reference: str, what: str) -> Any:
    """The object ``module:attribute`` names (``attribute`` may be dotted: ``A.b``).

    Args:
      reference: ``"package.module:NAME"``.
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
