"""The reduction rules of seed 000, as pure logic on partition shapes.

A reduction from ``P_x`` (the larger partition) to ``P_y`` pairs the worker at each Cartesian
index of ``P_x`` with one worker of ``P_y``.  After optional transposes (reversal of a shape)
``P_y`` is padded on the left with ones to the dimension of ``P_x``; along each dimension the
two shapes must be equal, or ``P_y`` must be 1.  Workers are paired by their *transposed*
index, never by rank order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spmdrules.runtime.errors import PartitionMismatchError


@dataclass(frozen=True)
class ReductionMatch:
    """How the workers of a big partition reduce onto (or broadcast from) a small one."""

    big_shape: tuple[int, ...]
    small_shape: tuple[int, ...]
    transpose_big: bool
    transpose_small: bool
    effective_big: tuple[int, ...]
    effective_small: tuple[int, ...]  # after transpose and left padding

    def small_index(self, big_index: Sequence[int]) -> tuple[int, ...]:
        """Index in the small partition (original orientation) paired with ``big_index``."""
        eff = tuple(big_index)[::-1] if self.transpose_big else tuple(big_index)
        paired = tuple(
            i if s == b else 0
            for i, s, b in zip(eff, self.effective_small, self.effective_big, strict=True)
        )
        unpadded = paired[len(paired) - len(self.small_shape) :]
        return unpadded[::-1] if self.transpose_small else unpadded

    def groups(self) -> list[list[int]]:
        """For each rank of the small partition, the ranks of the big one paired with it."""
        out: list[list[int]] = [[] for _ in range(int(np.prod(self.small_shape)))]
        for big_rank in range(int(np.prod(self.big_shape))):
            big_index = np.unravel_index(big_rank, self.big_shape)
            small = self.small_index(tuple(int(i) for i in big_index))
            out[int(np.ravel_multi_index(small, self.small_shape))].append(big_rank)
        return out


def match_reduction(
    big_shape: Sequence[int],
    small_shape: Sequence[int],
    *,
    transpose_big: bool = False,
    transpose_small: bool = False,
    op: str = "SumReduce",
    big_name: str = "P_x",
    small_name: str = "P_y",
) -> ReductionMatch:
    """Check the reduction rules and return the pairing, or raise PartitionMismatchError."""
    big = tuple(int(s) for s in big_shape)
    small = tuple(int(s) for s in small_shape)
    eff_big = big[::-1] if transpose_big else big
    eff_small = small[::-1] if transpose_small else small
    flags = (
        f"(transpose of {big_name}={transpose_big}, transpose of {small_name}={transpose_small})"
    )
    if len(eff_small) > len(eff_big):
        raise PartitionMismatchError(
            f"{op}: {small_name} has shape {small} and dimension {len(small)}, more than "
            f"{big_name} with shape {big}; the rules need dim({big_name}) >= dim({small_name}). "
            f"Give {big_name} more dimensions of length 1"
        )
    padded = (1,) * (len(eff_big) - len(eff_small)) + eff_small
    for d, (b, s) in enumerate(zip(eff_big, padded, strict=True)):
        if s not in (b, 1):
            raise PartitionMismatchError(
                f"{op}: {big_name} with shape {big} does not reduce to {small_name} with shape "
                f"{small} {flags}: in dimension {d} the effective shapes are {eff_big} and "
                f"{padded}, and {small_name} has {s} where it needs {b} or 1. Change "
                f"{small_name}'s shape, or use transpose_src / transpose_dest"
            )
    return ReductionMatch(big, small, transpose_big, transpose_small, eff_big, padded)
