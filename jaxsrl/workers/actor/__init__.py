"""The actor worker: steps environments on CPU and streams observations and trajectory segments. Imports no JAX."""
