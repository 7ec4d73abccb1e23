"""JAX-native environments: pure, jittable ``reset``/``step`` stepped on the accelerator
by device actors (Podracer's Anakin; ``docs/device_actors.md``), not by actor processes.

An ``--env`` of the form ``<library>:<EnvId>`` with a library in :data:`PREFIXES`
(``gymnax:CartPole-v1``, any gymnax id; ``brax:halfcheetah``, any Brax name;
``jaxmarl:MPE_simple_spread_v3``, JaxMARL's MPE ids) is JAX-native. This package's ``__init__`` reads
names only and imports nothing heavy: actor processes import :mod:`jaxsrl.envs`, and
must not import JAX. The adapters (:mod:`jaxsrl.envs.jax_native.gymnax_env`,
:mod:`jaxsrl.envs.jax_native.brax_env`, :mod:`jaxsrl.envs.jax_native.jaxmarl_env`) and their
registry (:mod:`jaxsrl.envs.jax_native.registry`) are imported only by the device path.
"""

from __future__ import annotations

#: library prefix of a JAX-native ``--env`` -> the pip extra that installs it.
PREFIXES = {"gymnax": "gymnax", "brax": "brax", "jaxmarl": "jaxmarl"}


def is_jax_native(env_id: str) -> bool:
    """Whether ``env_id`` names a JAX-native environment (``gymnax:<EnvId>``,
    ``brax:<name>``, ``jaxmarl:<MPE id>``)."""
    library, sep, rest = env_id.partition(":")
    return bool(sep) and library in PREFIXES and bool(rest)


def split_id(env_id: str) -> tuple[str, str]:
    """``(library, EnvId)`` of a JAX-native ``env_id``.

    Raises:
      ValueError: ``env_id`` is not JAX-native.
    """
    if not is_jax_native(env_id):
        raise ValueError(f"{env_id!r} is not a JAX-native environment id "
                         f"(<library>:<EnvId> with library one of {sorted(PREFIXES)})")
    library, _, name = env_id.partition(":")
    return library, name
