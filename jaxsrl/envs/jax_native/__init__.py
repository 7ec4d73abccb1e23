"""JAX-native environments: pure, jittable ``reset``/``step`` stepped on the accelerator
by device actors (Podracer's Anakin; ``docs/device_actors.md``), not by actor processes.

An ``--env`` of the form ``<library>:<EnvId>`` with a library in :data:`PREFIXES`
(``gymnax:CartPole-v1``, any gymnax id; ``brax:halfcheetah``, any Brax name;
``jaxmarl:MPE_simple_spread_v3``, JaxMARL's MPE ids; ``jax:package.module:factory``, a
user's own environment, :mod:`jaxsrl.envs.jax_native.user_env`) is JAX-native. This package's ``__init__`` reads
names only and imports nothing heavy: actor processes import :mod:`jaxsrl.envs`, and
must not import JAX. The adapters (:mod:`jaxsrl.envs.jax_native.gymnax_env`,
:mod:`jaxsrl.envs.jax_native.brax_env`, :mod:`jaxsrl.envs.jax_native.jaxmarl_env`,
:mod:`jaxsrl.envs.jax_native.user_env`) and their
registry (:mod:`jaxsrl.envs.jax_native.registry`) are imported only by the device path.
"""

from __future__ import annotations

#: library prefix of a JAX-native ``--env`` -> the pip extra that installs it (``None``:
#: ``jax:``, a user's own module, needs none).
PREFIXES = {"gymnax": "gymnax", "brax": "brax", "jaxmarl": "jaxmarl", "jax": None}


def is_jax_native(env_id: str) -> bool:
    """Whether ``env_id`` names a JAX-native environment (``gymnax:<EnvId>``,
    ``brax:<name>``, ``jaxmarl:<MPE id>``, ``jax:<module>:<factory>``)."""
    library, sep, rest = env_id.partition(":")
    return bool(sep) and library in PREFIXES and bool(rest)


def split_id(env_id: str) -> tuple[str, str]:
    """``(library, EnvId)`` of a JAX-native ``env_id`` (split at the first colon:
    ``jax:pkg.mod:make`` -> ``("jax", "pkg.mod:make")``).

    Raises:
      ValueError: ``env_id`` is not JAX-native.
    """
    if not is_jax_native(env_id):
        raise ValueError(f"{env_id!r} is not a JAX-native environment id "
                         f"(<library>:<EnvId> with library one of {sorted(PREFIXES)})")
    library, _, name = env_id.partition(":")
    return library, name
