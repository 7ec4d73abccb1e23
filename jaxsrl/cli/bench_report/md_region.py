"""The generated region of a Markdown report that also holds hand-written sections.

``docs/benchmarks.md`` is part generated (the ladder, by ``scripts/bench.py``) and part
written by hand (measurements the ladder does not make). The generated part lies between
two marker lines, :data:`START` and :data:`END` (HTML comments, invisible when rendered);
:func:`write` replaces only what lies between them and keeps the rest of the file
byte for byte. A file that does not exist yet is created holding the markers and the
generated text only.

Plain text in, text out (no JAX, no processes).
"""

from __future__ import annotations

import os

START = "<!-- bench:generated:start -->"
END = "<!-- bench:generated:end -->"


class RegionError(ValueError):
    """An existing report's markers are missing, repeated or out of order."""


def _bounds(text: str, where: str) -> tuple[int, int]:
    """``(a, b)``: the generated region is ``text[a:b]`` (from the line after
    :data:`START` to the start of the :data:`END` line).

    Raises:
      RegionError: not exactly one of each marker, each on a line of its own, START first.
    """
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or starts[0] > ends[0]:
        raise RegionError(
            f"{where} exists but does not hold exactly one {START} line followed by one {END} "
            f"line (found {len(starts)} and {len(ends)}): add them around its generated part, "
            "or write the report elsewhere (--out_md=PATH)")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    return offsets[starts[0] + 1], offsets[ends[0]]


def splice(existing: str | None, generated: str, where: str = "the report") -> str:
    """The file's new text: ``existing`` with its generated region replaced by
    ``generated`` (a newline added if it lacks one); with ``existing=None`` (no file yet)
    the markers around ``generated`` alone.

    Raises:
      RegionError: ``existing`` has no well-formed region (``where`` names the file).
    """
    if generated and not generated.endswith("\n"):
        generated += "\n"
    if existing is None:
        return f"{START}\n{generated}{END}\n"
    a, b = _bounds(existing, where)
    return existing[:a] + generated + existing[b:]


def check(path: str) -> None:
    """Raise :class:`RegionError` now if ``path`` exists without a well-formed region
    (so that a benchmark does not run for minutes before it finds it cannot write)."""
    if os.path.isfile(path):
        with open(path) as f:
            _bounds(f.read(), path)


def write(path: str, generated: str) -> None:
    """Replace the generated region of ``path`` with ``generated`` (create the file,
    and its folders, if it does not exist).

    Raises:
      RegionError: ``path`` exists without a well-formed region (the file is unchanged).
    """
    existing = None  # also for a non-file such as /dev/null
    if os.path.isfile(path):
        with open(path) as f:
            existing = f.read()
    text = splice(existing, generated, path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
