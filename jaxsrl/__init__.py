"""jaxsrl: a JAX, accelerator-centric distributed RL framework in the style of SRL.

See ``docs/architecture.md`` for the workers, streams and messages.
"""

__version__ = "0.1.0"

from jaxsrl.core.imports import shadowed_agents_package as _shadowed_agents_package

# ``python -m``/``-c`` in a folder holding a package named ``agents`` would import it in
# place of jaxsrl's built-in agents: say so here instead of "cannot import name 'AGENTS'".
if _why := _shadowed_agents_package():
    raise ImportError(_why)
