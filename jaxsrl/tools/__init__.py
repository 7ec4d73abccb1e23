"""User-facing tools over finished or running experiments: evaluation, plots, multi-seed runs."""
