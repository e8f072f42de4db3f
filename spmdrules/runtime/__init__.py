"""Partition runtime over MPI (seeds 000-003)."""
