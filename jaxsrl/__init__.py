"""jaxsrl: a JAX, accelerator-centric distributed RL framework in the style of SRL.

See ``docs/architecture.md`` for the workers, streams and messages.
"""

__version__ = "0.1.0"
