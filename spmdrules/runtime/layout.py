"""The global layout of a tensor over a Cartesian partition, recovered from local shapes.

Inputs may be unbalanced: the blocks along each partition axis may have any sizes, but all
workers at one coordinate of an axis must agree on their size along it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.runtime.decomposition import Box, balanced_box, starts_from_sizes
from spmdrules.runtime.errors import TensorStructureError
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.structure import LocalStructure


@dataclass(frozen=True)
class GridLayout:
    """dtype, global shape, and the box held by each partition rank."""

    dtype: np.dtype[Any]
    global_shape: tuple[int, ...]
    boxes: tuple[Box, ...]

    @classmethod
    def balanced(
        cls, P: MPIPartition, dtype: np.dtype[Any], global_shape: Sequence[int]
    ) -> GridLayout:
        shape = tuple(int(s) for s in global_shape)
        boxes = tuple(balanced_box(shape, P.shape, P.index_of(r)) for r in range(P.size))
        return cls(np.dtype(dtype), shape, boxes)


def layout_from_structures(
    P: MPIPartition, structures: Sequence[LocalStructure], op: str, name: str
) -> GridLayout:
    """Assemble the layout from the local structure of every rank of ``P`` (rank order)."""
    dtypes = {st[0] for st in structures if st is not None}
    if len(dtypes) != 1 or any(st is None for st in structures):
        raise TensorStructureError(
            f"{op}: the workers of {name} hold local tensors of different dtypes "
            f"({sorted(d.name for d in dtypes)}); give them all one dtype"
        )
    shapes = [st[1] for st in structures if st is not None]
    for r, shape in enumerate(shapes):
        if len(shape) != P.dim:
            raise TensorStructureError(
                f"{op}: the worker of {name} at index {P.index_of(r)} holds a tensor of "
                f"dimension {len(shape)} (shape {shape}) but {name} has dimension {P.dim} "
                f"(shape {P.shape}); give {name} one axis per tensor axis (1 where unsplit)"
            )
    sizes: list[list[int]] = []
    for d, parts in enumerate(P.shape):
        along: list[int] = []
        for c in range(parts):
            found = {shapes[r][d] for r in range(P.size) if P.index_of(r)[d] == c}
            if len(found) != 1:
                raise TensorStructureError(
                    f"{op}: the workers of {name} at coordinate {c} of partition axis {d} hold "
                    f"blocks of different lengths {sorted(found)} along tensor dim {d}; blocks "
                    "in one slab of the grid must have one length"
                )
            along.append(found.pop())
        sizes.append(along)
    starts = [starts_from_sizes(s) for s in sizes]
    boxes = tuple(
        tuple(
            (starts[d][i], starts[d][i] + sizes[d][i]) for d, i in enumerate(P.index_of(r))
        )
        for r in range(P.size)
    )
    return GridLayout(dtypes.pop(), tuple(sum(s) for s in sizes), boxes)
