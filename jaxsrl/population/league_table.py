"""The league table of a self-play run: ratings of every policy version, as text.

Rows come from :meth:`jaxsrl.population.ratings.Ratings.table` (highest ordinal
``mu - 3 sigma`` first); ids are ``<policy>:latest`` or ``<policy>:<version>`` (a
snapshot taken at that policy version). Pure formatting, no I/O.
"""

from __future__ import annotations

from typing import Iterable, Mapping


def split_id(pid: str) -> tuple[str, str]:
    """``("hider", "120")`` of ``"hider:120"``; ``("hider", "latest")`` of ``"hider:latest"``."""
    policy, _, version = pid.rpartition(":")
    return policy, version


def markdown(rows: Iterable[Mapping]) -> str:
    """A Markdown table of league rows (dicts with the fields of ``ratings.Row``).

    Columns: rank, policy, version, ordinal, mu, sigma, games, wins, losses, draws.
    """
    lines = ["| rank | policy | version | ordinal | mu | sigma | games | W | L | D |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rank, r in enumerate(rows, 1):
        policy, version = split_id(str(r["id"]))
        lines.append(f"| {rank} | {policy} | {version} | {r['ordinal']:.2f} | {r['mu']:.2f} | "
                     f"{r['sigma']:.2f} | {r['games']} | {r['wins']} | {r['losses']} | {r['draws']} |")
    return "\n".join(lines) + "\n"
