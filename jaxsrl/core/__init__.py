"""The agent interface and what every worker process shares (no sockets, no JAX here except in agent types)."""
