"""Hydra sweeper plugin `hydra/sweeper=throughput` (a thin shell over sweeper.search)."""
