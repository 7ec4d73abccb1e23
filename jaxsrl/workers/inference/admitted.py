"""The inference server's memory of requests it accepted: a repeated request is admitted
without being parsed and checked again.

An actor's ``act`` requests differ only in their array bytes: the same header (kind,
``actor``/``run``/``group`` meta, array names, dtypes and shapes) comes again and again,
byte for byte. Once :meth:`PolicyWorker.parse
<jaxsrl.workers.inference.policy.PolicyWorker.parse>` has accepted a request, its
verdict is remembered under its header's bytes, with what the verdict rests on besides
them: the frame count, each array frame's byte count, and the actor table's
:attr:`~jaxsrl.streams.admission.ActorTable.generation` read before the check. A request
whose header bytes are remembered, whose frames have those counts and which arrives
while the table has that generation gets the same verdict (the checks are functions of
exactly these), so it is admitted without them; any other request (a new header, a frame
of another size, a table that changed since: an actor restarted or registered) goes
through the full checks, which accept or reject it exactly as before.

Only acceptances are remembered (a rejected request is always checked in full, so its
drop is logged and counted as it always was), and only of requests whose checking had no
side effect besides the actor's last-seen time (a request carrying finished self-play
``games`` is always checked in full: its games go to the pools).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.kept_carry import KEPT
from jaxsrl.streams.obs_pack import is_packed


class Verdict(NamedTuple):
    """An accepted request's outcome and what it holds for.

    Attributes:
      frames: the request's frame count, identity frame included.
      generation: the actor table's generation before the check (0 without a table).
      actor: the actor id the table returned (``None`` without a table).
      group: the request's ``group`` meta (what its reply carries).
      rows: its rows.
      arrays: ``((frame index, array name, byte count), ...)`` of its array frames.
      kept: frame index of its ``carry_kept`` array (a request whose carry the server
        keeps, :mod:`jaxsrl.streams.kept_carry`), or 0 (its carry is in ``arrays``).
      packer: the :class:`~jaxsrl.streams.obs_pack.ObsPacker` of its packed observations,
        or ``None`` (its observation leaves are in ``arrays``).
      packed: ``((frame index, byte count), (frame index, byte count))`` of its ``obs#f``
        and ``obs#b`` arrays, or ``()``.
    """

    frames: int
    generation: int
    actor: int | None
    group: int
    rows: int
    arrays: tuple
    kept: int = 0
    packer: object = None
    packed: tuple = ()


class AdmittedRequests:
    """Header bytes -> :class:`Verdict` of the requests a server accepted (see the module
    docstring). Not thread-safe: one serving thread owns it.

    Args:
      actors: the server's actor table (``None``: the server checks no ids).
      max_known: most headers remembered (all are forgotten when that many are).
    """

    def __init__(self, actors: ActorTable | None, max_known: int = 4096):
        self._actors, self._max_known = actors, int(max_known)
        self._known: dict = {}

    def generation(self) -> int:
        """The actor table's generation now (read it before checking a request)."""
        return 0 if self._actors is None else self._actors.generation

    def get(self, frames: Sequence) -> Verdict | None:
        """The remembered verdict on a request of these received frames (``[identity,
        header, *arrays]``, as bytes), or ``None`` if none holds for them: then the
        request must be checked in full."""
        if len(frames) < 2:
            return None
        verdict = self._known.get(frames[1])
        if verdict is None or verdict.frames != len(frames):
            return None
        actors = self._actors
        if (0 if actors is None else actors.generation) != verdict.generation:
            return None
        for i, _, nbytes in verdict.arrays:
            if len(frames[i]) != nbytes:
                return None
        if verdict.kept and len(frames[verdict.kept]) != verdict.rows:  # uint8 [rows]
            return None
        for i, nbytes in verdict.packed:
            if len(frames[i]) != nbytes:
                return None
        return verdict

    def remember(self, frames: Sequence, generation: int, actor: int | None, group: int,
                 rows: int, names: Sequence[str], packer: object = None) -> None:
        """Remember that the request of ``frames`` (bytes; its arrays named ``names`` in
        frame order) was accepted with ``actor``, ``group`` and ``rows``, the actor table
        having had ``generation`` before the check (:meth:`generation`); ``packer``: its
        observations' :class:`~jaxsrl.streams.obs_pack.ObsPacker` (``obs#f``/``obs#b``
        among ``names``), or ``None``."""
        if len(frames) < 2 or not all(type(f) is bytes for f in frames):  # noqa: E721
            return
        if len(self._known) >= self._max_known:
            self._known.clear()
        arrays = tuple((i + 2, name, len(frames[i + 2])) for i, name in enumerate(names))
        kept = next((i for i, name, _ in arrays if name == KEPT), 0)
        by_name = {name: (i, nbytes) for i, name, nbytes in arrays}
        packed = (by_name["obs#f"], by_name["obs#b"]) if packer is not None else ()
        self._known[frames[1]] = Verdict(
            len(frames), generation, actor, group, rows,
            tuple(a for a in arrays if a[1] != KEPT and not is_packed(a[1])), kept, packer, packed)

    def __len__(self) -> int:
        return len(self._known)
