"""The help text of a dataclass's fields, read from its source, as plain one-line text.

A field's text is the string literal right after it in the class body (an attribute
docstring), or else its entry in an ``Attributes:`` section of the class docstring
(Google style). reST markup is dropped: ``x`` and :func:`x` become x.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")   # :func:`a.b`, :class:`~a.B`
_LITERAL = re.compile(r"``(.*?)``")            # ``x``
_ATTRIBUTE = re.compile(r"^(\w+)(?: \([^)]*\))?:\s*(.*)$")  # "name: text" / "name (type): text"


def plain(text: str) -> str:
    """``text`` on one line, with reST roles and double-backtick literals reduced to their text.

    >>> plain("Uses ``act``; see :func:`jaxsrl.x.f`\\n  and :class:`~a.B`.")
    'Uses act; see jaxsrl.x.f and a.B.'
    """
    text = _ROLE.sub(r"\1", " ".join(text.split()))
    return _LITERAL.sub(r"\1", text)


def field_docs(cls: type) -> dict[str, str]:
    """``{field name: plain help text}`` of the dataclass ``cls`` and its dataclass bases.

    Fields without text are left out; a class whose source cannot be read (made at run
    time, e.g. by ``dataclasses.make_dataclass``) adds nothing.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_attributes_section(klass.__doc__ or ""))
            docs.update(_attribute_docstrings(klass))
    names = {f.name for f in dataclasses.fields(cls)}
    return {name: plain(text) for name, text in docs.items() if name in names}


def _attribute_docstrings(klass: type) -> dict[str, str]:
    """The string literals that follow annotated assignments in ``klass``'s body."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return {}
    node = ast.parse(source).body[0]
    if not isinstance(node, ast.ClassDef):
        return {}
    docs = {}
    for stmt, after in zip(node.body, node.body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[stmt.target.id] = after.value.value
    return docs


def _attributes_section(doc: str) -> dict[str, str]:
    """The entries of the ``Attributes:`` section of a Google-style class docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    try:
        start = lines.index("Attributes:") + 1
    except ValueError:
        return {}
    docs: dict[str, str] = {}
    name, indent = None, None
    for line in lines[start:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0:
            break  # the next section
        match = _ATTRIBUTE.match(line.strip())
        if match and (indent is None or depth == indent):
            indent = depth
            name = match.group(1)
            docs[name] = match.group(2)
        elif name is not None:
            docs[name] += " " + line.strip()
    return docs
