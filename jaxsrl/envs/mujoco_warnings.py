"""MuJoCo's warnings, each distinct text once per process.

MuJoCo 4 warns, while compiling a model, that the compiler attribute ``settotalmass``
is deprecated. Gymnasium's ``half_cheetah.xml`` sets it (``settotalmass="14"``), so
every HalfCheetah environment built printed the same two lines: 65 times at the start
of a default ``--env=HalfCheetah-v5`` run (64 actor envs and one to read the spaces),
burying the run's own start lines. The cause is Gymnasium's model file: removing the
attribute without rescaling every body's mass and inertia by hand would change the
physics, so the model is left as it is and only the repeats are dropped.

:func:`quiet_repeats` routes MuJoCo's warnings (``mju_warning``: the compiler's, and
the first of each kind per ``mjData``, such as "Nan, Inf or huge value in QACC") to
the ``jaxsrl.envs`` logger, each distinct text once per process, instead of MuJoCo's
default handler (which prints every one to stdout and appends it to ``MUJOCO_LOG.TXT``
in the working directory). It never imports MuJoCo for an environment that does not
use it. No JAX here.
"""

from __future__ import annotations

import logging
import sys
import threading

import gymnasium

log = logging.getLogger("jaxsrl.envs")

_lock = threading.Lock()
_seen: set[str] = set()
_installed = False


def _uses_mujoco(env_id: str) -> bool:
    """Whether building ``env_id`` compiles a MuJoCo model: MuJoCo already imported in
    this process, or a Gymnasium MuJoCo environment (its entry point in
    ``gymnasium.envs.mujoco``)."""
    if "mujoco" in sys.modules:
        return True
    try:
        entry = gymnasium.spec(env_id).entry_point
    except Exception:  # noqa: BLE001  (gymnasium raises several kinds; make will say why)
        return False
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def _warn_once(text: str) -> None:
    """MuJoCo's warning callback: log ``text`` the first time this process sees it."""
    with _lock:
        if text in _seen:
            return
        _seen.add(text)
    log.warning("MuJoCo: %s (repeats in this process are not shown)", text)


def quiet_repeats(env_id: str) -> None:
    """Before building ``env_id``: if it uses MuJoCo, show each distinct MuJoCo warning
    once per process (module docstring). Leaves a warning handler someone else set, and
    environments without MuJoCo, alone."""
    global _installed
    if _installed or not _uses_mujoco(env_id):
        return
    import mujoco  # noqa: PLC0415  (only for the environments that import it anyway)

    with _lock:
        if not _installed and mujoco.get_mju_user_warning() is None:
            mujoco.set_mju_user_warning(_warn_once)
        _installed = True
