"""Devices and multi-host (jax.distributed) learners."""
