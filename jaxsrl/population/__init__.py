"""Populations: population-based training (``pbt``, ``search_space``, ``lineage``) and
self-play opponents (``opponents``, ``ratings``). Pure logic that a population-manager
worker calls; nothing here trains, sends or stores parameters."""
