"""A damaged checkpoint's restore leaves Orbax read coroutines whose collection Python
reports one traceback each; after a failed restore those reports are dropped and every
other unraisable report still reaches the previous hook."""

import os
import sys
import types

from jaxsrl.experiment import checkpoint


def _coroutine_from(filename: str):
    scope: dict = {}
    exec(compile("async def read():\n    return 1\n", filename, "exec"), scope)
    return scope["read"]()


def test_orbax_coroutine_reports_dropped_others_kept(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.object))
    checkpoint.quiet_orbax_leftovers()
    checkpoint.quiet_orbax_leftovers()  # installed once: the previous hook is not wrapped twice
    orbax = _coroutine_from(os.path.join(os.sep, "venv", "orbax", "checkpoint", "serialization.py"))
    mine = _coroutine_from(os.path.join(os.sep, "home", "me", "mine.py"))
    try:
        for obj in (orbax, mine, "not a coroutine"):
            sys.unraisablehook(types.SimpleNamespace(object=obj, exc_type=RuntimeError,
                                                     exc_value=RuntimeError("x"),
                                                     exc_traceback=None, err_msg=None))
    finally:
        orbax.close()
        mine.close()
    assert seen == [mine, "not a coroutine"]
